"""Post-processing of a variance or std: released numbers and their 95% interval from three noisy integers per cell.

Reads only noisy values and the plan (as dpcli.postprocess.values does), so all of it is post-processing:

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

from dpcli.errors import InternalError
from dpcli.plan.model import StatisticPlan
from dpcli.plan.scales import CONFIDENCE
from dpcli.postprocess.values import MEAN_DIGITS_BELOW_PRECISION
from dpcli.specs.model import Std


def part_confidence(confidence: float = CONFIDENCE) -> float:
    """Each of the three parts' confidence: their misses add up to at most 1 - confidence (Bonferroni)."""
    return (2 + confidence) / 3


Ratio = tuple[int, int]  # (numerator, denominator > 0): exact, in plain ints (Fractions made 10^6 cells take 28 s)


def _clip(x: Ratio, cap: Ratio) -> Ratio:
    """x clipped to [0, cap] (cap >= 0)."""
    num, den = x
    if num <= 0:
        return 0, 1
    if num * cap[1] > cap[0] * den:
        return cap
    return x


def _box(n: int, s: int, q: int, hn: int, hs: int, hq: int, step: int, width: int) -> tuple[Ratio, Ratio]:
    """The smallest and largest sample variance (grid units p²) of any (n, S, D Q) in the box around the noisy
    values, clipped to [0, the largest sample variance in bounds of this width]."""
    n_lo, n_hi = n - hn, n + hn
    if n_lo < 2:
        return (0, 1), (width * width, 2)
    rounding = n_hi * (step // 2)  # each row's square is within D/2 of the true one (0 when D = 1: exact)
    a_lo, a_hi = max(0, (q - hq) * step - rounding), (q + hq) * step + rounding
    s_lo, s_hi = s - hs, s + hs
    s2_min = 0 if s_lo <= 0 <= s_hi else min(s_lo * s_lo, s_hi * s_hi)
    s2_max = max(s_lo * s_lo, s_hi * s_hi)
    d_lo, d_hi = n_lo - 1, n_hi - 1
    # (A - S²/n) / (n - 1): the numerator's lower end over the larger divisor when it is >= 0, else the smaller
    num_lo = a_lo * n_lo - s2_max
    num_hi = a_hi * n_hi - s2_min
    low = (num_lo, n_lo * (d_hi if num_lo >= 0 else d_lo))
    high = (num_hi, n_hi * (d_lo if num_hi >= 0 else d_hi))
    cap = (width * width * n_lo, 4 * d_lo)
    return _clip(low, cap), _clip(high, cap)


def _value(n: int, s: int, q: int, step: int, width: int) -> Ratio:
    """The released sample variance (grid units p²) from the noisy parts; W²/4 when n < 2."""
    if n < 2:
        return width * width, 4
    return _clip((q * step * n - s * s, n * (n - 1)), (width * width * n, 4 * (n - 1)))


def _round(num: int, den: int) -> int:
    """round(num / den), ties to even (Python's round of a Fraction), den > 0."""
    whole, rest = divmod(num, den)
    return whole + (2 * rest > den or (2 * rest == den and whole % 2 == 1))


def _sqrt_round(x: Ratio) -> int:
    """round(sqrt(x)) for x >= 0, halves up, exactly: floor(2 sqrt(x)) = isqrt(floor(4x))."""
    return (math.isqrt(4 * x[0] // x[1]) + 1) // 2


def _sqrt_floor(x: Ratio) -> int:
    return math.isqrt(x[0] // x[1])


def _sqrt_ceil(x: Ratio) -> int:
    c = -(-x[0] // x[1])
    return 0 if c <= 0 else math.isqrt(c - 1) + 1


def variance_grids(
    sp: StatisticPlan,
    noisy_counts: np.ndarray,
    noisy_sums: np.ndarray,
    noisy_squares: np.ndarray,
    bounds: tuple[int, int],
    confidence: float = CONFIDENCE,
) -> tuple[list[int], list[int], list[int], Fraction]:
    """(value, ci_low, ci_high in steps of the released grid, that grid's step in the output's units): the
    variances (or stds, by the statistic's kind) and their intervals."""
    c_comp, s_comp, q_comp = sp.component("count"), sp.component("sum"), sp.component("squares")
    part = part_confidence(confidence)
    hn, hs, hq = c_comp.halfwidth(part), s_comp.halfwidth(part), q_comp.halfwidth(part)
    p = s_comp.unit
    step = q_comp.unit / (p * p)
    if step.denominator != 1:  # the plan's squares unit is p² D, D an integer (dpcli.plan.squares)
        raise InternalError(f"statistic {sp.statistic.name!r}: the squares' unit is not an integer multiple of p²")
    d, width = step.numerator, bounds[1] - bounds[0]
    f = 10**MEAN_DIGITS_BELOW_PRECISION
    values, lows, highs = [], [], []
    if isinstance(sp.statistic, Std):  # sqrt(v p²) / (p / f) = sqrt(v f²)
        for n, s, q in zip(noisy_counts.tolist(), noisy_sums.tolist(), noisy_squares.tolist(), strict=True):
            v = _value(int(n), int(s), int(q), d, width)
            low, high = _box(int(n), int(s), int(q), hn, hs, hq, d, width)
            values.append(_sqrt_round((v[0] * f * f, v[1])))
            lows.append(_sqrt_floor((low[0] * f * f, low[1])))
            highs.append(_sqrt_ceil((high[0] * f * f, high[1])))
        return values, lows, highs, p / f
    for n, s, q in zip(noisy_counts.tolist(), noisy_sums.tolist(), noisy_squares.tolist(), strict=True):
        v = _value(int(n), int(s), int(q), d, width)  # v p² / (p² D / f) = v f / D
        low, high = _box(int(n), int(s), int(q), hn, hs, hq, d, width)
        values.append(_round(v[0] * f, v[1] * d))
        lows.append(low[0] * f // (low[1] * d))
        highs.append(-(-high[0] * f // (high[1] * d)))
    return values, lows, highs, p * p * d / f
