"""top_k and mode: the chosen keys, ranked (docs/spec.md, "Top-k and mode").

Declared keys: permute-and-flip (McKenna & Sheldon 2020) on the keys' exact counts, peeled k times without
replacement, drawn exactly by ``dpcli.core.samplers.exponential_choice`` at the plan's temperature t (the ``choice``
component's scale): each draw visits the keys left in a uniformly random order and picks the first accepted, a key
accepted with probability exp(-(best - count) / t). Its work is fixed by the number of keys, k and t (a rejection
sampler's running time would depend on how close the counts are). No noisy count is released.

Open keys (``categories: open``): the keys that pass the partition selection
(dpcli.mechanisms.selection.select_entries), ranked by their released noisy counts (``rank_entries``):
post-processing of the selection's release, which costs nothing more.

Ties (post-processing of noisy counts, and the no-noise path of the tests) go to the key that comes first in the
output's key order.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from dpcli.core.samplers import RandomSource, exponential_choice, exponential_sample
from dpcli.errors import InternalError
from dpcli.mechanisms.noisy import Noisy
from dpcli.plan.model import StatisticPlan
from dpcli.specs.model import TopK


def choose(sp: StatisticPlan, counts: np.ndarray, source: RandomSource | None = None) -> np.ndarray:
    """The indices of the k keys chosen from their exact counts, in rank order (1 = the largest), drawn exactly; with
    by:, each cell's k keys in turn (cells in the table's order), drawn on that cell's counts alone."""
    comp = sp.component("choice")
    t = comp.required_scale()  # exp(-(best - u) / t) = exp(-(num/den) (best - u)) with num/den = 1/t
    return np.concatenate([
        exponential_choice(cell, t.denominator, t.numerator, comp.draws, source) for cell in cells_of(sp, counts)
    ])


def cells_of(sp: StatisticPlan, counts: np.ndarray) -> np.ndarray:
    """The counts as rows of one cell of by: each (one row without by:), the column's keys along a row: the engines
    count a top_k as a histogram of its dimensions (by: first, the column last)."""
    keys = sp.component("choice").choices
    values = np.asarray(counts)
    if keys < 1 or len(values) != sp.cells or sp.cells % keys:
        raise InternalError(
            f"statistic {sp.statistic.name!r}: {len(values)} counts for {sp.cells} cells of {keys} keys"
        )
    return values.reshape(sp.cells // keys, keys)


def ranked(counts: np.ndarray, k: int) -> np.ndarray:
    """The indices of the k largest ``counts`` in rank order, ties to the lower index: the ranking of released noisy
    counts (open keys), and the no-noise path of the exact-answer tests."""
    order = np.argsort(-np.asarray(counts, dtype=np.int64), kind="stable")
    return order[:k].astype(np.int64)


def ranked_cells(sp: StatisticPlan, counts: np.ndarray, k: int) -> np.ndarray:
    """``ranked`` in each cell of by: in turn (the no-noise path of the exact-answer tests)."""
    return np.concatenate([ranked(cell, k) for cell in cells_of(sp, counts)])


# ---------------------------------------------------------------------------------------------------------------
# The law of the draws, for `dpcli audit` (floats: likelihoods of outcomes, never a released value)

# Permute-and-flip's output law: with p_j = exp(-gap_j / t), candidate i is released iff it is accepted and every
# candidate before it in the random order is not. A uniform order is the order of iid uniform arrival times, so
#     P(i) = p_i * integral over u in [0, 1] of prod_{j != i} (1 - p_j u) du.
# The integrand is a polynomial; it is integrated by Gauss-Legendre rules on the dyadic pieces [2^-(k+1), 2^-k]
# (k < 60) and [0, 2^-60] (it can fall steeply from 1 near u = 0 when many p_j are near 1), in log space.
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(24)
_EDGES = [0.0, *(2.0 ** -k for k in range(60, -1, -1))]
_U = np.concatenate([(b - a) / 2 * _NODES + (a + b) / 2 for a, b in itertools.pairwise(_EDGES)])
_LOG_W = np.log(np.concatenate([(b - a) / 2 * _WEIGHTS for a, b in itertools.pairwise(_EDGES)]))


def permute_and_flip_log_pmf(gaps: np.ndarray, temperature: float) -> np.ndarray:
    """log P(i) of every candidate under permute-and-flip with these gaps (best - u, >= 0) at this temperature."""
    g = np.asarray(gaps, dtype=float)
    p = np.exp(-g / temperature)
    log_factors = np.log1p(-np.outer(_U, p))  # (nodes, m): log(1 - p_j u); every node u is below 1
    total = log_factors.sum(axis=1, keepdims=True)
    terms = _LOG_W[:, None] + total - log_factors  # the product over j != i, weighted
    top = terms.max(axis=0)
    log_pmf: np.ndarray = -g / temperature + top + np.log(np.exp(terms - top).sum(axis=0))  # numpy's log: Any
    return log_pmf


def log_probabilities(sp: StatisticPlan, counts: np.ndarray, outcomes: np.ndarray) -> np.ndarray:
    """log P(outcome) of each row of ``outcomes`` (ordered keys, one column per draw) under the plan's peeled draws
    on ``counts``: per draw, permute-and-flip's log P of the key drawn among the keys left."""
    t = float(sp.component("choice").required_scale())
    values = np.asarray(counts, dtype=float)
    outcomes = np.asarray(outcomes).reshape(len(outcomes), -1)
    if not len(outcomes):
        return np.zeros(0)
    # each distinct outcome once: the audit's 10^5 draws hold a few dozen
    distinct, where = np.unique(outcomes, axis=0, return_inverse=True)
    out = np.zeros(len(distinct))
    for r, outcome in enumerate(distinct.tolist()):
        left = np.ones(len(values), dtype=bool)
        total = 0.0
        for i in outcome:
            keys = np.flatnonzero(left)
            w = values[keys]
            total += float(permute_and_flip_log_pmf(w.max() - w, t)[int(np.searchsorted(keys, i))])
            left[i] = False
        out[r] = total
    return out[where.reshape(-1)]


def peeled_sample(sp: StatisticPlan, counts: np.ndarray, size: int, source: RandomSource | None = None) -> np.ndarray:
    """``size`` independent top_k draws on ``counts`` (rows of k ordered keys), each exactly as ``choose`` draws:
    every step is ``exponential_sample`` over the keys left, vectorised over the trials that took the same keys so
    far (the audit needs ~10^5 of them; one ``choose`` call per trial took ~1.5 ms)."""
    comp = sp.component("choice")
    t, k = comp.required_scale(), comp.draws
    values = [int(c) for c in np.asarray(counts).tolist()]
    out = np.zeros((size, k), dtype=np.int64)
    groups: list[tuple[np.ndarray, tuple[int, ...]]] = [(np.arange(size), ())]
    for j in range(k):
        following = []
        for trials, taken in groups:
            left = np.array([i for i in range(len(values)) if i not in taken], dtype=np.int64)
            picks = left[exponential_sample([values[i] for i in left], t.denominator, t.numerator, len(trials), source)]
            out[trials, j] = picks
            following += [(trials[picks == key], (*taken, int(key))) for key in np.unique(picks).tolist()]
        groups = following
    return out


def outcomes_between(sp: StatisticPlan, counts_d: np.ndarray, counts_d_prime: np.ndarray,
                     limit: int = 20_000) -> np.ndarray:
    """The ordered k-tuples the audit scores a pair on: over the keys whose counts differ, the largest key of each
    dataset and one key of neither kind (a lower bound of the pair's loss when not every key is among them), at
    most ``limit`` tuples."""
    k = sp.component("choice").draws
    a, b = np.asarray(counts_d), np.asarray(counts_d_prime)
    keys = [*np.flatnonzero(a != b).tolist(), int(np.argmax(a)), int(np.argmax(b))]
    keys += [i for i in np.argsort(-a, kind="stable").tolist() if i not in keys][: max(1, k - len(set(keys)))]
    keys = list(dict.fromkeys(keys))
    while len(keys) > k and math.perm(len(keys), k) > limit:
        keys.pop()
    return np.array(list(itertools.permutations(keys, k)), dtype=np.int64).reshape(-1, k)


def rank_entries(sp: StatisticPlan, selected: Noisy) -> Noisy:
    """An open-key top_k: the selection's released entries ranked by their noisy counts (post-processing), the
    first k of them (fewer when fewer keys pass)."""
    stat = sp.statistic
    if not isinstance(stat, TopK) or selected.counts is None or selected.keys is None:
        raise InternalError(f"statistic {stat.name!r}: only an open-key top_k's selected entries are ranked")
    order = ranked(selected.counts, stat.k).tolist()
    keys = tuple(selected.keys[i] for i in order)
    ranks = np.arange(len(order), dtype=np.int64)
    return Noisy(np.asarray(selected.counts, dtype=np.int64)[order], None, keys, chosen=ranks)
