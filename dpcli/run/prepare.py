"""One preparation step: every check a release makes before it reads the data or spends, in one place.

``prepare_spec(spec)`` is what follows from the spec alone: it is valid, it plans (budget shares), it is within the
public size limits (cells, memory estimate), its labels can be made, and a consistency policy is within its cap.
``prepare(spec, ...)`` adds what a run of that spec checks before it opens its input: the release id, the options,
where it reads and writes (paths, output format), and the ledger (its chain, the unit and neighbour pin, the cap,
the release store, and whether the release id is already paid for).

``dpcli release``, ``dpcli plan`` and ``dpcli check`` all call these, in this order, so ``check`` calls a spec valid
exactly when ``release`` would pass every check that needs no data (with ``--ledger``, the ledger's too): the
refusal, its exit code and its message are the same ones. Nothing here reads the input or writes anything.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

from dpcli.core.accounting import Budget
from dpcli.core.locations import is_url
from dpcli.core.resources import check_address_space, check_open_files
from dpcli.engine.inputs import DEFAULT_INPUT_TIMEOUT, check_input_timeout, input_path
from dpcli.errors import BudgetRefused, LedgerError, UsageError
from dpcli.ledger import DEFAULT_LOCK_TIMEOUT, Ledger, Purchase, Record, open_ledger, resolve_ledger
from dpcli.ledger.base import BudgetStatus, charge, check_spend
from dpcli.plan.cost import ReleaseCost, check_cost
from dpcli.plan.model import Plan, make_plan
from dpcli.plan.series import check_series_runnable
from dpcli.publish.labels import check_labels
from dpcli.publish.paths import Protected, check_release_paths, check_targets, named_path
from dpcli.publish.paths import output_path as checked_output
from dpcli.run.paid import RELEASE_ID, PaidRun, check_release_id, run_release_id
from dpcli.specs.load import load_spec
from dpcli.specs.meaning import release_meaning
from dpcli.specs.model import Spec
from dpcli.specs.v1 import ENGINES, INPUT_FORMATS

# The input's format, the table's writers, store and sidecar (numpy, polars) are imported where a run is prepared:
# `dpcli plan` needs the spec's checks alone and starts without them (docs/benchmarks.md, "Start-up")
if TYPE_CHECKING:
    from dpcli.publish.table import Table

__all__ = [
    "RELEASE_ID", "CheckedSpec", "Prepared", "check_release_id", "check_series_cap", "load_stored_table", "prepare",
    "prepare_spec",
    "stored_table",
]



@dataclass(frozen=True)
class CheckedSpec:
    """A spec that passed every check needing nothing but the spec, with its plan and its public size."""

    spec: Spec
    plan: Plan
    cost: ReleaseCost


def prepare_spec(spec: Spec | str | Path, *, format_labels: bool = True) -> CheckedSpec:
    """The checks of a spec alone, in the order a release makes them (SpecError, exit 2): valid, plannable, within
    the size limits (cells, memory estimate), its table's labels buildable, its consistency policy within its cap.
    ``format_labels=False`` (``dpcli plan``) builds the labels without writing their first and last rows, the one
    part that needs polars: plan starts without it (docs/benchmarks.md, "Start-up")."""
    if not isinstance(spec, Spec):
        spec = load_spec(spec)
    plan = make_plan(spec)
    cost = check_cost(plan)  # over a public size limit (cells, memory estimate): exit 2, nothing read or spent
    # the table's labels are made from the spec: any failure there comes before the spend
    check_labels(plan, format_rows=format_labels)
    if spec.postprocess:  # the finest table's cap of `postprocess: {consistent: true}`, before the spend
        from dpcli.postprocess.consistency import check_plan

        check_plan(plan)
    return CheckedSpec(spec, plan, cost)


@dataclass(frozen=True)
class Prepared:
    """A run of a spec that passed every check that needs no data: what it reads and writes, and (when the ledger
    was checked) the verified records and the spend that already paid for its release id, if any."""

    spec: Spec
    plan: Plan
    cost: ReleaseCost
    release_id: str
    named: bool  # the release id was given (else drawn for this run)
    input_timeout: float | None
    remote: str | None  # an input URL (only the Spark engine reads one)
    source: Path | None  # the input file (None: standard input, or a URL)
    input_format: str
    engine: str
    output: Path | None  # None: standard output
    fmt: str  # the table's format: csv or json
    meta: Path | None  # --meta
    report: Path | None  # --report
    summary: Path | None  # --summary-md
    ledger: Ledger | None  # None: the ledger was not checked (`dpcli check` without --ledger)
    records: list[Record]
    paid: Record | None  # the spend that paid for this named release id: a re-run writes its table again
    paid_run: PaidRun | None  # the paid-run protocol of this release (None: no ledger, or nothing to spend)

    @property
    def book(self) -> Ledger:
        """The ledger checked (a release always checks it)."""
        if self.ledger is None:
            raise LookupError("this run was prepared without its ledger")
        return self.ledger

    @property
    def run(self) -> PaidRun:
        """The paid run of a release that spends (a release with its ledger always has one)."""
        if self.paid_run is None:
            raise LookupError("this run was prepared without its ledger, or spends nothing")
        return self.paid_run


def prepare(
    spec: Spec | str | Path,
    *,
    input: str | Path | None = None,  # noqa: A002 - the contract's name
    output: str | Path | None = None,
    ledger: str | Path | Ledger | None = None,
    check_ledger: bool = True,
    fmt: str | None = None,
    release_id: str | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    input_timeout: float | None = DEFAULT_INPUT_TIMEOUT,
    input_format: str | None = None,
    engine: str | None = None,
    sidecar: str | Path | None = None,
    report: str | Path | None = None,
    summary_md: str | Path | None = None,
    say: Callable[[str], None] | None = None,
    period: str | None = None,
) -> Prepared:
    """Every check of a release of ``spec`` that needs no data, in the order ``release`` makes them; the arguments
    are ``release``'s. ``check_ledger=False``: no ledger is opened (its own checks, and the paths of its files, are
    left out); else the ledger is ``ledger``, $DPCLI_LEDGER or the spec's, read only (nothing is written).

    Of a frequency-only spec (estimates from a randomized file), the ledger's budget is not checked: it spends
    nothing. Of a named release id already paid for, neither: a release writes the stored table again. ``period``:
    the declared period a renewing cap charges the run to (a series' period's key, dpcli.run.series); by default a
    named release id."""
    from dpcli.engine import input_format as format_of
    from dpcli.publish.writers import output_format

    say = say or (lambda _msg: None)
    checked = prepare_spec(spec)
    spec, plan = checked.spec, checked.plan
    check_address_space(checked.cost.memory_mb)  # an address-space limit (ulimit -v) too low for it: exit 1
    check_open_files()  # and an open-file limit (ulimit -n)
    say(
        f"spec valid and planned: {len(plan.statistics)} statistic(s), "
        f"{sum(sp.cells for sp in plan.statistics if sp.selection is None)} declared cell(s)"
        + (", plus open keys chosen by partition selection" if any(sp.selection for sp in plan.statistics) else "")
        + f", {plan.cost_text()}"
    )
    release_id, named = run_release_id(release_id)
    input_timeout = check_input_timeout(input_timeout)

    location_given = input if input is not None else spec.input
    # a Spark engine's hdfs://, s3a://, file:// input
    remote = location_given if is_url(location_given) else None
    source = None if remote else input_path(input, spec.input)
    input_fmt = format_of(source, _choice(input_format, INPUT_FORMATS, "input_format", "--input-format"),
                          spec.input_format)
    engine = _choice(engine, ENGINES, "engine", "--engine") or spec.engine
    if spec.series is not None:
        check_series_runnable(spec, engine)  # what a series' run refuses of its spec (exit 2)
    if remote and engine != "spark":
        raise UsageError(f"input {remote[:200]} is a URL: only the Spark engine reads one", hint="use --engine spark")
    if engine == "spark" and not remote and source is None:
        raise UsageError("the Spark engine reads files, not standard input", hint="pass --input PATH")
    output_path = checked_output(output if output is not None else spec.output)
    location: str | Path | None = None  # a Ledger object passed in has no location to check against the paths
    book: Ledger | None = None
    if isinstance(ledger, Ledger):
        book = ledger
    elif check_ledger:
        location = resolve_ledger(ledger, spec.ledger)
        book = open_ledger(location, lock_timeout=lock_timeout)
    spec_file = Path(spec.source) if spec.source != "<string>" else None
    check_release_paths(spec_file, source, output_path, book, location)
    meta_path = _meta_path(sidecar, output_path, spec_file, source, book, location)
    report_path, summary_path = _page_paths(report, summary_md, spec_file, source, output_path, meta_path, book,
                                            location)
    fmt = output_format(output_path, fmt)  # after the paths: "is the ledger" says more than "not a .jsonl writer"
    say("paths checked")

    records: list[Record] = []
    if book is not None:
        records = book.records()  # verify the chain (exit 5) before any work
        say("ledger chain verified")
        if spec.series is not None:
            check_series_cap(spec, book.status(spec.dataset, records), book.name)
    paid: Record | None = None
    run: PaidRun | None = None
    if plan.frequency_only:  # estimates from a randomized file: nothing is spent (dpcli.run.randomize)
        if remote:
            raise UsageError("frequency statistics check their input's hash: give a local file, not a URL")
        if meta_path is not None:
            raise UsageError("--meta: a frequency estimate's sidecar is written beside its output file only")
    elif book is not None:
        run = PaidRun(
            book, spec.dataset, Budget(plan.epsilon, plan.rho, plan.selection_delta),
            Purchase.of(spec.dataset, spec.sha256, release_id, spec.privacy.pinned_unit, spec.privacy.neighbours,
                        tuple(s.statistic.name for s in plan.statistics), meaning=release_meaning(spec),
                        name=spec.name, period=period if period is not None else (release_id if named else None),
                        series=None if spec.series is None else {"periods": spec.series.periods,
                                                                 "design": spec.series.design}),
            named, lock_timeout, say,
        )
        paid = run.earlier_spend(records)
        if paid is None:
            # fast refusal before the scan, on the records verified above; the binding check is in spend()
            run.check_budget(records)
            say("budget available")
    return Prepared(
        spec, plan, checked.cost, release_id, named, input_timeout, remote, source, input_fmt, engine,
        output_path, fmt, meta_path, report_path, summary_path, book, records, paid, run,
    )


def check_series_cap(spec: Spec, status: BudgetStatus | None, ledger_name: str) -> None:
    """What a series asks of its dataset's cap (issue 26), checked before anything is read (UsageError, exit 2).

    A cap that renews per declared period charges each period of a per_period series on its own (a person's rows in
    many periods, or in many snapshots, are not disjoint across them, so no one charge covers them all): the tree of
    running totals, whose every block spans many periods, cannot be charged to one period, so it is refused there. A
    person unit needs that renewing cap: one charge for all periods would claim parallel composition over periods
    that one person's rows do not respect (dpcli never keeps the ids that would link them across runs)."""
    series = spec.series
    if series is None:
        return
    renewing = status is not None and status.per_period
    if renewing and series.running:
        raise UsageError(
            f"dataset '{spec.dataset}' has a cap that renews per declared period in ledger {ledger_name}: a series "
            f"of design {series.design} cannot be charged there, since each block of its running totals spans many "
            "periods and so belongs to no one period's cap (and a snapshot's people are in every period)",
            hint="use series design per_period on this dataset, or the running totals on a dataset with a lifetime "
            "cap (its rows each in one period)",
        )
    if spec.privacy.person is not None and not renewing:
        raise UsageError(
            f"a series under a person unit needs a cap that renews per declared period on dataset '{spec.dataset}' "
            f"(ledger {ledger_name}): one person may have rows in many periods, and one charge for all periods would "
            "need those rows linked across runs by ids, which dpcli never keeps; under a renewing cap each period is "
            "charged to its own period's cap, and a person present in k periods has k times the budget",
            hint=f"`dpcli budget set {spec.dataset} --epsilon E --per period` (a dataset with a lifetime cap or spends "
            "keeps it: use a new dataset name in the spec's dataset:), or use unit: row",
        )


def _choice(value: str | None, choices: tuple[str, ...], argument: str, option: str) -> str | None:
    if value is not None and value not in choices:
        raise UsageError(f"'{value[:40]}' is not one of: {', '.join(choices)}", argument=argument, option=option)
    return value


def _meta_path(
    meta: str | Path | None, output: Path | None, spec_file: Path | None, source: Path | None, book: Ledger | None,
    location: str | Path | None,
) -> Path | None:
    """``--meta PATH``: checked as an output is, before the spend (exit 2/3), and never the table itself."""
    meta_path = checked_output(meta)
    if meta_path is None:
        if meta is not None:
            raise UsageError("--meta names a file: the sidecar is JSON, and standard output holds the table")
        return None
    if output is not None and os.path.abspath(meta_path) == os.path.abspath(output):
        raise UsageError(f"--meta {meta_path} is the output: the sidecar needs its own file")
    check_release_paths(spec_file, source, meta_path, book, location)
    return meta_path


def _page_paths(
    report: str | Path | None, summary: str | Path | None, spec_file: Path | None, source: Path | None,
    output: Path | None, meta_path: Path | None, book: Ledger | None, location: str | Path | None,
) -> tuple[Path | None, Path | None]:
    """``--report`` and ``--summary-md``, checked with the table before anything is read (one checker,
    dpcli.publish.paths): none of what the release reads or keeps, nor its table or sidecar, nor one another."""
    report_path = None if report is None else named_path(os.fspath(report), "report")
    summary_path = None if summary is None else named_path(os.fspath(summary), "summary")
    if report_path is None and summary_path is None:
        return report_path, summary_path
    from dpcli.publish.sidecar import sidecar_path

    keep = Protected().add(spec_file, "the spec").add(source, "the input file").add_ledger(book, location)
    keep.add(output, "the output").add(meta_path or (None if output is None else sidecar_path(output)),
                                       "the output's sidecar")
    check_targets([(report_path, "report"), (summary_path, "summary")], keep)
    return report_path, summary_path


def stored_table(run: PaidRun, release_id: str) -> tuple[Record, Table]:
    """The spend and the stored table of the release paid for under ``run``'s id, as a re-run would write it again:
    waited for (dpcli.run.paid), then read. Missing, altered or unreadable: exit 5, as for the re-run (the id is never
    drawn again). Reads only: ``dpcli check --release-id`` asks it."""
    spend, done, stored = run.stored_state()
    if stored is None:
        raise run.unstored_error(spend, UNSTORED_TABLE[done is not None])
    return spend, load_stored_table(run.book, release_id, spend, stored)


# What a re-run says of a paid table it cannot find, by whether the `released` record was written (the release's
# Work.unstored says the same)
UNSTORED_TABLE = {
    False: "its table was never stored (the run that paid is still running, or failed after the spend)",
    True: "its stored table is missing from the release store",
}


def load_stored_table(book: Ledger, release_id: str, spend: Record, stored: bytes) -> Table:
    """A stored table's bytes as a Table: this version's compact form, or dpcli 0.2's text form. Hash-checked by the
    ledger, so a failure means a dpcli whose store format this one does not know (a newer one): exit 5, the id never
    drawn again."""
    from dpcli.publish.store import decode_table

    try:
        return decode_table(stored)
    except (ValueError, KeyError, TypeError):
        raise LedgerError(
            f"ledger {book.name}: the stored table of release id '{release_id}' (record {spend.seq}) is in a format "
            "this dpcli cannot read: re-run with the dpcli that released it; it is never drawn again"
        ) from None


@dataclass(frozen=True)
class LedgerOutlook:
    """The dataset's cap in a ledger, what it has spent, and what this release would leave (None: no cap)."""

    dataset: str
    cap: Fraction | None
    spent: Fraction
    after: Fraction | None  # the spent epsilon after this release (as the ledger composes it)
    refused: str | None  # why the ledger would refuse the release (None: it fits)
    # a renewing cap (issue 26): cap, spent and after are the period's; ``period`` None there is a period not charged
    per_period: bool = False
    period: str | None = None

    @property
    def left(self) -> Fraction | None:
        return None if self.cap is None or self.after is None else self.cap - self.after


# The period a plan shows of a renewing cap when it names none: not a valid period key, so never one charged.
NEW_PERIOD = "(a period not charged yet)"


def ledger_outlook(
    plan: Plan, location: str | Path, lock_timeout: float | None = None, period: str | None = None,
) -> LedgerOutlook:
    """Reads (and verifies) the ledger, waiting at most ``lock_timeout`` seconds for it (default: the ledger's);
    writes nothing, reserves nothing. Of a renewing cap, the outlook is ``period``'s (a release id), else a period
    not charged yet's; of a lifetime cap ``period`` is not used."""
    wait = DEFAULT_LOCK_TIMEOUT if lock_timeout is None else lock_timeout
    ledger = open_ledger(location, lock_timeout=wait)
    status = ledger.verify().datasets.get(plan.spec.dataset)
    if status is not None and status.per_period:
        status = status.for_period(NEW_PERIOD if period is None else check_release_id(period))
    name = ledger.name  # a PostgreSQL URL without its password
    refused = None
    try:
        check_spend(status, plan.spec.dataset, plan.epsilon, name, plan.rho, plan.selection_delta)
    except BudgetRefused as exc:
        refused = exc.fact
    if status is None:
        return LedgerOutlook(plan.spec.dataset, None, Fraction(0), None, refused)
    after = status.after(charge(plan.epsilon), charge(plan.rho), plan.selection_delta).spent
    return LedgerOutlook(plan.spec.dataset, status.cap, status.spent, after, refused, status.per_period, period)
