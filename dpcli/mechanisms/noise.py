"""Noise mechanisms as pure functions over numpy arrays of exact integers.

Every released number is ``exact integer + exact discrete noise``: no float ever touches a value before the
noise is added, so there are no low bits to leak (Mironov 2012). Values are int64 arrays (counts) or object
arrays of Python ints (fixed-point sums, which may exceed 64 bits).

``draw_noise`` applies a plan's noise components to a release's exact aggregates (a new mechanism plugs in at
``add_noise``, which picks the sampler by the component's mechanism name). How a statistic's numbers are drawn is
its kind's family (dpcli/spec/kinds.py): ``DRAWS`` holds one function per family, so a new kind of an existing family
changes nothing here.

Open-key statistics (``StatisticPlan.selection`` set) go through private partition selection (``select_entries``):
the engine hands one entry per *observed* cell, each entry's count gets the plan's discrete Laplace noise, and an
entry is released, with that same noisy count, when the noisy count reaches the plan's threshold. Cells nobody falls
in never appear, and nothing else about the data decides which keys are released.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from dpcli.core.samplers import RandomSource, discrete_gaussian, discrete_laplace
from dpcli.errors import InternalError
from dpcli.mechanisms import quantiles
from dpcli.mechanisms.topk import choose, ranked
from dpcli.plan.model import Plan, StatisticPlan
from dpcli.plan.quantiles import INTERVAL_COUNT, INTERVAL_PART_CONFIDENCE
from dpcli.plan.sensitivity import NoiseComponent
from dpcli.spec.kinds import KINDS, Family
from dpcli.spec.model import Column, Quantile, TopK, candidate_grid, histogram_bins, quantile_bins

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


@dataclass(frozen=True)
class Noisy:
    """Noisy integers of one statistic (grid units), the input of post-processing.

    Declared cells: one value per declared cell, ``keys`` None. Open keys: one value per *released* entry, and
    ``keys[i]`` = (code over the declared dimensions, open key text) of value i, in the output's order."""

    counts: np.ndarray | None
    sums: np.ndarray | None
    keys: tuple[tuple[int, str], ...] | None = None
    # a quantile: per declared cell and level (increasing), the index of the released candidate (cells x levels)
    choices: np.ndarray | None = None
    # top_k / mode over declared keys: the chosen keys' indices, in rank order (dpcli.mechanisms.topk); open keys:
    # ``keys`` in
    # rank order, with their noisy counts
    chosen: np.ndarray | None = None
    squares: np.ndarray | None = None  # variance/std: the noisy centred sums of squares (their own grid)
    # a quantile with interval: (ci_low, ci_high) as grid offsets from its lowest candidate (cells x levels)
    interval: tuple[np.ndarray, np.ndarray] | None = None


Entry = tuple[int, str]  # (code over the declared dimensions, first slowest; open key text)


def declared_sizes(sp: StatisticPlan) -> list[int]:
    """Sizes of the statistic's dimensions (None for a numeric histogram's bins; the open one counted as 0)."""
    stat = sp.statistic
    open_dim = sp.selection.dimension if sp.selection is not None else -1
    sizes = []
    for j, keys in enumerate(sp.dimension_keys):
        if j == open_dim:
            sizes.append(0)
        else:
            sizes.append(len(keys) if keys is not None else histogram_bins(stat).count)
    return sizes


def entry_order(sp: StatisticPlan, keys: Sequence[Entry]) -> list[int]:
    """Indices of ``keys`` in the output's order: over the statistic's dimensions in turn, declared dimensions in
    declared key order, the open one by its text (Python str order: code points)."""
    import polars as pl  # loaded with the release's engine anyway; `dpcli budget` never comes here

    after = 1  # cells of the declared dimensions after the open one: code = before * after + rest
    for size in declared_sizes(sp)[sp.required_selection().dimension + 1:]:
        after *= size
    codes = np.fromiter((code for code, _ in keys), dtype=np.int64, count=len(keys))
    # polars sorts text by its UTF-8 bytes, which is code point order (Python's): a million entries in ~0.2 s, where
    # sorted() with a key function took ~1.5 s
    texts = pl.Series([text for _, text in keys], dtype=pl.String)
    frame = pl.DataFrame({"before": codes // after, "text": texts, "rest": codes % after})
    return frame.with_row_index().sort(["before", "text", "rest"])["index"].to_list()


def select_entries(sp: StatisticPlan, noisy_counts: np.ndarray, keys: Sequence[Entry]) -> Noisy:
    """Partition selection's release step: the entries whose noisy count reaches the threshold, with that count, in
    the output's order. ``noisy_counts[i]`` is entry ``keys[i]``'s count plus the plan's noise (or, on the no-noise
    path of the tests, its exact count)."""
    threshold = sp.required_selection().threshold
    if len(noisy_counts) != len(keys):
        raise ValueError("open-key statistic: counts and keys of different lengths (an engine bug)")
    kept = np.flatnonzero(np.asarray(noisy_counts) >= threshold)
    chosen = [keys[i] for i in kept.tolist()]
    order = entry_order(sp, chosen)
    values = np.asarray(noisy_counts, dtype=np.int64)[kept[order]] if len(order) else np.zeros(0, dtype=np.int64)
    return Noisy(values, None, tuple(chosen[i] for i in order))


def _checked_keys(sp: StatisticPlan, ex: ExactStatistic) -> Sequence[Entry]:
    """The engine's entries of an open-key statistic. A repeated entry would be noised and offered twice, and a key
    longer than max_length was not cut as the spec says: either is an engine bug, refused rather than released."""
    max_length = sp.required_selection().max_length
    keys = ex.keys
    if keys is None:
        raise ValueError(f"open-key statistic {sp.statistic.name!r}: the engine returned no keys (an engine bug)")
    if len(set(keys)) != len(keys) or any(len(text) > max_length for _, text in keys):
        raise ValueError(f"open-key statistic {sp.statistic.name!r}: repeated or uncut keys (an engine bug)")
    return keys


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
        keys = _checked_keys(sp, ex)
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
    return rank_entries(sp, select_entries(sp, noisy, _checked_keys(sp, ex)))


def draw_randomized(plan: Plan, sp: StatisticPlan, ex: ExactStatistic) -> Noisy:
    """Never here: a frequency's counts are read from a randomized file (dpcli.run.randomize), which paid for them."""
    raise ValueError(f"statistic {sp.statistic.name!r}: a frequency draws no noise (dpcli.run.randomize releases it)")


# How each family of kinds (dpcli/spec/kinds.py) draws a statistic's noisy numbers from its exact aggregates
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
            selected = select_entries(sp, e.counts, _checked_keys(sp, e))
            out.append(rank_entries(sp, selected) if isinstance(stat, TopK) else selected)
        elif isinstance(stat, Quantile):  # the candidate of the largest utility
            _, counts, spacing, candidates = _quantile_counts(plan.spec.columns[stat.column], sp, e)
            best = quantiles.best(counts, stat.levels, spacing, candidates)
            # no noise: the interval is the value itself (docs/spec.md, "Quantiles and the median")
            interval = (best * spacing, best * spacing) if stat.interval_share is not None else None
            out.append(Noisy(None, None, choices=best, interval=interval))
        elif isinstance(stat, TopK):  # the k largest exact counts (ties: the first declared key)
            out.append(Noisy(None, None, chosen=ranked(e.counts, stat.k)))
        else:
            out.append(Noisy(e.counts, e.sums, squares=e.squares))
    return out


def rank_entries(sp: StatisticPlan, selected: Noisy) -> Noisy:
    """An open-key top_k: the selection's released entries ranked by their noisy counts (post-processing), the
    first k of them (fewer when fewer keys pass)."""
    stat = sp.statistic
    if not isinstance(stat, TopK) or selected.counts is None or selected.keys is None:
        raise InternalError(f"statistic {stat.name!r}: only an open-key top_k's selected entries are ranked")
    order = ranked(selected.counts, stat.k).tolist()
    keys = tuple(selected.keys[i] for i in order)
    ranks = np.arange(len(order), dtype=np.int64)
    return Noisy(np.asarray(selected.counts, dtype=np.int64)[order], None, keys, chosen=ranks)
