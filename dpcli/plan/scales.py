"""A noise component's numbers, from public parameters only: its scale or variance rounded up (never down) onto the
exact samplers' domain, the public limits on both, and the error half-width each noise gives at a confidence.
"""

from __future__ import annotations

import math
from fractions import Fraction

from dpcli.core.accounting import round_up

# Confidence of the published intervals. A mean's interval combines its two parts at (1 + c) / 2 each, so by the
# union bound the box holds the truth with probability at least c.
CONFIDENCE = 0.95
# The exact samplers take scales whose numerator and denominator fit in 48 bits; larger are rounded *up*.
SCALE_LIMIT = 2**48
MAX_SCALE = Fraction(2**40)
MAX_VARIANCE = Fraction(2**46)  # the exact Gaussian sampler takes sigma^2 with 48-bit numerator and denominator


def laplace_halfwidth(scale: Fraction, confidence: float = CONFIDENCE) -> int:
    """For X ~ discrete Laplace(t): P(|X| > k) = 2 q^(k+1) / (1 + q), q = exp(-1/t). Smallest k reaching confidence."""
    t = float(scale)
    q = math.exp(-1.0 / t)
    alpha = 1.0 - confidence
    k = max(0, math.ceil(t * math.log(2.0 / (alpha * (1.0 + q)))) - 1)
    # guard the float step: move k until it is the smallest that satisfies the bound. q^k is computed as
    # exp(-k/t), not q ** k: at t ~ 1e12 the rounded q carries a relative error ~1e-4 in log q, and stepping k one by
    # one across that gap took ~15 s per statistic (a release or plan near the 2^40 scale limit seemed to hang)
    while k > 0 and 2 * math.exp(-k / t) / (1 + q) <= alpha:
        k -= 1
    while 2 * math.exp(-(k + 1) / t) / (1 + q) > alpha:
        k += 1
    return k


def gaussian_halfwidth(variance: Fraction, confidence: float = CONFIDENCE) -> int:
    """Smallest k with P(|X| <= k) >= confidence for X ~ discrete Gaussian(sigma^2 = variance)."""
    v = float(variance)
    sigma = math.sqrt(v)
    if sigma > 2000:  # the discrete and continuous Gaussians agree to far below a unit here
        from statistics import NormalDist

        return math.ceil(NormalDist().inv_cdf((1 + confidence) / 2) * sigma)
    reach = int(12 * sigma) + 12
    xs = range(reach + 1)
    weights = [math.exp(-(x * x) / (2 * v)) for x in xs]
    total = weights[0] + 2 * sum(weights[1:])
    mass = weights[0]
    k = 0
    while mass / total < confidence:
        k += 1
        mass += 2 * weights[k]
    return k


def conservative_variance(l2_squared: int, rho: Fraction) -> Fraction:
    """sigma^2 = l2_squared / (2 rho), rounded up (never down) to a fraction the exact sampler accepts."""
    return conservative_scale(l2_squared, 2 * rho)


def conservative_scale(sensitivity: int, epsilon: Fraction) -> Fraction:
    """sensitivity/epsilon, rounded up (never down) to a fraction the exact sampler accepts."""
    exact = Fraction(sensitivity) / epsilon
    if exact.numerator <= SCALE_LIMIT and exact.denominator <= SCALE_LIMIT:
        return exact
    # max(1, ...): a scale past SCALE_LIMIT cannot be represented at all; it is rounded up to an integer and then
    # refused by the MAX_SCALE check (a zero denominator would be an internal error instead of exit 2)
    den = max(1, SCALE_LIMIT // (math.ceil(exact) + 1))
    return round_up(exact, den)


def choice_gap(temperature: Fraction, keys: int, draws: int, confidence: float = CONFIDENCE) -> int:
    """The smallest h such that, with probability >= confidence, each of ``draws`` draws picks a key whose count is
    within h of the largest count left at that draw. A key whose count is g below that largest is picked with
    probability at most exp(-g / t) (its chance to be accepted at all), so draw j (m - j keys left) misses by more
    than h with probability at most (m - j - 1) exp(-(h + 1) / t); a union bound over the draws.
    Public: t, m, k only."""
    others = sum(keys - j - 1 for j in range(draws))
    if others <= 0:
        return 0
    # the relative nudge keeps float rounding from giving one less than the exact ceiling (never fewer: safe side)
    return max(0, math.ceil(float(temperature) * math.log(others / (1 - confidence)) * (1 + 1e-12)) - 1)
