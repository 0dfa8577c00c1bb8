"""A quantile's draws (docs/spec.md, "Quantiles and the median"): per cell and level, one exact permute-and-flip draw
over the candidate grid, and the value-unit intervals' two draws per level. The utility, its sensitivity, the
rank-error bound and the interval levels are the plan's (dpcli.plan.quantiles, where their derivation is).

From the engine's bins per cell the rank counts lt(c), eq(c), gt(c) per candidate are exact integers; each draw
accepts candidate c with probability exp(-(best - u(c)) / t) at the plan's temperature t, sampled exactly by
``dpcli.core.samplers.permute_and_flip`` with work fixed by the candidate count, not by the data. The draws are
sorted within each cell (post-processing: released quantiles never cross).
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from dpcli.errors import InternalError
from dpcli.plan.quantiles import interval_grid, interval_levels, level_weights

if TYPE_CHECKING:
    import numpy as np

    from dpcli.core.samplers import RandomSource


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
    if eq.shape[1] != candidates:
        raise InternalError(f"quantile bins for {eq.shape[1]} candidates, the plan has {candidates}")
    through = np.cumsum(eq + above, axis=1)  # rows <= candidate j, or below candidate j + 1
    lt = np.concatenate([np.zeros((counts.shape[0], 1), dtype=np.int64), through[:, :-1]], axis=1)
    n = through[:, -1:]
    return lt, eq, n - lt - eq


def utilities(lt: np.ndarray, gt: np.ndarray, q: Fraction) -> np.ndarray:
    """u(c) = -|(b - a) lt(c) - a gt(c)|, exact: int64 when it cannot overflow, else Python ints."""
    import numpy as np

    a, b = level_weights(q)
    largest = int(max(lt.max(initial=0), gt.max(initial=0)))
    # numpy's ufuncs are typed as returning Any: the annotations say what they return here
    if largest * b < 2**62:
        exact: np.ndarray = -np.abs((b - a) * lt - a * gt)
        return exact
    wide: np.ndarray = -np.abs((b - a) * lt.astype(object) - a * gt.astype(object))
    return wide


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
    saturated: np.ndarray = np.minimum(np.minimum(v, GAP_CAP // a + 1) * a, GAP_CAP)
    return saturated


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
    gaps: np.ndarray = np.maximum(rising, falling)
    return gaps


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


def interval_utilities(lt: list[int], through: list[int], n: int, q: Fraction) -> list[int]:
    """v(c) = -max(0, a n - b through(c), b lt(c) - a n), Python ints (any a/b)."""
    a, b = level_weights(q)
    return [-max(0, a * n - b * t, b * x - a * n) for x, t in zip(lt, through, strict=True)]


def interval_gaps(lt: np.ndarray, through: np.ndarray, n: int, level: Fraction, grid: int) -> np.ndarray:
    """-v(c) = max(0, a n - D through(c), D lt(c) - a n) for level a/D (D = grid; v's best is 0: the first candidate
    with through(c) >= q n has lt(c) <= q n), int64 saturated at GAP_CAP with work fixed by the candidate count."""
    import numpy as np

    a = level.numerator * (grid // level.denominator)
    lt, through = np.asarray(lt, dtype=np.int64), np.asarray(through, dtype=np.int64)
    zeros = np.zeros_like(lt)
    above = _positive_part(lt, zeros, grid, 0, -a * n)  # D lt(c) - a n, non-decreasing
    below = _positive_part(zeros, through[::-1], 0, grid, a * n)[::-1]  # a n - D through(c), non-increasing
    gaps: np.ndarray = np.maximum(above, below)
    return gaps


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
