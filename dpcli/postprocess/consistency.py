"""Post-processing that spends nothing: consistent totals, non-negativity, rounding and the small-cell policy.

Everything here reads noisy values and public parameters (the spec's keys, bins and the noise variances of the
plan) only, so it costs no privacy. The exact no-noise path gives back the exact table: exact counts are already
consistent, generalised least squares returns a consistent input unchanged and rounding keeps integers.

Consistent counts. Counts that share a breakdown (a total, counts by sex, counts by sex x race, a histogram whose
bins cover every counted row) are noisy measurements ``y_s = A_s x + noise_s`` of one *finest table* x (the counts
over every dimension any of them has), where ``A_s`` sums the finest cells into the statistic's cells. The estimate
is generalised least squares: x minimising sum_s |y_s - A_s x|^2 / v_s, with v_s the variance of statistic s's noise
per cell (independent noise, one variance per statistic). Every released margin is then a sum of finest cells, so
the statistics add up exactly. The finest table itself must be one of the statistics (else the system has no unique
answer); it is capped at ``MAX_FINEST_CELLS`` cells, refused before the spend.

Rounding keeps the grand total: the finest cells are rounded by largest remainder (floor every cell, then add one
to the cells with the largest fractional parts until the sum is the rounded total; ties go to the earlier cell),
and every margin is released as the sum of its rounded finest cells. So the grand total is round(GLS total) and
each margin is within (its number of finest cells) of its GLS value, and everything adds up exactly.

Non-negativity (with consistency): negative finest cells are set to zero before rounding, so every margin is a sum
of non-negative cells. This removes the negative counts a reader would find absurd and biases small cells upwards.

Intervals: a consistent cell keeps its statistic's raw interval half-width, centred on the consistent value. GLS is
the best linear unbiased estimator, so its variance is at most that of the statistic's own noisy value (which is one
unbiased linear estimator of the same cell): the raw half-width is conservative, never narrower than the truth
needs. Narrower GLS intervals would need the variance of each cell under rounding and clipping; we do not claim them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from dpcli.core.accounting import format_exact
from dpcli.errors import InternalError, SpecError
from dpcli.plan.model import Plan, StatisticPlan
from dpcli.specs.kinds import KINDS
from dpcli.specs.model import Column, EdgeBins, GridBins, PostProcess, histogram_bins

if TYPE_CHECKING:
    from scipy import sparse  # untyped (no scipy-stubs installed): its names are Any to mypy

    from dpcli.mechanisms.noisy import Noisy

# The finest table GLS solves for: a sparse least-squares problem with one unknown per finest cell. 10^6 cells solve
# in seconds (scipy lsqr, a few tens of iterations); a bigger table is refused before anything is spent.
MAX_FINEST_CELLS = 1_000_000

SMALL_CELL_ACTIONS = ("flag", "suppress")


@dataclass(frozen=True)
class Measurement:
    """One noisy count statistic over a subset of the finest table's dimensions.

    ``values`` holds its cells in the spec's order (first dimension slowest), shaped by the sizes of ``dimensions``;
    ``variance`` is the variance of the noise added to each of its cells (public: from the plan)."""

    name: str
    dimensions: tuple[str, ...]
    values: np.ndarray
    variance: float


def finest_dimensions(measurements: Sequence[Measurement]) -> tuple[str, ...]:
    """The finest table's dimensions: the measurement that has every dimension any of them has. A SpecError when
    none does (counts by sex and counts by race alone do not determine counts by sex x race)."""
    everything = {d for m in measurements for d in m.dimensions}
    for m in measurements:
        if set(m.dimensions) == everything:
            return m.dimensions
    raise SpecError(
        "postprocess.consistent",
        "statistics "
        + ", ".join(m.name for m in measurements)
        + " share no finest table: add a count over every dimension they have ("
        + ", ".join(sorted(everything))
        + ")"
    )


def check_finest_size(cells: int, names: Sequence[str]) -> None:
    """The cap on the finest table, checked from the plan (before the spend)."""
    if cells > MAX_FINEST_CELLS:
        raise SpecError(
            "postprocess.consistent",
            f"the finest table of {', '.join(names)} has {cells} cells; at most "
            f"{MAX_FINEST_CELLS} are made consistent"
        )


def _margin_matrix(finest: tuple[str, ...], sizes: dict[str, int], dims: tuple[str, ...]) -> sparse.csr_matrix:
    """The sparse matrix summing finest cells (row-major over ``finest``) into the cells over ``dims``."""
    from scipy import sparse

    shape = tuple(sizes[d] for d in finest)
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    index = np.indices(shape).reshape(len(shape), n) if shape else np.zeros((0, 1), dtype=np.int64)
    kept = [finest.index(d) for d in dims]
    rows = np.zeros(n, dtype=np.int64)
    for axis in kept:
        rows = rows * shape[axis] + index[axis]
    m = int(np.prod([shape[a] for a in kept], dtype=np.int64)) if kept else 1
    return sparse.csr_matrix((np.ones(n), (rows, np.arange(n))), shape=(m, n))


def gls(measurements: Sequence[Measurement], sizes: dict[str, int]) -> tuple[tuple[str, ...], np.ndarray]:
    """(finest dimensions, the GLS estimate of the finest table, flat, row-major) from the noisy measurements."""
    from scipy import sparse
    from scipy.sparse.linalg import lsqr

    finest = finest_dimensions(measurements)
    for m in measurements:
        if not set(m.dimensions) <= set(finest) or m.variance <= 0:
            raise ValueError(f"measurement {m.name}: dimensions outside the finest table or no noise variance")
    blocks, targets = [], []
    for m in measurements:
        # dimensions in the finest table's order: a statistic by (race, sex) is transposed to (sex, race)
        ordered = tuple(d for d in finest if d in m.dimensions)
        values = np.asarray(m.values, dtype=np.float64).reshape([sizes[d] for d in m.dimensions] or [1])
        if m.dimensions:
            values = np.transpose(values, [m.dimensions.index(d) for d in ordered])
        weight = 1 / np.sqrt(m.variance)
        blocks.append(_margin_matrix(finest, sizes, ordered) * weight)
        targets.append(values.reshape(-1) * weight)
    a = sparse.vstack(blocks).tocsr()
    b = np.concatenate(targets)
    # start from the finest measurement itself: on exact (consistent) input it is the answer already
    start = next(np.asarray(m.values, dtype=np.float64).reshape(-1) for m in measurements if m.dimensions == finest)
    x = lsqr(a, b, atol=1e-14, btol=1e-14, iter_lim=10_000, x0=start)[0]
    return finest, x


def round_keeping_total(x: np.ndarray) -> np.ndarray:
    """Integers with sum == round(sum(x)), each within 1 of x: floor, then +1 to the largest fractional parts
    (stable: ties to the earlier cell). Values within 1e-9 of an integer are that integer first (float noise of
    the solver must not move an exact count)."""
    x = np.asarray(x, dtype=np.float64)
    near = np.rint(x)
    x = np.where(np.abs(x - near) < 1e-9, near, x)
    base = np.floor(x)
    short = round(float(x.sum())) - int(base.sum())
    order = np.argsort(-(x - base), kind="stable")
    out: np.ndarray = base.astype(np.int64)  # numpy's floor is typed as returning Any
    out[order[:short]] += 1
    return out


def margins(
    finest: tuple[str, ...], sizes: dict[str, int], cells: np.ndarray, dims: tuple[str, ...]
) -> np.ndarray:
    """A statistic's cells over ``dims`` (in its own dimension order) as sums of the finest cells."""
    shape = [sizes[d] for d in finest]
    table = np.asarray(cells).reshape(shape or [1])
    dropped = tuple(i for i, d in enumerate(finest) if d not in dims)
    summed = table.sum(axis=dropped) if dropped else table
    ordered = [d for d in finest if d in dims]
    if dims:
        summed = np.transpose(summed, [ordered.index(d) for d in dims])
    return np.asarray(summed).reshape(-1)


def make_consistent(
    measurements: Sequence[Measurement], sizes: dict[str, int], *, nonnegative: bool = False
) -> dict[str, np.ndarray]:
    """Each measurement's released integer cells: GLS, optionally clipped at zero, rounded keeping the grand total,
    every margin the sum of its rounded finest cells (so they add up exactly)."""
    finest, x = gls(measurements, sizes)
    if nonnegative:
        x = np.maximum(x, 0.0)
    cells = round_keeping_total(x)
    return {m.name: margins(finest, sizes, cells, m.dimensions) for m in measurements}


def round_to(values: Sequence[Fraction], digits: int) -> list[Fraction]:
    """Values rounded half-to-even to ``digits`` decimal places (Python's round of a Fraction: exact)."""
    step = Fraction(1, 10**digits) if digits >= 0 else Fraction(10 ** (-digits))
    return [round(v / step) * step for v in values]


def small_cells(
    value: Sequence[Fraction | None],
    ci_low: Sequence[Fraction | None],
    ci_high: Sequence[Fraction | None],
    max_relative_width: Fraction,
) -> list[bool]:
    """True where a cell's interval is wider than max_relative_width * |value| (a zero value with any width is
    small). A cell without an interval (a quantile, a top_k rank) is never small."""
    out = []
    for v, lo, hi in zip(value, ci_low, ci_high, strict=True):
        if v is None or lo is None or hi is None:
            out.append(False)
        else:
            out.append(hi - lo > max_relative_width * abs(v))
    return out


def flag_column(small: Sequence[bool], action: str) -> list[str]:
    """The table's ``flag`` texts: empty, or ``flagged`` / ``suppressed`` where the cell is small."""
    mark = "suppressed" if action == "suppress" else "flagged"
    return [mark if s else "" for s in small]


def noise_variance(mechanism: str, scale: Fraction | None, variance: Fraction | None) -> float:
    """The variance of one cell's noise (grid units), from a plan component's public parameters: discrete Laplace
    with scale t (P(k) proportional to exp(-|k|/t)) has variance 2 e^(-1/t) / (1 - e^(-1/t))^2; the discrete
    Gaussian's variance is at most its sigma^2 (Canonne, Kamath, Steinke 2020), used as the weight."""
    if mechanism == "discrete_gaussian":
        if variance is None:
            raise InternalError("a discrete Gaussian component without its variance")
        return float(variance)
    if scale is None:
        raise InternalError(f"a {mechanism} component without its scale")
    q = float(np.exp(-1 / float(scale)))
    return 2 * q / (1 - q) ** 2



# ---------------------------------------------------------------------------------------------------------------
# Which statistics of a plan are made consistent (decided from the spec and plan alone, before the spend)


@dataclass(frozen=True)
class Group:
    """Count statistics made consistent together: ``finest`` (an index into the plan's statistics) has every
    dimension of the others, ``members`` (indices, the finest among them) count the same rows."""

    finest: int
    members: tuple[int, ...]


def _counts_every_row(column: Column, bins: EdgeBins | GridBins | None) -> bool:
    """Whether every row has a key (or bin) of this column: a missing or undeclared cell takes ``impute:``, and a
    numeric value (clamped to the bounds) always falls in a bin. Otherwise some rows are left out of a breakdown by
    this column but counted by a statistic without it, and the two do not add up."""
    if column.impute is None:
        return False
    if not column.numeric:
        return True
    if column.bounds is None or bins is None:  # the loader gives a numeric column bounds, its histogram bins
        raise InternalError(f"numeric column {column.name!r} without bounds or bins")
    return bins.edge(0) <= column.bounds[0] and bins.edge(bins.count) > column.bounds[1]


def _dimension_signature(sp: StatisticPlan) -> dict[str, object]:
    """dimension -> what its keys are (a category's declared keys, or a histogram's bins)."""
    stat = sp.statistic
    out: dict[str, object] = {}
    for name, keys in zip(stat.dimensions, sp.dimension_keys, strict=True):
        out[name] = keys if keys is not None else stat.bins
    return out


def _skip_reason(plan: Plan, sp: StatisticPlan) -> str | None:
    if plan.spec.privacy.person is not None:
        return "not made consistent: under a person unit each statistic bounds a person's rows on its own"
    if sp.selection is not None:
        return "not made consistent: its keys come from the data (open keys)"
    return None


def consistency_groups(plan: Plan) -> tuple[list[Group], dict[int, str]]:
    """The groups of the plan's statistics with ``consistent: true``, and a note for each such statistic left out
    (why). Two counts are made consistent when one's dimensions are among the other's (same keys, same bins) and
    every dimension the finer has beyond the coarser counts every row (``_counts_every_row``): then the coarser
    counts exactly the rows the finer does. Each statistic joins the first finest statistic (in spec order) it fits."""
    wanted = [i for i, sp in enumerate(plan.statistics) if _policy(plan, sp).consistent]
    notes: dict[int, str] = {}
    eligible = []
    for i in wanted:
        reason = _skip_reason(plan, plan.statistics[i])
        if reason is None:
            eligible.append(i)
        else:
            notes[i] = reason
    signatures = {i: _dimension_signature(plan.statistics[i]) for i in eligible}

    def fits(inner: int, outer: int) -> bool:
        a, b = signatures[inner], signatures[outer]
        if not set(a) <= set(b) or any(a[d] != b[d] for d in a):
            return False
        columns = plan.spec.columns
        return all(_counts_every_row(columns[d], plan.statistics[outer].statistic.bins) for d in set(b) - set(a))

    finest_candidates = [i for i in eligible if not any(set(signatures[i]) < set(signatures[j]) for j in eligible)]
    members: dict[int, list[int]] = {f: [] for f in finest_candidates}
    for i in eligible:
        home = next((f for f in finest_candidates if fits(i, f)), None)
        if home is None:
            notes[i] = "not made consistent: no other statistic with consistent: true counts the same rows over " \
                       "all its dimensions (see docs/spec.md, Post-processing)"
        else:
            members[home].append(i)
    groups = []
    for f, ms in members.items():
        if len(ms) < 2:
            for i in ms:
                notes.setdefault(i, "not made consistent: no other statistic with consistent: true shares its rows")
            continue
        groups.append(Group(f, tuple(ms)))
    return groups, notes


def _policy(plan: Plan, sp: StatisticPlan) -> PostProcess:
    return plan.spec.postprocess.get(sp.statistic.name) or PostProcess()


def check_plan(plan: Plan) -> None:
    """Refusals before the spend: a finest table over ``MAX_FINEST_CELLS``, and any statistic asking for
    consistency over more cells than that, whether or not another statistic shares its rows (so the rule reads off
    the spec: a statistic that would be left alone today is not refused later because another is added); and
    counts asking for consistency that cannot have it for want of ``impute:`` (``check_rows_counted``)."""
    for group in consistency_groups(plan)[0]:
        check_finest_size(
            plan.statistics[group.finest].cells, [plan.statistics[i].statistic.name for i in group.members]
        )
    for sp in plan.statistics:
        policy = _policy(plan, sp)
        if policy.consistent and _skip_reason(plan, sp) is None:
            check_finest_size(sp.cells, [sp.statistic.name])
        if policy.small_cells is not None:
            small_cell_width(policy)  # here, before the spend, rather than in the sidecar after it
    check_rows_counted(plan)


def check_rows_counted(plan: Plan) -> None:
    """A SpecError (exit 2, before the spend) for a statistic with ``consistent: true`` left out of every group
    while another one with ``consistent: true`` has the same breakdown but for columns that do not count every row
    (no ``impute:``, or bins short of the bounds): released as asked it would be inconsistent, with a note in the
    plan only (issue 25). Left alone for another reason (no statistic nested with it, a person unit, open keys),
    a statistic keeps its note."""
    groups, _ = consistency_groups(plan)
    grouped = {i for g in groups for i in g.members}
    eligible = [i for i, sp in enumerate(plan.statistics)
                if _policy(plan, sp).consistent and _skip_reason(plan, sp) is None]
    signatures = {i: _dimension_signature(plan.statistics[i]) for i in eligible}
    columns = plan.spec.columns
    for i in eligible:
        if i in grouped:
            continue
        for j in eligible:
            a, b = signatures[i], signatures[j]
            coarse, fine = (i, j) if len(a) <= len(b) else (j, i)
            small, large = signatures[coarse], signatures[fine]
            if j == i or not set(small) <= set(large) or any(small[d] != large[d] for d in small):
                continue
            finer = plan.statistics[fine].statistic
            short = sorted(d for d in set(large) - set(small) if not _counts_every_row(columns[d], finer.bins))
            if not short:
                continue
            names = ", ".join(short)
            raise SpecError(
                "postprocess.consistent",
                f"'{plan.statistics[coarse].statistic.name}' and '{finer.name}' ask for consistent: true but do not "
                f"count the same rows: a row with no declared key (or bin) of {names} is counted by the first and "
                f"left out of the second; give {names} an impute: (a histogram's bins covering the bounds), or "
                "set consistent: false on one of them",
            )


def small_cell_width(policy: PostProcess) -> Fraction:
    """The width relative to |value| above which a cell is small (the loader requires it with ``small_cells``)."""
    if policy.max_relative_width is None:
        raise InternalError("postprocess.small_cells without max_relative_width")
    return policy.max_relative_width


def plan_notes(plan: Plan) -> list[str | None]:
    """Per statistic of the plan, one line on the post-processing it gets (None: none), for `dpcli plan`."""
    groups, notes = consistency_groups(plan)
    grouped = {i: g for g in groups for i in g.members}
    out: list[str | None] = []
    for i, sp in enumerate(plan.statistics):
        policy = plan.spec.postprocess.get(sp.statistic.name)
        if policy is None:
            out.append(None)
            continue
        parts = []
        if i in grouped:
            g = grouped[i]
            others = [plan.statistics[j].statistic.name for j in g.members if j != i]
            parts.append("consistent with " + ", ".join(others) + " (least squares, rounded keeping the total)")
        elif i in notes:
            parts.append(notes[i])
        if policy.nonnegative:
            parts.append("non-negative")
        if policy.digits is not None and KINDS[sp.statistic.kind].rounded:
            parts.append(f"rounded to {policy.digits} decimal places")
        if policy.small_cells is not None:
            verb = "flagged" if policy.small_cells == "flag" else "suppressed"
            width = format_exact(small_cell_width(policy))
            parts.append(f"cells with an interval wider than {width} x |value| {verb}")
        out.append("; ".join(parts) if parts else None)
    return out


def variance_of(sp: StatisticPlan) -> float:
    """The noise variance of one of a count statistic's cells (grid units = rows)."""
    c = sp.component("count")
    return noise_variance(c.mechanism, c.scale, c.variance)


def consistent_noisy(plan: Plan, noisy: list[Noisy]) -> list[Noisy]:
    """The noisy values with each consistency group's counts replaced by the consistent integers (post-processing
    of noisy values; the plan's public variances are the weights). Statistics in no group are unchanged."""
    from dataclasses import replace

    groups, _ = consistency_groups(plan)
    out = list(noisy)
    for g in groups:
        finest = plan.statistics[g.finest]
        sizes = dict(zip(finest.statistic.dimensions, _sizes(finest), strict=True))
        measurements = [
            Measurement(str(i), plan.statistics[i].statistic.dimensions, np.asarray(noisy[i].counts),
                        variance_of(plan.statistics[i]))
            for i in g.members
        ]
        nonnegative = _policy(plan, finest).nonnegative
        fitted = make_consistent(measurements, sizes, nonnegative=nonnegative)
        for i in g.members:
            out[i] = replace(noisy[i], counts=fitted[str(i)].astype(np.int64))
    return out


def _sizes(sp: StatisticPlan) -> list[int]:
    return [len(k) if k is not None else histogram_bins(sp.statistic).count for k in sp.dimension_keys]


def sidecar_blocks(plan: Plan) -> dict[str, dict[str, object]]:
    """Per statistic with a `postprocess:` policy, its sidecar block (public: the spec's policy and which statistics
    were made consistent together, decided from the spec alone)."""
    groups, notes = consistency_groups(plan)
    grouped = {i: g for g in groups for i in g.members}
    out: dict[str, dict[str, object]] = {}
    for i, sp in enumerate(plan.statistics):
        policy = plan.spec.postprocess.get(sp.statistic.name)
        if policy is None:
            continue
        consistent: dict[str, object] | None = None
        if i in grouped:
            g = grouped[i]
            consistent = {
                "with": [plan.statistics[j].statistic.name for j in g.members if j != i],
                "finest": plan.statistics[g.finest].statistic.name,
                "method": "generalised least squares over the finest table, weighted by each value's noise variance",
                "rounding": "the finest cells by largest remainder keeping the grand total; every other statistic of "
                            "the group is the sum of its rounded finest cells",
                "nonnegative": _policy(plan, plan.statistics[g.finest]).nonnegative,
                "interval": "the statistic's own half-width at the release's confidence around the consistent value "
                            "(conservative)",
            }
        out[sp.statistic.name] = {
            "consistent": consistent,
            "consistent_note": notes.get(i),
            "nonnegative": policy.nonnegative and KINDS[sp.statistic.kind].nonnegative,
            "digits": policy.digits if KINDS[sp.statistic.kind].rounded else None,
            "small_cells": None if policy.small_cells is None else {
                "max_relative_width": format_exact(small_cell_width(policy)),
                "action": policy.small_cells,
            },
        }
    return out
