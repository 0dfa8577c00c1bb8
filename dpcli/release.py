"""The library entry point: ``release(...)`` runs one private release end to end.

    spec -> plan (no data) -> structural checks (exit 2/3, nothing spent) -> exact aggregates (one scan)
         -> ledger spend (durable, under lock) -> noise -> post-processing -> atomic write -> ``released`` record

Everything that can fail is checked before the spend (paths, output target, size limits, labels, the input's
header and the aggregates). The spend is on disk before any noise is even drawn, so no noisy value can leave the
process unpaid; SIGINT/SIGTERM/SIGHUP are held from the spend until the table is stored, so a Ctrl-C cannot burn a
release id. A failure after the spend is SpentThenFailed (exit 5) naming the paid record; there is no automatic
refund (the safe direction), but a stored table can be written again under its release id.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Callable

import numpy as np

from dpcli import __version__, paths, postprocess, signals
from dpcli.accounting import format_exact, parse_exact
from dpcli.engine import ExactStatistic, aggregate, check_header, read_header
from dpcli.errors import DpcliError, Interrupted, LedgerError, OutputError, ReleaseIdPaid, SpentThenFailed, UsageError
from dpcli.ledger import DEFAULT_LOCK_TIMEOUT, BudgetStatus, Ledger, Record, open_ledger
from dpcli.ledger.base import check_pin, paid_spend, release_key
from dpcli.mechanisms import add_discrete_gaussian, add_discrete_laplace
from dpcli.output import Block, Table, check_labels, output_format, sidecar_path, write_sidecar, write_table
from dpcli.paths import check_output_target, is_ledger_url, resolve_ledger
from dpcli.plan import NoiseComponent, Plan, StatisticPlan, check_cost, make_plan
from dpcli.spec import Column, EdgeBins, GridBins, Spec, load_spec
from dpcli.spool import DEFAULT_INPUT_TIMEOUT, DEFAULT_MAX_INPUT_BYTES, InputFile, check_input_timeout


@dataclass(frozen=True)
class Noisy:
    """Noisy integers of one statistic (grid units), the input of post-processing."""

    counts: np.ndarray | None
    sums: np.ndarray | None


@dataclass
class Release:
    """What a finished release did: the table, where it went, what it cost."""

    plan: Plan
    table: Table
    spend: Record
    status: BudgetStatus | None
    output: Path | None  # None: standard output
    output_sha256: str
    ledger: str
    release_id: str
    metadata: dict = field(default_factory=dict)
    reused: bool = False  # True: the stored table of an earlier run under the same release id; nothing spent

    @property
    def epsilon_spent(self) -> Fraction:
        """What this run charged (the ledger's charge: the plan's epsilon rounded up onto its grid), 0 on reuse."""
        return Fraction(0) if self.reused else parse_exact(str(self.spend.get("epsilon", "0")))

    @property
    def rho_spent(self) -> Fraction:
        return Fraction(0) if self.reused else parse_exact(str(self.spend.get("rho", "0")))


# ---------------------------------------------------------------------------------------------------------------
# Paths


def check_paths(
    spec: Spec, input_path: Path | None, output: Path | None, book: Ledger, location: str | Path | None
) -> None:
    """Everything about where the release reads and writes that can be refused before the spend (exit 2)."""
    ledger_path = None if location is None or is_ledger_url(location) else Path(location)
    if input_path is not None and ledger_path is not None and ledger_path.exists() and _same_file(input_path, ledger_path):
        raise UsageError(f"the ledger {ledger_path} is the input file")
    if output is None:
        return
    check_output_target(
        output,
        spec=Path(spec.source) if spec.source != "<string>" else None,
        input=input_path,
        ledger=ledger_path,
        protected=book.own_paths,
        protected_trees=book.own_trees,
    )


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


# ---------------------------------------------------------------------------------------------------------------
# Noise and the table (pure functions of the plan and of noisy integers)


def draw_noise(plan: Plan, exact: list[ExactStatistic]) -> list[Noisy]:
    """Add the plan's exact discrete noise to every exact vector. Only called after the spend is durable."""
    out = []
    for sp, ex in zip(plan.statistics, exact):
        counts = _noised(ex.counts, sp.component("count")) if _has(sp, "count") else None
        sums = _noised(ex.sums, sp.component("sum")) if ex.sums is not None else None
        out.append(Noisy(counts, sums))
    return out


def _noised(values: np.ndarray, comp: NoiseComponent) -> np.ndarray:
    if values.dtype == object and len(values) and max(abs(int(values.max())), abs(int(values.min()))) < 2**62:
        # fixed-point sums arrive as Python ints; in int64 (as the mechanism keeps them when they fit) the noisy
        # array is 5x smaller and the table's columns are formatted without an object array
        values = values.astype(np.int64)
    if comp.mechanism == "discrete_gaussian":
        assert comp.variance is not None
        return add_discrete_gaussian(values, comp.variance)
    assert comp.scale is not None
    return add_discrete_laplace(values, comp.scale)


def _has(sp: StatisticPlan, role: str) -> bool:
    return any(c.role == role for c in sp.components)


def build_table(plan: Plan, noisy: list[Noisy]) -> Table:
    """The tidy output table from noisy integers (post-processing only). Its columns are made when written: labels
    from the declared keys and bins, numbers as int64 arrays on their decimal grid. A 10^7-cell histogram costs its
    noisy array here, not 10^7 Python strings (3 GB and 13 s after the spend in dpcli 0.2)."""
    from dpcli.output import statistic_labels

    spec = plan.spec
    blocks = []
    for sp, nz, labels in zip(plan.statistics, noisy, statistic_labels(plan)):
        stat = sp.statistic
        bounds = spec.columns[stat.column].grid_bounds if stat.kind == "mean" else None  # type: ignore[index]
        value, low, high = postprocess.number_columns(sp, nz.counts, nz.sums, bounds)
        rho = sp.rho if plan.rho else None
        blocks.append(Block(stat.name, sp.reported_epsilon, labels, value, low, high, rho))
    return Table(plan.dimensions, tuple(blocks), with_rho=plan.rho > 0)


def exact_noisy(exact: list[ExactStatistic]) -> list[Noisy]:
    """Exact aggregates passed through as if they were noisy: the no-noise path of the exact-answer tests.

    Nothing in the CLI or in ``release`` calls this; it exists so tests can check the whole post-processing and
    output path against plain polars without noise.
    """
    return [Noisy(e.counts, e.sums) for e in exact]


def metadata(plan: Plan, spend: Record, head: str) -> dict:
    """The sidecar: public facts only. The spec's hash and its public parameters (bounds, bins, keys, mechanisms,
    scales, shares), the release id and the ledger record and head. Never anything computed from the input's bytes
    (no input hash, row count or size) and no path of the operator's machine (threat model, contract)."""
    spec = plan.spec
    return {
        "dpcli_version": __version__,
        "dataset": spec.dataset,
        "spec_sha256": spec.sha256,
        "unit": spec.privacy.unit,
        "neighbours": spec.privacy.neighbours,
        "accounting": spec.privacy.accounting,
        "epsilon": format_exact(plan.epsilon),
        "rho": format_exact(plan.rho),
        "delta": None if plan.delta is None else format_exact(plan.delta),
        "confidence": postprocess.CONFIDENCE,
        "columns": {name: _column_meta(column) for name, column in spec.columns.items()},
        "statistics": [
            {
                "name": sp.statistic.name,
                "kind": sp.statistic.kind,
                "column": sp.statistic.column,
                "by": list(sp.statistic.by),
                "bins": _bins_meta(sp.statistic.bins),
                "mechanism": sp.mechanism,
                "epsilon": format_exact(sp.epsilon),
                "rho": format_exact(sp.rho),
                "cells": sp.cells,
                "noise": [_component_meta(c) for c in sp.components],
            }
            for sp in plan.statistics
        ],
        "ledger": {"record": spend.seq, "release_id": spend.get("release_id"), "head": head},
    }


def _column_meta(column: Column) -> dict:
    meta: dict = {"type": column.type}
    if column.bounds is not None:
        meta["bounds"] = [format_exact(b) for b in column.bounds]
    if column.precision is not None and column.type == "float":
        meta["precision"] = format_exact(column.precision)
    if column.type == "category":
        meta["categories"] = list(column.keys)
    if column.other is not None:
        meta["other"] = column.other
    if column.impute is not None:
        meta["impute"] = column.impute if isinstance(column.impute, str) else format_exact(column.impute)
    return meta


def _bins_meta(bins: EdgeBins | GridBins | None) -> dict | list | None:
    if isinstance(bins, GridBins):  # a million-bin grid stays three numbers, as in the spec
        return {"start": format_exact(bins.start), "stop": format_exact(bins.stop), "step": format_exact(bins.step)}
    if isinstance(bins, EdgeBins):
        return [format_exact(e) for e in bins.edges]
    return None


def _component_meta(c: NoiseComponent) -> dict:
    meta = {"part": c.role, "mechanism": c.mechanism, "sensitivity": c.sensitivity, "unit": format_exact(c.unit)}
    if c.mechanism == "discrete_gaussian":
        assert c.variance is not None
        meta.update(l2_sensitivity_squared=c.l2_squared, variance=format_exact(c.variance), rho=format_exact(c.rho))
    else:
        assert c.scale is not None
        meta.update(scale=format_exact(c.scale), epsilon=format_exact(c.epsilon))
    return meta


# ---------------------------------------------------------------------------------------------------------------
# The release


# A release id is public (it is in the ledger, the sidecar and CI logs): a date, a pipeline id, a version tag.
RELEASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+@-]{0,127}")
_WAIT_POLL = 0.1  # seconds between looks at the ledger while another run under the same release id finishes


def check_release_id(release_id: str) -> str:
    if not RELEASE_ID.fullmatch(release_id):
        raise UsageError(
            f"release id '{release_id[:60]}' is not valid: 1 to 128 letters, digits and . _ : + @ -, "
            "starting with a letter or digit"
        )
    return release_id


def release(
    spec: Spec | str | Path,
    *,
    input: str | Path | None = None,  # noqa: A002 - the contract's name
    output: str | Path | None = None,
    ledger: str | Path | Ledger | None = None,
    fmt: str | None = None,
    release_id: str | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    input_timeout: float | None = DEFAULT_INPUT_TIMEOUT,
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
    progress: Callable[[str], None] | None = None,
) -> Release:
    """Run one release. ``input``/``output`` may be ``"-"`` (stdin/stdout); defaults come from the spec.

    ``release_id`` names the release (a snapshot date, a pipeline id). The same dataset, spec bytes and id return
    the stored table of the first run under that id and spend nothing, without reading the input: re-publishing
    numbers already paid for is post-processing, while fresh noise for the same question would let averaging cancel
    it. Whether a run reuses is a function of the spec, the id and the ledger only, never of the input's bytes (else
    a re-run would tell whether one person's row changed). Without an id every run is a new release and spends.
    Concurrent runs under one id spend once; the others wait (up to ``lock_timeout``) for its table.

    ``input_timeout``: seconds without a byte from a streamed input (stdin, a FIFO) before exit 3 (0/None: wait
    forever). ``max_input_bytes``: the cap on a spooled stream (exit 3 past it). ``progress`` receives the name of each phase as it ends (``--verbose``): never a count, a cell, an
    aggregate or a per-phase timing (the scan's time depends on the data).
    """
    say = progress or (lambda _msg: None)
    if not isinstance(spec, Spec):
        spec = load_spec(spec)
    plan = make_plan(spec)
    check_cost(plan)  # over a public size limit (cells, memory estimate): exit 2 before anything is read or spent
    check_labels(plan)  # the table's labels are made from the spec: any failure there comes before the spend
    say(
        f"spec valid and planned: {len(plan.statistics)} statistic(s), "
        f"{sum(sp.cells for sp in plan.statistics)} declared cell(s), {plan.cost_text()}"
    )
    named = release_id is not None
    release_id = check_release_id(release_id) if release_id is not None else uuid.uuid4().hex
    key = release_key(spec.dataset, spec.sha256, release_id)
    input_timeout = check_input_timeout(input_timeout)

    input_path = _choose(input, spec.input)
    output_path = paths.output_path(output if output is not None else spec.output)
    location = None if isinstance(ledger, Ledger) else resolve_ledger(ledger, spec.ledger)
    book = ledger if isinstance(ledger, Ledger) else open_ledger(location, lock_timeout=lock_timeout)
    check_paths(spec, input_path, output_path, book, location)
    fmt = output_format(output_path, fmt)
    say("paths checked")

    records = book.records()  # verify the chain (exit 5) before any work
    say("ledger chain verified")
    if named and paid_spend(records, key) is not None:
        say(f"release id '{release_id}' of this spec is paid for: returning its stored table, reading no input")
        return _reissue(plan, book, key, release_id, output_path, fmt, lock_timeout)
    # fast refusal before the scan, on the records verified above; the binding check is in spend()
    status = book.status(spec.dataset, records)
    check_pin(status, spec.dataset, spec.privacy.unit, spec.privacy.neighbours, book.name)
    book.check(spec.dataset, plan.epsilon, plan.rho, records)
    say("budget available")

    # the spool (a copy of the data) is removed when this block ends, however it ends
    with InputFile(input_path, input_timeout, max_input_bytes) as src:
        if src.spooled:
            say("input spooled")
        header = read_header(src.path, quoted_line_breaks=spec.quoted_line_breaks)
        check_header(Path(src.name), header, spec.columns.keys())
        del header
        say("header has every declared column")
        exact = aggregate(plan, src.path)
        say("exact aggregates computed")

    # SIGINT/SIGTERM/SIGHUP wait from the moment the spend is about to be written (under the ledger's lock) until the
    # table is stored: a paid release id always gets its table, so an interrupted run is recovered with --release-id
    # instead of burning the id. Before that moment (the lock wait) a signal ends the run with nothing spent.
    with signals.Held() as hold:
        try:
            spend = book.spend(
                spec.dataset,
                plan.epsilon,
                {
                    "release_id": release_id,
                    "release_key": key,
                    "spec_sha256": spec.sha256,
                    "unit": spec.privacy.unit,
                    "neighbours": spec.privacy.neighbours,
                    "statistics": [s.statistic.name for s in plan.statistics],
                },
                rho=plan.rho,
                before_append=hold.hold_from_here,  # a Ctrl-C until then (the lock wait): nothing spent
            )
        except ReleaseIdPaid:
            # another run under the same id spent first (we raced it): its table is the release, ours is never drawn
            del exact
            hold.release()
            say(f"release id '{release_id}' was paid for by a concurrent run: waiting for its table")
            return _reissue(plan, book, key, release_id, output_path, fmt, lock_timeout)
        paid = _Paid(book.name, spend.seq, release_id, named)
        try:
            say(f"spend recorded: ledger record {spend.seq}")
            noisy = draw_noise(plan, exact)
            del exact
            table = build_table(plan, noisy)
            del noisy
            say("noise drawn and table built")
            # The table is stored and recorded before the output is written: a paid release id always has its
            # table, so if writing the output fails, a re-run under the id writes these numbers (never new noise).
            stored = table.to_json()
            book.store_table(key, stored)
            book.mark_released(key, {"release_id": release_id, "table_sha256": hashlib.sha256(stored).hexdigest()})
            del stored
            paid.stored = True
            say("table stored and the release recorded as done")
            hold.release()  # a signal that came meanwhile is raised here, and reported below with the paid record
            meta = metadata(plan, spend, spend.hash)
            out_sha = _write_outputs(table, output_path, fmt, meta, paid.text())
            say("output written")
            status = book.status(spec.dataset)
        except BaseException as exc:  # noqa: BLE001 - after the spend every failure must name what was paid
            failure = exc if isinstance(exc, SpentThenFailed) else None  # an OutputError already names the record
            paid.stored = paid.stored or _recorded(book, key)
            message = str(exc) if failure else f"{_what_failed(exc)} after the spend: {paid.text()}"
            try:
                hold.release()  # a signal held until now must not replace this report with "nothing was spent"
            except (KeyboardInterrupt, Interrupted):
                pass
            raise SpentThenFailed(message) from None
    return Release(plan, table, spend, status, output_path, out_sha, book.name, release_id, meta)


@dataclass
class _Paid:
    """What a run that failed after its spend must say: which record paid, and how to get the table if stored."""

    ledger: str
    record: int
    release_id: str
    named: bool
    stored: bool = False

    def text(self) -> str:
        paid = f"the release was paid for by ledger {self.ledger} record {self.record}, with no refund"
        if not self.stored:
            return f"{paid}; its table was not stored, so release id '{self.release_id}' can never be written"
        again = f"--release-id {self.release_id}" + ("" if self.named else " (the id this run drew)")
        return f"{paid}; its table is stored: re-run with {again} to write it"


def _recorded(book: Ledger, key: str) -> bool:
    """Whether the `released` record and the stored table of ``key`` are in the ledger (asked after a failure, which
    may have come between writing them and taking note: the message must say whether --release-id can recover)."""
    try:
        _spend, done, stored = book.find_release(key)
    except Exception:  # noqa: BLE001 - the ledger may be what failed: then say "not stored", the safe claim
        return False
    return done is not None and stored is not None


def _what_failed(exc: BaseException) -> str:
    """One line about an exception, without its message (which might quote a value)."""
    if isinstance(exc, (KeyboardInterrupt, Interrupted)):
        return f"interrupted by {signals.signal_name(exc)}"
    if isinstance(exc, MemoryError):
        return "out of memory"
    if isinstance(exc, OSError):
        return f"an I/O error ({exc.strerror or type(exc).__name__})"
    if isinstance(exc, DpcliError):
        return str(exc)
    return f"an internal error ({type(exc).__name__}; a bug in dpcli, please report it)"


def _write_outputs(table: Table, output_path: Path | None, fmt: str, meta: dict, paid: str) -> str:
    """Write the table (and beside a file, its sidecar); returns the table's sha256.

    Whatever stops it (disk full, an I/O error, a signal, memory), a failed run leaves no new or half-described
    output behind: the table's temporary file is gone (atomic_write), and a table or sidecar already renamed into
    place is removed. An OSError becomes OutputError (exit 5) naming what was paid; anything else is re-raised for
    release() to report the same way.
    """
    if output_path is None:
        try:
            return write_table(table, None, fmt)
        except OSError as exc:
            raise OutputError(
                f"could not write the output standard output: {exc.strerror or type(exc).__name__}; {paid}; "
                "standard output may hold part of the table: discard it"
            ) from None
    targets = (output_path, sidecar_path(output_path))
    before = [_identity(p) for p in targets]
    try:
        out_sha = write_table(table, output_path, fmt)
        write_sidecar(output_path, {**meta, "output_sha256": out_sha})
        return out_sha
    except BaseException as exc:
        for p, was in zip(targets, before):
            if _identity(p) != was:  # renamed into place by this run: a table without its sidecar is not left
                try:
                    os.unlink(p)
                except OSError:
                    pass
        if isinstance(exc, OSError):
            raise OutputError(
                f"could not write the output {output_path}: {exc.strerror or type(exc).__name__}; {paid}; "
                "no output file was left"
            ) from None
        raise


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns)


def _reissue(
    plan: Plan, book: Ledger, key: str, release_id: str, output_path: Path | None, fmt: str, wait: float
) -> Release:
    """Write the stored table of the release paid for under ``key`` again (same numbers, no new noise, no spend).

    A run that paid and has not stored its table yet is waited for, up to ``wait`` seconds. A paid release whose
    table is missing or altered is exit 5: the id is never drawn again (fresh noise for a question already answered
    would let averaging cancel the noise).
    """
    deadline = time.monotonic() + wait
    while True:
        spend, done, stored = book.find_release(key)
        if done is not None or time.monotonic() >= deadline:
            break
        time.sleep(_WAIT_POLL)
    if stored is None:
        state = (
            "its table was never stored (the run that paid is still running, or failed after the spend)"
            if done is None else "its stored table is missing from the release store"
        )
        raise LedgerError(
            f"ledger {book.name}: release id '{release_id}' of this spec was paid for by record {spend.seq}, but "
            f"{state}; a paid release id is never drawn again: use a new --release-id"
        )
    try:
        table = Table.from_json(stored)  # this version's compact form, or dpcli 0.2's text form
    except (ValueError, KeyError, TypeError):
        # hash-checked, so written by a dpcli whose store format this one does not know (a newer one)
        raise LedgerError(
            f"ledger {book.name}: the stored table of release id '{release_id}' (record {spend.seq}) is in a format "
            "this dpcli cannot read: re-run with the dpcli that released it; it is never drawn again"
        ) from None
    meta = {**metadata(plan, spend, spend.hash), "reissued": True}
    out_sha = _write_outputs(
        table, output_path, fmt, meta, f"nothing was spent (ledger record {spend.seq} already paid for this release)"
    )
    status = book.status(plan.spec.dataset)
    return Release(plan, table, spend, status, output_path, out_sha, book.name, release_id, meta, reused=True)


def _choose(explicit: str | Path | None, from_spec: Path | None) -> Path | None:
    """A path, or None for the standard stream."""
    value = explicit if explicit is not None else from_spec
    if value is None or str(value) == "-":
        return None
    return Path(value)
