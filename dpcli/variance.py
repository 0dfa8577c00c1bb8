"""Post-processing of a variance or std: released numbers and their 95% interval from three noisy integers per cell.

Reads only noisy values and the plan (as dpcli.postprocess does), so all of it is post-processing:

- n: the noisy count of rows with a value; S: their noisy centred sum (grid units p, centred on c);
  Q: the noisy sum of their rounded centred squares (units p² D, D = plan.square_step).
- variance = (D Q - S² / n) / (n - 1) (the sample variance, denominator n - 1, as R's var, pandas and SQL's
  VAR_SAMP), clipped to [0, W² n / (4 (n - 1))], the largest sample variance of n values in bounds of width W; the
  std is its square root. With a noisy n below 2 there is nothing to divide by: the value is W²/4 (std W/2), the
  interval the whole range [0, W²/2] (std [0, W/√2]).
- the interval: each part's noise half-width at confidence (2 + c)/3, so by the union bound all three hold with
  probability >= c; over that box (n, S and Q each within its half-width; Q's rounding, at most D/2 per row, added
  when D > 1) the variance's smallest and largest values by interval arithmetic, clipped as above. It covers the
  noise and the squares' rounding, not the bias from clamping to the bounds or from dropped cells.

Values are rounded to a grid 1000 times finer than the squares' (variance) or the column's (std) grid, the interval
outwards (its low end down, its high end up), in exact integer arithmetic.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpcli.plan import CONFIDENCE, StatisticPlan
from dpcli.postprocess import MEAN_DIGITS_BELOW_PRECISION, Released


def part_confidence(confidence: float = CONFIDENCE) -> float:
    """Each of the three parts' confidence: their misses add up to at most 1 - confidence (Bonferroni)."""
    return (2 + confidence) / 3


def _box(n: int, s: int, q: int, hn: int, hs: int, hq: int, step: int, width: int) -> tuple[Fraction, Fraction]:
    """The smallest and largest sample variance (grid units p²) of any (n, S, D Q) in the box around the noisy
    values, clipped to [0, the largest sample variance in bounds of this width]."""
    n_lo, n_hi = n - hn, n + hn
    if n_lo < 2:
        return Fraction(0), Fraction(width * width, 2)
    rounding = n_hi * (step // 2)  # each row's square is within D/2 of the true one (0 when D = 1: exact)
    a_lo, a_hi = max(0, (q - hq) * step - rounding), (q + hq) * step + rounding
    s_lo, s_hi = s - hs, s + hs
    s2_min = 0 if s_lo <= 0 <= s_hi else min(s_lo * s_lo, s_hi * s_hi)
    s2_max = max(s_lo * s_lo, s_hi * s_hi)
    num_lo = a_lo - Fraction(s2_max, n_lo)
    num_hi = a_hi - Fraction(s2_min, n_hi)
    d_lo, d_hi = n_lo - 1, n_hi - 1
    low = num_lo / d_hi if num_lo >= 0 else num_lo / d_lo
    high = num_hi / d_lo if num_hi >= 0 else num_hi / d_hi
    cap = Fraction(width * width * n_lo, 4 * d_lo)
    return min(max(low, Fraction(0)), cap), min(max(high, Fraction(0)), cap)


def _value(n: int, s: int, q: int, step: int, width: int) -> Fraction:
    """The released sample variance (grid units p²) from the noisy parts; W²/4 when n < 2."""
    if n < 2:
        return Fraction(width * width, 4)
    v = (q * step - Fraction(s * s, n)) / (n - 1)
    return min(max(v, Fraction(0)), Fraction(width * width * n, 4 * (n - 1)))


def _floor(x: Fraction) -> int:
    return x.numerator // x.denominator


def _ceil(x: Fraction) -> int:
    return -(-x.numerator // x.denominator)


def _sqrt_round(x: Fraction) -> int:
    """round(sqrt(x)) for x >= 0, halves up, exactly: floor(sqrt(y)) = isqrt(floor(y)), here y = 4x."""
    return (math.isqrt(_floor(4 * x)) + 1) // 2


def _sqrt_floor(x: Fraction) -> int:
    return math.isqrt(_floor(x))


def _sqrt_ceil(x: Fraction) -> int:
    c = _ceil(x)
    return 0 if c <= 0 else math.isqrt(c - 1) + 1


def variances(
    sp: StatisticPlan,
    noisy_counts: np.ndarray,
    noisy_sums: np.ndarray,
    noisy_squares: np.ndarray,
    bounds: tuple[int, int],
    confidence: float = CONFIDENCE,
) -> Released:
    """The released variances (or stds, by the statistic's kind) and their intervals, in the output's units."""
    c_comp, s_comp, q_comp = sp.component("count"), sp.component("sum"), sp.component("squares")
    part = part_confidence(confidence)
    hn, hs, hq = c_comp.halfwidth(part), s_comp.halfwidth(part), q_comp.halfwidth(part)
    p = s_comp.unit
    step = q_comp.unit / (p * p)
    assert step.denominator == 1
    d, width = step.numerator, bounds[1] - bounds[0]
    f = 10**MEAN_DIGITS_BELOW_PRECISION
    std = sp.statistic.kind == "std"
    # released grid: std in steps of p / 1000, variance in steps of p² D / 1000 (both in grid units scaled by f)
    values, lows, highs = [], [], []
    for n, s, q in zip(noisy_counts.tolist(), noisy_sums.tolist(), noisy_squares.tolist(), strict=True):
        n, s, q = int(n), int(s), int(q)
        value = _value(n, s, q, d, width)
        low, high = _box(n, s, q, hn, hs, hq, d, width)
        if std:  # sqrt(v p²) / (p / f) = sqrt(v f²)
            g = (_sqrt_round(value * f * f), _sqrt_floor(low * f * f), _sqrt_ceil(high * f * f))
            unit = p / f
        else:  # v p² / (p² D / f) = v f / D
            g = (round(value * f / d), _floor(low * f / d), _ceil(high * f / d))
            unit = p * p * d / f
        values.append(g[0] * unit)
        lows.append(g[1] * unit)
        highs.append(g[2] * unit)
    return Released(values, lows, highs)
