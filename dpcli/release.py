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

import contextlib
import hashlib
import os
import re
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import BinaryIO

from dpcli import signals
from dpcli.accounting import parse_exact
from dpcli.engine import aggregate, check_input
from dpcli.engine import input_format as format_of
from dpcli.errors import DpcliError, Interrupted, LedgerError, OutputError, ReleaseIdPaid, SpentThenFailed, UsageError
from dpcli.inputs import DEFAULT_INPUT_TIMEOUT, DEFAULT_MAX_INPUT_BYTES, InputFile, check_input_timeout, input_path
from dpcli.ledger import DEFAULT_LOCK_TIMEOUT, BudgetStatus, Ledger, Record, open_ledger, resolve_ledger
from dpcli.ledger.base import check_pin, paid_spend, release_key
from dpcli.locations import is_url
from dpcli.mechanisms import draw_noise
from dpcli.output import (
    Table,
    build_table,
    check_labels,
    output_format,
    release_metadata,
    sidecar_path,
    write_sidecar,
    write_table,
)
from dpcli.paths import Protected, check_release_paths, check_targets, named_path, open_append
from dpcli.paths import output_path as checked_output
from dpcli.plan import Plan, check_cost, make_plan
from dpcli.spec import Spec, load_spec
from dpcli.spec_fields import ENGINES, INPUT_FORMATS

__all__ = ["RELEASE_ID", "Release", "check_release_id", "release"]


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


def _choice(value: str | None, choices: tuple[str, ...], argument: str, option: str) -> str | None:
    if value is not None and value not in choices:
        raise UsageError(f"'{value[:40]}' is not one of: {', '.join(choices)}", argument=argument, option=option)
    return value


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
    if not isinstance(spec, Spec):
        spec = load_spec(spec)
    plan = make_plan(spec)
    check_cost(plan)  # over a public size limit (cells, memory estimate): exit 2 before anything is read or spent
    check_labels(plan)  # the table's labels are made from the spec: any failure there comes before the spend
    if spec.postprocess:  # the finest table's cap of `postprocess: {consistent: true}`, before the spend
        from dpcli.consistency import check_plan

        check_plan(plan)
    say(
        f"spec valid and planned: {len(plan.statistics)} statistic(s), "
        f"{sum(sp.cells for sp in plan.statistics if sp.selection is None)} declared cell(s)"
        + (", plus open keys chosen by partition selection" if any(sp.selection for sp in plan.statistics) else "")
        + f", {plan.cost_text()}"
    )
    named = release_id is not None
    release_id = check_release_id(release_id) if release_id is not None else uuid.uuid4().hex
    key = release_key(spec.dataset, spec.sha256, release_id)
    input_timeout = check_input_timeout(input_timeout)

    location_given = input if input is not None else spec.input
    # a Spark engine's hdfs://, s3a://, file:// input
    remote = location_given if is_url(location_given) else None
    source = None if remote else input_path(input, spec.input)
    input_fmt = format_of(source, _choice(input_format, INPUT_FORMATS, "input_format", "--input-format"),
                          spec.input_format)
    engine = _choice(engine, ENGINES, "engine", "--engine") or spec.engine
    if remote and engine != "spark":
        raise UsageError(f"input {remote[:200]} is a URL: only the Spark engine reads one", hint="use --engine spark")
    if engine == "spark" and not remote and source is None:
        raise UsageError("the Spark engine reads files, not standard input", hint="pass --input PATH")
    output_path = checked_output(output if output is not None else spec.output)
    location: str | Path | None = None  # a Ledger object passed in has no location to check against the paths
    if isinstance(ledger, Ledger):
        book = ledger
    else:
        location = resolve_ledger(ledger, spec.ledger)
        book = open_ledger(location, lock_timeout=lock_timeout)
    spec_file = Path(spec.source) if spec.source != "<string>" else None
    check_release_paths(spec_file, source, output_path, book, location)
    meta_path = _meta_path(sidecar, output_path, spec_file, source, book, location)
    pages = _Pages.checked(report, summary_md, spec_file, source, output_path, meta_path, book, location)
    fmt = output_format(output_path, fmt)  # after the paths: "is the ledger" says more than "not a .jsonl writer"
    say("paths checked")

    records = book.records()  # verify the chain (exit 5) before any work
    say("ledger chain verified")
    if plan.frequency_only:  # estimates from a randomized file: nothing is spent (dpcli.randomize)
        from dpcli.randomize import release_frequencies

        if remote:
            raise UsageError("frequency statistics check their input's hash: give a local file, not a URL")
        if meta_path is not None:
            raise UsageError("--meta: a frequency estimate's sidecar is written beside its output file only")
        done = release_frequencies(plan, book, records, source, input_fmt, engine, spark_master, output_path, fmt,
                                   input_timeout, max_input_bytes, on_input_bytes, say, release_id)
        return pages.write(done, "nothing was spent (estimates from a randomized file)")
    if named and paid_spend(records, key) is not None:
        say(f"release id '{release_id}' of this spec is paid for: returning its stored table, reading no input")
        return pages.write(_reissue(plan, book, key, release_id, output_path, fmt, lock_timeout, meta_path))
    # fast refusal before the scan, on the records verified above; the binding check is in spend()
    status = book.status(spec.dataset, records)
    check_pin(status, spec.dataset, spec.privacy.pinned_unit, spec.privacy.neighbours, book.name)
    book.check(spec.dataset, plan.epsilon, plan.rho, records, plan.selection_delta)
    say("budget available")

    # A person unit's rows are chosen by a keyed hash under a secret of this run alone (never stored or shown):
    # whoever wrote the rows cannot foresee which are kept, and every engine keeps the same ones
    chosen = {"secret": secrets.token_bytes(32)} if spec.privacy.person is not None else {}
    if engine == "spark":
        from dpcli.engine import spark_engine  # pyspark is an optional extra

        # Spark reads the input where it is (a file, a directory of parts, a URL) and checks its structure itself
        exact = spark_engine.aggregate(plan, remote or str(source or "-"), master=spark_master,
                                       input_format=input_fmt, **chosen)
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

    # SIGINT/SIGTERM/SIGHUP wait from the moment the spend is about to be written (under the ledger's lock) until the
    # table is stored: a paid release id always gets its table, so an interrupted run is recovered with --release-id
    # instead of burning the id. Before that moment (the lock wait) a signal ends the run with nothing spent.
    with signals.Held() as hold:

        def before_append() -> None:  # under the ledger's lock, before the spend is written
            pages.open()  # the summary file: refused here, nothing is spent
            hold.hold_from_here()  # a Ctrl-C until then (the lock wait): nothing spent

        try:
            spend = book.spend(
                spec.dataset,
                plan.epsilon,
                {
                    "release_id": release_id,
                    "release_key": key,
                    "spec_sha256": spec.sha256,
                    "unit": spec.privacy.pinned_unit,
                    "neighbours": spec.privacy.neighbours,
                    "statistics": [s.statistic.name for s in plan.statistics],
                },
                rho=plan.rho,
                before_append=before_append,
                delta=plan.selection_delta,
            )
        except ReleaseIdPaid:
            # another run under the same id spent first (we raced it): its table is the release, ours is never drawn
            del exact
            hold.release()
            say(f"release id '{release_id}' was paid for by a concurrent run: waiting for its table")
            return pages.write(_reissue(plan, book, key, release_id, output_path, fmt, lock_timeout, meta_path))
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
            meta = release_metadata(plan, spend, spend.hash)
            out_sha = _write_outputs(table, output_path, fmt, meta, paid.text(), paid.hint(), meta_path)
            say("output written")
            status = book.status(spec.dataset)
            done = Release(plan, table, spend, status, output_path, out_sha, book.name, release_id, meta)
            pages.write(done, paid.text())
        except BaseException as exc:  # noqa: BLE001 - after the spend every failure must name what was paid
            failure = spent_then_failed(exc, paid, book, key)
            # a signal held until now must not replace this report with "nothing was spent"
            with contextlib.suppress(KeyboardInterrupt, Interrupted):
                hold.release()
            raise failure from None
    return done


@dataclass
class _Pages:
    """``--report`` and ``--summary-md`` of one release: checked with the table before anything is read (one
    checker, dpcli.paths), the summary opened for appending before the spend, both written after the table."""

    report: Path | None = None
    summary: Path | None = None
    handle: BinaryIO | None = None

    @classmethod
    def checked(
        cls, report: str | Path | None, summary: str | Path | None, spec_file: Path | None, source: Path | None,
        output: Path | None, meta_path: Path | None, book: Ledger, location: str | Path | None,
    ) -> _Pages:
        pages = cls(
            None if report is None else named_path(os.fspath(report), "report"),
            None if summary is None else named_path(os.fspath(summary), "summary"),
        )
        if pages.report is None and pages.summary is None:
            return pages
        keep = Protected().add(spec_file, "the spec").add(source, "the input file").add_ledger(book, location)
        keep.add(output, "the output").add(meta_path or (None if output is None else sidecar_path(output)),
                                           "the output's sidecar")
        check_targets([(pages.report, "report"), (pages.summary, "summary")], keep)
        return pages

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
            paid = f"nothing was spent (ledger record {done.spend.seq} already paid for this release)"
        from dpcli import report as page  # matplotlib only for a run that asks for a report

        try:
            table = done.table
            source = "standard output" if done.output is None else done.output.name
            data = page.from_rows(table.columns, table.rows(), done.metadata, done.status, done.ledger, source)
            if self.report is not None:
                page.write_report(self.report, page.render_html(data))
            if self.summary is not None:
                page.append_summary(self.summary, page.render_markdown(data), self.handle)
        except BaseException as exc:  # noqa: BLE001 - the table is out: every failure must say so, and what paid
            raise OutputError(
                f"the report could not be written ({_what_failed(exc)}); {paid}; the table was written",
                hint="make the report again with `dpcli report`",
            ) from None
        finally:
            if self.handle is not None:  # the summary opened before the spend, also when the report failed first
                self.handle.close()
                self.handle = None
        return done


@dataclass
class _Paid:
    """What a run that failed after its spend must say: which record paid, whether its table is stored (the fact),
    and how to get the table written (the hint, which names the CLI's flag)."""

    ledger: str
    record: int
    release_id: str
    named: bool
    stored: bool = False

    def text(self) -> str:
        paid = f"the release was paid for by ledger {self.ledger} record {self.record}, with no refund"
        if not self.stored:
            return f"{paid}; its table was not stored, so release id '{self.release_id}' can never be written"
        return f"{paid}; its table is stored under release id '{self.release_id}'"

    def hint(self) -> str | None:
        if not self.stored:
            return None
        again = f"--release-id {self.release_id}" + ("" if self.named else " (the id this run drew)")
        return f"re-run with {again} to write it"


def spent_then_failed(exc: BaseException, paid: _Paid, book: Ledger, key: str) -> SpentThenFailed:
    """The report (exit 5) of ``exc``, raised after the spend ``paid``: what failed, which record paid, and whether a
    re-run under the release id can write the stored result (shared with dpcli.randomize)."""
    paid.stored = paid.stored or _recorded(book, key)
    if isinstance(exc, SpentThenFailed):  # an OutputError already names the record
        return SpentThenFailed(exc.fact, hint=exc.hint)
    message = f"{_what_failed(exc)} after the spend: {paid.text()}"
    hints = (exc.hint if isinstance(exc, DpcliError) else None, paid.hint())
    return SpentThenFailed(message, hint="; ".join(h for h in hints if h) or None)


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


def _meta_path(
    meta: str | Path | None, output: Path | None, spec_file: Path | None, source: Path | None, book: Ledger,
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


def _write_outputs(
    table: Table, output_path: Path | None, fmt: str, meta: dict, paid: str, hint: str | None = None,
    meta_path: Path | None = None,
) -> str:
    """Write the table (and its sidecar: at ``meta_path``, else beside a file); returns the table's sha256.

    Whatever stops it (disk full, an I/O error, a signal, memory), a failed run leaves no new or half-described
    output behind: the table's temporary file is gone (atomic_write), and a table or sidecar already renamed into
    place is removed. An OSError becomes OutputError (exit 5) naming what was paid; anything else is re-raised for
    release() to report the same way.
    """
    if output_path is None:
        try:
            out_sha = write_table(table, None, fmt)
        except OSError as exc:
            raise OutputError(
                f"could not write the table to standard output: {exc.strerror or type(exc).__name__}; {paid}; "
                "standard output may hold part of the table: discard it",
                hint=hint,
            ) from None
        if meta_path is not None:  # the sidecar of a table on standard output (`-o - --meta PATH`)
            try:
                write_sidecar(meta_path, {**meta, "output_sha256": out_sha}, meta_path)
            except OSError as exc:
                raise OutputError(
                    f"could not write the sidecar {meta_path}: {exc.strerror or type(exc).__name__}; {paid}; "
                    "the table went to standard output",
                    hint=hint,
                ) from None
        return out_sha
    targets = (output_path, meta_path or sidecar_path(output_path))
    before = [_identity(p) for p in targets]
    try:
        out_sha = write_table(table, output_path, fmt)
        write_sidecar(output_path, {**meta, "output_sha256": out_sha}, meta_path)
        return out_sha
    except BaseException as exc:
        for p, was in zip(targets, before, strict=True):
            if _identity(p) != was:  # renamed into place by this run: a table without its sidecar is not left
                with contextlib.suppress(OSError):
                    os.unlink(p)
        if isinstance(exc, OSError):
            raise OutputError(
                f"could not write the output {output_path}: {exc.strerror or type(exc).__name__}; {paid}; "
                "no output file was left",
                hint=hint,
            ) from None
        raise


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns)


def _reissue(
    plan: Plan, book: Ledger, key: str, release_id: str, output_path: Path | None, fmt: str, wait: float,
    meta_path: Path | None = None,
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
            f"{state}; a paid release id is never drawn again",
            hint="use a new --release-id",
        )
    try:
        table = Table.from_json(stored)  # this version's compact form, or dpcli 0.2's text form
    except (ValueError, KeyError, TypeError):
        # hash-checked, so written by a dpcli whose store format this one does not know (a newer one)
        raise LedgerError(
            f"ledger {book.name}: the stored table of release id '{release_id}' (record {spend.seq}) is in a format "
            "this dpcli cannot read: re-run with the dpcli that released it; it is never drawn again"
        ) from None
    meta = {**release_metadata(plan, spend, spend.hash, table.contract), "reissued": True}
    out_sha = _write_outputs(
        table, output_path, fmt, meta, f"nothing was spent (ledger record {spend.seq} already paid for this release)",
        meta_path=meta_path,
    )
    status = book.status(plan.spec.dataset)
    return Release(plan, table, spend, status, output_path, out_sha, book.name, release_id, meta, reused=True)

