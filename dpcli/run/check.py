"""``dpcli check`` as a library call: every problem of a spec (and, with the ledger, of the ledger) that a release
would refuse before reading any data, and what the checks found, as one typed result the CLI renders (text or JSON).

A spec with errors gets every one of them (``spec_errors``), and with an explicitly named ledger that ledger's chain
is verified too, so one run lists both. A valid spec goes through ``prepare``, release's own pre-spend checks, in
release's order: a refusal of the plan, the options, the paths or the pin ends the check; one of the ledger itself
(its chain, cap, store, a paid release id: the first, as each depends on the one before) does not, and the input's
header is checked too, both listed when both fail. Reads the input's header only; spends nothing and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from dpcli.errors import BudgetRefused, DpcliError, LedgerError
from dpcli.ledger import open_ledger, resolve_ledger
from dpcli.ledger.base import DEFAULT_LOCK_TIMEOUT
from dpcli.run.series_input import uses_template
from dpcli.specs.load import is_synth_spec, spec_errors
from dpcli.specs.randomize import is_randomize_spec

__all__ = ["CheckResult", "check_spec"]


@dataclass(frozen=True)
class CheckResult:
    """What ``dpcli check`` found. ``problems`` holds every refusal found, in the order found (empty: valid); the
    other fields are what the checks that passed established (None where not checked)."""

    spec: Path
    problems: tuple[DpcliError, ...]
    randomize: bool = False  # a randomize spec (``randomize: {columns: ...}``)
    synth: bool = False  # a synth spec (``synth: {...}``)
    verdict: str | None = None  # a valid randomize spec's one-line verdict
    statistics: int | None = None
    size: str | None = None  # the release's cells and memory estimate, as release's limits word them
    cost: str | None = None  # what the release charges
    input_checked: str | None = None  # the input whose header has every declared column
    ledger: str | None = None  # the ledger checked (its name; a PostgreSQL URL without its password)
    release_id: str | None = None  # the release id checked (--release-id), else None
    paid_record: int | None = None  # the spend record that already paid for the release id, if any
    frequency_only: bool = False  # estimates from a randomized file: nothing to spend

    @property
    def valid(self) -> bool:
        return not self.problems

    @property
    def exit_code(self) -> int:
        """The first problem's exit code (the one release would stop at: the spec's before the ledger's), else 0."""
        return self.problems[0].exit_code if self.problems else 0


def check_spec(
    spec: str | Path,
    *,
    input: str | None = None,  # noqa: A002 - the contract's name
    input_format: str | None = None,
    output: str | None = None,
    ledger: str | None = None,
    release_id: str | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
) -> CheckResult:
    """Check ``spec`` as ``release`` with these options would before reading any data (with ``ledger``, the ledger's
    checks too). A refusal is returned among ``problems``, never raised; anything else (a signal, a bug) is raised."""
    path = Path(spec)
    if is_randomize_spec(path):
        return _check_randomize(path, input, output, ledger, release_id)
    errors = spec_errors(path)
    if not errors and is_synth_spec(path):
        return _check_synth(path, input, input_format, output, ledger, release_id)
    if errors:
        problems: list[DpcliError] = list(errors)
        if ledger is not None:  # the ledger named on the command line is checked too: one run lists both
            try:
                open_ledger(resolve_ledger(ledger, None), lock_timeout=lock_timeout).records()
            except DpcliError as exc:
                problems.append(exc)
        return CheckResult(path, tuple(problems))
    return _check_release(path, input, input_format, output, ledger, release_id, lock_timeout)


def _check_randomize(
    path: Path, input: str | None, output: str | None, ledger: str | None, release_id: str | None,  # noqa: A002
) -> CheckResult:
    from dpcli.errors import UsageError
    from dpcli.run.randomize import check_randomize

    if output is not None or ledger is not None or release_id is not None:
        refused = UsageError("--output, --ledger and --release-id check a release spec; `dpcli check` of a "
                             "randomize spec checks the spec and its input")
        return CheckResult(path, (refused,), randomize=True)
    try:
        verdict = check_randomize(path, input)
    except DpcliError as exc:
        return CheckResult(path, (exc,), randomize=True)
    return CheckResult(path, (), randomize=True, verdict=verdict)


def _check_synth(
    path: Path, input: str | None, input_format: str | None, output: str | None,  # noqa: A002
    ledger: str | None, release_id: str | None,
) -> CheckResult:
    """A synth spec (issue 27): the spec, its plan's refusals (the domain's sizes: dpcli.plan.synth) and its input's
    header (every declared column). The run's own checks (ledger, release id, output) come with ``dpcli synth``."""
    from dpcli.engine import check_input
    from dpcli.engine.inputs import input_path
    from dpcli.errors import UsageError
    from dpcli.plan.budget import cost_text
    from dpcli.plan.synth import make_synth_plan
    from dpcli.specs.load import load_spec

    if output is not None or ledger is not None or release_id is not None:
        refused = UsageError("--output, --ledger and --release-id check a release spec; `dpcli check` of a synth "
                             "spec checks the spec, its plan and its input")
        return CheckResult(path, (refused,), synth=True)
    try:
        spec = load_spec(path)
        plan = make_synth_plan(spec)
        source = input_path(input, spec.input if isinstance(spec.input, Path) else None)
        if source is not None:
            check_input(plan.exact_plan.spec, source, input_format)
    except DpcliError as exc:
        return CheckResult(path, (exc,), synth=True)
    checked = "" if source is None else f"; {source} has every declared column"
    cost = cost_text(Fraction(0), plan.charge.rho, spec.privacy.delta, Fraction(0))
    return CheckResult(path, (), synth=True, verdict=(
        f"dpcli: {path} is valid: a synthetic CSV of {len(plan.sizes)} columns by {plan.synth.method.upper()}, "
        f"{len(plan.candidates)} candidate pairs, charging {cost}{checked}"
    ), cost=cost, input_checked=None if source is None else str(source))


def _check_release(
    path: Path, input: str | None, input_format: str | None, output: str | None,  # noqa: A002
    ledger: str | None, release_id: str | None, lock_timeout: float,
) -> CheckResult:
    from dpcli.engine import check_input
    from dpcli.run.prepare import prepare, stored_table

    # the checks release makes before it reads the data, in its order (dpcli.run.prepare), said the same way
    problems: list[DpcliError] = []
    try:
        ready = prepare(
            path, input=input, output=output, ledger=ledger, check_ledger=ledger is not None, release_id=release_id,
            lock_timeout=lock_timeout, input_format=input_format,
        )
        if ready.paid is not None:  # release would write the stored table again: it must be there and readable
            stored_table(ready.run, ready.release_id)
    except (LedgerError, BudgetRefused) as exc:
        # the ledger's own refusal (its chain, cap, store, a paid id): the input's header is checked still, so that
        # one run lists both
        problems.append(exc)
        try:
            ready = prepare(path, input=input, output=output, check_ledger=False, release_id=release_id,
                            lock_timeout=lock_timeout, input_format=input_format)
        except DpcliError as other:
            return CheckResult(path, (exc, other))
    except DpcliError as exc:  # the plan, the options, the paths, the pin: nothing after them is checked
        return CheckResult(path, (exc,))
    # standard input, a URL that only Spark reads, and a series' per-period template (each run checks the files of
    # the periods it reads: dpcli.run.series_input) are not checked
    template = uses_template(ready.spec, input)
    if ready.source is not None and not template:
        try:
            check_input(ready.spec, ready.source, ready.input_format)
        except DpcliError as exc:
            problems.append(exc)
    if problems:
        return CheckResult(path, tuple(problems))
    plan = ready.plan
    return CheckResult(
        path, (), statistics=len(plan.statistics), size=ready.cost.text(), cost=plan.cost_text(),
        input_checked=None if ready.source is None or template else str(ready.source),
        ledger=None if ready.ledger is None else ready.ledger.name,
        release_id=ready.release_id if ready.named else None,
        paid_record=None if ready.paid is None else ready.paid.seq,
        frequency_only=plan.frequency_only,
    )
