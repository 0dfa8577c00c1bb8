"""A series' binary tree of dyadic blocks of periods, and the analytic variances of each design's estimates.

A block (level j, index i) covers the periods [i 2^j + 1, (i + 1) 2^j] (1-based, inclusive); over a horizon of T
periods only the blocks ending at or before T exist. There are h = ceil(log2(T + 1)) levels (0 .. h - 1), and a
period lies in exactly one block per level, so a record changes at most h blocks: each block gets epsilon / h
(Laplace) or rho / h (Gaussian) of the running totals' budget.

The variances here are in units of ONE noise's variance (a period's for the per-period design, a block's for
the tree), so the plan multiplies them by the variance of the noise it draws (``exact_noise_variance``). They are
exact for the estimators of dpcli/postprocess/series.py (same recursions, no data), used by the plan and bench/.
The weights of Honaker's estimator on the blocks (``tree_weights``) are here too, so that the plan can state an
estimate's interval (dpcli.postprocess.series.linear_halfwidth) without data; series.py estimates with them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from typing import TYPE_CHECKING

from dpcli.errors import InternalError

if TYPE_CHECKING:  # numpy is imported where weights are computed: `dpcli plan` starts without it
    import numpy as np


def levels(periods: int) -> int:
    """h = ceil(log2(T + 1)): the number of levels of blocks over a horizon of T periods (one per bit of T)."""
    _check_period(periods, "periods")
    return periods.bit_length()  # ceil(log2(T + 1)) == bit length of T, exactly, with no float


@dataclass(frozen=True, order=True)
class Block:
    """The dyadic block of periods [index 2^level + 1, (index + 1) 2^level]."""

    level: int
    index: int

    def __post_init__(self) -> None:
        if self.level < 0 or self.index < 0:
            raise InternalError(f"block ({self.level}, {self.index}): level and index must be >= 0")

    @property
    def first(self) -> int:
        """The block's first period (1-based)."""
        return (self.index << self.level) + 1

    @property
    def last(self) -> int:
        """The block's last period (1-based, inclusive)."""
        return (self.index + 1) << self.level

    @property
    def size(self) -> int:
        """How many periods the block covers."""
        return 1 << self.level

    @property
    def key(self) -> str:
        """The block's name in ledger records and store keys: ``b<level>.<index>``."""
        return f"b{self.level}.{self.index}"

    def children(self) -> tuple[Block, Block]:
        """The two blocks of the level below that make this one (a level-0 block has none: an error)."""
        if self.level == 0:
            raise InternalError(f"block {self.key} is a single period: it has no children")
        return Block(self.level - 1, 2 * self.index), Block(self.level - 1, 2 * self.index + 1)


def _check_period(t: int, name: str) -> None:
    if isinstance(t, bool) or not isinstance(t, int) or t < 1:
        raise InternalError(f"{name} must be an integer >= 1, not {t!r}")


def tree_blocks(periods: int) -> list[Block]:
    """Every block of a horizon of T periods, level by level (2T - popcount(T) blocks)."""
    return blocks_within(periods)


def ending_at(t: int) -> list[Block]:
    """The blocks whose last period is t (one per power of two dividing t), lowest level first: the blocks that
    become complete, and may be drawn, once period t has ended."""
    _check_period(t, "period")
    out = []
    level = 0
    while t % (1 << level) == 0:
        out.append(Block(level, (t >> level) - 1))
        level += 1
    return out


def cover(t: int) -> list[Block]:
    """The maximal blocks partitioning [1, t], one per set bit of t, earliest (largest) first."""
    _check_period(t, "period")
    out = []
    done = 0
    for level in range(t.bit_length() - 1, -1, -1):
        if t >> level & 1:
            out.append(Block(level, done >> level))
            done += 1 << level
    return out


def blocks_within(t: int) -> list[Block]:
    """Every complete block inside [1, t], level by level (lowest first), each level in period order."""
    _check_period(t, "period")
    return [Block(level, i) for level in range(t.bit_length()) for i in range(t >> level)]


@dataclass(frozen=True)
class Variances:
    """The variance of a design's two estimates at a period t, in units of one noise's variance."""

    period: float  # the period's own value
    to_date: float  # the running total over [1, t]


def summed_variances(t: int) -> Variances:
    """Per-period releases: a period's value is its own noisy value; the running total is the sum of t of them.
    Units: one period's noise variance."""
    _check_period(t, "period")
    return Variances(period=1.0, to_date=float(t))


def cover_variances(t: int) -> Variances:
    """The tree without consistency: the running total is the sum of the cover's blocks (popcount(t) of them), the
    period's value its level-0 block. Units: one block's noise variance."""
    return Variances(period=1.0, to_date=float(len(cover(t))))


@cache
def subtree_variance(height: int) -> float:
    """Variance of the GLS estimate of a complete subtree's root from that subtree's blocks alone (all of one
    variance 1): v_0 = 1, v_l = 1 / (1 + 1 / (2 v_(l-1))), i.e. 2^l / (2^(l+1) - 1), falling to 1/2."""
    return (1 << height) / ((1 << (height + 1)) - 1)


@cache
def leaf_variance(height: int) -> float:
    """Variance of the GLS estimate of a period at the bottom of a complete subtree of this height whose root is
    estimated from the subtree alone: going down, V_child = v_child / 2 + V_parent / 4 (two equal siblings)."""
    var = subtree_variance(height)
    for level in range(height - 1, -1, -1):
        var = subtree_variance(level) / 2 + var / 4
    return var


def honaker_variances(t: int) -> Variances:
    """The tree with Honaker's efficient estimator (GLS over every block inside [1, t]): the blocks inside [1, t]
    are the complete subtrees under the cover's blocks, independent of each other, so the running total's variance
    is the sum of the cover roots' and the period's value is estimated within the subtree holding t.
    Units: one block's noise variance."""
    roots = cover(t)
    own = roots[-1]  # t is the last period of the last (smallest) cover block
    return Variances(period=leaf_variance(own.level), to_date=sum(subtree_variance(b.level) for b in roots))


def _down(starts: list[np.ndarray], t: int) -> list[np.ndarray]:
    """Weights on the blocks y_b of sum_b starts[b] e_b (e: the bottom-up estimates; starts indexed [level][index]
    like blocks_within(t)): e_b = v_l y_b + (1 - v_l)(e_left + e_right) pushes a block's coefficient to its
    children times (1 - v_l); a block's own weight is v_l times its coefficient."""
    import numpy as np

    top = t.bit_length() - 1
    coefficient = starts[top].copy()
    weights = [np.zeros(0)] * (top + 1)
    for level in range(top, -1, -1):
        v = subtree_variance(level)
        weights[level] = v * coefficient
        if level:
            below = starts[level - 1].copy()
            below[: 2 * len(coefficient)] += (1 - v) * np.repeat(coefficient, 2)
            coefficient = below
    return weights


def tree_weights(t: int) -> tuple[tuple[Block, ...], np.ndarray, np.ndarray]:
    """The blocks inside [1, t] and the GLS weights (Honaker's estimator, dpcli/postprocess/series.py) of period t's
    value and of the running total to t on them: each estimate is sum_b w_b y_b, its error sum_b w_b Z_b."""
    import numpy as np

    blocks = tuple(blocks_within(t))
    top = t.bit_length() - 1
    sizes = [t >> level for level in range(top + 1)]
    total = [np.zeros(n) for n in sizes]
    for root in cover(t):
        total[root.level][root.index] = 1.0
    # the period: climb from t's level-0 block to the cover block holding it (the last, smallest one); each step
    # x_c = e_c / 2 - e_sibling / 2 + x_parent / 2 (half of the parent's residual), and the root's x is its e
    own = [np.zeros(n) for n in sizes]
    root_level = cover(t)[-1].level
    index, factor = t - 1, 1.0
    for level in range(root_level):
        own[level][index] += factor / 2
        own[level][index ^ 1] -= factor / 2
        index, factor = index >> 1, factor / 2
    own[root_level][index] += factor
    return blocks, np.concatenate(_down(own, t)), np.concatenate(_down(total, t))


def laplace_variance(scale: Fraction) -> float:
    """The exact variance of the discrete Laplace with scale s: 2q / (1 - q)^2, q = exp(-1/s); below 2 s^2."""
    x = 1.0 / float(scale)
    # 2q / (1 - q)^2 == 1 / (2 sinh^2(x / 2)), without the cancellation of 1 - q at large scales
    return 1.0 / (2.0 * math.sinh(x / 2.0) ** 2)


def gaussian_variance(variance: Fraction) -> float:
    """The exact variance of the discrete Gaussian with parameter sigma^2 (below sigma^2; CKS 2020, Cor. 9): summed
    over its support for small sigma; beyond sigma = 100 it differs from sigma^2 by far less than a float's ulp."""
    v = float(variance)
    if v > 10_000:
        return v
    reach = int(40 * math.sqrt(v)) + 40
    weights = [math.exp(-(x * x) / (2 * v)) for x in range(reach + 1)]
    total = weights[0] + 2 * math.fsum(weights[1:])
    return 2 * math.fsum(x * x * w for x, w in enumerate(weights)) / total


def exact_noise_variance(mechanism: str, parameter: Fraction) -> float:
    """The exact variance of one noise of a plan component: ``parameter`` is its Laplace scale or its Gaussian
    sigma^2 (``NoiseComponent.required_scale`` / ``required_variance``)."""
    if mechanism == "discrete_gaussian":
        return gaussian_variance(parameter)
    if mechanism == "discrete_laplace":
        return laplace_variance(parameter)
    raise InternalError(f"no series variance for the {mechanism} mechanism")


def variances_at(design: str, t: int, mechanism: str, parameter: Fraction) -> Variances:
    """The variances (grid units) of period t's value and of the running total to t, for a design's estimates:
    ``per_period`` (the per-period releases, their sum) or ``running_totals`` (the tree with Honaker's estimator),
    given the noise of ONE piece (a period's, or a block's at epsilon / h or rho / h): ``parameter`` its Laplace scale
    or Gaussian sigma^2."""
    if design == "per_period":
        units = summed_variances(t)
    elif design == "running_totals":
        units = honaker_variances(t)
    else:
        raise InternalError(f"no variances for the series design {design!r}")
    one = exact_noise_variance(mechanism, parameter)
    return Variances(period=one * units.period, to_date=one * units.to_date)
