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

from dpcli.plan import StatisticPlan

# Confidence of the published intervals. A mean's interval combines its two parts at (1 + c) / 2 each, so by the
# union bound the box holds the truth with probability at least c.
CONFIDENCE = 0.95
# A mean is released on a grid 1000 times finer than its column's precision: finer digits would only be noise.
MEAN_DIGITS_BELOW_PRECISION = 3


@dataclass(frozen=True)
class Released:
    """Released numbers of one statistic, one per cell, in the output's units (exact rationals)."""

    value: list[Fraction]
    ci_low: list[Fraction]
    ci_high: list[Fraction]
    integer: bool  # counts: value and interval are integers


def counts(sp: StatisticPlan, noisy: np.ndarray, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Noisy counts and their interval, as int64 arrays (kept as arrays: a histogram may have millions of cells)."""
    k = sp.component("count").halfwidth(confidence)
    noisy = np.asarray(noisy, dtype=np.int64)
    return noisy, noisy - k, noisy + k


def sums(sp: StatisticPlan, noisy: np.ndarray, confidence: float = CONFIDENCE) -> Released:
    comp = sp.component("sum")
    k = comp.halfwidth(confidence)
    unit = comp.unit
    values = [int(v) * unit for v in noisy]
    return Released(values, [v - k * unit for v in values], [v + k * unit for v in values], integer=False)


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
    step = unit / 10**MEAN_DIGITS_BELOW_PRECISION

    def real(x: Fraction) -> Fraction:
        """grid units (centred) -> output units, clipped to the bounds and rounded to the mean's grid."""
        x = min(max(x + offset, lo), hi)
        return round(x * unit / step) * step

    # the values: vectorised; the midpoint of the bounds where the noisy count is <= 0 (nothing to divide by)
    values = [int(g) * step for g in mean_grid(sp, np.asarray(noisy_sums), np.asarray(noisy_counts), bounds).tolist()]
    lows, highs = [], []
    for s, n in zip(noisy_sums, noisy_counts):
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
    return Released(values, lows, highs, integer=False)


def mean_grid(sp: StatisticPlan, s: np.ndarray, n: np.ndarray, bounds: tuple[int, int]) -> np.ndarray:
    """The released means, in steps of precision/1000, vectorised and exact: round-half-even of 1000 (s/n + c),
    clipped to the bounds (clipping and rounding commute at integer bounds); the midpoint when n <= 0."""
    f = 10**MEAN_DIGITS_BELOW_PRECISION
    offset = sp.component("sum").offset
    lo, hi = bounds
    big = max(int(np.abs(s.astype(object)).max(initial=0)), 1) + abs(offset) * max(int(np.abs(n.astype(object)).max(initial=0)), 1)
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
