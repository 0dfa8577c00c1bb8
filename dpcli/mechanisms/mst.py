"""MST's selection (McKenna, Miklau & Sheldon 2021): the pair marginals to measure, a spanning tree over the columns.

The scores (``pair_scores``). For each candidate pair (a, b) of columns, how badly the independence model fits it:
score_ab = sum over the cells of |x_ab - round(m_ab)|, where x_ab are the pair's exact integer counts and m_ab the
model's pair marginal: the outer product of a's and b's one-way estimates (each made a distribution) times a total.
The one-way estimates and the total are RELEASED values (the noisy one-way marginals measured first, and a total
derived from them or declared), so given them the model is a fixed table; it is rounded to integers BEFORE the
difference. Then the score is an integer and its sensitivity is the L1 change of x_ab: adding or removing one row
moves one cell of x_ab by 1 (or none, when the row is left out for a missing value), so the score moves by at most 1
(triangle inequality); replacing a row moves two cells by 1, the score by at most 2. Rounding after the difference
instead would not do: round(s) can move by 2 when s moves by 1 across a half. MST's own scoring is the L1 distance to
the model of the one-way measurements, as here.

The tree (``select_tree``). Kruskal's algorithm with a private choice at each of its d - 1 rounds: among the candidate
pairs that join two different components (union-find), one exponential-mechanism draw
(``dpcli.core.samplers.exponential_mechanism``, the exact law) with gaps = best - score among those, at rate
num/den = eps_sel / (2 Delta_u); the pair drawn joins its components. Each round is eps_sel-DP and eps_sel-bounded-
range, so eps_sel**2/8-zCDP (Cesar & Rogers 2021); d - 1 rounds compose to (d - 1) eps_sel**2/8. Which pairs are
eligible in a round is a function of the earlier rounds' released picks only, so each draw's work is fixed by public
quantities (its number of eligible pairs and the rate).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from numbers import Integral, Real

import numpy as np
import numpy.typing as npt

from dpcli.core.samplers import RandomSource, exponential_mechanism, saturated_gaps
from dpcli.errors import InternalError

__all__ = ["independence_marginal", "pair_scores", "select_tree"]

Pair = tuple[int, int]


def _distribution(estimate: npt.ArrayLike) -> np.ndarray:
    """A one-way estimate (noisy counts, possibly negative, or any non-negative weights) as a distribution: negatives
    clipped to 0, normalised; uniform when nothing is left."""
    values = np.clip(np.asarray(estimate, dtype=np.float64).reshape(-1), 0.0, None)
    if not values.size:
        raise InternalError("a one-way estimate has no cells")
    mass = values.sum()
    return values / mass if mass > 0 else np.full(values.size, 1.0 / values.size)


def independence_marginal(p_a: npt.ArrayLike, p_b: npt.ArrayLike, total: float) -> np.ndarray:
    """The independence model's pair marginal, rounded to integers (int64, shape (len(p_a), len(p_b))): total times
    the outer product of the two one-way estimates, each made a distribution. Released values only."""
    model = float(total) * np.outer(_distribution(p_a), _distribution(p_b))
    return np.rint(model).astype(np.int64)


def pair_scores(
    exact_pairs: Mapping[Pair, npt.ArrayLike], one_way_estimates: Sequence[npt.ArrayLike], total: float | int
) -> np.ndarray:
    """The score of each candidate pair, in the order of ``exact_pairs``' keys (int64): sum |x_ab - round(m_ab)|.

    ``exact_pairs``: (a, b) -> the pair's exact integer counts, shape (size_a, size_b) or flat in row-major order
    (a slowest), as the engine returns a marginal; ``one_way_estimates``: per column, its released one-way estimate
    (noisy counts; negatives are clipped); ``total``: a released total (>= 0). Sensitivity: 1 under add/remove, 2 under
    replace (module docstring)."""
    if isinstance(total, bool) or not isinstance(total, Real) or not 0 <= float(total) < 2.0**53:
        raise InternalError("the model's total must be a released number in [0, 2**53)")
    sizes = [np.asarray(e).size for e in one_way_estimates]
    scores = np.empty(len(exact_pairs), dtype=np.int64)
    for k, ((a, b), counts) in enumerate(exact_pairs.items()):
        if not (0 <= a < len(sizes) and 0 <= b < len(sizes) and a != b):
            raise InternalError(f"candidate pair ({a}, {b}) does not name two columns")
        exact = np.asarray(counts)
        if exact.dtype.kind not in "iu" or exact.size != sizes[a] * sizes[b]:
            raise InternalError(f"pair ({a}, {b})'s exact counts are not {sizes[a]}x{sizes[b]} integers")
        model = independence_marginal(one_way_estimates[a], one_way_estimates[b], float(total))
        scores[k] = int(np.abs(exact.reshape(sizes[a], sizes[b]).astype(np.int64) - model).sum())
    return scores


def _check_candidates(d: int, candidates: Sequence[Pair], scores: np.ndarray) -> None:
    if isinstance(d, bool) or not isinstance(d, Integral) or d < 1:
        raise InternalError("d must be a positive int")
    if scores.dtype != np.int64 or scores.shape != (len(candidates),):
        raise InternalError("scores must be int64, one per candidate")
    if any(not (0 <= a < d and 0 <= b < d and a != b) for a, b in candidates):
        raise InternalError("a candidate pair does not name two of the d columns")
    if len(set(candidates)) != len(candidates):
        raise InternalError("a candidate pair is listed twice")
    parent = list(range(d))
    for a, b in candidates:
        parent[_root(parent, a)] = _root(parent, b)
    if len({_root(parent, i) for i in range(d)}) != 1:
        raise InternalError("the candidate pairs do not connect every column: no spanning tree")


def _root(parent: list[int], i: int) -> int:
    while parent[i] != i:
        parent[i] = parent[parent[i]]  # path halving
        i = parent[i]
    return i


def select_tree(
    d: int,
    candidates: Sequence[Pair],
    scores: npt.ArrayLike,
    num: int,
    den: int,
    source: RandomSource | None = None,
) -> tuple[Pair, ...]:
    """A spanning tree over columns 0..d-1: d - 1 pairs of ``candidates``, in the order drawn.

    Kruskal with private choices: each round draws, with ``exponential_mechanism`` at rate num/den, one of the
    candidates joining two different components, gaps = best - score among them (``scores``: int64, one per
    candidate). The rate is eps_sel / (2 Delta_u) for the scores' sensitivity Delta_u. Refuses (InternalError) a
    candidate list that does not connect every column."""
    score_array = np.asarray(scores)
    pairs = [(int(a), int(b)) for a, b in candidates]
    _check_candidates(d, pairs, score_array)
    parent = list(range(d))
    chosen: list[Pair] = []
    for _ in range(d - 1):
        eligible = [k for k, (a, b) in enumerate(pairs) if _root(parent, a) != _root(parent, b)]
        gaps = saturated_gaps(score_array[eligible])
        pick = pairs[eligible[exponential_mechanism(gaps, num, den, source)]]
        parent[_root(parent, pick[0])] = _root(parent, pick[1])
        chosen.append(pick)
    return tuple(chosen)
