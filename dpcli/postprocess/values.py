"""Post-processing: turns noisy integers into released numbers. Reads only noisy values and the plan.

Anything computed here from noisy values (rounding, the mean's ratio, the fallback for a non-positive noisy count,
clipping a mean into its bounds, confidence intervals) is post-processing and costs no privacy. Nothing here sees
an exact aggregate; exact-answer tests feed exact values through the same functions.

Counts are released as noisy integers, unclamped: they can be negative when the true count is small, and clamping
them to zero would bias every total built from them. Their confidence interval says how far off they may be.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpcli.plan.model import StatisticPlan
from dpcli.plan.scales import CONFIDENCE
from dpcli.specs.model import Frequency

# A mean is released on a grid 1000 times finer than its column's precision: finer digits would only be noise.
MEAN_DIGITS_BELOW_PRECISION = 3


@dataclass(frozen=True)
class Released:
    """Released numbers of one statistic, one per cell, in the output's units (exact rationals)."""

    value: list[Fraction]
    ci_low: list[Fraction]
    ci_high: list[Fraction]


def sums(sp: StatisticPlan, noisy: np.ndarray, confidence: float = CONFIDENCE) -> Released:
    comp = sp.component("sum")
    k = comp.halfwidth(confidence)
    unit = comp.unit
    values = [int(v) * unit for v in noisy]
    return Released(values, [v - k * unit for v in values], [v + k * unit for v in values])


def means(
    sp: StatisticPlan,
    noisy_sums: np.ndarray,
    noisy_counts: np.ndarray,
    bounds: tuple[int, int],
    confidence: float = CONFIDENCE,
) -> Released:
    """Mean = noisy centred sum / noisy count + centre, clipped to the bounds; midpoint when the count is <= 0."""
    s_comp, c_comp = sp.component("sum"), sp.component("count")
    part = (1 + confidence) / 2
    ks, kc = s_comp.halfwidth(part), c_comp.halfwidth(part)
    unit, offset = s_comp.unit, s_comp.offset
    lo, hi = Fraction(bounds[0]), Fraction(bounds[1])
    step: Fraction = unit / 10**MEAN_DIGITS_BELOW_PRECISION  # int ** a name is typed Any

    def real(x: Fraction) -> Fraction:
        """grid units (centred) -> output units, clipped to the bounds and rounded to the mean's grid."""
        x = min(max(x + offset, lo), hi)
        return round(x * unit / step) * step

    # the values: vectorised; the midpoint of the bounds where the noisy count is <= 0 (nothing to divide by)
    values = [int(g) * step for g in mean_grid(sp, np.asarray(noisy_sums), np.asarray(noisy_counts), bounds).tolist()]
    lows, highs = [], []
    for s, n in zip(noisy_sums, noisy_counts, strict=True):
        s, n = int(s), int(n)
        if n <= 0:
            lows.append(real(lo - offset))
            highs.append(real(hi - offset))
            continue
        if n - kc <= 0:
            lows.append(real(lo - offset))
            highs.append(real(hi - offset))
            continue
        low_num, high_num = s - ks, s + ks
        low = Fraction(low_num, n + kc) if low_num >= 0 else Fraction(low_num, n - kc)
        high = Fraction(high_num, n - kc) if high_num >= 0 else Fraction(high_num, n + kc)
        lows.append(real(low))
        highs.append(real(high))
    return Released(values, lows, highs)


def _abs_max(a: np.ndarray) -> int:
    """max |a| as a Python int, without an object copy of an int64 array (|a| < 2^62 there: no overflow)."""
    if a.dtype == object:
        return int(np.abs(a).max(initial=0))
    return int(np.abs(a.astype(np.int64, copy=False)).max(initial=0))


def mean_grid(sp: StatisticPlan, s: np.ndarray, n: np.ndarray, bounds: tuple[int, int]) -> np.ndarray:
    """The released means, in steps of precision/1000, vectorised and exact: round-half-even of 1000 (s/n + c),
    clipped to the bounds (clipping and rounding commute at integer bounds); the midpoint when n <= 0."""
    f = 10**MEAN_DIGITS_BELOW_PRECISION
    offset = sp.component("sum").offset
    lo, hi = bounds
    big = max(_abs_max(s), 1) + abs(offset) * max(_abs_max(n), 1)
    wide = big * f * 4 >= 2**62 or max(abs(lo), abs(hi)) * f * 4 >= 2**62
    s = s.astype(object) if wide else s.astype(np.int64)
    n = n.astype(object) if wide else n.astype(np.int64)
    positive = n > 0
    den = np.where(positive, n, 1)
    num = (s + offset * den) * f
    q = num // den
    twice = 2 * (num - q * den)
    up = (twice > den) | ((twice == den) & (q % 2 == 1))
    g = q + up.astype(np.int64)
    g = np.minimum(np.maximum(g, lo * f), hi * f)
    middle = round(Fraction((lo + hi) * f, 2))
    return np.where(positive, g, middle)


# ---------------------------------------------------------------------------------------------------------------
# Vectorised forms for the table: the same numbers as counts/sums/means above, as int64 arrays on a decimal grid
# (text made by the writer). A million-cell sum or mean took seconds as Fractions; these take milliseconds. Where an
# array would not fit int64 (or the precision is not a terminating decimal) the table falls back to the Fractions.

_INT64_SAFE = 2**62


def decimal_step(unit: Fraction) -> tuple[int, int] | None:
    """(mult, digits) with unit == mult / 10**digits, or None when unit has no terminating decimal (1/3)."""
    for digits in range(19):
        scaled = unit * 10**digits
        if scaled.denominator == 1:
            return scaled.numerator, digits
    return None


def _int64(values: np.ndarray) -> np.ndarray | None:
    """The values as int64 when they all fit comfortably (a noisy fixed-point sum may be an object array)."""
    values = np.asarray(values)
    if values.dtype != object:
        return values.astype(np.int64, copy=False)
    if len(values) and max(abs(int(values.max())), abs(int(values.min()))) >= _INT64_SAFE:
        return None
    return values.astype(np.int64)


def _fits(largest: int, mult: int) -> bool:
    return largest * mult < _INT64_SAFE


def sum_grid(
    sp: StatisticPlan, noisy: np.ndarray, confidence: float = CONFIDENCE
) -> tuple[np.ndarray, int, int, int] | None:
    """(noisy sums in grid units, half-width k, mult, digits): value i is noisy[i] * mult / 10**digits and its
    interval (noisy[i] -/+ k) * mult / 10**digits, exactly as ``sums``. None when int64 cannot hold it."""
    comp = sp.component("sum")
    step = decimal_step(comp.unit)
    values = _int64(noisy)
    if step is None or values is None:
        return None
    k = comp.halfwidth(confidence)
    largest = int(np.abs(values).max(initial=0)) + k
    return (values, k, *step) if _fits(largest, step[0]) else None


def _round_half_even_div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """round(num / den) with ties to even, for den > 0, in int64 (Python's round of a Fraction)."""
    q = num // den
    twice = 2 * (num - q * den)
    up = (twice > den) | ((twice == den) & (q % 2 == 1))
    rounded: np.ndarray = q + up.astype(np.int64)  # numpy's operators on untyped arrays: Any
    return rounded


def mean_grids(
    sp: StatisticPlan,
    noisy_sums: np.ndarray,
    noisy_counts: np.ndarray,
    bounds: tuple[int, int],
    confidence: float = CONFIDENCE,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int] | None:
    """(value, ci_low, ci_high in steps of unit / 1000, mult, digits of that step): exactly ``means``, in int64.
    None when an intermediate could leave int64 or the step is not a terminating decimal."""
    s_comp, c_comp = sp.component("sum"), sp.component("count")
    f = 10**MEAN_DIGITS_BELOW_PRECISION
    step = decimal_step(s_comp.unit / f)
    s, n = _int64(noisy_sums), _int64(noisy_counts)
    if step is None or s is None or n is None:
        return None
    part = (1 + confidence) / 2
    ks, kc = s_comp.halfwidth(part), c_comp.halfwidth(part)
    offset = s_comp.offset
    lo, hi = bounds
    biggest_s = int(np.abs(s).max(initial=0)) + ks
    biggest_n = int(np.abs(n).max(initial=0)) + kc
    # every intermediate below is at most f * (|s| + ks + |offset| * (|n| + kc)) and the bounds times f * mult
    reach = f * (biggest_s + abs(offset) * max(biggest_n, 1)) + f * max(abs(lo), abs(hi))
    if 4 * reach >= _INT64_SAFE or not _fits(f * max(abs(lo), abs(hi)) + 1, step[0]):
        return None
    value = mean_grid(sp, s, n, bounds).astype(np.int64)
    # the interval: each part at (1 + confidence) / 2; the whole range where the noisy count may be <= 0
    ok = n - kc > 0
    low_num, high_num = s - ks, s + ks
    low_den = np.where(low_num >= 0, n + kc, n - kc)
    high_den = np.where(high_num >= 0, n - kc, n + kc)
    low_den, high_den = np.where(ok, low_den, 1), np.where(ok, high_den, 1)
    low = _round_half_even_div(low_num * f, low_den) + offset * f
    high = _round_half_even_div(high_num * f, high_den) + offset * f
    low = np.where(ok, np.clip(low, lo * f, hi * f), lo * f)
    high = np.where(ok, np.clip(high, lo * f, hi * f), hi * f)
    return value, low.astype(np.int64), high.astype(np.int64), *step


def quantile_values(lo: int, spacing: int, choices: np.ndarray) -> np.ndarray:
    """A quantile's released values in grid units, row by row (declared cells slowest, levels in increasing order):
    the chosen candidates lo + index * spacing. The draws are already sorted within each cell (post-processing:
    dpcli.mechanisms.quantiles.choose), so a cell's quantiles never cross."""
    return (lo + np.asarray(choices, dtype=np.int64) * spacing).reshape(-1)
def frequencies(sp: StatisticPlan, counts: np.ndarray) -> tuple[list[str], list[str], list[str]]:
    """A frequency statistic's released numbers from the exact key counts of a randomized file (no noise: the file
    was randomized by ``dpcli randomize``): the unbiased count estimates and their 95% intervals
    (dpcli.mechanisms.randomized_response.estimate_counts), as decimal text to two places."""
    from dpcli.mechanisms.randomized_response import estimate_counts

    stat = sp.statistic
    if not isinstance(stat, Frequency):
        raise ValueError(f"statistic {stat.name!r} is a {stat.kind}, not a frequency")
    epsilon = stat.randomized_epsilon
    values, half = estimate_counts(counts, epsilon)
    return (
        [f"{v:.2f}" for v in values], [f"{v - half:.2f}" for v in values], [f"{v + half:.2f}" for v in values]
    )
