"""The library entry point: ``release(...)`` runs one private release end to end.

    spec -> plan (no data) -> structural checks (exit 2/3, nothing spent) -> exact aggregates (one scan)
         -> ledger spend (durable, under lock) -> noise -> post-processing -> atomic write -> ``released`` record

The spend is on disk before any noise is even drawn, so no noisy value can leave the process unpaid. A crash after
the spend loses that budget (the safe direction); there is no automatic refund.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

from dpcli import __version__
from dpcli.accounting import format_exact
from dpcli.engine import ExactStatistic, aggregate, check_header, read_header
from dpcli.engine.polars_engine import used_columns
from dpcli.errors import InputError, UsageError
from dpcli.ledger import DEFAULT_LOCK_TIMEOUT, BudgetStatus, Ledger, Record, open_ledger
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
    write_sidecar,
    write_table,
)
from dpcli.plan import NoiseComponent, Plan, StatisticPlan, make_plan
from dpcli import postprocess
from dpcli.spec import Spec, load_spec

STDIN_CHUNK = 1 << 20


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
    input_sha256: str
    ledger: str
    metadata: dict = field(default_factory=dict)
    reused: bool = False  # True: an earlier release of the same spec and input, returned again without a spend


# ---------------------------------------------------------------------------------------------------------------
# Paths


def resolve_ledger(explicit: str | Path | None, spec: Spec | None) -> Path:
    for candidate in (explicit, os.environ.get("DPCLI_LEDGER") or None, spec.ledger if spec else None):
        if candidate:
            return Path(candidate)
    raise UsageError("no ledger: pass --ledger PATH, set DPCLI_LEDGER, or add `ledger:` to the spec")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def check_paths(input_path: Path | None, output_path: Path | None, ledger_path: Path) -> None:
    """Refuse outputs that would overwrite the input or the ledger, or write through a symlink (exit 2)."""
    if output_path is not None:
        if output_path.is_symlink():
            raise UsageError(f"output {output_path} is a symbolic link: refusing to write through it")
        if input_path is not None and _same_file(output_path, input_path):
            raise UsageError(f"output {output_path} is the input file: refusing to overwrite the data")
        if _same_file(output_path, ledger_path):
            raise UsageError(f"output {output_path} is the ledger: refusing to overwrite it")
    if input_path is not None and ledger_path.exists() and _same_file(input_path, ledger_path):
        raise UsageError(f"the ledger {ledger_path} is the input file")


# ---------------------------------------------------------------------------------------------------------------
# Input


class _InputFile:
    """A readable regular file for the engine: the path itself, or a spooled copy of stdin or a FIFO."""

    def __init__(self, source: Path | None):
        self.source = source
        self._tmp: str | None = None
        self._sha: str | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        if source is None or _is_stream(source):
            self.path = self._spool(source)
        else:
            self.path = source

    def _spool(self, source: Path | None) -> Path:
        fd, tmp = tempfile.mkstemp(prefix="dpcli-input-", suffix=".csv")
        self._tmp = tmp
        sha = hashlib.sha256()
        try:
            reader = sys.stdin.buffer if source is None else open(source, "rb")  # noqa: SIM115
            with os.fdopen(fd, "wb") as out:
                while chunk := reader.read(STDIN_CHUNK):
                    sha.update(chunk)
                    out.write(chunk)
            if source is not None:
                reader.close()
        except OSError as exc:
            raise InputError(f"cannot read input {source or 'from standard input'}: {exc.strerror or 'read failed'}") from None
        self._sha = sha.hexdigest()
        return Path(tmp)

    def start_hash(self) -> None:
        """Hash the file in a thread while polars scans it (hashlib releases the GIL): ~0.3 s saved per 200 MB."""
        if self._sha is not None:
            return

        def work() -> None:
            try:
                with open(self.path, "rb") as fh:
                    self._sha = hashlib.file_digest(fh, "sha256").hexdigest()
            except BaseException as exc:  # noqa: BLE001 - reported by sha256()
                self._error = exc

        self._thread = threading.Thread(target=work, daemon=True)
        self._thread.start()

    def sha256(self) -> str:
        if self._thread is not None:
            self._thread.join()
        if self._sha is None:
            raise InputError(f"cannot read input {self.source}: hashing failed")
        return self._sha

    def close(self) -> None:
        if self._tmp:
            try:
                os.unlink(self._tmp)
            except OSError:
                pass

    @property
    def name(self) -> str:
        return "standard input" if self.source is None else str(self.source)


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


def metadata(plan: Plan, spend: Record, input_sha: str, ledger_name: str, head: str) -> dict:
    spec = plan.spec
    return {
        "dpcli_version": __version__,
        "dataset": spec.dataset,
        "spec_sha256": spec.sha256,
        "input_sha256": input_sha,
        "neighbours": spec.privacy.neighbours,
        "accounting": spec.privacy.accounting,
        "epsilon": format_exact(plan.epsilon),
        "rho": format_exact(plan.rho),
        "delta": None if plan.delta is None else format_exact(plan.delta),
        "confidence": postprocess.CONFIDENCE,
        "statistics": [
            {
                "name": sp.statistic.name,
                "kind": sp.statistic.kind,
                "mechanism": sp.mechanism,
                "epsilon": format_exact(sp.epsilon),
                "rho": format_exact(sp.rho),
                "cells": sp.cells,
                "noise": [_component_meta(c) for c in sp.components],
            }
            for sp in plan.statistics
        ],
        "ledger": {"path": ledger_name, "record": spend.seq, "release_id": spend.get("release_id"), "head": head},
    }


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


def release(
    spec: Spec | str | Path,
    *,
    input: str | Path | None = None,  # noqa: A002 - the contract's name
    output: str | Path | None = None,
    ledger: str | Path | Ledger | None = None,
    fmt: str | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    reuse: bool = True,
) -> Release:
    """Run one release. ``input``/``output`` may be ``"-"`` (stdin/stdout); defaults come from the spec.

    With ``reuse`` (the default), a spec and input byte-identical to an earlier completed release return that
    release's noisy table again without spending: re-publishing numbers already paid for is post-processing,
    while drawing fresh noise for the same question would let averaging cancel the noise out.
    """
    if not isinstance(spec, Spec):
        spec = load_spec(spec)
    plan = make_plan(spec)

    input_path = _choose(input, spec.input)
    output_path = _choose(output, spec.output)
    if isinstance(ledger, Ledger):
        book = ledger
        ledger_path = Path(book.name)
    else:
        ledger_path = resolve_ledger(ledger, spec)
        check_paths(input_path, output_path, ledger_path)
        book = open_ledger(ledger_path, lock_timeout=lock_timeout)
    if output_path is not None:
        check_output_target(output_path)
    fmt = output_format(output_path, fmt)

    src = _InputFile(input_path)
    try:
        header = read_header(src.path)
        check_header(src.path if input_path is None else input_path, header, spec.columns.keys())
        del header
        records = book.records()  # verify the chain (exit 5) before any work
        src.start_hash()
        # wait for the input's hash before the scan only when this very spec was released before: otherwise
        # hashing runs alongside the scan
        if reuse and any(r.type == "spend" and r.get("spec_sha256") == spec.sha256 for r in records):
            earlier = book.find_release(spec.dataset, spec.sha256, src.sha256())
            if earlier is not None:
                return _reissue(plan, book, earlier, src.sha256(), output_path, fmt)
        book.check(spec.dataset, plan.epsilon, plan.rho)  # fast refusal before the scan; binding check in spend()
        exact = aggregate(plan, src.path)
        input_sha = src.sha256()
    finally:
        src.close()

    release_id = uuid.uuid4().hex
    spend = book.spend(
        spec.dataset,
        plan.epsilon,
        {
            "release_id": release_id,
            "spec_sha256": spec.sha256,
            "input_sha256": input_sha,
            "statistics": [s.statistic.name for s in plan.statistics],
            "output": "-" if output_path is None else str(output_path),
        },
        rho=plan.rho,
    )
    noisy = draw_noise(plan, exact)
    del exact
    table = build_table(plan, noisy)
    meta = metadata(plan, spend, input_sha, book.name, spend.hash)
    out_sha = write_table(table, output_path, fmt)
    if output_path is not None:
        write_sidecar(output_path, {**meta, "output_sha256": out_sha})
    stored = table.to_json()
    book.store_table(release_id, stored)
    book.mark_released(
        release_id, {"output_sha256": out_sha, "table_sha256": hashlib.sha256(stored).hexdigest()}
    )
    status = book.status(spec.dataset)
    return Release(plan, table, spend, status, output_path, out_sha, input_sha, book.name, meta)


def _reissue(
    plan: Plan, book: Ledger, earlier: tuple[Record, Record, bytes], input_sha: str, output_path: Path | None, fmt: str
) -> Release:
    """Write an earlier release's stored table again (same numbers, no new noise, no spend)."""
    spend, _done, stored = earlier
    table = Table.from_json(stored)
    meta = {**metadata(plan, spend, input_sha, book.name, spend.hash), "reissued": True}
    out_sha = write_table(table, output_path, fmt)
    if output_path is not None:
        write_sidecar(output_path, {**meta, "output_sha256": out_sha})
    status = book.status(plan.spec.dataset)
    return Release(plan, table, spend, status, output_path, out_sha, input_sha, book.name, meta, reused=True)


def _choose(explicit: str | Path | None, from_spec: Path | None) -> Path | None:
    """A path, or None for the standard stream."""
    value = explicit if explicit is not None else from_spec
    if value is None or str(value) == "-":
        return None
    return Path(value)
