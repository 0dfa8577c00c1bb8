"""Chi-squared conformance of dpcli.core.samplers' selection (``exponential_sample``, and ``exponential_choice``'s
peeling) against the exact law of permute-and-flip (McKenna & Sheldon 2020; issue 23): with p_j = exp(-(num/den)
gap_j), P(i) = p_i * integral_0^1 prod_{j != i} (1 - p_j u) du (i first accepted in a uniform order, the order
being that of iid uniform arrival times), computed here in Fractions: the product's polynomial expanded exactly
and integrated term by term, each p_j a 60-digit rational (far below what 10**6 draws resolve).

Same rules as test_sampler_conformance.py: no seeds, no retries, the threshold scipy.stats.chi2.isf(1e-8, df) per
check (the statistical checks of both files and tests/core/test_samplers.py stay under 100, so a correct sampler fails
the suite by chance with probability below 1e-6), bins expecting at least 20 draws, and power checks that feed the
harness a wrong distribution (a wrong rate; the exponential mechanism's law at the same rate) and require a
rejection.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpcli.core.samplers import exponential_choice, exponential_sample
from tests.pf_law import permute_and_flip_law

ALPHA = 1e-8
MIN_EXPECTED = 20
SCORES = [0, -1, -2, -3, -7, 2, 2, -40]


def exponential_mechanism(scores: list[int], rate: Fraction) -> np.ndarray:
    """The exponential mechanism's law, P(i) proportional to exp(-rate gap_i): the power checks' alternative."""
    best = max(scores)
    w = np.array([math.exp(-float(rate) * (best - s)) for s in scores])
    return w / w.sum()


def weights(scores: list[int], rate: Fraction) -> np.ndarray:
    """permute_and_flip_law as float64 probabilities."""
    return np.array([float(x) for x in permute_and_flip_law(scores, rate)])


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
@pytest.mark.parametrize(("num", "den"), [(1, 2), (3, 1), (1, 40)])
def test_single_draws_follow_permute_and_flip(num: int, den: int) -> None:
    n = 2_000_000
    draws = exponential_sample(SCORES, num, den, n)
    counts = np.bincount(draws, minlength=len(SCORES))
    stat, threshold = chi2_fit(counts, weights(SCORES, Fraction(num, den)))
    assert stat < threshold
    if num != 1 or den != 40:  # at rate 1/40 the two laws are close; elsewhere the exponential mechanism's is rejected
        stat, threshold = chi2_fit(counts, exponential_mechanism(SCORES, Fraction(num, den)))
        assert stat > threshold


@pytest.mark.slow
def test_gaps_past_int64_follow_the_mechanism() -> None:
    # gaps of 10**30 and more are saturated at 2**62, which no flip reaches: never drawn, as their probability
    # (below exp(-10**30)) says
    scores = [10**30, 10**30 - 1, 10**30 - 2, 0, -(10**40)]
    n = 1_000_000
    draws = exponential_sample(scores, 1, 1, n)
    probs = weights(scores[:3], Fraction(1))
    assert (draws < 3).all()
    stat, threshold = chi2_fit(np.bincount(draws, minlength=3), probs)
    assert stat < threshold


def peeling_probs(scores: list[int], rate: Fraction, k: int) -> dict[tuple[int, ...], float]:
    """Exact probability of each ordered k-tuple under peeling (permute-and-flip over the keys left at each draw)."""
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
