"""k-ary randomized response: the local-DP mechanism of ``dpcli randomize``, and the unbiased frequency estimate of
its output (``{kind: frequency, randomized: ...}``).

One record's cell, a key among k declared keys, is published as that key with probability e^ε / (e^ε + k − 1)
and as each other key with probability 1 / (e^ε + k − 1): the exponential mechanism with utility 1 for the true
key and 0 for every other, which is ε-DP for the record under ``replace`` (the likelihood of any output changes by
at most e^ε when the cell changes). It is sampled exactly and vectorised over records, by rejection: a uniform
proposal among the k keys is kept when it is the true key, and otherwise with an exact Bernoulli(exp(−ε)) draw
(dpcli.core.samplers). The expected number of rounds per record is k / (1 + (k − 1) e^−ε) ≤ k.

A missing cell (or one no declared rule maps to a key) has no true key: it is published as a uniformly random key.
That is the mechanism's output distribution mixed over every true key with equal weight, so the likelihood ratio
against any true key stays within e^ε, and the output tells nothing about which cells were missing.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpcli.core.samplers import RandomSource, bernoulli_exp, default_source

# The exact Bernoulli(exp(-num/den)) sampler takes integers below 2**63: an epsilon per column must fit
SAMPLER_LIMIT = 2**62
# The share of 1 - confidence each tail of an interval may miss (two-sided Hoeffding bound)
CONFIDENCE = 0.95


def fits_sampler(epsilon: Fraction) -> bool:
    """Whether the exact sampler takes this epsilon as it is (numerator and denominator below 2**62)."""
    return epsilon.numerator < SAMPLER_LIMIT and epsilon.denominator < SAMPLER_LIMIT


def randomize_keys(
    true_index: np.ndarray, k: int, epsilon: Fraction, source: RandomSource | None = None
) -> np.ndarray:
    """The published key index of each record: ``true_index`` holds each record's declared key (0 … k−1), or −1
    for a missing cell. Returns int64 indices in [0, k), one per record, in record order."""
    if k < 1:
        raise ValueError("k-ary randomized response needs at least one key")
    if epsilon <= 0 or not fits_sampler(epsilon):
        raise ValueError("epsilon must be positive, with numerator and denominator below 2**62")
    src = source if source is not None else default_source()
    truth = np.asarray(true_index, dtype=np.int64)
    out = np.empty(truth.shape[0], dtype=np.int64)
    missing = truth < 0
    out[missing] = src.integers_below(k, size=int(missing.sum()))
    todo = np.flatnonzero(~missing)
    while todo.size:
        proposal = src.integers_below(k, size=todo.size)
        accepted = proposal == truth[todo]
        others = np.flatnonzero(~accepted)
        if others.size:
            accepted[others] = bernoulli_exp(
                np.full(others.size, epsilon.numerator, dtype=np.int64), epsilon.denominator, src
            )
        out[todo[accepted]] = proposal[accepted]
        todo = todo[~accepted]
    return out


def keep_probability(k: int, epsilon: float) -> float:
    """P(the published key is the true one) = e^ε / (e^ε + k − 1) (for the plan and docs; sampling is exact)."""
    return 1.0 / (1.0 + (k - 1) * math.exp(-epsilon))


def estimate_counts(counts: np.ndarray, epsilon: Fraction) -> tuple[np.ndarray, float]:
    """Unbiased estimates of the true count of each key from the counts c_j of the published keys (k = len(counts),
    n = Σ c_j), and the half-width of their 95% intervals.

    With p = e^ε/(e^ε+k−1) and q = 1/(e^ε+k−1), E[c_j] = n_j p + (n − n_j) q, so n̂_j = (c_j − n q)/(p − q)
    = ((e^ε + k − 1) c_j − n)/(e^ε − 1) is unbiased for n_j (a record whose cell was missing is spread evenly: it
    adds 1/k to each key's expectation). Not clipped to [0, n]: clipping would bias it.

    The half-width comes from public quantities only (n, k, ε): c_j is a sum of n independent Bernoulli draws, so by
    Hoeffding's inequality P(|c_j − E c_j| ≥ t) ≤ 2 exp(−2t²/n) = 5% at t = √(n ln(40) / 2), for any n and any
    data; the estimate's half-width is t (e^ε + k − 1)/(e^ε − 1).
    """
    c = np.asarray(counts, dtype=np.float64)
    k, n = c.shape[0], float(c.sum())
    e = math.exp(float(epsilon))
    values = ((e + k - 1) * c - n) / (e - 1)
    return values, error_factor(k, epsilon) * math.sqrt(n)


def error_factor(k: int, epsilon: Fraction) -> float:
    """The 95% half-width of a frequency estimate over k keys at ε, per √n (estimate_counts)."""
    e = math.exp(float(epsilon))
    return math.sqrt(math.log(2 / (1 - CONFIDENCE)) / 2) * (e + k - 1) / (e - 1)
