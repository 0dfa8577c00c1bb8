"""The command line: parse arguments, call the library, map DpcliError to its exit code. Nothing else."""

from __future__ import annotations

import json
import os
import sys
import time
from enum import StrEnum
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperArgument, TyperCommand

from dpcli.cli import documents, layout, messages, progress, render_audit, render_ledger, render_plan, render_run
from dpcli.core.accounting import format_exact, parse_exact
from dpcli.core.version import __version__
from dpcli.engine.inputs import DEFAULT_INPUT_TIMEOUT, DEFAULT_MAX_INPUT_BYTES, MAX_INPUT_TIMEOUT, parse_size
from dpcli.errors import (
    TOO_MANY_FILES,
    AuditFailed,
    BudgetRefused,
    DpcliError,
    InputError,
    Interrupted,
    LedgerError,
    ResourceError,
    SpecError,
    SpentThenFailed,
    UsageError,
)
from dpcli.ledger.base import DEFAULT_LOCK_TIMEOUT, MAX_LOCK_TIMEOUT, check_lock_timeout
from dpcli.specs.v1 import ENGINES, INPUT_FORMATS, MAX_RELEASE_EPSILON

if TYPE_CHECKING:
    from dpcli.ledger.named import OtherLedger
    from dpcli.plan.model import Plan
    from dpcli.run.check import CheckResult
    from dpcli.specs.model import Spec


def _example(command: str) -> str:
    """A command's help epilog: one example, kept as written (a line holding only \\b stops click rewrapping it)."""
    return f"\b\nExample:\n  $ {command}"


class DpcliCommand(TyperCommand):
    """Typer's command, with arguments shown as their metavar alone: Typer 0.2x writes a required argument as
    ``{spec}`` in the usage line and adds its type (``SPEC <path>``) in the list, where POSIX usage says ``SPEC``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, TyperArgument):
                # Typer builds its own TyperArgument and takes no class for it: the argument becomes the subclass
                # below, which changes the two hooks Typer's help formatting calls and nothing else
                param.__class__ = MetavarArgument


class MetavarArgument(TyperArgument):
    """An argument named by its metavar alone in the usage line, with nothing after its name in the help list."""

    def _usage_display_name(self) -> str:
        return self.metavar or (self.name or "").upper()

    def display_type_rich(self, ctx: object) -> str | None:
        return None


# -h as well as --help, on every command (click hands a group's context settings down to its subcommands)
CONTEXT = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
    context_settings=CONTEXT,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Differentially private statistics from a CSV and a YAML spec, with a budget ledger.",
    epilog=_example("dpcli plan configs/example.yaml"),
)
budget_app = typer.Typer(
    context_settings=CONTEXT, no_args_is_help=True, help="Budget caps per dataset (they live in the ledger).",
    epilog=_example("dpcli budget show --ledger ledger.jsonl"),
)
ledger_app = typer.Typer(
    context_settings=CONTEXT, no_args_is_help=True, help="The audit trail of caps and spends.",
    epilog=_example("dpcli ledger verify --ledger ledger.jsonl"),
)
app.add_typer(budget_app, name="budget")
app.add_typer(ledger_app, name="ledger")

LedgerOpt = typer.Option(
    None, "--ledger", metavar="PATH|URL",
    help="Ledger file or postgresql:// URL (else $DPCLI_LEDGER, else the spec's ledger:).",
)
InputOpt = typer.Option(
    None, "--input", "-i", metavar="PATH", help="CSV to read, or - for stdin (default: spec's input:)."
)
OutputOpt = typer.Option(
    None, "--output", "-o", metavar="PATH", help="Where to write, or - for stdout (default: spec's output:)."
)
SummaryMdOpt = typer.Option(
    None, "--summary-md", metavar="PATH",
    help="Append a short Markdown summary to this file (e.g. \"$GITHUB_STEP_SUMMARY\"; a regular file).",
)
LockOpt = typer.Option(
    DEFAULT_LOCK_TIMEOUT, "--lock-timeout", metavar="SECONDS",
    help=f"Seconds to wait for the ledger (its lock, or a PostgreSQL statement) before exit 5 (0 to "
    f"{MAX_LOCK_TIMEOUT:.0f}).",
    callback=check_lock_timeout,  # inf, nan, negative or huge: exit 2 (a float range lets inf and nan through)
)


# Typer offers and parses an enum by its values; the member names are never seen on the command line.
class OutputFormat(StrEnum):
    CSV = "csv"
    JSON = "json"


# the spec's choices (dpcli.specs.v1, the one declaration), offered by the options that override them
# enums built from the spec's declared tuples (one declaration): mypy cannot type a StrEnum made at run time
InputFormat = StrEnum("InputFormat", {name.upper().replace(".", "_"): name for name in INPUT_FORMATS})  # type: ignore[misc]
Engine = StrEnum("Engine", {name.upper(): name for name in ENGINES})  # type: ignore[misc]


class Neighbours(StrEnum):
    ADD_REMOVE = "add_remove"
    REPLACE = "replace"


class Per(StrEnum):
    # "period", not "day": the cap renews per DECLARED period key (a release id, a series' period), never per clock day
    PERIOD = "period"


def _exact(option: str, text: str) -> Fraction:
    try:
        value = parse_exact(text)
    except ValueError:
        raise UsageError(f"{option}: '{text[:40]}' is not a number") from None
    return value


@app.command(
    cls=DpcliCommand,
    epilog=_example("dpcli release spec.yaml --ledger ledger.jsonl --release-id 2026-01-31 -o out.csv"),
)
def release(
    spec: Path = typer.Argument(..., metavar="SPEC", help="The release spec (YAML)."),
    input: str | None = InputOpt,  # noqa: A002 - the contract's name
    output: str | None = OutputOpt,
    ledger: str | None = LedgerOpt,
    fmt: OutputFormat | None = typer.Option(
        None, "--format", case_sensitive=False, help="The table's format (default: json for a .json path, else csv)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object on stderr."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary on stderr (errors are still printed)."),
    lock_timeout: float = LockOpt,
    release_id: str | None = typer.Option(
        None, "--release-id", envvar="DPCLI_RELEASE_ID", metavar="ID",
        help="Name this release (e.g. $(date +%F)): the same dataset, spec and id return the first run's table "
        "and spend nothing. Without it every run is a new release.",
    ),
    reuse: bool = typer.Option(
        True, "--reuse/--no-reuse", hidden=True,
        help="No effect since 0.2 (re-runs are keyed on --release-id); accepted so old scripts keep working.",
    ),
    input_timeout: float = typer.Option(
        DEFAULT_INPUT_TIMEOUT, "--input-timeout", envvar="DPCLI_INPUT_TIMEOUT", metavar="SECONDS",
        help="Seconds without a byte from stdin or a FIFO before giving up with exit 3 (0: wait forever; at most "
        f"{MAX_INPUT_TIMEOUT:.0f}).",
    ),
    max_input_bytes: str = typer.Option(
        f"{DEFAULT_MAX_INPUT_BYTES >> 30}G", "--max-input-bytes", envvar="DPCLI_MAX_INPUT_BYTES", metavar="N",
        help="Cap on stdin or a FIFO, spooled to a private temporary file, and on a compressed, Parquet or Arrow "
        "input's decompressed size: past it, exit 3 before any spend (e.g. 512M, 16G).",
    ),
    verbose: bool = typer.Option(
        False, "--verbose", "-v",
        help="Progress on stderr: each phase by name and the run's total time (never data, never per-phase times).",
    ),
    input_format: InputFormat | None = typer.Option(
        None, "--input-format", case_sensitive=False,
        help="The input's format (default: from its extension: .csv, .csv.gz, .csv.zst, .parquet, .arrow).",
    ),
    engine: Engine | None = typer.Option(
        None, "--engine", case_sensitive=False,
        help="Who computes the exact aggregates (default: the spec's engine:, else polars).",
    ),
    spark_master: str = typer.Option(
        "local[*]", "--spark-master", envvar="SPARK_MASTER", metavar="URL",
        help="The Spark master's URL, for --engine spark.",
    ),
    report_path: str | None = typer.Option(
        None, "--report", metavar="PATH", help="Also write the release's report (one self-contained HTML file)."
    ),
    summary_md: str | None = SummaryMdOpt,
    meta: str | None = typer.Option(
        None, "--meta", metavar="PATH",
        help="Write the metadata sidecar (JSON, schema: `dpcli schema --sidecar`) here, also with --output - "
        "(default: OUTPUT.meta.json beside an output file; none for standard output).",
    ),
    period: int | None = typer.Option(
        None, "--period", metavar="N",
        help="A spec with series: release period N (1..T); the first period released charges the series once, "
        "later ones spend nothing. A date-like --release-id (2027-01-05) names the period holding that date.",
    ),
    allow_unfinished: bool = typer.Option(
        False, "--allow-unfinished",
        help="A series: release a period that has not ended yet (rows arriving later never count in it).",
    ),
) -> None:
    """Release noisy statistics: spend the budget, then write the table.

    On a terminal a bar shows the bytes of the input read so far, of its size (not with --quiet or --json, nor
    when $CI or $NO_COLOR is set)."""
    from dpcli.core import signals
    from dpcli.run.release import release as run
    from dpcli.specs.load import load_spec

    if verbose and quiet:
        raise UsageError("--verbose and --quiet contradict each other: give one")
    del reuse  # a no-op kept for old scripts: reuse is keyed on --release-id, never on the input's bytes
    cap = parse_size(max_input_bytes)
    started = time.monotonic()
    bar_wanted = progress.progress_wanted(sys.stderr, quiet=quiet, as_json=as_json)
    # a series' period: --period, or a release id that may be date-like (then the spec says whether it is a series)
    loaded = load_spec(spec) if period is not None or release_id is not None or allow_unfinished else None
    if period is not None or (loaded is not None and loaded.series is not None):
        from dpcli.run.series import release_period

        with progress.input_bar(sys.stderr, bar_wanted) as on_input_bytes:
            done = release_period(
                loaded or spec, period=period, release_id=release_id, allow_unfinished=allow_unfinished, input=input,
                output=output, ledger=ledger, fmt=None if fmt is None else fmt.value, lock_timeout=lock_timeout,
                input_timeout=input_timeout, max_input_bytes=cap, progress=_progress_printer if verbose else None,
                input_format=None if input_format is None else input_format.value,
                engine=None if engine is None else engine.value, on_input_bytes=on_input_bytes, sidecar=meta,
                report=report_path, summary_md=summary_md,
            )
        signals.finish()
        if as_json:
            with_pages = report_path is not None or summary_md is not None
            summary = render_run.release_summary(done, None, report_path, with_pages)
            sys.stderr.write(json.dumps(documents.stamped("release", summary)) + "\n")
            return
        if not quiet or done.reused:
            messages.info(render_run.period_text(done))
        pages = None if quiet else render_run.pages_text(report_path, summary_md)
        if pages is not None:
            messages.info(pages)
        return
    if allow_unfinished:
        raise UsageError("--allow-unfinished is for a spec with a series")
    try:
        # the bar is off the terminal before anything below says a word (an error line, a warning, the summary)
        with progress.input_bar(sys.stderr, bar_wanted) as on_input_bytes:
            result = run(
                loaded or spec, input=input, output=output, ledger=ledger, fmt=None if fmt is None else fmt.value,
                release_id=release_id,
                lock_timeout=lock_timeout, input_timeout=input_timeout, max_input_bytes=cap,
                progress=_progress_printer if verbose else None,
                input_format=None if input_format is None else input_format.value,
                engine=None if engine is None else engine.value, spark_master=spark_master,
                on_input_bytes=on_input_bytes, sidecar=meta, report=report_path, summary_md=summary_md,
            )
    except BudgetRefused:
        # no cap here may mean the cap is in the other ledger the environment or the spec names
        _warn_cap_elsewhere(spec, ledger, quiet=as_json, lock_timeout=lock_timeout)
        raise
    # the release and its output are written (or a paid release's table written again): a signal from here on
    # changes nothing, so that no exit reads "nothing was spent" after a spend
    signals.finish()
    if verbose:
        # the run's total wall time is public (threat model); per-phase times are not: the scan's depends on the data
        _progress_printer(f"done in {time.monotonic() - started:.2f} s")
    status = result.status
    warning = None
    if not result.reused and status is not None and status.releases == 1:
        warning = _warn_first_spend(result.plan.spec, ledger, quiet=as_json)
    if as_json:
        with_report = report_path is not None or summary_md is not None
        summary = render_run.release_summary(result, warning, report_path, with_report)
        sys.stderr.write(json.dumps(documents.stamped("release", summary)) + "\n")
        return
    pages = None if quiet else render_run.pages_text(report_path, summary_md)
    if result.reused:
        # said even with --quiet: a re-run that did not draw new noise must never pass unnoticed
        messages.info(render_run.release_reissued(result))
    elif not quiet:
        messages.info(render_run.release_text(result))
    if pages is not None:
        messages.info(pages)


@app.command(
    cls=DpcliCommand,
    epilog=_example("dpcli randomize configs/randomize.yaml --ledger ledger.jsonl --release-id 2026-01-31 -o rr.csv"),
)
def randomize(
    spec: Path = typer.Argument(..., metavar="SPEC", help="The randomize spec (YAML, with randomize: {columns: ...})."),
    input: str | None = InputOpt,  # noqa: A002 - the contract's name
    output: str | None = OutputOpt,
    ledger: str | None = LedgerOpt,
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object on stderr."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary on stderr (errors are still printed)."),
    lock_timeout: float = LockOpt,
    release_id: str | None = typer.Option(
        None, "--release-id", envvar="DPCLI_RELEASE_ID", metavar="ID",
        help="Name this run: the same dataset, spec and id write the first run's file again and spend nothing.",
    ),
) -> None:
    """Write a local-DP copy of chosen category/bool columns (k-ary randomized response, ε per record).

    One row per input row, in input order, the chosen columns only; neighbours: replace. Spends like a release."""
    from dpcli.core import signals
    from dpcli.run.randomize import randomize as run

    result = run(spec, input=input, output=output, ledger=ledger, release_id=release_id, lock_timeout=lock_timeout)
    signals.finish()  # the file is written: a late signal changes nothing
    if as_json:
        sys.stderr.write(json.dumps(documents.stamped("randomize", render_run.randomize_summary(result))) + "\n")
        return
    if result.reused:
        messages.info(render_run.randomize_reissued(result))
        return
    if quiet:
        return
    messages.info(render_run.randomize_text(result))


@app.command(
    cls=DpcliCommand,
    epilog=_example("dpcli synth configs/synth.yaml --ledger ledger.jsonl --release-id 2026-11 -o synthetic.csv"),
)
def synth(
    spec: Path = typer.Argument(..., metavar="SPEC", help="The synth spec (YAML, with synth: {method: mst, ...})."),
    input: str | None = InputOpt,  # noqa: A002 - the contract's name
    output: str | None = OutputOpt,
    ledger: str | None = LedgerOpt,
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object on stderr."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary on stderr (errors are still printed)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Progress on stderr: each phase by name."),
    lock_timeout: float = LockOpt,
    release_id: str | None = typer.Option(
        None, "--release-id", envvar="DPCLI_RELEASE_ID", metavar="ID",
        help="Name this release: the same dataset, spec and id estimate again from the stored measurements, write "
        "the same bytes and spend nothing. Without it every run is a new release.",
    ),
    marginals: str | None = typer.Option(
        None, "--marginals", metavar="PATH",
        help="Write the noisy marginals table here (default: OUTPUT.marginals.csv beside an output file).",
    ),
    meta: str | None = typer.Option(
        None, "--meta", metavar="PATH",
        help="Write the sidecar (every public parameter) here (default: OUTPUT.meta.json beside an output file).",
    ),
    report_path: str | None = typer.Option(
        None, "--report", metavar="PATH",
        help="Also write an HTML report: the fit to the published measurements, beside the noise's size.",
    ),
    input_timeout: float = typer.Option(
        DEFAULT_INPUT_TIMEOUT, "--input-timeout", envvar="DPCLI_INPUT_TIMEOUT", metavar="SECONDS",
        help="Seconds without a byte from stdin or a FIFO before giving up with exit 3 (0: wait forever).",
    ),
    max_input_bytes: str = typer.Option(
        f"{DEFAULT_MAX_INPUT_BYTES >> 30}G", "--max-input-bytes", envvar="DPCLI_MAX_INPUT_BYTES", metavar="N",
        help="Cap on stdin, a FIFO, or a compressed, Parquet or Arrow input's decompressed size (e.g. 16G).",
    ),
    input_format: InputFormat | None = typer.Option(
        None, "--input-format", case_sensitive=False, help="The input's format (default: from its extension).",
    ),
    engine: Engine | None = typer.Option(
        None, "--engine", case_sensitive=False, help="Who computes the exact marginals (default: the spec's).",
    ),
    spark_master: str = typer.Option(
        "local[*]", "--spark-master", envvar="SPARK_MASTER", metavar="URL", help="The Spark master's URL.",
    ),
) -> None:
    """Write a synthetic CSV from noisy marginals (MST): charged like a release; values only from the spec.

    The noisy marginals it was fitted to and a sidecar of every public parameter are written beside it."""
    from dpcli.core import signals
    from dpcli.run.synth import synth as run

    if verbose and quiet:
        raise UsageError("--verbose and --quiet contradict each other: give one")
    result = run(
        spec, input=input, output=output, ledger=ledger, release_id=release_id, marginals=marginals, sidecar=meta,
        report=report_path, lock_timeout=lock_timeout, input_timeout=input_timeout,
        max_input_bytes=parse_size(max_input_bytes),
        input_format=None if input_format is None else input_format.value,
        engine=None if engine is None else engine.value, spark_master=spark_master,
        progress=_progress_printer if verbose else None,
    )
    signals.finish()  # the file is written: a late signal changes nothing
    if as_json:
        sys.stderr.write(json.dumps(documents.stamped("synth", render_run.synth_summary(result))) + "\n")
        return
    if result.reused:
        # said even with --quiet: a re-run that drew no new noise must never pass unnoticed
        messages.info(render_run.synth_reissued(result))
        return
    if not quiet:
        messages.info(render_run.synth_text(result))


# where a ledger was named, in the words of the command line
LEDGER_SOURCES = {"explicit": "--ledger", "environment": "$DPCLI_LEDGER", "spec": "the spec's ledger:"}


def _warn_first_spend(spec: Spec, explicit: str | None, quiet: bool) -> str | None:
    """After a release of ``spec``, the first of its dataset in the ledger used: warn when another ledger is named
    too (dpcli.ledger.named): each ledger holds its own cap, so spends split between two ledgers are each checked
    against a whole budget. Returns the warning (for --json's summary), printed unless ``quiet``."""
    from dpcli.ledger.named import other_ledger

    pair = other_ledger(explicit, spec.ledger)
    return None if pair is None else _warn_other_ledger("first release of", spec.dataset, pair, quiet)


def _warn_cap_elsewhere(spec: Path, explicit: str | None, quiet: bool, lock_timeout: float) -> None:
    """After a release of the spec file ``spec`` was refused for its budget: warn when the ledger used has no cap
    or spend of its dataset while another ledger is named (the cap may be there)."""
    from dpcli.ledger.named import cap_elsewhere

    found = cap_elsewhere(spec, explicit, lock_timeout)
    if found is not None:
        _warn_other_ledger("no cap or spend for", *found, quiet)


def _warn_other_ledger(what: str, dataset: str, pair: OtherLedger, quiet: bool) -> str:
    """The warning about a dataset's budget split between two ledgers (README "The ledger"), printed unless
    ``quiet``."""
    warning = (
        f"{what} dataset '{dataset}' in ledger {pair.used} (from {LEDGER_SOURCES[pair.used_from]}), while "
        f"{LEDGER_SOURCES[pair.other_from]} names ledger {pair.other}: each ledger keeps its own budget; use one "
        "ledger per dataset"
    )
    if not quiet:
        messages.warning(warning)
    return warning


def _progress_printer(message: str) -> None:
    """--verbose: one stderr line per finished phase, by name only (no timings: the scan's time depends on the data;
    the CLI adds the run's total time at the end, which is public)."""
    sys.stderr.write(f"dpcli: {message}\n")
    sys.stderr.flush()


@app.command(
    "report", cls=DpcliCommand,
    epilog=_example("dpcli report out.csv -o report.html --ledger ledger.jsonl --summary-md \"$GITHUB_STEP_SUMMARY\""),
)
def report_command(
    table: Path = typer.Argument(..., metavar="OUT.csv", help="A released table (CSV, or JSON for a .json path)."),
    output: str = typer.Option(..., "--output", "-o", metavar="PATH", help="Where to write the HTML report."),
    meta: Path | None = typer.Option(
        None, "--meta", metavar="PATH", help="The table's sidecar (default: OUT.csv.meta.json beside it, if any)."
    ),
    ledger: str | None = typer.Option(
        None, "--ledger", metavar="PATH|URL",
        help="Read the dataset's budget left from this ledger (else $DPCLI_LEDGER; without either the report says "
        "it is not known). Spends nothing.",
    ),
    summary_md: str | None = SummaryMdOpt,
    lock_timeout: float = LockOpt,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Say nothing on success (errors are still printed)."),
    as_json: bool = typer.Option(False, "--json", help="Print what was written as one JSON object on stdout."),
) -> None:
    """Write one self-contained HTML page about a released table: plots with intervals, parameters, budget."""
    from dpcli.publish.paths import named_path
    from dpcli.publish.report import make_report

    report_path = named_path(output, "report")
    summary_path = None if summary_md is None else named_path(summary_md, "summary")
    make_report(
        table, report_path, meta=meta, ledger=ledger or os.environ.get("DPCLI_LEDGER") or None,
        summary_md=summary_path, lock_timeout=lock_timeout,
    )
    pages = render_run.pages_text(output, summary_md)
    if pages is not None and not quiet and not as_json:
        messages.info(pages)
    if as_json:
        messages.document(documents.stamped("report", {
            "report": str(report_path), "table": str(table),
            "summary_md": None if summary_path is None else str(summary_path),
        }))


@app.command(cls=DpcliCommand, epilog=_example("dpcli schema > spec-v1.schema.json"))
def schema(
    sidecar: bool = typer.Option(
        False, "--sidecar", help="Print the schema of the release's metadata sidecar (OUTPUT.meta.json) instead."
    ),
) -> None:
    """Print the JSON Schema (draft 2020-12) of spec version 1, for editors and CI validators."""
    if sidecar:
        from dpcli.publish.sidecar import sidecar_schema_text

        sys.stdout.write(sidecar_schema_text())
        return
    from dpcli.specs.schema import schema_json

    sys.stdout.write(schema_json())


@app.command(cls=DpcliCommand, epilog=_example("dpcli plan configs/example.yaml --json"))
def plan(
    spec: Path = typer.Argument(..., metavar="SPEC", help="The release spec (YAML)."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
    epsilons: str | None = typer.Option(
        None, "--epsilon", metavar="E1,E2,...",
        help="Compare expected errors at these total ε (the spec's split scaled; zCDP: ε at the spec's δ).",
    ),
    targets: list[str] = typer.Option(
        [], "--target", metavar="NAME=ERROR",
        help="A statistic's largest acceptable ±error at 95% (repeatable; over its target:): find the smallest ε.",
    ),
    ledger: str | None = typer.Option(
        None, "--ledger", metavar="PATH|URL",
        help="Show what the release would leave of the dataset's cap (reads only).",
    ),
    period: str | None = typer.Option(
        None, "--release-id", metavar="ID",
        help="With --ledger, of a cap that renews per period: the period (release id) whose cap to show; else a "
        "period not charged yet.",
    ),
    lock_timeout: float = LockOpt,
    rows: list[str] = typer.Option(
        [], "--expected-rows", metavar="N|NAME=N",
        help="Rows with a value per cell, for a mean's error in its units and its --target: N for every mean, "
        "NAME=N for one (repeatable; over the spec's expected_rows).",
    ),
    at_period: list[int] = typer.Option(
        [], "--at-period", metavar="N",
        help="A series: also show the expected errors at period N (repeatable; always 1, T/2 and T).",
    ),
) -> None:
    """Show, without reading any data, each statistic's mechanism, sensitivity, ε share, scale and error."""
    from dpcli.run.prepare import prepare_spec
    from dpcli.specs.load import is_synth_spec
    from dpcli.specs.randomize import is_randomize_spec

    if is_randomize_spec(spec):
        from dpcli.specs.randomize import load_randomize_spec

        randomize_plan = render_plan.randomize_plan(load_randomize_spec(spec))
        if as_json:
            messages.document(documents.stamped("plan", randomize_plan), indent=2)
        else:
            sys.stdout.write(render_plan.randomize_plan_text(randomize_plan))
        return
    if is_synth_spec(spec):
        if epsilons or targets or ledger is not None or rows or at_period or period is not None:
            raise UsageError("--epsilon, --target, --ledger, --release-id, --expected-rows and --at-period plan a "
                             "spec's statistics: a synth spec's plan is its own (give the spec alone)")
        from dpcli.plan.synth import make_synth_plan
        from dpcli.specs.load import load_spec

        synth_doc = render_plan.synth_plan_doc(make_synth_plan(load_spec(spec)))
        if as_json:
            messages.document(documents.stamped("plan", synth_doc), indent=2)
        else:
            sys.stdout.write(render_plan.synth_plan_text(synth_doc))
        return
    # every check of the spec alone that a release makes (exit 2), its labels built but not formatted (no polars)
    the_plan = prepare_spec(spec, format_labels=False).plan
    if rows:
        from dpcli.plan.what_if import with_expected_rows

        the_plan = with_expected_rows(the_plan, *_expected_rows(rows))
    series_doc = None
    if the_plan.spec.series is not None:
        from dpcli.plan.series import make_series_plan
        from dpcli.run.series import series_plan_doc

        splan = make_series_plan(the_plan.spec)
        if splan.series.design != "per_period":  # the plan printed is what is drawn: a part of the budget each
            the_plan = splan.main
        periods = splan.series.periods
        series_doc = series_plan_doc(splan, [1, max(1, periods // 2), periods, *at_period])
    elif at_period:
        raise UsageError("--at-period is for a spec with a series")
    if period is not None and ledger is None:
        raise UsageError("--release-id names the period of a renewing cap that --ledger shows: give --ledger too")
    planning = _planning(the_plan, epsilons, targets, ledger, lock_timeout, period)
    if series_doc is not None and (planning.get("ledger") or {}).get("per") == "period":
        series_doc["charged"] = "per_period"  # a renewing cap: each period charged to its own period's cap
    if as_json:
        doc = render_plan.plan_doc(the_plan, planning)
        if series_doc is not None:
            doc["series"] = series_doc
        messages.document(documents.stamped("plan", doc), indent=2)
    else:
        render_plan.print_plan(the_plan, sys.stdout)
        render_plan.print_planning(the_plan, planning, sys.stdout)
        if series_doc is not None:
            render_plan.print_series(series_doc, sys.stdout)


def _expected_rows(given: list[str]) -> tuple[int | None, dict[str, int]]:
    """plan --expected-rows: N (every mean) and NAME=N (one), as given; their range is checked with the spec."""
    every: int | None = None
    own: dict[str, int] = {}
    for text in given:
        name, eq, number = text.rpartition("=")
        if not number.strip().isdigit() or (eq and not name):
            raise UsageError(f"--expected-rows: '{text[:60]}' is not N or NAME=N (N a whole number of rows)")
        if eq:
            own[name] = int(number)
        else:
            every = int(number)
    return every, own


def _planning(
    the_plan: Plan, epsilons: str | None, targets: list[str], ledger: str | None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT, period: str | None = None,
) -> dict[str, Any]:
    """plan's what-if answers (dpcli.plan.what_if) as their JSON document: --epsilon, targets (the spec's or
    --target), --ledger."""
    from dpcli.plan.what_if import compare_errors, errors_at, find_epsilon, targets_of

    out: dict[str, Any] = {}
    if epsilons is not None:
        values = [_exact("--epsilon", e.strip()) for e in epsilons.split(",")]
        if not values or any(not 0 < e <= MAX_RELEASE_EPSILON for e in values) or len(values) > 12:
            raise UsageError(f"--epsilon: give 1 to 12 numbers in (0, {MAX_RELEASE_EPSILON}], comma-separated")
        out["what_if"] = render_plan.what_if_json(values, errors_at(the_plan, values))
    extra: dict[str, Fraction] = {}
    for t in targets:
        name, eq, error = t.partition("=")
        if not eq or not name:
            raise UsageError(f"--target: '{t[:60]}' is not NAME=ERROR")
        extra[name] = _exact("--target", error.strip())
        if extra[name] <= 0:
            raise UsageError("--target: the error must be positive")
    if extra or any(sp.statistic.target is not None for sp in the_plan.statistics):
        answer = find_epsilon(the_plan, targets_of(the_plan, extra))
        # the errors at the answer's epsilon: its plan is the spec's at that epsilon (plan_at), found by the search
        errors = None if answer.plan is None else compare_errors(the_plan, [answer.plan])
        out["target"] = render_plan.target_json(answer, errors)
    if ledger is not None:
        from dpcli.ledger import resolve_ledger
        from dpcli.run.prepare import ledger_outlook

        out["ledger"] = render_plan.outlook_json(
            ledger_outlook(the_plan, resolve_ledger(ledger, None), lock_timeout, period)
        )
    return out


@app.command("audit", cls=DpcliCommand, epilog=_example("dpcli audit configs/example.yaml --trials 20000"))
def audit_command(
    spec: Path = typer.Argument(..., metavar="SPEC", help="The release spec (YAML)."),
    trials: int = typer.Option(
        200_000, "--trials", metavar="N", min=1_000, max=1_000_000_000,
        help="Noise draws per statistic and dataset (default 200000).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Empirically audit each statistic's privacy claim on synthetic neighbouring datasets. Reads no data, spends
    nothing. Exit 6 when a statistic's ε lower bound exceeds its claim (a bug)."""
    from dpcli.audit.release_audit import audit as run
    from dpcli.specs.randomize import is_randomize_spec

    if is_randomize_spec(spec):
        from dpcli.audit.randomize_audit import audit_randomize

        rr = audit_randomize(spec, trials=trials)
        if as_json:
            doc = documents.stamped("audit", rr.as_dict(), 0 if rr.ok else AuditFailed.exit_code)
            messages.document(doc, indent=2, ensure_ascii=False)
        else:
            sys.stdout.write(rr.text())
        if not rr.ok:
            names = ", ".join(t.name for t in rr.violations)
            raise AuditFailed(f"audit: {names} of the randomized response does not deliver its claim: the "
                              f"empirical ε lower bound exceeds it (confidence {rr.confidence})")
        return
    from dpcli.specs.load import load_spec

    loaded = load_spec(spec)
    if loaded.synth is not None:  # MST's measurements and selection (dpcli.audit.synth_audit)
        from dpcli.audit.synth_audit import audit_synth

        report = audit_synth(loaded, trials=trials)
    else:
        report = run(spec, trials=trials)
    if as_json:
        doc = documents.stamped("audit", report.as_dict(), 0 if report.ok else AuditFailed.exit_code)
        messages.document(doc, indent=2, ensure_ascii=False)
    else:
        render_audit.print_audit(report, sys.stdout)
    if not report.ok:
        names = ", ".join(f"'{s.statistic}'" for s in report.violations)
        raise AuditFailed(
            f"audit: {names} does not deliver its claim: a searched neighbouring pair loses more than the claimed "
            f"privacy under the plan's noise, or the empirical ε lower bound exceeds the claim (confidence "
            f"{report.confidence})"
        )


@app.command(cls=DpcliCommand, epilog=_example("dpcli check spec.yaml --input people.csv --ledger ledger.jsonl"))
def check(
    spec: Path = typer.Argument(..., metavar="SPEC", help="The release spec (YAML)."),
    input: str | None = typer.Option(  # noqa: A002
        None, "--input", "-i", metavar="PATH", help="Also check this CSV's header (default: spec's input:)."
    ),
    input_format: InputFormat | None = typer.Option(
        None, "--input-format",
        help="csv, csv.gz, csv.zst, parquet or arrow (default: the spec's input_format:, else the extension).",
    ),
    output: str | None = typer.Option(
        None, "--output", "-o", metavar="PATH", help="Check this output as release would (default: spec's output:)."
    ),
    ledger: str | None = typer.Option(
        None, "--ledger", metavar="PATH|URL",
        help="Also check the ledger as release would: its chain, the unit pin, the cap, the release id (reads only).",
    ),
    release_id: str | None = typer.Option(
        None, "--release-id", envvar="DPCLI_RELEASE_ID", metavar="ID",
        help="Check this release id as release would (with --ledger: whether it is paid for already).",
    ),
    lock_timeout: float = LockOpt,
    as_json: bool = typer.Option(
        False, "--json", help="Print the verdict as one JSON object on stdout: every problem found, as fields."
    ),
) -> None:
    """Validate the spec as release would before reading any data, and that the input's header (or schema) has the
    declared columns. Reads the header only; spends nothing and writes nothing.

    Valid exactly when `dpcli release` with the same options would pass every check that needs no data (with
    --ledger, the ledger's too). Every error of the spec is reported, one `dpcli: error: FILE: PATH: MESSAGE` line
    each (exit 2), and with --ledger the ledger's and the input header's problems both; with --json, one object
    listing them all."""
    from dpcli.run.check import check_spec

    result = check_spec(
        spec, input=input, input_format=None if input_format is None else input_format.value, output=output,
        ledger=ledger, release_id=release_id, lock_timeout=lock_timeout,
    )
    if any(isinstance(p, BudgetRefused) for p in result.problems):
        # as release says it: no cap here may mean the cap is in another ledger named
        _warn_cap_elsewhere(spec, ledger, quiet=as_json, lock_timeout=lock_timeout)
    if as_json:
        messages.document(documents.stamped("check", _check_doc(result), result.exit_code), indent=2)
    if result.problems:
        # with --json the document lists them all: stderr gets the first, which decides the exit code, as its one
        # error object
        for problem in result.problems[:1] if as_json else result.problems:
            _say_error(problem)
        raise typer.Exit(result.exit_code)
    if as_json:
        return
    if result.verdict is not None:
        messages.info(result.verdict)
        return
    checked = "" if result.input_checked is None else f"; {result.input_checked} has every declared column"
    if result.ledger is None or result.frequency_only:
        budget = ""  # without --ledger; a frequency estimate spends nothing
    elif result.paid_record is not None:
        budget = (f"; release id '{result.release_id}' is paid for by ledger {result.ledger} record "
                  f"{result.paid_record}: release writes its stored table again, spending nothing")
    else:
        budget = f"; ledger {result.ledger} allows the spend"
    messages.info(
        f"dpcli: {spec} is valid: {result.statistics} statistic(s), {result.size}, {result.cost}{checked}{budget}"
    )


def _check_doc(result: CheckResult) -> dict[str, Any]:
    """``dpcli check --json``'s document (docs/json.md)."""
    return {
        "valid": result.valid, "spec": str(result.spec),
        "problems": [_problem(p) for p in result.problems],
        "randomize": result.randomize, "synth": result.synth, "statistics": result.statistics, "size": result.size,
        "cost": result.cost,
        "input_checked": result.input_checked, "ledger": result.ledger, "release_id": result.release_id,
        "paid_record": result.paid_record,
    }


def _problem(exc: DpcliError) -> dict[str, Any]:
    """An error as a --json problem: its code, kind, message (as its one line says it) and fields."""
    return documents.error_fields(exc.exit_code, _error_kind(exc), _error_text(exc), exc.fields())


@app.command(cls=DpcliCommand, epilog=_example("dpcli init people.csv -o spec.yaml"))
def init(
    csv: Path = typer.Argument(..., metavar="CSV", help="A CSV file: only its header is read."),
    output: str | None = typer.Option(
        None, "--output", "-o", metavar="SPEC", help="Write the skeleton to this file (default: standard output)."
    ),
    force: bool = typer.Option(False, "--force", help="With -o: overwrite an existing file."),
    as_json: bool = typer.Option(
        False, "--json", help="Print one JSON object on stdout (without -o, the skeleton is its `spec` field)."
    ),
) -> None:
    """Write a spec skeleton from a CSV header (names only: a person fills in types, bounds and categories).

    Its input: is relative to the spec's directory (the current one when printed), as the loader reads it."""
    from dpcli.core.files import atomic_write
    from dpcli.engine.csv_header import read_header
    from dpcli.engine.source import input_delimiter
    from dpcli.publish.paths import check_init_target, is_stdout_name, output_path
    from dpcli.specs.skeleton import spec_skeleton

    target = output_path(output)  # `-o -`: standard output
    if target is not None:
        if os.path.lexists(target) and not force and not is_stdout_name(target):  # that one: check_init_target says
            raise UsageError(f"{target} exists: give --force to overwrite it, or another -o")
        check_init_target(target, csv)  # never the CSV it reads, the ledger, a directory, FIFO or link (exit 2)
    header = read_header(csv, delimiter=input_delimiter(csv))  # before anything is written: an unreadable CSV
    # leaves no file behind; a .tsv's header is read at tabs, as a release with no csv.delimiter would read it
    text = spec_skeleton(csv, header, Path.cwd() if target is None else target.absolute().parent)
    if target is None:
        if as_json:
            messages.document(documents.stamped("init", {"output": None, "spec": text, "header_columns": len(header)}))
        else:
            sys.stdout.write(text)
        return
    try:
        atomic_write(target, lambda fh: fh.write(text.encode("utf-8")))
    except OSError as exc:
        raise InputError(f"cannot write {target}: {exc.strerror or type(exc).__name__}") from None
    if as_json:
        messages.document(documents.stamped("init", {"output": str(target), "header_columns": len(header)}))
        return
    messages.info(f"dpcli: wrote {target}: fill in the TODOs, then `dpcli check {target}`")


@budget_app.command(
    "set", cls=DpcliCommand, epilog=_example("dpcli budget set people --epsilon 3 --ledger ledger.jsonl")
)
def budget_set(
    dataset: str = typer.Argument(..., metavar="DATASET", help="Dataset name (the spec's dataset:)."),
    epsilon: str = typer.Option(
        ..., "--epsilon", metavar="EPSILON", help="The cap on the total ε spent on this dataset."
    ),
    delta: str = typer.Option("0", "--delta", metavar="DELTA", help="The cap on δ (pure ε releases spend none)."),
    allow_raise: bool = typer.Option(False, "--raise", help="Allow raising an existing cap (recorded as a raise)."),
    neighbours: Neighbours | None = typer.Option(
        None, "--neighbours",
        help="Pin the dataset's neighbour relation; else the first release pins it.",
    ),
    unit: str | None = typer.Option(
        None, "--unit", metavar="UNIT",
        help="The privacy unit pinned with --neighbours (needs it): row (the default), or person:FIELD (a spec's "
        "person unit with id FIELD).",
    ),
    ledger: str | None = LedgerOpt,
    lock_timeout: float = LockOpt,
    per: Per | None = typer.Option(
        None, "--per",
        help="period: a cap that renews per declared period (each release's --release-id, or a series' period), "
        "never by the clock; a person present in k periods has k·ε. Never mixed with a lifetime cap on a dataset.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the cap set as one JSON object on stdout."),
) -> None:
    """Set a dataset's budget cap. Lowering is always allowed; raising needs --raise."""
    from dpcli.ledger import resolve_ledger
    from dpcli.ledger.admin import set_budget
    from dpcli.ledger.base import RENEWING_NOTE
    from dpcli.ledger.named import other_ledger
    from dpcli.specs.fields import DATASET_NAME

    if not DATASET_NAME.fullmatch(dataset):
        raise UsageError(f"'{dataset[:60]}' is not a valid dataset name (letters, digits, _ . -)")
    eps = _exact("--epsilon", epsilon)
    dlt = _exact("--delta", delta)
    if eps <= 0:
        raise UsageError("--epsilon: a cap must be positive")
    if not 0 <= dlt < 1:
        raise UsageError("--delta: must be in [0, 1)")
    if unit is not None and unit != "row" and not (unit.startswith("person:") and len(unit) > len("person:")):
        raise UsageError(f"--unit: '{unit[:40]}' is not a unit (row, or person:FIELD)")
    if unit is not None and neighbours is None:
        # a pin is a unit and a neighbour relation together: a unit alone would pin nothing, without a word
        raise UsageError(
            "--unit pins the dataset's unit together with its neighbour relation: give --neighbours too "
            "(add_remove or replace)"
        )
    location = resolve_ledger(ledger, None)
    pair = other_ledger(ledger, None)
    pinned = None if neighbours is None else neighbours.value
    done = set_budget(location, dataset, eps, dlt, allow_raise=allow_raise,
                      unit=(unit or "row") if pinned else None, neighbours=pinned, lock_timeout=lock_timeout,
                      per_period=per is not None)
    status = done.status
    spent = status.spent if status else Fraction(0)
    # a renewing cap: what a period not charged yet has (each period's own: `dpcli budget show`)
    remaining = status.remaining if status and status.remaining is not None else eps
    warning = None
    if done.new_here and pair is not None:
        warning = (
            f"dataset '{dataset}' first appears in ledger {pair.used} (from --ledger), while "
            f"{LEDGER_SOURCES[pair.other_from]} names ledger {pair.other}: releases that use {pair.other} will not "
            "see this cap; use one ledger per dataset"
        )
    if as_json:
        messages.document(documents.stamped("budget set", {
            "dataset": dataset, "cap": format_exact(eps), "cap_delta": format_exact(dlt),
            "raised": bool(done.record.get("raise")), "spent": format_exact(spent),
            "remaining": format_exact(remaining), "record": done.record.seq,
            **({"per": "period", "periods_seen": len(status.periods) if status else 0, "note": RENEWING_NOTE}
               if per is not None else {}),
            "warnings": [] if warning is None else [warning],
        }))
        return
    if per is not None:
        messages.info(
            f"dpcli: cap for '{dataset}' set to ε={layout.eps(eps)} per period"
            + (" (raised)" if done.record.get("raise") else "")
            + f"; {len(status.periods) if status else 0} period(s) charged so far, spent {layout.eps(spent)} over "
            f"all of them; a new period has ε={layout.eps(eps)}. Note: {RENEWING_NOTE}"
        )
    else:
        messages.info(
            f"dpcli: cap for '{dataset}' set to ε={layout.eps(eps)}"
            + (" (raised)" if done.record.get("raise") else "")
            + f"; spent {layout.eps(spent)}, remaining {layout.eps(remaining)}"
        )
    if warning is not None:
        messages.warning(warning)


@budget_app.command("show", cls=DpcliCommand, epilog=_example("dpcli budget show --ledger ledger.jsonl --json"))
def budget_show(
    as_json: bool = typer.Option(False, "--json", help="JSON for scripts."),
    ledger: str | None = LedgerOpt,
    lock_timeout: float = LockOpt,
) -> None:
    """Spent and remaining ε per dataset."""
    from dpcli.ledger import resolve_ledger
    from dpcli.ledger.admin import budget_statuses, ledger_series

    location = resolve_ledger(ledger, None)
    statuses = budget_statuses(location, lock_timeout=lock_timeout)
    series = ledger_series(location, lock_timeout=lock_timeout)
    if as_json:
        sys.stdout.write(render_ledger.budget_json(statuses, series))
    else:
        render_ledger.print_budget(statuses, sys.stdout)
        render_ledger.print_series(series, sys.stdout)


@ledger_app.command("show", cls=DpcliCommand, epilog=_example("dpcli ledger show --ledger ledger.jsonl"))
def ledger_show(
    as_json: bool = typer.Option(False, "--json", help="JSON for scripts."),
    ledger: str | None = LedgerOpt,
    lock_timeout: float = LockOpt,
) -> None:
    """Every record of the ledger (verified first)."""
    from dpcli.ledger import resolve_ledger
    from dpcli.ledger.admin import ledger_records
    from dpcli.ledger.base import series_statuses

    records = ledger_records(resolve_ledger(ledger, None), lock_timeout=lock_timeout)
    if as_json:
        sys.stdout.write(render_ledger.ledger_json(records))
    else:
        render_ledger.print_ledger(records, sys.stdout)
        render_ledger.print_series(series_statuses(records), sys.stdout)


@ledger_app.command(
    "verify", cls=DpcliCommand,
    epilog=_example("dpcli ledger verify --ledger ledger.jsonl --against out.csv.meta.json"),
)
def ledger_verify(
    ledger: str | None = LedgerOpt,
    against: list[Path] = typer.Option(
        [], "--against", metavar="META_JSON|HEAD",
        help="A release's .meta.json (or a head hash): its ledger head must be in the chain.",
    ),
    lock_timeout: float = LockOpt,
    as_json: bool = typer.Option(False, "--json", help="Print the verdict as one JSON object on stdout."),
) -> None:
    """Check the hash chain: exit 0 when intact, 5 when edited, reordered, cut, torn or older than a release."""
    from dpcli.ledger import resolve_ledger
    from dpcli.ledger.admin import verify_ledger

    report = verify_ledger(resolve_ledger(ledger, None), against, lock_timeout=lock_timeout)
    if as_json:
        messages.document(documents.stamped("ledger verify", {
            "ok": True, "records": report.records, "head": report.head,
            "keyed": report.keyed, "against": [str(a) for a in against],
        }))
        return
    keyed = ", authenticated with the ledger key" if report.keyed else ""
    sys.stdout.write(f"ledger OK: {report.records} record(s), head {report.head}{keyed}\n")


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"dpcli {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    pass


def main(argv: list[str] | None = None) -> None:
    """Entry point: every DpcliError becomes its exit code and one ``dpcli: error:`` line; nothing prints a
    traceback (it could carry data), whatever is raised: a BaseException such as polars' PanicException included.

    Typer runs with standalone_mode=False so that its usage errors come here and are said in the same one line.
    SIGINT, SIGTERM and SIGHUP become ``Interrupted``; a run they end before the spend exits 128 + the signal's
    number, saying that nothing was spent (after the spend, the release says which record paid: exit 5). A limit of
    the process (file descriptors, memory) reached before the spend is a ResourceError (exit 1). Once the outcome is
    decided, a late signal is ignored (signals.finish), through the interpreter's teardown.
    """
    from dpcli.core import signals

    code = 0
    args = sys.argv[1:] if argv is None else argv
    messages.json_errors = _wants_json(args)
    messages.json_command = documents.command_of(args)
    messages.stdout_written = False
    messages.setup_streams()  # no exit 1 for a ε on an ASCII stdout (PYTHONIOENCODING=ascii)
    _quiet_warnings()
    signals.install()
    try:
        result = app(args=argv, prog_name="dpcli", standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except BaseException as exc:  # noqa: BLE001 - said in one line below, whatever it is
        signals.finish()  # first: a signal from here on cannot replace this outcome
        code = _say_outcome(exc)
    signals.finish(last=True)
    _flush_quietly()
    sys.exit(code)


def _quiet_warnings() -> None:
    """No Python warning reaches stderr: its text names a source file and line, and whether one fires (an overflow in
    numpy, a polars notice) can depend on the data. Everything dpcli means to say is its own one line; a
    PYTHONWARNINGS or -W option that would print or raise one is overridden too."""
    import warnings

    warnings.simplefilter("ignore")


def _say_outcome(exc: BaseException) -> int:
    """One line about ``exc``, which ended the command; its exit code."""
    from dpcli.core import signals
    from dpcli.core.resources import process_limit

    if isinstance(exc, typer.Abort):
        messages.error("interrupted; nothing was spent", "interrupted", 130)
        return 130
    if isinstance(exc, SystemExit):
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if isinstance(exc, (KeyboardInterrupt, Interrupted)):
        # release() and randomize() turn a signal after their spend into exit 5 naming the record: one that gets
        # here came before any spend (or in a command that spends nothing)
        code = signals.exit_status(exc)
        messages.error(f"interrupted by {signals.signal_name(exc)}; nothing was spent", "interrupted", code)
        return code
    limit = process_limit(exc)
    if limit is not None:
        _say_error(limit)
        return limit.exit_code
    if isinstance(exc, DpcliError):
        _say_error(exc)
        return exc.exit_code
    click_code = _click_error(exc)
    if click_code is not None:
        return click_code
    if "TooManyOpenFiles" in str(exc) and type(exc).__name__ == "PanicException":
        messages.error(TOO_MANY_FILES, "resource", 1)
        return 1
    messages.error(f"internal error ({type(exc).__name__}); this is a bug in dpcli, please report it")
    return 1


def _click_error(exc: BaseException) -> int | None:
    """Say a usage error of the Typer/Click layer in one line and return its exit code (None: not one of them).

    Matched by shape, not class: Typer vendors Click from 0.20 on (typer._click) and uses the real one before."""
    format_message, exit_code = getattr(exc, "format_message", None), getattr(exc, "exit_code", None)
    if not callable(format_message) or not isinstance(exit_code, int):
        return None
    if type(exc).__name__ == "NoArgsIsHelpError":  # `dpcli` or `dpcli budget` alone: the help, as before
        sys.stderr.write(format_message() + "\n")
        return 2
    ctx = getattr(exc, "ctx", None)
    see = f" (see '{ctx.command_path} --help')" if ctx is not None and exit_code == 2 else ""
    # Typer 0.2x words a bad choice "Invalid value for '--format': Value error, 'xml' is not one of ..."
    message = _one_line(format_message()).replace(": Value error, ", ": ")
    messages.error(message + see, "usage", exit_code)
    return exit_code


def _wants_json(argv: list[str]) -> bool:
    """--json among the options (not after ``--``): the command's errors are then JSON too."""
    args = list(argv)
    return "--json" in (args[: args.index("--")] if "--" in args else args)


# kind of each exception class in a --json error, most specific first (README "Exit codes")
ERROR_KINDS: tuple[tuple[type[DpcliError], str], ...] = (
    (SpecError, "spec"), (UsageError, "usage"), (InputError, "input"), (BudgetRefused, "budget"),
    (SpentThenFailed, "spent_then_failed"), (LedgerError, "ledger"), (AuditFailed, "audit"),
    (ResourceError, "resource"),
)


def _say_error(exc: DpcliError) -> None:
    """One error line (dpcli/errors.py)."""
    messages.error(_error_text(exc), _error_kind(exc), exc.exit_code, exc.fields())


def _error_text(exc: DpcliError) -> str:
    """An error's text. The library states the fact; the command line names its flag (in place of the keyword
    argument the fact is about) and appends the hint, which names flags too (dpcli/errors.py)."""
    text = f"{exc.option}: {exc.fact}" if exc.option else str(exc)
    return _one_line(f"{text}; {exc.hint}" if exc.hint else text)


def _error_kind(exc: DpcliError) -> str:
    return next((kind for cls, kind in ERROR_KINDS if isinstance(exc, cls)), "internal")


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _flush_quietly() -> None:
    """Flush stdout; if the reader has gone, point stdout at /dev/null so the interpreter's exit stays quiet."""
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError, OSError):
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
