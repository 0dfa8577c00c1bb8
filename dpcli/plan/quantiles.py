"""Quantiles by permute-and-flip selection over a declared candidate grid (docs/spec.md, "Quantiles and the median"):
what the plan needs of them, from the spec alone. The draws themselves are dpcli.mechanisms.quantiles.

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
exponential mechanism's factor 2, which permute-and-flip shares). Several levels are separate draws, each with an
even share of the statistic's epsilon (sequential composition); cells of ``by:`` are disjoint (parallel
composition).

Accuracy, from public quantities only: a candidate whose utility is at least x below the best is released with
probability at most exp(-x / t) (it must be accepted), so P[u(released) < u(best) - t ln(m / alpha)] <= alpha by
the union bound, as for the exponential mechanism. At 95%: the released value's rank error |lt - q (lt + gt)|
exceeds the best candidate's by at most t ln(20 m) / b rows.
"""

from __future__ import annotations

import math
from fractions import Fraction


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


def person_utility_sensitivity(
    q: Fraction, neighbours: str, has_cells: bool, rows: int, bounds: str
) -> tuple[int, str]:
    """The utility's sensitivity for level q under a person unit, one person holding at most ``rows`` = n rows of
    the statistic (n = K without cells, min(K, g r) with them; ``bounds``: "K=.., G=.., R=.." for the text).

    n_j rows of the person in cell j change that cell's lt(c) and gt(c) by x and y, x + y <= n_j, so its u(c) by at
    most |(b - a) x - a y| <= max(a, b - a) n_j (add/remove). Every cell's draw is calibrated to D = n max(a, b - a)
    (n = sum of the n_j at most): cell j's draw is then (eps0 n_j / n)-DP (permute-and-flip at temperature 2D/eps0
    with a utility that moves by D n_j / n), and the cells' draws together eps0-DP. Replace without cells: n_j = K
    rows leave (x, y) and K arrive (x', y'): |(b - a)(x' - x) - a (y' - y)| <= (b - a) K + a K = b K. Replace with
    cells: cell j loses n_j rows and gains n'_j, moving u by at most max(a, b - a)(n_j + n'_j), at most 2n max(a, b - a)
    over the cells: D = 2n max(a, b - a) (>= b n, the change inside one cell)."""
    a, b = level_weights(q)
    one = max(a, b - a)
    u = f"u(c) = -|{b - a}·lt(c) - {a}·gt(c)|"
    if neighbours == "add_remove":
        if not has_cells:
            why = (
                f"add/remove one person ({bounds}): their at most K={rows} rows each move into lt(c) or gt(c) (or "
                f"neither), so {u} changes by at most K·max(a, b - a) = {rows}×{one} = {rows * one}"
            )
            return rows * one, why
        why = (
            f"add/remove one person ({bounds}): their n_j rows in cell j move that cell's {u} by at most "
            f"n_j·max(a, b - a), the n_j adding up to at most n = min(K, g·r) = {rows}; each cell is calibrated to "
            f"n·max(a, b - a) = {rows}×{one} = {rows * one}, so the person's cells' draws together spend one draw's ε"
        )
        return rows * one, why
    if not has_cells:
        why = (
            f"replace one person ({bounds}): at most K={rows} rows leave lt(c) or gt(c) and K arrive in the other, "
            f"so {u} changes by at most (b - a)·K + a·K = b·K = {b}×{rows} = {b * rows}"
        )
        return b * rows, why
    why = (
        f"replace one person ({bounds}): cell j loses the leaving person's n_j rows and gains the arriving one's "
        f"n'_j, moving its {u} by at most max(a, b - a)·(n_j + n'_j), at most 2n·max(a, b - a) over the cells "
        f"(n = min(K, g·r) = {rows}); each cell is calibrated to 2×{rows}×{one} = {2 * rows * one} (>= b·n = "
        f"{b * rows}, the change inside one cell), so the cells' draws together spend one draw's ε"
    )
    return 2 * rows * one, why


def rank_bound(scale: Fraction, candidates: int, confidence: float) -> int:
    """Utility units the released candidate may fall below the best one, at ``confidence``: ceil(t ln(m / alpha)),
    rounded up (a public bound, so a float's last bits are covered by the ceiling and a margin of one)."""
    return math.ceil(float(scale) * math.log(candidates / (1.0 - confidence))) + 1


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


def interval_scale_factor(neighbours: str, has_cells: bool, rows: int = 1) -> int:
    """c in the interval draws' scale 2 c / eps0 (rows): the rank-distance utility's sensitivity over b, summed over
    the cells one neighbour changes. One row: 1, or 2 under replace with by:. A person unit's n = ``rows`` rows (K
    without cells, min(K, g r) with them) move a cell's v(c) by at most b n_j (n_j of them there; a n - b through(c)
    and b lt(c) - a n each move by at most max(a, b - a) n_j), n at most over the cells: n, or 2n under replace
    with by: (the leaving and the arriving person's rows), and n = K under replace without cells (b K at most, as a
    level's utility)."""
    return (2 if neighbours == "replace" and has_cells else 1) * rows


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
