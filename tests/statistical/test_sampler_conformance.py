"""Chi-squared conformance of the exact samplers in dpcli.core.samplers, 10**7 draws per parameter.

Rules:
* No seeds and no retries: each test draws once from the real CSPRNG and decides.
* Expected probabilities come from the exact PMF (closed forms for the Laplace and geometric laws; for the
  discrete Gaussian, the kernel exp(-x**2 / (2 sigma**2)) summed in float64 over |x| <= 12 sigma + 50, beyond
  which the mass is below exp(-72) of the total, far below float64 resolution).
* Bins: single integers where the scale is small, else equal widths; the two outer bins absorb the exact tail
  mass and are merged inwards until every bin expects at least 20 draws.
* Threshold: scipy.stats.chi2.isf(ALPHA, df) with ALPHA = 1e-8 per check. This file and tests/core/test_samplers.py
  together hold fewer than 50 statistical checks, so a correct sampler fails the suite by chance with
  probability below 50 * 1e-8 = 5e-7 < 1e-6.
* Power: the *_has_power tests feed the same harness a deliberately wrong distribution and require a rejection,
  so a passing test here is evidence, not an artefact of a harness that cannot fail.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpcli.core.samplers import RandomSource, bernoulli_exp, discrete_gaussian, discrete_laplace, geometric_exp

# 10**7 draws per check: a statistical suite, run by `make test-slow` (and .ci/run), not `make test`
pytestmark = pytest.mark.slow

N = 10_000_000
ALPHA = 1e-8
MIN_EXPECTED = 20


# ----------------------------------------------------------------------------------------------
# harness
# ----------------------------------------------------------------------------------------------


def chi2_fit(samples: np.ndarray, edges, mass) -> tuple[float, float, int]:
    """(statistic, threshold, df). Bins: (-inf, e0), [e0, e1), ..., [e_last, inf).

    ``mass(lo, hi)`` returns the exact P(lo <= X <= hi) (lo may be -inf, hi may be +inf). The
    distributions tested are unimodal, so merging the outer bins inwards until both the outer bin and its
    neighbour expect MIN_EXPECTED draws leaves every bin with at least that many.
    """
    n = samples.size
    edges = [int(e) for e in edges]
    bounds = [-math.inf, *edges, math.inf]
    probs = [mass(bounds[i], bounds[i + 1] - 1) for i in range(len(bounds) - 1)]
    while len(probs) > 2 and min(probs[0], probs[1]) * n < MIN_EXPECTED:
        edges.pop(0)
        first = probs.pop(0)
        probs[0] += first
    while len(probs) > 2 and min(probs[-1], probs[-2]) * n < MIN_EXPECTED:
        edges.pop()
        last = probs.pop()
        probs[-1] += last
    probs = np.array(probs)
    assert abs(probs.sum() - 1) < 1e-9, probs.sum()
    expected = probs * n
    assert expected.min() >= MIN_EXPECTED
    counts = np.bincount(np.searchsorted(np.array(edges, dtype=np.int64), samples, side="right"), minlength=len(probs))
    stat = float(((counts - expected) ** 2 / expected).sum())
    df = len(probs) - 1
    return stat, float(stats.chi2.isf(ALPHA, df)), df


def centred_edges(width: int, reach: int) -> np.ndarray:
    """Bin edges for a law symmetric about 0: bins of ``width`` integers centred on multiples of width."""
    j = reach // width + 2
    return np.arange(-j, j + 2) * width - width // 2


def laplace_mass(scale: Fraction):
    lam = float(1 / scale)
    q = math.exp(-lam)

    def positive(a, b):  # P(a <= X <= b) for 1 <= a
        if a > b:
            return 0.0
        tail = 1.0 if b == math.inf else -math.expm1(-lam * (b + 1 - a))
        return math.exp(-lam * a) * tail / (1 + q)

    def mass(lo, hi):
        total = positive(max(lo, 1), hi) + positive(max(-hi, 1), -lo)
        if lo <= 0 <= hi:
            total += -math.expm1(-lam) / (1 + q)  # P(0) = (1 - q) / (1 + q)
        return total

    return mass


def geometric_mass(num: int, den: int):
    lam = num / den

    def mass(lo, hi):  # P(k) = (1 - q) q**k, k >= 0
        lo = max(lo, 0)
        if lo > hi:
            return 0.0
        tail = 1.0 if hi == math.inf else -math.expm1(-lam * (hi + 1 - lo))
        return math.exp(-lam * lo) * tail

    return mass


def gaussian_mass(sigma2: Fraction, edges):
    """Exact-PMF bin masses for the discrete Gaussian, by summing the kernel (float64, pairwise)."""
    s2 = float(sigma2)
    reach = math.ceil(12 * math.sqrt(s2)) + 50
    bounds = [-reach] + [int(e) for e in edges] + [reach + 1]
    sums = {}
    for lo, hi in itertools.pairwise(bounds):
        x = np.arange(lo, hi, dtype=np.float64)
        sums[(lo, hi)] = float(np.exp(-(x * x) / (2 * s2)).sum())
    total = math.fsum(sums.values())
    by_start = {lo: v / total for (lo, hi), v in sums.items()}
    by_start[-math.inf] = by_start.pop(-reach)

    def mass(lo, hi):  # only asked for whole original bins
        return by_start[lo]

    return mass


def run_fit(samples, edges, mass):
    stat, threshold, df = chi2_fit(samples, edges, mass)
    return stat, threshold, df


# ----------------------------------------------------------------------------------------------
# discrete Laplace
# ----------------------------------------------------------------------------------------------

LAPLACE_SCALES = [Fraction(1), Fraction(10), Fraction(1000), Fraction(10**6), Fraction(7, 3)]


@pytest.mark.parametrize("scale", LAPLACE_SCALES, ids=str)
def test_discrete_laplace(scale):
    samples = discrete_laplace(scale, N)
    width = max(1, round(scale / 20))
    edges = centred_edges(width, math.ceil(40 * scale))
    stat, threshold, df = run_fit(samples, edges, laplace_mass(scale))
    assert stat < threshold, f"chi2 = {stat:.1f} >= {threshold:.1f} (df = {df})"


def test_laplace_harness_has_power():
    """Draws at 1.1x the claimed scale must be rejected (the statistic is in the thousands)."""
    claimed = Fraction(10)
    samples = discrete_laplace(claimed * Fraction(11, 10), N)
    stat, threshold, _ = run_fit(samples, centred_edges(1, 400), laplace_mass(claimed))
    assert stat > threshold, f"chi2 = {stat:.1f} < {threshold:.1f}: the harness cannot tell scale 11 from 10"


# ----------------------------------------------------------------------------------------------
# discrete Gaussian
# ----------------------------------------------------------------------------------------------

GAUSSIAN_SIGMA2 = [Fraction(1), Fraction(100), Fraction(10**6), Fraction(10**12), Fraction(7, 3), Fraction(1, 5)]


@pytest.mark.parametrize("sigma2", GAUSSIAN_SIGMA2, ids=str)
def test_discrete_gaussian(sigma2):
    samples = discrete_gaussian(sigma2, N)
    sigma = math.sqrt(sigma2)
    width = max(1, round(sigma / 20))
    edges = centred_edges(width, math.ceil(7 * sigma) + 5)
    stat, threshold, df = run_fit(samples, edges, gaussian_mass(sigma2, edges))
    assert stat < threshold, f"chi2 = {stat:.1f} >= {threshold:.1f} (df = {df})"


def test_gaussian_harness_has_power():
    """Draws with sigma**2 5% larger than claimed must be rejected."""
    claimed = Fraction(100)
    samples = discrete_gaussian(claimed * Fraction(105, 100), N)
    edges = centred_edges(1, 80)
    stat, threshold, _ = run_fit(samples, edges, gaussian_mass(claimed, edges))
    assert stat > threshold, f"chi2 = {stat:.1f} < {threshold:.1f}: the harness cannot tell sigma**2 105 from 100"


# ----------------------------------------------------------------------------------------------
# building blocks
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2), Fraction(20)], ids=str)
def test_bernoulli_exp(gamma):
    """Exact two-sided binomial test of the success count against p = exp(-gamma)."""
    nums = np.full(N, gamma.numerator, dtype=np.int64)
    successes = int(bernoulli_exp(nums, gamma.denominator).sum())
    if gamma == 0:
        assert successes == N  # p = 1 exactly
        return
    pvalue = stats.binomtest(successes, N, math.exp(-gamma)).pvalue
    assert pvalue > ALPHA, f"{successes} successes in {N}, p-value {pvalue:.3g}"


def test_bernoulli_harness_has_power():
    """gamma = 1.01 against a claimed gamma = 1 (a 0.4% shift in p, about 24 standard errors)."""
    successes = int(bernoulli_exp(np.full(N, 101, dtype=np.int64), 100).sum())
    assert stats.binomtest(successes, N, math.exp(-1)).pvalue < ALPHA


@pytest.mark.parametrize(("num", "den"), [(1, 1), (5, 2), (1, 1000), (3, 7)])
def test_geometric_exp(num, den):
    samples = geometric_exp(num, den, N)
    assert samples.min() >= 0
    width = max(1, round(den / num / 20))
    edges = np.arange(1, 200) * width
    stat, threshold, df = run_fit(samples, edges, geometric_mass(num, den))
    assert stat < threshold, f"chi2 = {stat:.1f} >= {threshold:.1f} (df = {df})"


def test_discrete_laplace_with_explicit_source():
    """The same law when the caller passes its own RandomSource (scale 3/2, 10**7 draws)."""
    scale = Fraction(3, 2)
    samples = discrete_laplace(scale, N, source=RandomSource())
    stat, threshold, df = run_fit(samples, centred_edges(1, 100), laplace_mass(scale))
    assert stat < threshold, f"chi2 = {stat:.1f} >= {threshold:.1f} (df = {df})"
