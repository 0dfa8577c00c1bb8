"""A series' released numbers from its stored noisy pieces, spending nothing: the tree's efficient estimates, the sums
of per-period values, the monotone running total, and rigorous interval half-widths of linear combinations of exact
discrete noises.

The tree (Honaker 2015, "Efficient use of differentially private binary trees"). At period t the stored blocks
inside [1, t] (dpcli.plan.tree.blocks_within) are noisy sums y_b = x_b + Z_b of the period values x, every Z_b
independent with one variance. The estimate is generalised least squares over those blocks (with one variance:
ordinary least squares), computed exactly in O(blocks) passes: the blocks inside [1, t] are complete subtrees
under the cover's blocks (dpcli.plan.tree.cover), independent of each other. Bottom-up, a block's estimate from its
own subtree is e_b = v_l y_b + (1 - v_l)(e_left + e_right), v_l = 2^l / (2^(l+1) - 1) that estimate's variance
(inverse-variance weighting of the block and its children's sum). The running total to t is the sum of the cover
roots' e (their subtrees hold all the data about them). Top-down, a child's final estimate is its own e plus half
of its parent's residual (x_parent - e_left - e_right): the conditional mean given the sum, for two siblings of
equal variance. Every estimate is a fixed linear combination sum_b w_b y_b whose weights depend on t only; they are
computed first and the estimates are their products with the noisy values, so an estimate and its interval's weights
can never disagree. tests/postprocess/test_series.py checks them against a dense least-squares solve.

Intervals. The error of an estimate is sum_b w_b Z_b, a combination of independent exact discrete Laplace or
discrete Gaussian noises. Its half-width at a confidence c is the smallest of these rigorous bounds
(``linear_halfwidth``), never a normal approximation:
- a Chernoff bound: P(|S| >= k) <= 2 exp(K(lambda) - lambda k) for every lambda > 0, K the log moment-generating
  function of S (symmetric). Laplace: K is exact, sum_b log M(lambda w_b) with the discrete Laplace's MGF
  M(l) = (1 - q)^2 / ((1 - q e^l)(1 - q e^-l)), q = exp(-1/scale), minimised over lambda on a grid (any lambda gives
  a valid bound, so the search's precision costs width, never validity). Gaussian: the discrete Gaussian is
  sub-Gaussian with variance proxy sigma^2 (Canonne, Kamath & Steinke 2020), K(lambda) <= lambda^2 sigma^2 sum w^2 / 2,
  so k = sqrt(2 sigma^2 sum w^2 ln(2 / (1 - c))).
- a union bound: |S| <= sum_b |w_b| k_b when every |Z_b| <= k_b, each k_b today's exact half-width of one noise at
  confidence 1 - (1 - c) / n (dpcli.plan.scales). With ONE term this is exactly today's half-width (times |w|), so a
  one-term combination gives exactly what a release's interval gives today; with many terms the Chernoff bound wins.
  (Today's Gaussian half-width is rigorous too: the exact quantile summed for sigma <= 2000, and beyond it
  ceil(z sigma), which holds because P(X >= m) <= P(N(0, sigma^2) >= m - 1) for m >= 1: each pmf term is at most
  the density's integral over [m - 1, m], and the normaliser is at least sqrt(2 pi) sigma by Poisson summation.)
- Laplace, where one term dominates (the tree's own level-0 block at an odd t): that term exactly and the rest by
  its Chernoff bound, P(S >= k) = sum_z P(Z_1 = z) P(R >= k - |w_1| z) (``_laplace_largest_exact``).
When every weight is an integer the error is an integer, so the half-width is rounded down to one (the same event).
The Gaussian Chernoff bound is ~1.4x the normal approximation's width at 95% (2.72 sigma against 1.96 sigma): the
price of a bound that holds for the exact noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpcli.errors import InternalError
from dpcli.plan.scales import CONFIDENCE, gaussian_halfwidth, laplace_halfwidth
from dpcli.plan.tree import Block, tree_weights

# the Chernoff bound's float arithmetic is rounded UP by this relative margin (far above its rounding error)
_SAFETY = 1e-9


@dataclass(frozen=True)
class TreeEstimate:
    """The tree's GLS estimates at period t, per cell, and what their intervals need.

    Each estimate is ``sum_b weights[b] * noisy[b]`` over ``blocks``; its error is the same combination of the
    blocks' independent noises, so ``linear_halfwidth(period_weights, ...)`` is the period value's half-width."""

    t: int
    period: np.ndarray  # per cell: period t's own value
    to_date: np.ndarray  # per cell: the running total over [1, t]
    blocks: tuple[Block, ...]  # the blocks the estimates use: every block inside [1, t]
    period_weights: np.ndarray  # one weight per block of ``blocks``
    to_date_weights: np.ndarray
    period_variance: float  # the estimates' variances: block_variance * sum of squared weights
    to_date_variance: float


def estimate_tree(noisy: Mapping[Block, np.ndarray], t: int, block_variance: float) -> TreeEstimate:
    """Honaker's efficient (GLS) estimates of period t's value and of the running total to t, per cell, from the
    noisy blocks inside [1, t] (blocks of ``noisy`` ending after t are not used; every block inside must be there).
    ``block_variance``: the variance of one block's noise (dpcli.plan.tree.exact_noise_variance)."""
    blocks, period_weights, to_date_weights = tree_weights(t)
    missing = [b.key for b in blocks if b not in noisy]
    if missing:
        raise InternalError(f"the estimate at period {t} needs the blocks {', '.join(missing[:5])} (not given)")
    values = np.stack([np.asarray(noisy[b], dtype=np.float64) for b in blocks])
    return TreeEstimate(
        t=t,
        period=period_weights @ values,
        to_date=to_date_weights @ values,
        blocks=blocks,
        period_weights=period_weights,
        to_date_weights=to_date_weights,
        period_variance=block_variance * float(period_weights @ period_weights),
        to_date_variance=block_variance * float(to_date_weights @ to_date_weights),
    )


def sum_periods(noisy_periods: Sequence[np.ndarray]) -> np.ndarray:
    """The running total of per-period releases: the exact sum of their noisy integers, per cell (int64 while it
    surely fits, else Python integers). Its error is the sum of the periods' noises: weights all 1."""
    if not noisy_periods:
        raise InternalError("a running total needs at least one period")
    largest = max(int(np.abs(np.asarray(v)).max(initial=0)) for v in noisy_periods)
    if largest * len(noisy_periods) < 2**62:
        exact: np.ndarray = np.stack([np.asarray(v, dtype=np.int64) for v in noisy_periods]).sum(axis=0)
        return exact
    total = np.asarray(noisy_periods[0]).astype(object)
    for v in noisy_periods[1:]:
        total = total + np.asarray(v).astype(object)
    return total


@dataclass(frozen=True)
class MonotoneTotal:
    """A running total projected non-decreasing, with intervals that stay honest (see ``monotone_to_date``)."""

    value: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


def monotone_to_date(
    estimate: np.ndarray, halfwidth: float, floor: np.ndarray | None = None, ceiling: np.ndarray | None = None
) -> MonotoneTotal:
    """The running total of counts at period t, made non-decreasing online (post-processing): the estimate clipped to
    [floor, ceiling], ``floor`` the largest to-date value already published for a period before t and ``ceiling``
    the smallest published for a period after t (periods may be released out of order; None: no such period). Frozen
    tables stay frozen: nothing published is revised.

    The interval is the one from BEFORE the projection, [estimate - halfwidth, estimate + halfwidth], widened just
    enough to hold the published value: [min(estimate - h, value), max(estimate + h, value)]. It contains the raw
    interval, so it covers the true total at least as often (the stated confidence), and it contains the number
    it is printed beside. (A band narrowed by the projection would need simultaneous coverage over periods, which
    these per-period intervals do not claim.)"""
    raw = np.asarray(estimate, dtype=np.float64)
    value = raw
    if floor is not None and ceiling is not None and bool(np.any(np.asarray(floor) > np.asarray(ceiling))):
        raise InternalError("monotone running total: a floor above its ceiling (the published totals decrease)")
    if floor is not None:
        value = np.maximum(value, np.asarray(floor, dtype=np.float64))
    if ceiling is not None:
        value = np.minimum(value, np.asarray(ceiling, dtype=np.float64))
    lower = np.minimum(raw - halfwidth, value)
    return MonotoneTotal(value=value, lower=lower, upper=np.maximum(raw + halfwidth, value))


def _laplace_log_mgf(lam: np.ndarray, weights: np.ndarray, scale: float) -> np.ndarray:
    """K(lambda) = sum_b log M(lambda w_b) for discrete Laplace noises of one scale, at each lambda (rows), written
    with expm1 so that 1 - q and 1 - q e^(+-l) keep their digits at large scales."""
    magnitudes, counts = np.unique(np.abs(weights), return_counts=True)  # the tree's weights take few values
    x = np.outer(lam, magnitudes)
    inv = 1.0 / scale
    one_minus_q = -math.expm1(-inv)
    terms = 2 * math.log(one_minus_q) - np.log(-np.expm1(x - inv)) - np.log(-np.expm1(-x - inv))
    result: np.ndarray = terms @ counts
    return result


def _laplace_chernoff(weights: np.ndarray, scale: float, alpha: float) -> float:
    """min over lambda of (K(lambda) + ln(2 / alpha)) / lambda, lambda < 1 / (scale max |w|) where M is finite."""
    limit = 1.0 / (scale * float(np.abs(weights).max()))
    tail = math.log(2.0 / alpha)
    # a coarse grid of lambda over (0, limit), then a fine one around its best point: any lambda is a valid bound
    grid = _laplace_lambdas(limit)
    for _ in range(2):
        k = (_laplace_log_mgf(grid, weights, scale) + tail) / grid
        best = int(np.argmin(k))
        lo = grid[max(best - 1, 0)]
        hi = grid[min(best + 1, len(grid) - 1)]
        grid = np.linspace(lo, hi, 101)
    k = (_laplace_log_mgf(grid, weights, scale) + tail) / grid
    return float(k.min())


def _laplace_lambdas(limit: float) -> np.ndarray:
    """A grid of lambda over (0, limit), dense near both ends (where the best lambda lies for few / many terms)."""
    near = limit * (1 - np.geomspace(1.0, 1e-9, 200))[1:]
    return np.sort(np.concatenate([limit * np.geomspace(1e-6, 0.5, 100), near]))


def _laplace_survival(a: np.ndarray, q: float) -> np.ndarray:
    """P(Z >= a) for the discrete Laplace, P(z) = (1 - q) / (1 + q) q^|z|: q^a / (1 + q) for a >= 1, else
    1 - q^(1 - a) / (1 + q)."""
    a = np.asarray(a, dtype=np.float64)
    upper = np.exp(np.log(q) * np.maximum(a, 1.0)) / (1 + q)
    lower = 1 - np.exp(np.log(q) * np.maximum(1.0 - a, 1.0)) / (1 + q)
    result: np.ndarray = np.where(a >= 1, upper, lower)
    return result


def _laplace_largest_exact(weights: np.ndarray, scale: float, alpha: float, upper: float) -> float:
    """A tighter bound where one term dominates (the tree's level-0 block at odd t): the largest term w_1 Z_1 taken
    exactly, the rest R by its Chernoff bound, P(S >= k) = sum_z P(Z_1 = z) P(R >= k - |w_1| z) with
    P(R >= u) <= min(1, min over lambda of exp(K_R(lambda) - lambda u)). The z are grouped in at most ~2000 buckets,
    each bounded by its largest z (P(R >= k - |w_1| z) grows with z), the mass beyond +-reach counted as 1; the
    smallest k with 2 P(S >= k) <= alpha by bisection below ``upper`` (a valid half-width already)."""
    lead_at = int(np.argmax(np.abs(weights)))
    lead = float(abs(weights[lead_at]))
    rest = np.delete(weights, lead_at)
    lam = _laplace_lambdas(1.0 / (scale * float(np.abs(rest).max())))
    log_mgf = _laplace_log_mgf(lam, rest, scale)
    q = math.exp(-1.0 / scale)
    reach = math.ceil(scale * math.log(1e6 / alpha)) + 1  # P(Z > reach) < alpha / 1e6
    width = max(1, math.ceil(2 * reach / 2000))
    starts = np.arange(-reach, reach + 1, width)
    tops = np.minimum(starts + width - 1, reach)
    masses = _laplace_survival(starts, q) - _laplace_survival(tops + 1, q)
    beyond = float(_laplace_survival(np.array([reach + 1]), q)[0])
    below = 1.0 - float(_laplace_survival(np.array([-reach]), q)[0])

    def tail(k: float, z: np.ndarray) -> np.ndarray:
        u = k - lead * z
        bound = np.exp(np.minimum(0.0, (log_mgf[:, None] - lam[:, None] * u[None, :]).min(axis=0)))
        result: np.ndarray = np.where(u > 0, bound, 1.0)
        return result

    def excess(k: float) -> float:  # 2 P(S >= k), rounded up
        inside = float(masses @ tail(k, tops.astype(np.float64)))
        outside = beyond + below * float(tail(k, np.array([-reach - 1.0]))[0])
        return 2 * (inside + outside) * (1 + _SAFETY) + 1e-12

    if excess(upper) > alpha:
        return upper
    lo, hi = 0.0, upper
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if excess(mid) <= alpha else (mid, hi)
    return hi


def linear_halfwidth(
    weights: np.ndarray | Sequence[float], mechanism: str, parameter: Fraction, confidence: float = CONFIDENCE
) -> float:
    """A half-width k with P(|sum_b w_b Z_b| <= k) >= confidence, the
    Z_b independent exact discrete noises of one plan component: ``parameter`` its Laplace scale or its Gaussian
    sigma^2. The smaller of a Chernoff and a union bound (module docstring); one term: exactly today's half-width
    (dpcli.plan.scales) times |w|."""
    w = np.asarray(weights, dtype=np.float64)
    w = w[w != 0]
    if not 0 < confidence < 1:
        raise InternalError(f"a confidence must be in (0, 1), not {confidence}")
    if w.size == 0:
        return 0.0
    alpha = 1.0 - confidence
    part = 1.0 - alpha / w.size
    if mechanism == "discrete_gaussian":
        union = float(np.abs(w).sum()) * gaussian_halfwidth(parameter, part)
        chernoff = math.sqrt(2 * float(parameter) * float(w @ w) * math.log(2 / alpha))
    elif mechanism == "discrete_laplace":
        union = float(np.abs(w).sum()) * laplace_halfwidth(parameter, part)
        chernoff = _laplace_chernoff(w, float(parameter), alpha) if w.size > 1 else math.inf
    else:
        raise InternalError(f"no interval for a combination of {mechanism} noises")
    bound = min(union, chernoff * (1 + _SAFETY) + _SAFETY)
    if mechanism == "discrete_laplace" and w.size > 1:
        bound = _laplace_largest_exact(w, float(parameter), alpha, bound)
    if bool(np.all(w == np.round(w))):
        return float(math.floor(bound))  # an integer error: |S| < k and |S| <= floor(k) are the same event
    return bound
