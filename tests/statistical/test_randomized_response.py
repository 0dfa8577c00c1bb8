"""Chi-squared conformance of dpcli.mechanisms.randomized_response.randomize_keys (the sampler of `dpcli randomize`) to
its exact
distribution, and the coverage of the frequency estimate's 95% intervals.

Rules (as tests/statistical/test_sampler_conformance.py): no seeds and no retries; each check draws once from the
real CSPRNG and decides at a fixed threshold scipy.stats.chi2.isf(ALPHA, df) (or a binomial quantile) with
ALPHA = 1e-8, and this file holds 7 checks, so a correct sampler fails it by chance with probability below 1e-7.
Power: a check feeds the harness the distribution at half the ε and requires a rejection (a miss has probability
at most ALPHA_POWER = 1e-8 by the noncentral chi-squared bound computed in the test).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpcli.mechanisms.randomized_response import estimate_counts, randomize_keys

pytestmark = pytest.mark.slow

N = 2_000_000
ALPHA = 1e-8


def exact_law(k: int, epsilon: Fraction, true_key: int | None) -> np.ndarray:
    """P(published key = j): e^ε/(e^ε+k−1) for the true key, 1/(e^ε+k−1) for the others; uniform when missing."""
    if true_key is None:
        return np.full(k, 1 / k)
    e = math.exp(float(epsilon))
    law = np.full(k, 1 / (e + k - 1))
    law[true_key] = e / (e + k - 1)
    return law


def chi2(samples: np.ndarray, law: np.ndarray) -> tuple[float, float]:
    observed = np.bincount(samples, minlength=len(law)).astype(np.float64)
    expected = law * len(samples)
    assert expected.min() >= 20
    stat = float(((observed - expected) ** 2 / expected).sum())
    return stat, float(stats.chi2.isf(ALPHA, len(law) - 1))


@pytest.mark.parametrize(
    ("k", "epsilon", "true_key"),
    [(2, Fraction(1, 2), 0), (5, Fraction(1), 3), (42, Fraction(3), 0), (7, Fraction(1, 10), 6),
     (4, Fraction(2), None)],
)
def test_randomize_keys_has_its_exact_distribution(k: int, epsilon: Fraction, true_key: int | None) -> None:
    truth = np.full(N, -1 if true_key is None else true_key, dtype=np.int64)
    stat, threshold = chi2(randomize_keys(truth, k, epsilon), exact_law(k, epsilon, true_key))
    assert stat < threshold, f"chi2 = {stat:.1f} >= {threshold:.1f} (k = {k}, ε = {epsilon})"


def test_the_harness_tells_epsilon_from_half_of_it() -> None:
    """Power: draws at ε = 1/2 against the law at ε = 1 (k = 5) are rejected. With the expected noncentrality
    λ = N Σ (p½ − p1)²/p1, the statistic is noncentral χ²(df, λ); its 1e-8 quantile must clear the threshold."""
    k, true_key = 5, 2
    law, half = exact_law(k, Fraction(1), true_key), exact_law(k, Fraction(1, 2), true_key)
    nc = N * float(((half - law) ** 2 / law).sum())
    threshold = float(stats.chi2.isf(ALPHA, k - 1))
    assert float(stats.ncx2.ppf(ALPHA, k - 1, nc)) > threshold  # the check below misses with probability < ALPHA
    stat, _ = chi2(randomize_keys(np.full(N, true_key, dtype=np.int64), k, Fraction(1, 2)), law)
    assert stat > threshold, f"chi2 = {stat:.1f} <= {threshold:.1f}: the harness cannot tell ε = 1/2 from 1"


def test_frequency_intervals_cover_the_truth_at_least_95_percent() -> None:
    """Over R independent randomizations of one data set, each key's interval covers its true count in at least 95%
    of them (Hoeffding's bound is conservative: typically ~99.9%). The check fails when the number covering is below
    the ALPHA-quantile of Binomial(R, 0.95), the count a 95% interval would give."""
    runs, k, epsilon = 2000, 4, Fraction(1)
    true_counts = np.array([600, 250, 100, 50])
    truth = np.repeat(np.arange(k), true_counts)
    covered = 0
    for _ in range(runs):
        published = randomize_keys(truth, k, epsilon)
        values, half = estimate_counts(np.bincount(published, minlength=k), epsilon)
        covered += int(np.all(np.abs(values - true_counts) <= half))  # all four keys at once: stricter
    floor = int(stats.binom.ppf(ALPHA, runs, 0.95))
    assert covered >= floor, f"{covered} of {runs} runs covered every key; below {floor}"
