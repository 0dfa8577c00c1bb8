"""The library entry point: ``release(...)`` runs one private release end to end.

    spec -> plan (no data) -> structural checks (exit 2/3, nothing spent) -> exact aggregates (one scan)
         -> ledger spend (durable, under lock) -> noise -> post-processing -> atomic write -> ``released`` record

The spend is on disk before any noise is even drawn, so no noisy value can leave the process unpaid. A crash after
the spend loses that budget (the safe direction); there is no automatic refund.
"""

from __future__ import annotations

import hashlib
import os
import re
import select
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Callable

import numpy as np

from dpcli import __version__
from dpcli.accounting import format_exact, parse_exact
from dpcli.engine import ExactStatistic, aggregate, check_header, read_header
from dpcli.errors import InputError, LedgerError, OutputError, ReleaseIdPaid, UsageError
from dpcli.ledger import DEFAULT_LOCK_TIMEOUT, BudgetStatus, Ledger, Record, open_ledger
from dpcli.ledger.base import check_pin, paid_spend, release_key
from dpcli.mechanisms import add_discrete_gaussian, add_discrete_laplace
from dpcli.output import (
    Block,
    Table,
    bin_labels,
    cell_labels,
    check_output_target,
    decimal_text,
    int_text,
    output_format,
    sidecar_path,
    write_sidecar,
    write_table,
)
from dpcli.plan import NoiseComponent, Plan, StatisticPlan, make_plan
from dpcli import postprocess
from dpcli.spec import Column, EdgeBins, GridBins, Spec, load_spec

STDIN_CHUNK = 1 << 20
# Idle timeout on a streamed input (stdin, a FIFO): no byte for this many seconds ends the run with exit 3, before
# anything is spent. 0 or None waits forever. CLI: --input-timeout (or $DPCLI_INPUT_TIMEOUT).
DEFAULT_INPUT_TIMEOUT = 60.0


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


def is_ledger_url(location: str | Path) -> bool:
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


def resolve_ledger(explicit: str | Path | None, spec: Spec | None) -> str | Path:
    """--ledger, else $DPCLI_LEDGER, else the spec's ledger:. A PostgreSQL URL stays text (a Path would fold its //)."""
    for candidate in (explicit, os.environ.get("DPCLI_LEDGER") or None, spec.ledger if spec else None):
        if candidate:
            return candidate if is_ledger_url(candidate) else Path(candidate)
    raise UsageError("no ledger: pass --ledger PATH or URL, set DPCLI_LEDGER, or add `ledger:` to the spec")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def check_paths(input_path: Path | None, output_path: Path | None, ledger_location: str | Path) -> None:
    """Refuse outputs that would overwrite the input or the ledger, or write through a symlink (exit 2)."""
    ledger_path = None if is_ledger_url(ledger_location) else Path(ledger_location)
    if output_path is not None:
        if output_path.is_symlink():
            raise UsageError(f"output {output_path} is a symbolic link: refusing to write through it")
        if input_path is not None and _same_file(output_path, input_path):
            raise UsageError(f"output {output_path} is the input file: refusing to overwrite the data")
        if ledger_path is not None and _same_file(output_path, ledger_path):
            raise UsageError(f"output {output_path} is the ledger: refusing to overwrite it")
    if input_path is not None and ledger_path is not None and ledger_path.exists() and _same_file(input_path, ledger_path):
        raise UsageError(f"the ledger {ledger_path} is the input file")


# ---------------------------------------------------------------------------------------------------------------
# Input


class _InputFile:
    """A readable regular file for the engine: the path itself, or a spooled copy of stdin or a FIFO."""

    def __init__(self, source: Path | None, timeout: float | None = DEFAULT_INPUT_TIMEOUT):
        self.source = source
        self.timeout = timeout
        self._tmp: str | None = None
        if source is None or _is_stream(source):
            self.path = self._spool(source)
        else:
            self.path = source

    def _spool(self, source: Path | None) -> Path:
        fd, tmp = tempfile.mkstemp(prefix="dpcli-input-", suffix=".csv")
        self._tmp = tmp
        name = "standard input" if source is None else str(source)
        try:
            if source is None:
                if sys.stdin is None:
                    os.close(fd)
                    raise InputError("cannot read input from standard input: it is closed")
                rfd, own = sys.stdin.fileno(), False
            else:
                # O_NONBLOCK: opening a FIFO must not hang until a writer appears; the idle timeout covers that wait
                rfd, own = os.open(source, os.O_RDONLY | os.O_NONBLOCK), True
            try:
                with os.fdopen(fd, "wb") as out:
                    while chunk := _read_chunk(rfd, self.timeout, name):
                        out.write(chunk)
            finally:
                if own:
                    os.close(rfd)
        except OSError as exc:
            raise InputError(f"cannot read input {source or 'from standard input'}: {exc.strerror or 'read failed'}") from None
        return Path(tmp)

    def close(self) -> None:
        if self._tmp:
            try:
                os.unlink(self._tmp)
            except OSError:
                pass

    @property
    def name(self) -> str:
        return "standard input" if self.source is None else str(self.source)


def _read_chunk(fd: int, timeout: float | None, name: str) -> bytes:
    """The next chunk of a stream (b"" at its end); InputError when no byte arrives for ``timeout`` seconds."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    wait_ms = int(timeout * 1000) if timeout else -1
    while True:
        if not poller.poll(wait_ms):
            raise InputError(
                f"no data from {name} for {timeout:g} s (--input-timeout): giving up before anything was spent"
            )
        try:
            return os.read(fd, STDIN_CHUNK)
        except (BlockingIOError, InterruptedError):
            continue


def _is_stream(path: Path) -> bool:
    try:
        import stat

        mode = os.stat(path).st_mode
        return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)
    except OSError:
        return False


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
    if comp.mechanism == "discrete_gaussian":
        assert comp.variance is not None
        return add_discrete_gaussian(values, comp.variance)
    assert comp.scale is not None
    return add_discrete_laplace(values, comp.scale)


def _has(sp: StatisticPlan, role: str) -> bool:
    return any(c.role == role for c in sp.components)


def build_table(plan: Plan, noisy: list[Noisy]) -> Table:
    """The tidy output table from noisy integers (post-processing only)."""
    spec = plan.spec
    blocks = []
    for sp, nz in zip(plan.statistics, noisy):
        stat = sp.statistic
        keys = []
        for d, k in zip(stat.dimensions, sp.dimension_keys):
            keys.append(k if k is not None else bin_labels(stat.bins))  # type: ignore[arg-type]
        labels = dict(zip(stat.dimensions, cell_labels(keys))) if keys else {}
        if stat.kind in ("count", "histogram"):
            v, lo, hi = postprocess.counts(sp, nz.counts)  # type: ignore[arg-type]
            value, low, high = int_text(v), int_text(lo), int_text(hi)
        elif stat.kind == "sum":
            r = postprocess.sums(sp, nz.sums)  # type: ignore[arg-type]
            value, low, high = decimal_text(r.value), decimal_text(r.ci_low), decimal_text(r.ci_high)
        else:
            bounds = spec.columns[stat.column].grid_bounds  # type: ignore[index]
            r = postprocess.means(sp, nz.sums, nz.counts, bounds)  # type: ignore[arg-type]
            value, low, high = decimal_text(r.value), decimal_text(r.ci_low), decimal_text(r.ci_high)
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
    forever). ``progress`` receives the name of each phase as it ends (``--verbose``): never a count, a cell, an
    aggregate or a per-phase timing (the scan's time depends on the data).
    """
    say = progress or (lambda _msg: None)
    if not isinstance(spec, Spec):
        spec = load_spec(spec)
    plan = make_plan(spec)
    say(
        f"spec valid and planned: {len(plan.statistics)} statistic(s), "
        f"{sum(sp.cells for sp in plan.statistics)} declared cell(s), {plan.cost_text()}"
    )
    named = release_id is not None
    release_id = check_release_id(release_id) if release_id is not None else uuid.uuid4().hex
    key = release_key(spec.dataset, spec.sha256, release_id)

    input_path = _choose(input, spec.input)
    output_path = _choose(output, spec.output)
    if isinstance(ledger, Ledger):
        book = ledger
    else:
        location = resolve_ledger(ledger, spec)
        check_paths(input_path, output_path, location)
        book = open_ledger(location, lock_timeout=lock_timeout)
    if output_path is not None:
        check_output_target(output_path)
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

    src = _InputFile(input_path, input_timeout)
    try:
        if src.path != input_path:
            say("input spooled")
        header = read_header(src.path, quoted_line_breaks=spec.quoted_line_breaks)
        check_header(src.path if input_path is None else input_path, header, spec.columns.keys())
        del header
        say("header has every declared column")
        exact = aggregate(plan, src.path)
        say("exact aggregates computed")
    finally:
        src.close()

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
        )
    except ReleaseIdPaid:
        # another run under the same id spent first (we raced it): its table is the release, ours is never drawn
        del exact
        say(f"release id '{release_id}' was paid for by a concurrent run: waiting for its table")
        return _reissue(plan, book, key, release_id, output_path, fmt, lock_timeout)
    say(f"spend recorded: ledger record {spend.seq}")
    noisy = draw_noise(plan, exact)
    del exact
    table = build_table(plan, noisy)
    say("noise drawn and table built")
    # The table is stored and recorded before the output is written: a paid release id always has its table, so if
    # writing the output fails, a re-run under the id writes these numbers (it never draws again).
    stored = table.to_json()
    book.store_table(key, stored)
    book.mark_released(key, {"release_id": release_id, "table_sha256": hashlib.sha256(stored).hexdigest()})
    say("table stored and the release recorded as done")
    again = f"--release-id {release_id}" if named else f"--release-id {release_id} (the id this run drew)"
    paid = (
        f"the release was paid for by ledger {book.name} record {spend.seq}, with no refund; its table is stored: "
        f"re-run with {again} to write it"
    )
    meta = metadata(plan, spend, spend.hash)
    out_sha = _write_outputs(table, output_path, fmt, meta, paid)
    say("output written")
    status = book.status(spec.dataset)
    return Release(plan, table, spend, status, output_path, out_sha, book.name, release_id, meta)


def _write_outputs(table: Table, output_path: Path | None, fmt: str, meta: dict, paid: str) -> str:
    """Write the table (and beside a file, its sidecar); returns the table's sha256.

    An OSError here (disk full, I/O error) becomes OutputError (exit 5) naming what was paid: the table's temporary
    file is already gone (atomic_write), and a table whose sidecar could not be written is removed with the
    sidecar, so a failed run leaves no new or half-described output behind.
    """
    table_written = False
    try:
        out_sha = write_table(table, output_path, fmt)
        table_written = True
        if output_path is not None:
            write_sidecar(output_path, {**meta, "output_sha256": out_sha})
        return out_sha
    except OSError as exc:
        where = "standard output" if output_path is None else str(output_path)
        if output_path is None:
            left = "standard output may hold part of the table: discard it"
        else:
            left = "no output file was left"
            if table_written:
                for p in (output_path, sidecar_path(output_path)):
                    try:
                        os.unlink(p)
                    except OSError:
                        pass
        raise OutputError(
            f"could not write the output {where}: {exc.strerror or type(exc).__name__}; {paid}; {left}"
        ) from None


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
    table = Table.from_json(stored)
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
