"""A series' running totals by the square-root factorisation on an integer lattice (``method: factorization``),
from the horizon alone: the lattice matrix, its sensitivity, and the weights of every estimate.

The running totals of T periods are A x, A the lower-triangular all-ones T x T matrix. A = L L with L the
lower-triangular Toeplitz matrix whose first column holds the coefficients of (1 - x)^(-1/2), binom(2j, j) / 4^j.
L is irrational in no entry but its entries have ever longer binary expansions, and exact discrete noise needs
integers: so L is ROUNDED onto the lattice C = round(2^BITS L) (BITS = 12, fixed and public; C[0] = 2^12), still
lower-triangular Toeplitz, every entry computed exactly from binomial integers (round half up). Product t is
(C x)_t = sum_{s <= t} C[t - s] x_s, an integer for every cell; the integer discrete Gaussian is added to it and only
the noisy product y_t is stored.

Sensitivity: a row in period s changes x_s by its statistic's per-row change d (L2 norm at most Delta), so it
changes the products by column s of C times d: L2 norm |c_s| |d|. Every column of C is a shifted, truncated copy of
the first, so the largest column norm is the first's: |c_1|^2 = sum_{j < T} C[j]^2, an exact integer
(``column_norm_squared``). The noise of a product of a statistic with zCDP share rho_i is sigma^2 = |c_1|^2 Delta^2 /
(2 rho_i): each product's plan is the spec's at 1 / |c_1|^2 of the running totals' share, exactly as the tree's
block is at 1 / h.

Estimates (post-processing of the noisy products, in floating point): the running total to t is (A C^-1 y)_t =
sum_{s <= t} B[t - s] y_s, B the partial sums of C^-1's first column D (C^-1 is lower-triangular Toeplitz too); it is
unbiased (A C^-1 C x = A x), and its error sum_s B[t - s] z_s includes the rounding. A period's value is the
difference of two running totals: sum_s D[t - s] y_s. Their intervals: dpcli.postprocess.series.linear_halfwidth
of those weights and the products' sigma^2 (a rigorous tail bound of the exact noise).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from dpcli.errors import InternalError

if TYPE_CHECKING:  # numpy is imported where weights are computed: `dpcli plan` starts without it
    import numpy as np

# the lattice: C = round(2^BITS L); fixed and public. 12: at every T <= 10^4 its variance is within 0.003% of the real
# L's (docs/benchmarks.md), and a product's sigma^2 grows with 4^BITS against the exact sampler's limit (2^46): 16
# would divide the largest sum bound a given rho can serve by 16
BITS = 12


@cache
def lattice(periods: int) -> tuple[int, ...]:
    """C's first column: round(2^BITS binom(2j, j) / 4^j) for j < T, exactly (round half up), in integers."""
    if periods < 1:
        raise InternalError(f"a lattice of {periods} periods")
    out = []
    central = 1  # binom(2j, j)
    for j in range(periods):
        if j:
            central = central * 2 * (2 * j - 1) // j  # binom(2j, j) = binom(2j - 2, j - 1) 2 (2j - 1) / j, exactly
        shift = 2 * j - BITS - 1  # round(central 2^BITS / 4^j) = floor(central / 2^(2j - BITS - 1) + 1) / 2
        doubled = central >> shift if shift >= 0 else central << -shift
        out.append((doubled + 1) >> 1)
    return tuple(out)


@cache
def column_norm_squared(periods: int) -> int:
    """|C's largest column|^2 = |its first column|^2 = sum_j C[j]^2: an exact integer."""
    return sum(c * c for c in lattice(periods))


@cache
def _inverse(periods: int) -> np.ndarray:
    """D, C^-1's first column (floats): the first T coefficients of 1 / C(x), by forward substitution."""
    import numpy as np

    c = np.array(lattice(periods), dtype=np.float64)
    d = np.zeros(periods)
    d[0] = 1.0 / c[0]
    for n in range(1, periods):
        d[n] = -float(c[1 : n + 1] @ d[n - 1 :: -1]) / c[0]
    d.flags.writeable = False
    return d


def weights(periods: int, t: int) -> tuple[np.ndarray, np.ndarray]:
    """The weights on the noisy products y_1..y_t of period t's value and of the running total to t (in that order):
    D[t - s] and B[t - s] for s = 1..t."""
    import numpy as np

    if not 1 <= t <= periods:
        raise InternalError(f"period {t} of a factorisation over {periods} periods")
    d = _inverse(periods)[:t]
    return d[::-1].copy(), np.cumsum(d)[::-1].copy()


def product_weights(periods: int, t: int) -> tuple[int, ...]:
    """Product t's integer weights on the exact period values x_1..x_t: C[t - s] for s = 1..t."""
    return lattice(periods)[:t][::-1]
