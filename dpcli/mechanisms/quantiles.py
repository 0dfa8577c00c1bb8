"""Quantiles by permute-and-flip selection over a declared candidate grid (docs/spec.md, "Quantiles and the median").

The candidates are c_j = lo + j * spacing (grid units of the column), j < m, from the spec alone. For a level
q = a/b (lowest terms) the utility of c is the integer

    u(c) = -|(b - a) * lt(c) - a * gt(c)|,    lt(c) = #{x < c},  gt(c) = #{x > c}

over the rows with a value. It is b times |lt - q (lt + gt)|: how many rows the split at c is off the q split, rows
equal to c left out. Leaving them out (as OpenDP's quantile score does) is what makes the mechanism land *on* the
quantile when many rows share it: with u = -|b lt(c) - a n| instead, the median of ages (thousands of rows per age)
scores the true median m and m + 1 almost alike, and the released value is off by one about half the time.

Sensitivity (one row): adding or removing a row x changes lt(c) or gt(c) by 1 (or neither, x = c), so u changes by
at most max(a, b - a) (add_remove). Replacing a row takes it out of one side and puts it into the other: b. With
``by:`` under replace a row can leave one cell and join another, changing two cells' utilities by max(a, b - a)
each: the plan calibrates each cell to 2 max(a, b - a) then (it is >= b). The utility is not monotone, so each draw
is permute-and-flip with acceptance probabilities exp(-(best - u(c)) / t), t = 2 * sensitivity / epsilon (the
exponential mechanism's factor 2, which permute-and-flip shares), sampled exactly by
``dpcli.core.samplers.permute_and_flip`` with work fixed by the candidate count, not by the data. Several levels are
separate
draws, each with an even share of the statistic's epsilon (sequential composition); cells of ``by:`` are disjoint
(parallel composition).

Accuracy, from public quantities only: a candidate whose utility is at least x below the best is released with
probability at most exp(-x / t) (it must be accepted), so P[u(released) < u(best) - t ln(m / alpha)] <= alpha by
the union bound, as for the exponential mechanism. At 95%: the released value's rank error |lt - q (lt + gt)|
exceeds the best candidate's by at most t ln(20 m) / b rows.

numpy is imported inside the functions that need it: the plan (``dpcli plan``, ``dpcli check``) imports this module
and runs without numpy.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from dpcli.core.samplers import RandomSource


def level_weights(q: Fraction) -> tuple[int, int]:
    """(a, b) of q = a/b in lowest terms."""
    return q.numerator, q.denominator


def utility_sensitivity(q: Fraction, neighbours: str, has_cells: bool) -> tuple[int, str]:
    """The utility's sensitivity for level q and why."""
    a, b = level_weights(q)
    one = max(a, b - a)
    if neighbours == "add_remove":
        why = (
            f"add/remove one row moves it into lt(c) or gt(c) (or neither, x = c), so u(c) = -|{b - a}·lt(c) - "
            f"{a}·gt(c)| changes by at most max(a, b - a) = {one}"
        )
        return one, why
    if has_cells:
        why = (
            f"replace one row: it can leave one cell and join another, changing both cells' u(c) = -|{b - a}·lt(c) "
            f"- {a}·gt(c)| by max(a, b - a) = {one} each, so each cell is calibrated to 2×{one} = {2 * one} "
            f"(>= b = {b}, a row moving from lt(c) to gt(c) inside its cell)"
        )
        return 2 * one, why
    why = (
        f"replace one row: it can go from lt(c) to gt(c), so u(c) = -|{b - a}·lt(c) - {a}·gt(c)| changes by at "
        f"most (b - a) + a = b = {b}"
    )
    return b, why


def rank_bound(scale: Fraction, candidates: int, confidence: float) -> int:
    """Utility units the released candidate may fall below the best one, at ``confidence``: ceil(t ln(m / alpha)),
    rounded up (a public bound, so a float's last bits are covered by the ceiling and a margin of one)."""
    return math.ceil(float(scale) * math.log(candidates / (1.0 - confidence))) + 1


def rank_counts(counts: np.ndarray, spacing: int, candidates: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lt, eq, gt) per cell and candidate, from the engine's bins per cell (``counts``: cells x bins, int64).
    With spacing 1 bin j holds the rows equal to candidate j; otherwise bin 2j the rows equal to candidate j and bin
    2j + 1 the rows strictly between candidate j and the next (above the last one, for the last)."""
    import numpy as np

    counts = np.asarray(counts, dtype=np.int64)
    if spacing == 1:
        eq = counts
        above = np.zeros_like(counts)
    else:
        eq, above = counts[:, 0::2], counts[:, 1::2]
    assert eq.shape[1] == candidates
    through = np.cumsum(eq + above, axis=1)  # rows <= candidate j, or below candidate j + 1
    lt = np.concatenate([np.zeros((counts.shape[0], 1), dtype=np.int64), through[:, :-1]], axis=1)
    n = through[:, -1:]
    return lt, eq, n - lt - eq


def utilities(lt: np.ndarray, gt: np.ndarray, q: Fraction) -> np.ndarray:
    """u(c) = -|(b - a) lt(c) - a gt(c)|, exact: int64 when it cannot overflow, else Python ints."""
    import numpy as np

    a, b = level_weights(q)
    largest = int(max(lt.max(initial=0), gt.max(initial=0)))
    if largest * b < 2**62:
        return -np.abs((b - a) * lt - a * gt)
    return -np.abs((b - a) * lt.astype(object) - a * gt.astype(object))


def choose(counts: np.ndarray, levels: tuple[Fraction, ...], scales: tuple[Fraction, ...], spacing: int,
           candidates: int, source: RandomSource | None = None) -> np.ndarray:
    """Per cell and level, the index of the released candidate: one exact permute-and-flip draw each, candidate c
    accepted with probability exp(-(best - u(c)) / t); sorted within each cell (post-processing: released quantiles
    never cross). The gaps best - u(c) come from ``quantile_gaps`` (int64, work fixed by the candidate count)."""
    import numpy as np

    from dpcli.core.samplers import permute_and_flip

    lt, _, gt = rank_counts(counts, spacing, candidates)
    out = np.zeros((lt.shape[0], len(levels)), dtype=np.int64)
    for j, (q, t) in enumerate(zip(levels, scales, strict=True)):
        for cell in range(lt.shape[0]):
            # accepted with probability exp(-(num/den) gap), num/den = 1/t
            out[cell, j] = permute_and_flip(quantile_gaps(lt[cell], gt[cell], q), t.denominator, t.numerator, source)
    return np.sort(out, axis=1)


# ---------------------------------------------------------------------------------------------------------------
# Gaps best - u(c) as int64 saturated at GAP_CAP, exact below it, with work fixed by the candidate count.
#
# The utilities are products of counts (up to 2**63) and a level's numerator or denominator, far past int64; a switch
# to Python ints where they grow would let one row change the draw's running time. Both utilities are
# built from f(c) = A x(c) - B y(c) + C with x non-decreasing and y non-increasing in c (A, B >= 0 public, below
# 2**62; C a Python int), so f is non-decreasing: the first candidate j with f > 0 is found by a binary search of
# a fixed number of steps (Python ints, one f per step), and past it f(c) = f(j) + A (x(c) - x(j)) + B (y(j) - y(c)),
# a sum of non-negative terms that saturates exactly in int64. A gap at or above GAP_CAP is never accepted (the
# sampler's flips stay below it), so saturation changes no draw.


def _first_positive(x: np.ndarray, y: np.ndarray, a: int, b: int, c: int) -> int:
    """The first index with a x - b y + c > 0 (len(x) if none), by binary search with a fixed number of steps."""
    m = len(x)
    lo, hi = 0, m
    for _ in range(m.bit_length() + 1):
        mid = min((lo + hi) // 2, m - 1)
        positive = a * int(x[mid]) - b * int(y[mid]) + c > 0  # evaluated at every step, settled or not
        if lo < hi:
            lo, hi = (lo, mid) if positive else (mid + 1, hi)
    return lo


def _saturated_times(v: np.ndarray, a: int) -> np.ndarray:
    """min(a v, GAP_CAP) for int64 v >= 0 and 0 <= a < 2**62, without overflow."""
    import numpy as np

    from dpcli.core.samplers import GAP_CAP

    if a == 0:
        return np.zeros_like(v)
    return np.minimum(np.minimum(v, GAP_CAP // a + 1) * a, GAP_CAP)


def _positive_part(x: np.ndarray, y: np.ndarray, a: int, b: int, c: int) -> np.ndarray:
    """min(max(0, a x - b y + c), GAP_CAP) per index, exactly, for x non-decreasing and y non-increasing (int64)."""
    import numpy as np

    from dpcli.core.samplers import GAP_CAP

    if not 0 <= a < GAP_CAP or not 0 <= b < GAP_CAP:
        raise ValueError("a utility coefficient is out of the gaps' range (the plan bounds them)")
    m = len(x)
    j = _first_positive(x, y, a, b, c)
    r = min(j, m - 1)  # the reference candidate (every lane is masked out when j == m)
    base = min(max(a * int(x[r]) - b * int(y[r]) + c, 0), GAP_CAP)
    out = np.full(m, base, dtype=np.int64)
    for term in (_saturated_times(np.maximum(x - x[r], 0), a), _saturated_times(np.maximum(y[r] - y, 0), b)):
        out += np.minimum(term, GAP_CAP - out)
    return np.where(np.arange(m) >= j, out, 0)  # f <= 0 before j (whole-array, whatever j is)


def quantile_gaps(lt: np.ndarray, gt: np.ndarray, q: Fraction) -> np.ndarray:
    """best - u(c) per candidate, u(c) = -|d(c)|, d(c) = (b - a) lt(c) - a gt(c) (non-decreasing in c), as int64
    saturated at GAP_CAP: max(0, d - best', -d - best') with best' = min |d| = -best."""
    import numpy as np

    a, b = level_weights(q)
    lt, gt = np.asarray(lt, dtype=np.int64), np.asarray(gt, dtype=np.int64)
    j = _first_positive(lt, gt, b - a, a, 1)  # the first d(c) >= 0: min |d| is at j - 1 or j
    least = min(abs((b - a) * int(lt[i]) - a * int(gt[i])) for i in (max(j - 1, 0), min(j, len(lt) - 1)))
    rising = _positive_part(lt, gt, b - a, a, -least)
    falling = _positive_part(gt[::-1], lt[::-1], a, b - a, -least)[::-1]
    return np.maximum(rising, falling)


def best(counts: np.ndarray, levels: tuple[Fraction, ...], spacing: int, candidates: int) -> np.ndarray:
    """Per cell and level, the candidate of the largest utility (the first of equals): the selection
    with no noise, for the exact-answer tests (``dpcli.mechanisms.noise.exact_noisy``) only."""
    import numpy as np

    lt, _, gt = rank_counts(counts, spacing, candidates)
    out = np.zeros((lt.shape[0], len(levels)), dtype=np.int64)
    for j, q in enumerate(levels):
        for cell in range(lt.shape[0]):
            out[cell, j] = int(np.argmax(utilities(lt[cell], gt[cell], q)))
    return np.sort(out, axis=1)


# ---------------------------------------------------------------------------------------------------------------
# Value-unit intervals paid by a declared share of the statistic's budget (``interval: {share: S}``; docs/spec.md)
#
# A noisy count n^ of the rows with a value (per cell) and, per level q, two more permute-and-flip draws at the levels
# q_lo = q - E / n_lo and q_hi = q + E / n_lo (rounded outwards onto the grid 1/D, below), n_lo = n^ - e_n (e_n the
# count's halfwidth, E the draws' public rank bound in rows), each part at confidence 1 - 0.05/3 (Bonferroni: each
# level's interval covers with >= 95%). The levels are computed from the noisy count alone (post-processing), as exact
# Fractions. The draws use the rank distance utility on the data rounded down to the candidate grid,
#
#     v(c) = -max(0, a n - b through(c), b lt(c) - a n),   through(c) = #{x < next candidate after c},
#
# (0 on every candidate that is an a/b-quantile of the rounded data, so the best utility is 0), whose sensitivity is
# at most b (add_remove: max(a, b - a); replace: b; replace with by: 2 max(a, b - a) <= 2b): the draws use the
# temperature t = b * scale, scale = 2 c / eps0 rows (c = 1, or 2 under replace with by:), so their rank bound in
# rows, scale * ln(m / alpha), does not depend on the data-dependent level. Coverage: with n_lo <= n and the q_lo
# draw within E rows of rank distance, a candidate above every q-quantile has rank distance > (q - q_lo) n >= E, so
# it is not drawn: ci_low <= a q-quantile; likewise ci_high (plus spacing - 1 grid units, undoing the rounding) >= one.
# The lead's design added e_n to E in q_lo/q_hi; n_lo <= n already gives (q - q_lo) n >= E, so it is left out (narrower
# intervals, same guarantee). A level that falls outside (0, 1), or n_lo <= 0, takes the bound itself (lo or hi):
# clipping it into (0, 1) would break the argument above.

INTERVAL_CONFIDENCE = 0.95
INTERVAL_COUNT = "interval n"  # the role of the interval's noisy count in the plan
INTERVAL_PART_CONFIDENCE = 1 - (1 - INTERVAL_CONFIDENCE) / 3  # the count, the low draw, the high draw


def interval_scale_factor(neighbours: str, has_cells: bool) -> int:
    """c in the interval draws' scale 2 c / eps0 (rows): the rank-distance utility's sensitivity over b."""
    return 2 if neighbours == "replace" and has_cells else 1


def interval_utilities(lt: list[int], through: list[int], n: int, q: Fraction) -> list[int]:
    """v(c) = -max(0, a n - b through(c), b lt(c) - a n), Python ints (any a/b)."""
    a, b = level_weights(q)
    return [-max(0, a * n - b * t, b * x - a * n) for x, t in zip(lt, through, strict=True)]


# The levels q -/+ E / n_lo are computed after the spend from a noisy count, so their denominators are the data's: they
# are rounded onto the grid 1/D, D = interval_grid(scale) a power of two fixed by the plan, q_lo down and q_hi up (a
# lower q_lo and a higher q_hi only widen the interval, so coverage holds), and the draws' temperature D * scale
# stays within the sampler's domain whatever the noisy count. The plan rounds the scale (rows) up to a dyadic
# rational with a numerator below 2**INTERVAL_SCALE_BITS (relative change below 2**-23; only more noise), so D is
# 2**24 or finer for every scale below 2**24 rows.
INTERVAL_SCALE_BITS = 24
_TEMPERATURE_BITS = 48  # the sampler's limit on a temperature's numerator and denominator
_MAX_GRID_BITS = 40  # keeps D * n and a * n (n < 2**63) products of coefficients below 2**62 apart: A, B < 2**62


def interval_scale(exact: Fraction) -> Fraction:
    """The interval draws' scale (rows) rounded up (never down) to p / 2**e with p < 2**INTERVAL_SCALE_BITS (p up to
    ceil(exact) when exact itself is that large)."""
    whole = math.ceil(exact)
    e = max(0, INTERVAL_SCALE_BITS - 1 - whole.bit_length())
    return Fraction(math.ceil(exact * 2**e), 2**e)


def interval_grid(scale: Fraction) -> int:
    """D, the levels' public denominator: the largest power of two up to 2**40 with D * scale.numerator <= 2**48."""
    return 1 << min(_MAX_GRID_BITS, max(0, _TEMPERATURE_BITS - scale.numerator.bit_length()))


def interval_levels(q: Fraction, noisy_n: int, n_halfwidth: int, bound: int,
                    grid: int) -> tuple[Fraction | None, Fraction | None]:
    """(q_lo, q_hi) from the noisy count (post-processing) on the grid 1/grid, q_lo rounded down and q_hi up; None
    where the level leaves (0, 1) or n_lo <= 0: that end of the interval is the column's bound."""
    n_lo = noisy_n - n_halfwidth
    if n_lo <= 0:
        return None, None
    low = Fraction(math.floor((q - Fraction(bound, n_lo)) * grid), grid)
    high = Fraction(math.ceil((q + Fraction(bound, n_lo)) * grid), grid)
    return (low if low > 0 else None), (high if high < 1 else None)


def interval_gaps(lt: np.ndarray, through: np.ndarray, n: int, level: Fraction, grid: int) -> np.ndarray:
    """-v(c) = max(0, a n - D through(c), D lt(c) - a n) for level a/D (D = grid; v's best is 0: the first candidate
    with through(c) >= q n has lt(c) <= q n), int64 saturated at GAP_CAP with work fixed by the candidate count."""
    import numpy as np

    a = level.numerator * (grid // level.denominator)
    lt, through = np.asarray(lt, dtype=np.int64), np.asarray(through, dtype=np.int64)
    zeros = np.zeros_like(lt)
    above = _positive_part(lt, zeros, grid, 0, -a * n)  # D lt(c) - a n, non-decreasing
    below = _positive_part(zeros, through[::-1], 0, grid, a * n)[::-1]  # a n - D through(c), non-increasing
    return np.maximum(above, below)


def intervals(counts: np.ndarray, levels: tuple[Fraction, ...], values: np.ndarray, noisy_n: np.ndarray,
              n_halfwidth: int, scale: Fraction, bound: int, spacing: int, candidates: int, top: int,
              source: RandomSource | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(ci_low, ci_high) as grid offsets from the lowest candidate, per cell and level (cells x levels), around the
    released ``values`` (candidate indices, cells x levels): each end one exact permute-and-flip draw at q_lo or q_hi
    (above), widened to include the value (post-processing). ``top``: the upper bound's offset from the lowest
    candidate."""
    import numpy as np

    from dpcli.core.samplers import permute_and_flip

    lt, _, _ = rank_counts(counts, spacing, candidates)
    n = np.asarray(counts, dtype=np.int64).sum(axis=1)
    grid = interval_grid(scale)
    t = scale * grid  # the temperature in utility units (D per row): accepted with probability exp(-gap / t)
    low = np.zeros(values.shape, dtype=np.int64)
    high = np.full(values.shape, top, dtype=np.int64)
    for cell in range(lt.shape[0]):
        below = lt[cell]
        through = np.append(below[1:], n[cell])
        for j, q in enumerate(levels):
            ends = interval_levels(q, int(noisy_n[cell]), n_halfwidth, bound, grid)
            for side, level in enumerate(ends):
                if level is None:
                    continue
                gaps = interval_gaps(below, through, int(n[cell]), level, grid)
                index = permute_and_flip(gaps, t.denominator, t.numerator, source)
                if side == 0:
                    low[cell, j] = index * spacing
                else:
                    high[cell, j] = min(index * spacing + spacing - 1, top)
    offsets = np.asarray(values, dtype=np.int64) * spacing
    return np.minimum(low, offsets), np.maximum(high, offsets)
