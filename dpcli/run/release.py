"""The library entry point: ``release(...)`` runs one private release end to end.

    spec -> plan (no data) -> structural checks (exit 2/3, nothing spent) -> exact aggregates (one scan)
         -> ledger spend (durable, under lock) -> noise -> post-processing -> atomic write -> ``released`` record

Everything that can fail is checked before the spend (paths, output target, size limits, labels, the input's
header and the aggregates). The spend is on disk before any noise is even drawn, so no noisy value can leave the
process unpaid; SIGINT/SIGTERM/SIGHUP are held from the spend until the table is stored, so a Ctrl-C cannot burn a
release id. A failure after the spend is SpentThenFailed (exit 5) naming the paid record; there is no automatic
refund (the safe direction), but a stored table can be written again under its release id. That sequence, from the
reuse check to the report of a failure, is dpcli.run.paid's; this module gives it the table (``_TableWork``).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, BinaryIO

from dpcli.core.accounting import parse_exact
from dpcli.engine import ExactStatistic, aggregate, check_input
from dpcli.engine.inputs import DEFAULT_INPUT_TIMEOUT, DEFAULT_MAX_INPUT_BYTES, InputFile
from dpcli.errors import InputError, InternalError, OutputError, UsageError
from dpcli.ledger import DEFAULT_LOCK_TIMEOUT, BudgetStatus, Delivery, Ledger, Record
from dpcli.mechanisms.noise import draw_noise
from dpcli.mechanisms.noisy import Noisy
from dpcli.plan.model import Plan
from dpcli.publish.paths import open_append
from dpcli.publish.sidecar import release_metadata, sidecar_path, write_sidecar
from dpcli.publish.store import encode_table
from dpcli.publish.table import CONTRACT, Table, build_table
from dpcli.publish.writers import write_table
from dpcli.run.paid import RELEASE_ID, Paid, Unpaid, check_release_id, leaves_nothing, what_failed
from dpcli.run.prepare import UNSTORED_TABLE, load_stored_table, prepare
from dpcli.run.randomize import find_randomized
from dpcli.specs.model import Frequency, Spec

__all__ = ["RELEASE_ID", "Pages", "Release", "check_release_id", "release"]  # the release id's rule: dpcli.run.paid


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
    metadata: dict[str, Any] = field(default_factory=dict)  # the sidecar's JSON object
    reused: bool = False  # True: the stored table of an earlier run under the same release id; nothing spent
    # a series' period (issue 26): which one, and whether this run made the series' charge (``spend``)
    period: int | None = None
    charged: bool = True

    @property
    def epsilon_spent(self) -> Fraction:
        """What this run charged (the ledger's charge: the plan's epsilon rounded up onto its grid), 0 on reuse."""
        return Fraction(0) if self.reused or not self.charged else parse_exact(str(self.spend.get("epsilon", "0")))

    @property
    def rho_spent(self) -> Fraction:
        return Fraction(0) if self.reused or not self.charged else parse_exact(str(self.spend.get("rho", "0")))


# ---------------------------------------------------------------------------------------------------------------
# The release


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
    input_format: str | None = None,
    engine: str | None = None,
    spark_master: str | None = None,
    on_input_bytes: Callable[[int, int | None], None] | None = None,
    sidecar: str | Path | None = None,
    report: str | Path | None = None,
    summary_md: str | Path | None = None,
) -> Release:
    """Run one release. ``input``/``output`` may be ``"-"`` (stdin/stdout); defaults come from the spec.

    ``release_id`` names the release (a snapshot date, a pipeline id). The same dataset, spec bytes and id return
    the stored table of the first run under that id and spend nothing, without reading the input: re-publishing
    numbers already paid for is post-processing, while fresh noise for the same question would let averaging cancel
    it. Whether a run reuses is a function of the spec, the id and the ledger only, never of the input's bytes (else
    a re-run would tell whether one person's row changed). Without an id every run is a new release and spends.
    Concurrent runs under one id spend once; the others wait (up to ``lock_timeout``) for its table.

    ``input_timeout``: seconds without a byte from a streamed input (stdin, a FIFO) before exit 3 (0/None: wait
    forever). ``max_input_bytes``: the cap on a spooled stream (exit 3 past it). ``input_format``: csv, csv.gz,
    csv.zst, parquet or arrow (default: the spec's ``input_format:``, else the input's extension; csv for standard
    input). ``engine``: polars (this machine) or spark (default: the spec's ``engine:``), ``spark_master`` the Spark
    master URL (default $SPARK_MASTER, else local[*]). ``progress`` receives
    the name of each phase as it ends (``--verbose``): never a count, a cell, an aggregate or a per-phase timing (the
    scan's time depends on the data).

    ``on_input_bytes(read, total)`` is told the bytes of the input read so far (compressed bytes for .gz/.zst) and
    its size (None for a stream): figures the threat model makes public, never a row count or a cell. The last
    report has ``read == total`` (a stream's size is known by then): it tells the caller that reading is over, so a
    progress display is gone before the table is written (perhaps to the same terminal).

    ``sidecar``: where the metadata sidecar goes (``--meta``), else beside an output file (none for standard output).
    ``report``: also write the release's HTML report there (``--report``); ``summary_md``: append its Markdown
    summary there (``--summary-md``). Both are checked with the table before anything is read or spent, and an
    existing summary file is opened before the spend; a failure writing them after the spend is exit 5.
    """
    say = progress or (lambda _msg: None)
    # every check that needs no data, shared with `dpcli check` and `dpcli plan` (dpcli.run.prepare), the ledger's
    # included: its chain, whether this release id is paid for, the pin, the cap and the store
    ready = prepare(
        spec, input=input, output=output, ledger=ledger, fmt=fmt, release_id=release_id, lock_timeout=lock_timeout,
        input_timeout=input_timeout, input_format=input_format, engine=engine, sidecar=sidecar, report=report,
        summary_md=summary_md, say=say,
    )
    spec, plan, book, release_id = ready.spec, ready.plan, ready.book, ready.release_id
    if spec.series is not None:  # before anything is read or spent
        raise UsageError("a spec with a series releases one period per run (dpcli.run.series.release_period)",
                         hint="give --period N (or a date-like --release-id)")
    remote, source, input_fmt, engine = ready.remote, ready.source, ready.input_format, ready.engine
    input_timeout, output_path, fmt, meta_path = ready.input_timeout, ready.output, ready.fmt, ready.meta
    pages = Pages(ready.report, ready.summary)
    if plan.frequency_only:  # estimates from a randomized file: nothing is spent
        done = _release_frequencies(plan, book, ready.records, source, input_fmt, engine, spark_master, output_path,
                                    fmt, input_timeout, max_input_bytes, on_input_bytes, say, release_id)
        return pages.write(done, _FREQUENCY.text())
    run = ready.run
    work = _TableWork(plan, book, release_id, output_path, fmt, meta_path, pages, say)
    if ready.paid is not None:
        say(f"release id '{release_id}' of this spec is paid for: returning its stored table, reading no input")
        return run.reissue(work)

    # A person unit's rows are chosen by a keyed hash under a secret of this run alone (never stored or shown):
    # whoever wrote the rows cannot foresee which are kept, and every engine keeps the same ones
    chosen = {"secret": secrets.token_bytes(32)} if spec.privacy.person is not None else {}
    if engine == "spark":
        from dpcli.engine import spark_engine  # pyspark is an optional extra

        # Spark reads the input where it is (a file, a directory of parts, a URL) and checks its structure itself
        exact = spark_engine.aggregate(plan, remote or str(source or "-"), master=spark_master,
                                       input_format=input_fmt, max_input_bytes=max_input_bytes, **chosen)
        say("exact aggregates computed by Spark")
    else:
        with InputFile(source, input_timeout, max_input_bytes, on_input_bytes) as src:
            if src.spooled:
                say("input spooled")
            check_input(spec, src.path, input_fmt)
            say("header has every declared column")
            exact = aggregate(plan, src.path, input_format=input_fmt, on_bytes=on_input_bytes,
                              max_input_bytes=max_input_bytes, **chosen)
            say("exact aggregates computed")

    work.exact = exact
    del exact
    # the summary file is opened under the ledger's lock, before the spend: refused there, nothing is spent
    return run.pay(work, before_spend=pages.open)


@dataclass
class _TableWork:
    """A release's part of the paid run (dpcli.run.paid): the noisy table, drawn once from the exact aggregates and
    stored as compact JSON; the table, its sidecar, the report and the summary written from it, or from the stored
    table of the run that paid (a re-run under the release id)."""

    plan: Plan
    book: Ledger
    release_id: str
    output_path: Path | None
    fmt: str
    meta_path: Path | None
    pages: Pages
    say: Callable[[str], None]
    exact: list[ExactStatistic] | None = None
    table: Table | None = None
    waiting_for: str = "its table"
    stored_note: str = "table stored"

    def draw(self) -> bytes:
        exact, self.exact = self.exact, None
        if exact is None:
            raise InternalError("a release's noise is drawn once, from its exact aggregates")
        noisy = draw_noise(self.plan, exact)
        del exact
        self.table = build_table(self.plan, noisy)
        del noisy
        self.say("noise drawn and table built")
        return encode_table(self.table)

    def delivery(self, release_id: str, stored_sha256: str) -> Delivery:
        return Delivery(release_id, stored_sha256)

    def publish(self, spend: Record, paid: Paid) -> Release:
        table = self.table
        if table is None:
            raise InternalError("a release is published after its table is drawn")
        meta = release_metadata(self.plan, spend, spend.hash)
        out_sha = write_outputs(table, self.output_path, self.fmt, meta, paid, self.meta_path)
        self.say("output written")
        status = self.book.status(self.plan.spec.dataset, period=spend.get("period"))
        done = Release(self.plan, table, spend, status, self.output_path, out_sha, self.book.name, self.release_id,
                       meta)
        return self.pages.write(done, paid.text())

    def republish(self, spend: Record, stored: bytes) -> Release:
        """The stored table written again: same numbers, no new noise, no spend."""
        table = load_stored_table(self.book, self.release_id, spend, stored)
        meta = {**release_metadata(self.plan, spend, spend.hash, table.contract), "reissued": True}
        out_sha = write_outputs(table, self.output_path, self.fmt, meta, Unpaid.reissue(spend), self.meta_path)
        status = self.book.status(self.plan.spec.dataset, period=spend.get("period"))
        done = Release(self.plan, table, spend, status, self.output_path, out_sha, self.book.name, self.release_id,
                       meta, reused=True)
        return self.pages.write(done)

    def unstored(self, released: bool) -> str:
        return UNSTORED_TABLE[released]

    def drop(self) -> None:
        self.exact = None


@dataclass
class Pages:
    """``--report`` and ``--summary-md`` of one release: checked with the table before anything is read (one
    checker, dpcli.publish.paths), the summary opened for appending before the spend, both written after the table."""

    report: Path | None = None
    summary: Path | None = None
    handle: BinaryIO | None = None
    book: Ledger | None = None  # a series' period: its ledger, whose frozen tables the report draws the series from

    def open(self) -> None:
        """Before the spend: an existing summary file (e.g. $GITHUB_STEP_SUMMARY) opened for appending, so that a
        FIFO, link or unwritable file in its place ends the run with nothing spent."""
        if self.summary is not None and self.handle is None:
            self.handle = open_append(self.summary, "summary")

    def write(self, done: Release, paid: str | None = None) -> Release:
        """The report and the summary of ``done``, after its table is written. Whatever fails here is exit 5 naming
        what was paid (``paid``; a re-issue: nothing): the table and its sidecar are written and stay."""
        if self.report is None and self.summary is None:
            return done
        if paid is None:
            paid = Unpaid.reissue(done.spend).text()
        from dpcli.publish.report import render_html, write_report  # matplotlib only for a run that asks for a report
        from dpcli.publish.report_data import from_rows
        from dpcli.publish.report_series import series_view
        from dpcli.publish.summary import write_summary

        try:
            table = done.table
            source = "standard output" if done.output is None else done.output.name
            data = from_rows(table.columns, table.rows(), done.metadata, done.status, done.ledger, source)
            data.series = series_view(data, self.book)  # None unless the sidecar names a series
            if self.report is not None:
                write_report(self.report, render_html(data))
            if self.summary is not None:
                write_summary(self.summary, data, self.handle)
        except BaseException as exc:  # noqa: BLE001 - the table is out: every failure must say so, and what paid
            raise OutputError(
                f"the report could not be written ({what_failed(exc)}); {paid}; the table was written",
                hint="make the report again with `dpcli report`",
            ) from None
        finally:
            if self.handle is not None:  # the summary opened before the spend, also when the report failed first
                self.handle.close()
                self.handle = None
        return done


def write_outputs(
    table: Table, output_path: Path | None, fmt: str, meta: dict[str, Any], paid: Paid | Unpaid,
    meta_path: Path | None = None,
) -> str:
    """Write the table (and its sidecar: at ``meta_path``, else beside a file); returns the table's sha256.

    Whatever stops it (disk full, an I/O error, a signal, memory), a failed run leaves no new or half-described
    output behind: the table's temporary file is gone (atomic_write), and a table or sidecar already renamed into
    place is removed. An OSError becomes OutputError (exit 5) naming what was paid; anything else is re-raised for
    the paid run (dpcli.run.paid) to report the same way.
    """
    if output_path is None:
        try:
            out_sha = write_table(table, None, fmt)
        except OSError as exc:
            raise OutputError(
                f"could not write the table to standard output: {exc.strerror or type(exc).__name__}; {paid.text()}; "
                "standard output may hold part of the table: discard it",
                hint=paid.hint(),
            ) from None
        if meta_path is not None:  # the sidecar of a table on standard output (`-o - --meta PATH`)
            try:
                write_sidecar(meta_path, {**meta, "output_sha256": out_sha}, meta_path)
            except OSError as exc:
                raise OutputError(
                    f"could not write the sidecar {meta_path}: {exc.strerror or type(exc).__name__}; {paid.text()}; "
                    "the table went to standard output",
                    hint=paid.hint(),
                ) from None
        return out_sha
    try:
        with leaves_nothing(output_path, meta_path or sidecar_path(output_path)):  # never a table without its sidecar
            out_sha = write_table(table, output_path, fmt)
            write_sidecar(output_path, {**meta, "output_sha256": out_sha}, meta_path)
        return out_sha
    except OSError as exc:
        raise OutputError(
            f"could not write the output {output_path}: {exc.strerror or type(exc).__name__}; {paid.text()}; "
            "no output file was left",
            hint=paid.hint(),
        ) from None


# ---------------------------------------------------------------------------------------------------------------
# Frequency estimates from a randomized file: nothing is spent

_FREQUENCY = Unpaid("nothing was spent (estimates from a randomized file)")


def _release_frequencies(
    plan: Plan, book: Ledger, records: list[Record], source: Path | None, input_fmt: str, engine: str,
    spark_master: str | None, output_path: Path | None, fmt: str, input_timeout: float | None, max_input_bytes: int,
    on_input_bytes: Callable[[int, int | None], None] | None, say: Callable[[str], None], release_id: str,
) -> Release:
    """A release of ``kind: frequency`` statistics (once the paths and the ledger's chain are checked): the input
    must be a randomize output this ledger recorded, for every statistic's column, ε and keys (else InputError,
    before anything is read further); then its exact key counts (any engine: a frequency is a histogram of the column
    to ``engine/cells.py``) and their unbiased estimates. Nothing is spent and no ledger record is written: the
    estimates are post-processing of a published file, and the same file always gives the same numbers."""
    spec = plan.spec
    frequencies = [sp.statistic for sp in plan.statistics if isinstance(sp.statistic, Frequency)]
    if len(frequencies) != len(plan.statistics):  # Plan.frequency_only, by the kinds' family, says they all are
        raise InternalError("a frequency release has only frequency statistics")
    with InputFile(source, input_timeout, max_input_bytes, on_input_bytes) as src:
        digest = _file_sha256(src.path)
        vouchers = [
            find_randomized(records, book.name, digest, spec.dataset, spec.columns[stat.column],
                            stat.randomized_epsilon)
            for stat in frequencies
        ]
        say(f"input is the randomize output recorded by ledger record {vouchers[0].seq}")
        if engine == "spark":
            from dpcli.engine import spark_engine

            exact = spark_engine.aggregate(plan, str(src.path), master=spark_master, input_format=input_fmt,
                                           max_input_bytes=max_input_bytes)
        else:
            check_input(spec, src.path, input_fmt)
            exact = aggregate(plan, src.path, input_format=input_fmt, on_bytes=on_input_bytes)
        say("exact key counts computed")
    table = build_table(plan, [Noisy(ex.counts, None) for ex in exact])
    meta = {
        "contract": CONTRACT,
        "dpcli_release": "frequency estimates from a randomized file (nothing spent)",
        "dataset": spec.dataset,
        "spec_sha256": spec.sha256,
        # the recorded output's hash (public, in the ledger), which the input was just found to be
        "input_sha256": vouchers[0].get("output_sha256"),
        "ledger": {"name": book.name, "randomize_records": sorted({r.seq for r in vouchers})},
    }
    out_sha = write_outputs(table, output_path, fmt, meta, _FREQUENCY)
    say("output written")
    status = book.status(spec.dataset, period=vouchers[0].get("period"))  # a renewing cap: the period's
    return Release(plan, table, vouchers[0], status, output_path, out_sha, book.name, release_id,
                   meta)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    except OSError as exc:
        raise InputError(f"cannot read input {path}: {exc.strerror or 'unreadable'}") from None
    return digest.hexdigest()
