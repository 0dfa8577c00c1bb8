"""Chi-squared conformance of dpcli.samplers' exponential mechanism (``exponential_sample``, and
``exponential_choice``'s peeling) against its exact distribution, P(i) proportional to exp(-(num/den) * gap_i).

Same rules as test_sampler_conformance.py: no seeds, no retries, the threshold scipy.stats.chi2.isf(1e-8, df) per
check (the statistical checks of both files and tests/test_samplers.py stay under 100, so a correct sampler fails
the suite by chance with probability below 1e-6), expected probabilities from the closed form in float64 (relative
error ~1e-16, far below what 10**6 draws resolve), bins expecting at least 20 draws, and a power check that feeds
the harness a wrong distribution and requires a rejection.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpcli.samplers import exponential_choice, exponential_sample

ALPHA = 1e-8
MIN_EXPECTED = 20
SCORES = [0, -1, -2, -3, -7, 2, 2, -40]


def weights(scores: list[int], rate: Fraction) -> np.ndarray:
    best = max(scores)
    w = np.array([math.exp(-float(rate) * (best - s)) for s in scores])
    return w / w.sum()


def chi2_fit(counts: np.ndarray, probs: np.ndarray) -> tuple[float, float]:
    """(statistic, threshold), the least likely bins merged into one until it expects MIN_EXPECTED draws."""
    n = counts.sum()
    order = np.argsort(probs)
    merged = int(np.searchsorted(np.cumsum(probs[order]) * n, MIN_EXPECTED)) + 1
    if probs.min() * n < MIN_EXPECTED:
        low, rest = order[:merged], order[merged:]
        counts = np.append(counts[rest], counts[low].sum())
        probs = np.append(probs[rest], probs[low].sum())
    expected = probs * n
    assert expected.min() >= MIN_EXPECTED
    stat = float(((counts - expected) ** 2 / expected).sum())
    return stat, float(stats.chi2.isf(ALPHA, len(probs) - 1))


@pytest.mark.slow
@pytest.mark.parametrize("num,den", [(1, 2), (3, 1), (1, 40)])
def test_single_draws_follow_the_exponential_mechanism(num: int, den: int) -> None:
    n = 2_000_000
    draws = exponential_sample(SCORES, num, den, n)
    stat, threshold = chi2_fit(np.bincount(draws, minlength=len(SCORES)), weights(SCORES, Fraction(num, den)))
    assert stat < threshold


@pytest.mark.slow
def test_gaps_past_the_int64_fast_path_follow_the_mechanism() -> None:
    # gaps of 10**30 and more take the Python-int path (exponent capped, the rest drawn exactly)
    scores = [10**30, 10**30 - 1, 10**30 - 2, 0, -(10**40)]
    n = 1_000_000
    draws = exponential_sample(scores, 1, 1, n)
    probs = np.array([1, math.exp(-1), math.exp(-2), 0.0, 0.0])
    stat, threshold = chi2_fit(np.bincount(draws, minlength=len(scores)), probs / probs.sum())
    assert stat < threshold


def peeling_probs(scores: list[int], rate: Fraction, k: int) -> dict[tuple[int, ...], float]:
    """Exact probability of each ordered k-tuple under peeling."""
    out: dict[tuple[int, ...], float] = {}
    for order in itertools.permutations(range(len(scores)), k):
        left, p = list(range(len(scores))), 1.0
        for i in order:
            w = weights([scores[j] for j in left], rate)
            p *= w[left.index(i)]
            left.remove(i)
        out[order] = p
    return out


@pytest.mark.slow
def test_peeling_draws_ordered_tuples_with_their_exact_probability() -> None:
    scores, rate, k, n = [3, 1, 0, -2], Fraction(1, 1), 2, 30_000
    probs = peeling_probs(scores, rate, k)
    seen = Counter(tuple(exponential_choice(scores, rate.numerator, rate.denominator, k=k).tolist()) for _ in range(n))
    keys = list(probs)
    stat, threshold = chi2_fit(np.array([seen[key] for key in keys]), np.array([probs[key] for key in keys]))
    assert stat < threshold


@pytest.mark.slow
def test_the_harness_rejects_a_wrong_rate() -> None:
    draws = exponential_sample(SCORES, 1, 2, 2_000_000)
    stat, threshold = chi2_fit(np.bincount(draws, minlength=len(SCORES)), weights(SCORES, Fraction(11, 20)))
    assert stat > threshold
