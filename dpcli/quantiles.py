"""Quantiles by the exponential mechanism over a declared candidate grid (docs/spec.md, "Quantiles and the median").

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
is exp(-(best - u(c)) / t) with t = 2 * sensitivity / epsilon (the exponential mechanism's factor 2), sampled exactly
by ``dpcli.samplers.exponential_choice``. Several levels are separate draws, each with an even share of the
statistic's epsilon (sequential composition); cells of ``by:`` are disjoint (parallel composition).

Accuracy, from public quantities only: a candidate whose utility is at least x below the best has probability at
most exp(-x / t) relative to the best one, so P[u(released) < u(best) - t ln(m / alpha)] <= alpha. At 95%: the
released value's rank error |lt - q (lt + gt)| exceeds the best candidate's by at most t ln(20 m) / b rows.

numpy is imported inside the functions that need it: the plan (``dpcli plan``, ``dpcli check``) imports this module
and runs without numpy.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from dpcli.samplers import RandomSource


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
    """Per cell and level, the index of the released candidate: one exact exponential-mechanism draw each,
    weights exp(-(best - u(c)) / t); sorted within each cell (post-processing: released quantiles never cross)."""
    import numpy as np

    from dpcli.samplers import exponential_choice

    lt, _, gt = rank_counts(counts, spacing, candidates)
    out = np.zeros((lt.shape[0], len(levels)), dtype=np.int64)
    for j, (q, t) in enumerate(zip(levels, scales, strict=True)):
        for cell in range(lt.shape[0]):
            u = utilities(lt[cell], gt[cell], q)
            # weight exp(-(num/den)(best - u)) with num/den = 1/t
            out[cell, j] = exponential_choice(u, t.denominator, t.numerator, 1, source)[0]
    return np.sort(out, axis=1)


def best(counts: np.ndarray, levels: tuple[Fraction, ...], spacing: int, candidates: int) -> np.ndarray:
    """Per cell and level, the candidate of the largest utility (the first of equals): the exponential mechanism
    with no noise, for the exact-answer tests (``dpcli.mechanisms.exact_noisy``) only."""
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
# A noisy count n^ of the rows with a value (per cell) and, per level q, two more exponential-mechanism draws at the
# levels q_lo = q - E / n_lo and q_hi = q + E / n_lo, n_lo = n^ - e_n (e_n the count's halfwidth, E the draws' public
# rank bound in rows), each part at confidence 1 - 0.05/3 (Bonferroni: each level's interval covers with >= 95%).
# The levels are computed from the noisy count alone (post-processing), as exact Fractions. The draws use the rank
# distance utility on the data rounded down to the candidate grid,
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


def interval_levels(q: Fraction, noisy_n: int, n_halfwidth: int, bound: int) -> tuple[Fraction | None, Fraction | None]:
    """(q_lo, q_hi) from the noisy count (post-processing), None where the level leaves (0, 1) or n_lo <= 0: that
    end of the interval is the column's bound."""
    n_lo = noisy_n - n_halfwidth
    if n_lo <= 0:
        return None, None
    low, high = q - Fraction(bound, n_lo), q + Fraction(bound, n_lo)
    return (low if low > 0 else None), (high if high < 1 else None)


def intervals(counts: np.ndarray, levels: tuple[Fraction, ...], values: np.ndarray, noisy_n: np.ndarray,
              n_halfwidth: int, scale: Fraction, bound: int, spacing: int, candidates: int, top: int,
              source: RandomSource | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(ci_low, ci_high) as grid offsets from the lowest candidate, per cell and level (cells x levels), around the
    released ``values`` (candidate indices, cells x levels): each end one exact draw at q_lo or q_hi (above),
    widened to include the value (post-processing). ``top``: the upper bound's offset from the lowest candidate."""
    import numpy as np

    from dpcli.samplers import exponential_choice

    lt, _, _ = rank_counts(counts, spacing, candidates)
    n = np.asarray(counts, dtype=np.int64).sum(axis=1)
    low = np.zeros(values.shape, dtype=np.int64)
    high = np.full(values.shape, top, dtype=np.int64)
    for cell in range(lt.shape[0]):
        below = [int(x) for x in lt[cell]]
        through = [*below[1:], int(n[cell])]
        for j, q in enumerate(levels):
            ends = interval_levels(q, int(noisy_n[cell]), n_halfwidth, bound)
            for side, level in enumerate(ends):
                if level is None:
                    continue
                u = interval_utilities(below, through, int(n[cell]), level)
                t = scale * level.denominator  # the temperature in utility units: weights exp(-(best - u) / t)
                index = int(exponential_choice(np.asarray(u, dtype=object), t.denominator, t.numerator, 1, source)[0])
                if side == 0:
                    low[cell, j] = index * spacing
                else:
                    high[cell, j] = min(index * spacing + spacing - 1, top)
    offsets = np.asarray(values, dtype=np.int64) * spacing
    return np.minimum(low, offsets), np.maximum(high, offsets)
