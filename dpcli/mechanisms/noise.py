"""Noise mechanisms as pure functions over numpy arrays of exact integers.

Every released number is ``exact integer + exact discrete noise``: no float ever touches a value before the
noise is added, so there are no low bits to leak (Mironov 2012). Values are int64 arrays (counts) or object
arrays of Python ints (fixed-point sums, which may exceed 64 bits).

``draw_noise`` applies a plan's noise components to a release's exact aggregates (a new mechanism plugs in at
``add_noise``, which picks the sampler by the component's mechanism name). How a statistic's numbers are drawn is
its kind's family (dpcli/specs/kinds.py): ``DRAWS`` holds one function per family, so a new kind of an existing family
changes nothing here.

Open-key statistics (``StatisticPlan.selection`` set) get noise on each observed entry's count and go through private
partition selection (dpcli.mechanisms.selection).
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from dpcli.core.samplers import RandomSource, discrete_gaussian, discrete_laplace
from dpcli.errors import InternalError
from dpcli.mechanisms import quantiles
from dpcli.mechanisms.noisy import Noisy
from dpcli.mechanisms.selection import checked_keys, select_entries
from dpcli.mechanisms.topk import choose, rank_entries, ranked_cells
from dpcli.plan.model import Plan, StatisticPlan
from dpcli.plan.quantiles import INTERVAL_COUNT, INTERVAL_PART_CONFIDENCE
from dpcli.plan.sensitivity import NoiseComponent
from dpcli.specs.grid import candidate_grid, quantile_bins
from dpcli.specs.kinds import KINDS, Family
from dpcli.specs.model import Column, Quantile, TopK

if TYPE_CHECKING:  # the engine's result type only: importing the engine would load polars
    from dpcli.engine import ExactStatistic

_INT64_SAFE = 2**62


def add_discrete_laplace(values: np.ndarray, scale: Fraction, source: RandomSource | None = None) -> np.ndarray:
    """values + independent discrete Laplace(scale) noise per entry, exactly (same dtype family as the input)."""
    return _add(values, discrete_laplace(scale, len(values), source))


def add_discrete_gaussian(values: np.ndarray, variance: Fraction, source: RandomSource | None = None) -> np.ndarray:
    """values + independent discrete Gaussian noise with parameter sigma^2 = variance per entry, exactly."""
    return _add(values, discrete_gaussian(variance, len(values), source))


def _add(values: np.ndarray, noise: np.ndarray) -> np.ndarray:
    # numpy's operators are typed as returning Any: the annotation says what they return here
    noisy: np.ndarray
    if values.dtype == object:
        noisy = values + noise.astype(object)
    elif len(values) and int(np.abs(values).max()) >= _INT64_SAFE:
        noisy = values.astype(object) + noise.astype(object)
    else:
        noisy = values.astype(np.int64) + noise
    return noisy


def add_noise(values: np.ndarray, comp: NoiseComponent) -> np.ndarray:
    """``values`` plus the noise of one plan component (its mechanism, scale or variance), exactly."""
    if comp.mechanism == "discrete_gaussian":
        return add_discrete_gaussian(values, comp.required_variance())
    return add_discrete_laplace(values, comp.required_scale())


def _quantile(sp: StatisticPlan) -> Quantile:
    """The quantile statistic of a plan its kind's family sent to the quantile draws."""
    if not isinstance(sp.statistic, Quantile):
        raise InternalError(f"statistic {sp.statistic.name!r} is a {sp.statistic.kind}, not a quantile")
    return sp.statistic


def _quantile_counts(
    column: Column, sp: StatisticPlan, ex: ExactStatistic
) -> tuple[Quantile, np.ndarray, int, int]:
    """A quantile statistic, its exact counts as (declared cells x engine bins), its candidate spacing and count."""
    stat = _quantile(sp)
    _, spacing, candidates = candidate_grid(column, stat.step)
    bins = quantile_bins(stat, column)
    return stat, np.asarray(ex.counts, dtype=np.int64).reshape(-1, bins), spacing, candidates


def draw_quantiles(
    column: Column, sp: StatisticPlan, ex: ExactStatistic, source: RandomSource | None = None
) -> Noisy:
    """A quantile's release: one exact permute-and-flip draw per declared cell and level
    (dpcli.mechanisms.quantiles)."""
    stat, counts, spacing, candidates = _quantile_counts(column, sp, ex)
    levels = stat.levels
    scales = tuple(c.required_scale() for c in sp.components[: len(levels)])
    choices = quantiles.choose(counts, levels, scales, spacing, candidates, source)
    if stat.interval_share is None:
        return Noisy(None, None, choices=choices)
    count = sp.component(INTERVAL_COUNT)
    noisy_n = add_noise(counts.sum(axis=1), count)
    draw = sp.components[len(levels) + 1]
    top = column.grid_bounds[1] - column.grid_bounds[0]
    interval = quantiles.intervals(
        counts, levels, choices, noisy_n, count.halfwidth(INTERVAL_PART_CONFIDENCE), draw.required_scale(),
        draw.halfwidth(INTERVAL_PART_CONFIDENCE), spacing, candidates, top, source,
    )
    return Noisy(None, None, choices=choices, interval=interval)


def draw_additive(plan: Plan, sp: StatisticPlan, ex: ExactStatistic) -> Noisy:
    """Each of the statistic's noise components added to its exact vector (counts, sums, squares); open keys: the
    noisy counts' partition selection."""
    if sp.selection is not None:
        keys = checked_keys(sp, ex)
        return select_entries(sp, add_noise(_narrowed(ex.counts), sp.component("count")), keys)
    has_count = any(c.role == "count" for c in sp.components)
    counts = add_noise(_narrowed(ex.counts), sp.component("count")) if has_count else None
    sums = add_noise(_narrowed(ex.sums), sp.component("sum")) if ex.sums is not None else None
    squares = add_noise(_narrowed(ex.squares), sp.component("squares")) if ex.squares is not None else None
    return Noisy(counts, sums, squares=squares)


def draw_quantile(plan: Plan, sp: StatisticPlan, ex: ExactStatistic) -> Noisy:
    """A quantile's or median's draws (``draw_quantiles``) over its column's candidate grid."""
    stat = _quantile(sp)
    return draw_quantiles(plan.spec.columns[stat.column], sp, ex)


def draw_ranking(plan: Plan, sp: StatisticPlan, ex: ExactStatistic) -> Noisy:
    """A top_k's or mode's keys: report-noisy-max over declared keys (dpcli.mechanisms.topk); open keys: partition
    selection
    of the noisy counts, then their ranking (post-processing)."""
    if sp.selection is None:
        return Noisy(None, None, chosen=choose(sp, ex.counts))
    noisy = add_noise(_narrowed(ex.counts), sp.component("count"))
    return rank_entries(sp, select_entries(sp, noisy, checked_keys(sp, ex)))


def draw_randomized(plan: Plan, sp: StatisticPlan, ex: ExactStatistic) -> Noisy:
    """Never here: a frequency's counts are read from a randomized file (dpcli.run.randomize), which paid for them."""
    raise ValueError(f"statistic {sp.statistic.name!r}: a frequency draws no noise (dpcli.run.randomize releases it)")


# How each family of kinds (dpcli/specs/kinds.py) draws a statistic's noisy numbers from its exact aggregates
DRAWS: dict[Family, Callable[[Plan, StatisticPlan, ExactStatistic], Noisy]] = {
    Family.ADDITIVE: draw_additive,
    Family.QUANTILE: draw_quantile,
    Family.RANKING: draw_ranking,
    Family.RANDOMIZED: draw_randomized,
}


def draw_noise(plan: Plan, exact: list[ExactStatistic]) -> list[Noisy]:
    """Add the plan's exact discrete noise to every exact vector, as its kind's family draws it. Only called after
    the spend is durable."""
    return [DRAWS[KINDS[sp.statistic.kind].family](plan, sp, ex) for sp, ex in zip(plan.statistics, exact, strict=True)]


def _narrowed(values: np.ndarray) -> np.ndarray:
    if values.dtype == object and len(values) and max(abs(int(values.max())), abs(int(values.min()))) < 2**62:
        # fixed-point sums arrive as Python ints; in int64 (as the mechanism keeps them when they fit) the noisy
        # array is 5x smaller and the table's columns are formatted without an object array
        return values.astype(np.int64)
    return values


def exact_noisy(exact: list[ExactStatistic], plan: Plan | None = None) -> list[Noisy]:
    """Exact aggregates passed through as if they were noisy: the no-noise path of the exact-answer tests. An
    open-key statistic (the ``plan`` is needed then) keeps the entries whose exact count reaches the threshold.

    Nothing in the CLI or in ``release`` calls this; it exists so tests can check the whole post-processing and
    output path against plain polars without noise.
    """
    if plan is None:
        if any(e.keys is not None for e in exact):
            raise InternalError("exact_noisy: open keys need the plan")
        return [Noisy(e.counts, e.sums, squares=e.squares) for e in exact]
    out = []
    for sp, e in zip(plan.statistics, exact, strict=True):
        stat = sp.statistic
        if sp.selection is not None:
            selected = select_entries(sp, e.counts, checked_keys(sp, e))
            out.append(rank_entries(sp, selected) if isinstance(stat, TopK) else selected)
        elif isinstance(stat, Quantile):  # the candidate of the largest utility
            _, counts, spacing, candidates = _quantile_counts(plan.spec.columns[stat.column], sp, e)
            best = quantiles.best(counts, stat.levels, spacing, candidates)
            # no noise: the interval is the value itself (docs/spec.md, "Quantiles and the median")
            interval = (best * spacing, best * spacing) if stat.interval_share is not None else None
            out.append(Noisy(None, None, choices=best, interval=interval))
        elif isinstance(stat, TopK):  # the k largest exact counts (ties: the first declared key)
            out.append(Noisy(None, None, chosen=ranked_cells(sp, e.counts, stat.k)))
        else:
            out.append(Noisy(e.counts, e.sums, squares=e.squares))
    return out
