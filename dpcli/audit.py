"""Empirical privacy audit: ``dpcli audit SPEC``. Reads no data and spends nothing.

For every statistic of a spec's plan:

1. **Neighbouring datasets.** Two small synthetic CSVs are written to a temporary directory from the declared
   columns alone (the spec's ``input:`` is never opened): D, a few rows of valid values, and D', its worst-case
   neighbour under the spec's relation. Under ``add_remove``, D' is D plus one row at the value extreme that moves
   the statistic most, in the first declared cell (for a mean: into a cell that is empty in D, where one row moves
   both the noisy count and the noisy sum). Under ``replace``, one row moves from one cell to another, or its value
   goes from one bound to the other (or from missing to the extreme, when that moves the sum more). The real engine
   (:func:`dpcli.engine.aggregate`) turns both files into exact vectors.
2. **Noise.** The statistic's real noise (the plan's components, through :mod:`dpcli.mechanisms`) is drawn
   ``trials`` times for each dataset, on the cells whose exact aggregates differ between D and D' only: the other
   cells get independent noise of the same law under D and D', so they cannot change any test's outcome (the
   likelihood ratio of the whole release is that of the differing cells). The noisy integers are post-processed as
   a release does: counts through :func:`dpcli.postprocess.counts`, means through
   :func:`dpcli.postprocess.mean_grid` (the vectorised function a release's means come from), sums as the noisy
   grid integers themselves. On the first ``CROSS_CHECK`` trials of every dataset these are checked to give exactly
   the numbers :func:`dpcli.postprocess.sums` and :func:`dpcli.postprocess.means` give (a disagreement is an
   internal error, exit 1).
3. **Events and bounds.** Events are fixed before any noise is drawn, from public quantities only (the exact
   released values of D and D' and the noise scale): "every differing cell's released value is at or beyond
   a + τ(b - a)" towards D''s values ("up") or towards D's ("down"), for a handful of τ around 0 and 1 and in the
   tails. For each event E and each direction, Clopper-Pearson gives a lower bound on P[E | one dataset] and an
   upper bound on P[E | the other], and ε_lb = max log((p_lo - δ) / p_hi). With probability at least
   ``confidence`` every bound of the report holds at once (a union bound: each one-sided bound is at level
   (1 - confidence) / (number of bounds)), and then an (ε, δ)-DP statistic has ε_lb <= ε. So a report with
   ε_lb > claimed ε is, up to that probability, proof of a bug.

It is evidence, not a proof: a lower bound that stays below the claim does not show the mechanism private (other
datasets or events might show more, and a finite sample cannot see rare events); one above it proves a bug.

Claims: a Laplace statistic claims its pure ε (δ = 0). A Gaussian statistic of a zCDP release with share ρ claims
ε = zcdp_to_epsilon(ρ, δ) at the spec's ``privacy.delta``; a spec with only ``rho`` is audited at
δ = ``ASSUMED_DELTA`` (the report says so).
"""

from __future__ import annotations

import csv
import math
import tempfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from dpcli import postprocess
from dpcli.accounting import format_decimal, format_exact, zcdp_to_epsilon
from dpcli.engine import ExactStatistic, aggregate
from dpcli.errors import InternalError, UsageError
from dpcli.mechanisms import add_discrete_gaussian, add_discrete_laplace
from dpcli.plan import NoiseComponent, Plan, StatisticPlan, bin_label, make_plan
from dpcli.spec import Column, GridBins, Spec, load_spec

DEFAULT_TRIALS = 200_000
MIN_TRIALS = 1_000
MAX_TRIALS = 1_000_000_000
# Probability that every Clopper-Pearson bound of a report holds at once: a correct mechanism is reported as a
# violation (exit 6) with probability at most 1e-9, so a scheduled audit in CI never fails by chance in practice.
DEFAULT_CONFIDENCE = 1 - 1e-9
# A zCDP spec with a rho and no delta has no (epsilon, delta) claim to test; the audit uses this delta and says so.
ASSUMED_DELTA = Fraction(1, 10**6)
CHUNK = 250_000  # trials drawn at once (memory stays ~ tens of MB whatever --trials is)
CROSS_CHECK = 2_000  # trials per dataset post-processed by the real dpcli.postprocess functions too
# Tail thresholds, in noise standard deviations beyond the two exact values.
_SPREAD = (0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0)
_MEAN_UP = (0.25, 0.5, 0.75, 1.0)
_MEAN_DOWN = (0.0, 0.25, 0.5, 0.75)
_BASE_ROWS = 3

EVIDENCE_NOTE = (
    "This audit is evidence, not a proof: a lower bound at or below the claim does not show a statistic private "
    "(other datasets or events might show more); a lower bound above the claim proves a bug."
)


# ---------------------------------------------------------------------------------------------------------------
# The report


@dataclass(frozen=True)
class EventCount:
    """One event: its text, and how many of the trials on D and on D' fell in it."""

    direction: str  # "up": at or beyond D''s exact values; "down": at or beyond D's
    tau: float
    thresholds: tuple[Fraction, ...]  # per differing cell, the released value the event compares with
    text: str
    hits_d: int
    hits_d_prime: int


@dataclass(frozen=True)
class StatisticAudit:
    statistic: str
    kind: str
    mechanism: str
    claimed_epsilon: Fraction
    delta: Fraction  # 0 for a Laplace (pure) statistic
    epsilon_lower_bound: float  # >= 0; 0 when no event shows anything
    trials: int  # per dataset
    events: tuple[EventCount, ...]
    alpha_per_bound: float  # level of each one-sided Clopper-Pearson bound
    cells: int  # differing cells noised
    neighbour: str  # how D and D' differ
    cell_labels: tuple[str, ...]  # the differing cells ("" for a statistic without cells)
    exact_d: tuple[Fraction, ...]  # their released values without noise, on D and on D'
    exact_d_prime: tuple[Fraction, ...]
    worst_event: str | None  # the event and direction that gave epsilon_lower_bound

    @property
    def within_claim(self) -> bool:
        return Fraction(self.epsilon_lower_bound) <= self.claimed_epsilon

    def as_dict(self) -> dict[str, Any]:
        return {
            "statistic": self.statistic,
            "kind": self.kind,
            "mechanism": self.mechanism,
            "claimed_epsilon": format_exact(self.claimed_epsilon),
            "delta": format_exact(self.delta),
            "epsilon_lower_bound": self.epsilon_lower_bound,
            "within_claim": self.within_claim,
            "trials": self.trials,
            "events": len(self.events),
            "alpha_per_bound": self.alpha_per_bound,
            "noised_cells": self.cells,
            "neighbour": self.neighbour,
            "differing_cells": [
                {"cell": c, "exact_d": format_exact(x), "exact_d_prime": format_exact(y)}
                for c, x, y in zip(self.cell_labels, self.exact_d, self.exact_d_prime)
            ],
            "worst_event": self.worst_event,
        }


@dataclass(frozen=True)
class AuditReport:
    dataset: str
    neighbours: str
    accounting: str  # "pure" | "zcdp"
    trials: int
    confidence: float
    statistics: tuple[StatisticAudit, ...]
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return all(s.within_claim for s in self.statistics)

    @property
    def violations(self) -> tuple[StatisticAudit, ...]:
        return tuple(s for s in self.statistics if not s.within_claim)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "neighbours": self.neighbours,
            "accounting": self.accounting,
            "trials": self.trials,
            "confidence": self.confidence,
            "data_read": False,
            "spent": False,
            "ok": self.ok,
            "statistics": [s.as_dict() for s in self.statistics],
            "notes": list(self.notes),
        }


# ---------------------------------------------------------------------------------------------------------------
# Clopper-Pearson


def clopper_pearson(hits: int, trials: int, alpha: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds, each at level ``alpha``: P[p < lo] <= alpha and P[p > hi] <= alpha."""
    try:
        from scipy.stats import beta
    except ImportError:  # scipy is installed with dpcli's [test] extra (make demo / make test)
        raise UsageError("dpcli audit needs scipy: pip install scipy (or pip install -e '.[test]')") from None
    lo = 0.0 if hits == 0 else float(beta.ppf(alpha, hits, trials - hits + 1))
    hi = 1.0 if hits == trials else float(beta.isf(alpha, hits + 1, trials - hits))
    return lo, hi


def epsilon_bound(p_lo: float, p_hi: float, delta: float) -> float | None:
    """log((p_lo - delta) / p_hi), or None when p_lo <= delta (the event says nothing at this delta)."""
    if p_lo - delta <= 0 or p_hi <= 0:
        return None
    return math.log((p_lo - delta) / p_hi)


# ---------------------------------------------------------------------------------------------------------------
# Synthetic neighbours (from the declared columns only)


def _ceil(x: Fraction) -> int:
    return -((-x.numerator) // x.denominator)


def _grid_text(column: Column, k: int) -> str:
    assert column.precision is not None
    return format_exact(k * column.precision)


def _base_text(column: Column) -> str:
    if column.numeric:
        lo, hi = column.grid_bounds
        return _grid_text(column, min(max(0, lo), hi))
    return column.keys[0]


@dataclass(frozen=True)
class _Choice:
    index: int  # index along the dimension (key or bin)
    text: str  # the cell text that lands there
    label: str


def _numeric_bins(column: Column, stat_bins: Any, want: int = 2) -> list[_Choice]:
    """Up to ``want`` bins a clamped grid value can reach, each with one such value."""
    p = column.precision
    assert p is not None
    glo, ghi = column.grid_bounds
    n = stat_bins.count
    if isinstance(stat_bins, GridBins):
        first = max(0, math.floor((glo * p - stat_bins.start) / stat_bins.step))
    else:
        first = 0
    out: list[_Choice] = []
    j = first
    while j < n and len(out) < want:
        k = max(_ceil(stat_bins.edge(j) / p), glo)
        if k > ghi:
            break
        if k < _ceil(stat_bins.edge(j + 1) / p):
            out.append(_Choice(j, _grid_text(column, k), bin_label(stat_bins, j)))
        j += 1
    return out


def _choices(spec: Spec, sp: StatisticPlan) -> list[list[_Choice]]:
    """Per dimension of the statistic, up to two reachable cells."""
    stat = sp.statistic
    dims: list[list[_Choice]] = []
    for d in stat.by:
        keys = spec.columns[d].keys
        dims.append([_Choice(i, keys[i], keys[i]) for i in range(min(2, len(keys)))])
    if stat.kind == "histogram":
        column = spec.columns[stat.column]  # type: ignore[index]
        if column.numeric:
            dims.append(_numeric_bins(column, stat.bins))
        else:
            keys = column.keys
            dims.append([_Choice(i, keys[i], keys[i]) for i in range(min(2, len(keys)))])
    return dims


@dataclass(frozen=True)
class _Pair:
    d: list[dict[str, str]]
    d_prime: list[dict[str, str]]
    description: str
    expect_change: bool = True


def _neighbours(spec: Spec, sp: StatisticPlan) -> _Pair:
    stat = sp.statistic
    base = {name: _base_text(c) for name, c in spec.columns.items()}
    dims = _choices(spec, sp)
    names = list(stat.dimensions)
    if any(not choices for choices in dims):
        rows = [dict(base) for _ in range(_BASE_ROWS)]
        return _Pair(rows, rows, "no row can reach a declared cell of this statistic: nothing to test", False)
    cell_a = {n: c[0].text for n, c in zip(names, dims)}
    label_a = ", ".join(c[0].label for c in dims)
    cell_b = None
    for i in reversed(range(len(dims))):
        if len(dims[i]) > 1:
            cell_b = dict(cell_a)
            cell_b[names[i]] = dims[i][1].text
            label_b = ", ".join((c[1] if j == i else c[0]).label for j, c in enumerate(dims))
            break
    where_a = f" in cell [{label_a}]" if names else ""

    def row(cells: dict[str, str], **values: str) -> dict[str, str]:
        r = dict(base)
        r.update(cells)
        r.update(values)
        return r

    replace = spec.privacy.neighbours == "replace"
    if stat.kind in ("count", "histogram"):
        d = [dict(base) for _ in range(_BASE_ROWS)]
        if not replace:
            return _Pair(d, d + [row(cell_a)], f"D: {_BASE_ROWS} rows; D' = D + 1 row{where_a}")
        if cell_b is not None:
            return _Pair(
                d + [row(cell_a)], d + [row(cell_b)],
                f"D: {_BASE_ROWS + 1} rows; D': one row moved from cell [{label_a}] to [{label_b}]",
            )
        if not names:
            return _Pair(
                d + [row(cell_a)], d + [row(cell_a)],
                "replacing a row does not change the number of rows: nothing to test (the sensitivity of 1 is "
                "conservative)",
                expect_change=False,
            )
        out = {n: "" for n in names}
        return _Pair(
            d + [row(cell_a)], d + [row(out)],
            f"D: {_BASE_ROWS + 1} rows; D': one row moved from cell [{label_a}] to no cell (missing value)",
        )

    column = spec.columns[stat.column]  # type: ignore[index]
    name = column.name
    glo, ghi = column.grid_bounds
    if stat.kind == "sum":
        ext = ghi if abs(ghi) >= abs(glo) else glo
        ext_text = _grid_text(column, ext)
        d = [dict(base) for _ in range(_BASE_ROWS)]
        if not replace:
            return _Pair(d, d + [row(cell_a, **{name: ext_text})], f"D: {_BASE_ROWS} rows; D' = D + 1 row{where_a} with {name}={ext_text}")
        if stat.by and cell_b is not None:
            return _Pair(
                d + [row(cell_a, **{name: ext_text})], d + [row(cell_b, **{name: ext_text})],
                f"D: {_BASE_ROWS + 1} rows; D': the row with {name}={ext_text} moved from cell [{label_a}] to [{label_b}]",
            )
        lo_text, hi_text = _grid_text(column, glo), _grid_text(column, ghi)
        if column.impute is None and abs(ext) > ghi - glo:
            return _Pair(
                d + [row(cell_a, **{name: ""})], d + [row(cell_a, **{name: ext_text})],
                f"D: {_BASE_ROWS + 1} rows; D': one row's {name} changed from missing to {ext_text}{where_a}",
            )
        return _Pair(
            d + [row(cell_a, **{name: lo_text})], d + [row(cell_a, **{name: hi_text})],
            f"D: {_BASE_ROWS + 1} rows; D': one row's {name} changed from {lo_text} to {hi_text}{where_a}",
        )

    # mean: the worst case is a cell that is empty in D (then one row moves both the noisy count and the noisy sum):
    # D's rows have no value in the column, or there are none when the column imputes missing values
    hi_text = _grid_text(column, ghi)  # U' - c >= c - L' for the centre c the plan uses
    d = [row({}, **{name: ""}) for _ in range(_BASE_ROWS)] if column.impute is None else []
    rows_text = f"{len(d)} rows without a {name}" if d else "no rows"
    if not replace:
        return _Pair(d, d + [row(cell_a, **{name: hi_text})], f"D: {rows_text}; D' = D + 1 row{where_a} with {name}={hi_text}")
    if stat.by and cell_b is not None:
        return _Pair(
            d + [row(cell_a, **{name: hi_text})], d + [row(cell_b, **{name: hi_text})],
            f"D: {rows_text} + 1 row with {name}={hi_text} in cell [{label_a}]; D': that row moved to [{label_b}]",
        )
    if column.impute is None:
        return _Pair(
            d + [row(cell_a, **{name: ""})], d + [row(cell_a, **{name: hi_text})],
            f"D: {rows_text} + 1 more; D': that row's {name} changed from missing to {hi_text}{where_a}",
        )
    lo_text = _grid_text(column, glo)
    return _Pair(
        [row(cell_a, **{name: lo_text})], [row(cell_a, **{name: hi_text})],
        f"D: 1 row with {name}={lo_text}; D': its {name} changed to {hi_text}{where_a}",
    )


def _write_csv(path: Path, columns: list[str], rows: list[dict[str, str]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        for r in rows:
            w.writerow([r[c] for c in columns])


# ---------------------------------------------------------------------------------------------------------------
# Released values on the output grid (integers), vectorised


def _grid_step(sp: StatisticPlan) -> Fraction:
    """The released value of one output-grid step: 1 for counts, the precision for sums, precision/1000 for means."""
    kind = sp.statistic.kind
    if kind in ("count", "histogram"):
        return Fraction(1)
    unit = sp.component("sum").unit
    return unit if kind == "sum" else unit / 10**postprocess.MEAN_DIGITS_BELOW_PRECISION


def _as_ints(values: np.ndarray, limit: int = 2**62) -> np.ndarray:
    """int64 when every value and ``limit`` fit comfortably, else Python ints (object)."""
    if values.dtype != object and values.size and int(np.abs(values).max()) < limit:
        return values.astype(np.int64)
    return values.astype(object)


def _released_grid(sp: StatisticPlan, counts: np.ndarray | None, sums: np.ndarray | None, bounds: tuple[int, int] | None) -> np.ndarray:
    kind = sp.statistic.kind
    if kind in ("count", "histogram"):
        value, _, _ = postprocess.counts(sp, counts)  # type: ignore[arg-type]
        return value
    if kind == "sum":
        return _as_ints(sums)  # type: ignore[arg-type]
    return postprocess.mean_grid(sp, sums, counts, bounds)  # type: ignore[arg-type]


def _real_values(sp: StatisticPlan, counts: np.ndarray | None, sums: np.ndarray | None, bounds: tuple[int, int] | None) -> list[Fraction]:
    """The released values by the real post-processing functions (exact fractions)."""
    kind = sp.statistic.kind
    if kind in ("count", "histogram"):
        value, _, _ = postprocess.counts(sp, counts)  # type: ignore[arg-type]
        return [Fraction(int(v)) for v in value]
    if kind == "sum":
        return list(postprocess.sums(sp, sums).value)  # type: ignore[arg-type]
    return list(postprocess.means(sp, sums, counts, bounds).value)  # type: ignore[arg-type]


def _noised(value: int, comp: NoiseComponent, size: int) -> np.ndarray:
    base = np.full(size, value, dtype=np.int64) if abs(value) < 2**62 else np.full(size, value, dtype=object)
    if comp.mechanism == "discrete_gaussian":
        assert comp.variance is not None
        return add_discrete_gaussian(base, comp.variance)
    assert comp.scale is not None
    return add_discrete_laplace(base, comp.scale)


def _noise_std(comp: NoiseComponent) -> float:
    if comp.mechanism == "discrete_gaussian":
        assert comp.variance is not None
        return math.sqrt(float(comp.variance))
    assert comp.scale is not None
    t = float(comp.scale)
    one_minus_q = -math.expm1(-1.0 / t)
    return math.sqrt(2.0 * math.exp(-1.0 / t)) / one_minus_q


# ---------------------------------------------------------------------------------------------------------------
# One statistic


@dataclass
class _Setup:
    sp: StatisticPlan
    pair: _Pair
    exact_d: ExactStatistic
    exact_dp: ExactStatistic
    cells: list[int]  # differing cells whose released values differ
    labels: list[str]
    signs: list[int]  # +1: D''s exact value is above D's
    a: list[int]  # exact released values on the output grid
    b: list[int]
    events: list[tuple[str, float, tuple[int, ...]]]  # (direction, tau, per-cell integer threshold on sign*grid)
    claimed: Fraction
    delta: Fraction


def _cell_label(sp: StatisticPlan, spec: Spec, cell: int) -> str:
    stat = sp.statistic
    if not stat.dimensions:
        return ""
    sizes = []
    for d, keys in zip(stat.dimensions, sp.dimension_keys):
        sizes.append(len(keys) if keys is not None else stat.bins.count)  # type: ignore[union-attr]
    parts = []
    rest = cell
    for size, keys in zip(reversed(sizes), reversed(sp.dimension_keys)):
        rest, i = divmod(rest, size)
        parts.append(keys[i] if keys is not None else bin_label(stat.bins, i))  # type: ignore[arg-type]
    return ", ".join(reversed(parts))


def _events(sp: StatisticPlan, signs: list[int], a: list[int], b: list[int], spread: float | None) -> list[tuple[str, float, tuple[int, ...]]]:
    if sp.statistic.kind == "mean":
        ups, downs = list(_MEAN_UP), list(_MEAN_DOWN)
    else:
        assert spread is not None
        ups = [0.5, 1.0] + [1.0 + k * spread for k in _SPREAD]
        downs = [0.5, 0.0] + [-k * spread for k in _SPREAD]
    out: list[tuple[str, float, tuple[int, ...]]] = []
    seen: set[tuple[str, tuple[int, ...]]] = set()
    for direction, taus in (("up", ups), ("down", downs)):
        for tau in taus:
            t = Fraction(tau)
            # in signed grid units sg = sign * grid: "up" is sg >= ceil(sign * theta), "down" is sg <= floor(...)
            thresholds = []
            for s, lo, hi in zip(signs, a, b):
                theta = s * (lo + t * (hi - lo))
                thresholds.append(_ceil(theta) if direction == "up" else math.floor(theta))
            key = (direction, tuple(thresholds))
            if key not in seen:
                seen.add(key)
                out.append((direction, tau, tuple(thresholds)))
    return out


def _event_text(setup: _Setup, direction: str, thresholds: tuple[int, ...], step: Fraction) -> str:
    parts = []
    for label, s, th in zip(setup.labels, setup.signs, thresholds):
        # sg >= th (up) or sg <= th (down), sg = s * grid: back to the released value
        upper = (direction == "up") == (s > 0)
        op = "≥" if upper else "≤"
        value = Fraction(s * th) * step
        parts.append(f"{'value' if not label else f'[{label}]'} {op} {format_decimal(value, 10)}")
    return " and ".join(parts)


def _prepare(spec: Spec, sp: StatisticPlan, folder: Path, index: int, delta: Fraction) -> _Setup:
    stat = sp.statistic
    pair = _neighbours(spec, sp)
    columns = list(spec.columns)
    single = Plan(spec, (sp,))
    exact = []
    for tag, rows in (("d", pair.d), ("d_prime", pair.d_prime)):
        path = folder / f"{index}-{tag}.csv"
        _write_csv(path, columns, rows)
        exact.append(aggregate(single, path)[0])
    ed, edp = exact
    diff = ed.counts != edp.counts
    if ed.sums is not None and edp.sums is not None:
        diff |= np.array([x != y for x, y in zip(ed.sums.tolist(), edp.sums.tolist())], dtype=bool)
    differing = np.flatnonzero(diff).tolist()
    if pair.expect_change and not differing:
        raise InternalError(f"audit: the synthetic neighbours of statistic '{stat.name}' gave identical aggregates")

    if sp.mechanism == "discrete_gaussian":
        claimed = zcdp_to_epsilon(sp.rho, delta)
        used_delta = delta
    else:
        claimed = sp.reported_epsilon if sp.reported_epsilon is not None else sp.epsilon
        used_delta = Fraction(0)

    bounds = spec.columns[stat.column].grid_bounds if stat.kind == "mean" else None  # type: ignore[index]
    step = _grid_step(sp)
    cells, signs, a, b, labels = [], [], [], [], []
    if differing:
        idx = np.array(differing)
        values = []
        for e in (ed, edp):
            counts = e.counts[idx] if stat.kind != "sum" else None
            sums = e.sums[idx] if e.sums is not None else None
            values.append(_real_values(sp, counts, sums, bounds))
        for cell, va, vb in zip(differing, values[0], values[1]):
            if va == vb:
                continue
            ga, gb = va / step, vb / step
            if ga.denominator != 1 or gb.denominator != 1:
                raise InternalError(f"audit: statistic '{stat.name}' released a value off its output grid")
            cells.append(cell)
            signs.append(1 if gb > ga else -1)
            a.append(int(ga))
            b.append(int(gb))
            labels.append(_cell_label(sp, spec, cell))
    spread = None
    if stat.kind != "mean" and cells:
        comp = sp.components[0]
        unit_steps = comp.unit / step  # noise std in output-grid steps
        spread = max(_noise_std(comp) * float(unit_steps) / abs(y - x) for x, y in zip(a, b))
    events = _events(sp, signs, a, b, spread) if cells else []
    return _Setup(sp, pair, ed, edp, cells, labels, signs, a, b, events, claimed, used_delta)


def _count_hits(setup: _Setup, exact: ExactStatistic, trials: int, spec: Spec) -> list[int]:
    """Draw the statistic's noise ``trials`` times on the differing cells; hits per event."""
    sp = setup.sp
    stat = sp.statistic
    bounds = spec.columns[stat.column].grid_bounds if stat.kind == "mean" else None  # type: ignore[index]
    has_count = any(c.role == "count" for c in sp.components)
    has_sum = any(c.role == "sum" for c in sp.components)
    hits = [0] * len(setup.events)
    done = 0
    while done < trials:
        m = min(CHUNK, trials - done)
        signed = []
        for cell, sign in zip(setup.cells, setup.signs):
            counts = _noised(int(exact.counts[cell]), sp.component("count"), m) if has_count else None
            sums = _noised(int(exact.sums[cell]), sp.component("sum"), m) if has_sum else None  # type: ignore[index]
            grid = _released_grid(sp, counts, sums, bounds)
            if done == 0 and stat.kind != "count" and stat.kind != "histogram":
                k = min(CROSS_CHECK, m)
                real = _real_values(
                    sp, None if counts is None else counts[:k], None if sums is None else sums[:k], bounds
                )
                step = _grid_step(sp)
                if any(Fraction(int(g)) * step != r for g, r in zip(grid[:k].tolist(), real)):
                    raise InternalError(
                        f"audit: its vectorised post-processing disagrees with dpcli.postprocess ({stat.name})"
                    )
            signed.append(grid * sign)
        for i, (direction, _tau, thresholds) in enumerate(setup.events):
            mask = np.ones(m, dtype=bool)
            for sg, th in zip(signed, thresholds):
                mask &= (sg >= th) if direction == "up" else (sg <= th)
            hits[i] += int(np.count_nonzero(mask))
        done += m
    return hits


def audit(
    spec: Spec | Plan | str | Path,
    trials: int = DEFAULT_TRIALS,
    confidence: float = DEFAULT_CONFIDENCE,
) -> AuditReport:
    """Audit every statistic of a spec (or of a plan, e.g. a deliberately broken one in a test). No data read."""
    if isinstance(spec, Plan):
        plan = spec
    else:
        plan = make_plan(spec if isinstance(spec, Spec) else load_spec(spec))
    the_spec = plan.spec
    if isinstance(trials, bool) or not isinstance(trials, int) or not MIN_TRIALS <= trials <= MAX_TRIALS:
        raise UsageError(f"--trials: must be a whole number in [{MIN_TRIALS}, {MAX_TRIALS}]")
    if not 0.0 < confidence < 1.0:
        raise UsageError("confidence: must be in (0, 1)")
    alpha = 1.0 - confidence

    notes = [
        "only the cells whose exact aggregates differ between D and D' are noised: the others get independent "
        "noise of the same law under both, which no test can use",
        "events are on the released value of those cells, fixed before any noise is drawn",
        f"sums and means are post-processed by an exact vectorised replica of dpcli.postprocess, checked against "
        f"the real functions on the first {CROSS_CHECK} trials of every dataset",
    ]
    delta = plan.delta
    gaussian = any(sp.mechanism == "discrete_gaussian" for sp in plan.statistics)
    if gaussian and delta is None:
        delta = ASSUMED_DELTA
        notes.append(
            f"the spec states rho without delta: Gaussian statistics are audited at δ={format_exact(ASSUMED_DELTA)}"
        )
    with tempfile.TemporaryDirectory(prefix="dpcli-audit-") as tmp:
        setups = [
            _prepare(the_spec, sp, Path(tmp), i, delta if delta is not None else Fraction(0))
            for i, sp in enumerate(plan.statistics)
        ]
    total_bounds = sum(4 * len(s.events) for s in setups)
    alpha_bound = alpha / max(total_bounds, 1)

    results = []
    for setup in setups:
        sp = setup.sp
        hits_d = _count_hits(setup, setup.exact_d, trials, the_spec) if setup.events else []
        hits_dp = _count_hits(setup, setup.exact_dp, trials, the_spec) if setup.events else []
        best, worst = 0.0, None
        step = _grid_step(sp)
        events = []
        dlt = float(setup.delta)
        for (direction, tau, thresholds), hd, hdp in zip(setup.events, hits_d, hits_dp):
            text = _event_text(setup, direction, thresholds, step)
            values = tuple(Fraction(s * th) * step for s, th in zip(setup.signs, thresholds))
            events.append(EventCount(direction, tau, values, text, hd, hdp))
            lo_d, hi_d = clopper_pearson(hd, trials, alpha_bound)
            lo_dp, hi_dp = clopper_pearson(hdp, trials, alpha_bound)
            for eps, favoured, other, p_f, p_o in (
                (epsilon_bound(lo_dp, hi_d, dlt), "D'", "D", hdp, hd),
                (epsilon_bound(lo_d, hi_dp, dlt), "D", "D'", hd, hdp),
            ):
                if eps is not None and eps > best:
                    best = eps
                    worst = (
                        f"{text}: P[E|{favoured}] ≈ {p_f / trials:.4g} vs P[E|{other}] ≈ {p_o / trials:.4g}"
                    )
        results.append(
            StatisticAudit(
                statistic=sp.statistic.name,
                kind=sp.statistic.kind,
                mechanism=sp.mechanism,
                claimed_epsilon=setup.claimed,
                delta=setup.delta,
                epsilon_lower_bound=best,
                trials=trials,
                events=tuple(events),
                alpha_per_bound=alpha_bound,
                cells=len(setup.cells),
                neighbour=setup.pair.description,
                cell_labels=tuple(setup.labels),
                exact_d=tuple(x * step for x in setup.a),
                exact_d_prime=tuple(x * step for x in setup.b),
                worst_event=worst,
            )
        )
    notes.append(EVIDENCE_NOTE)
    return AuditReport(
        dataset=the_spec.dataset,
        neighbours=the_spec.privacy.neighbours,
        accounting=the_spec.privacy.accounting,
        trials=trials,
        confidence=confidence,
        statistics=tuple(results),
        notes=tuple(notes),
    )
