"""dpcli.mechanisms.mst (issue 27): MST's pair scores (integers of sensitivity 1 under add/remove, 2 under replace,
checked by brute force over every neighbour of small datasets) and its private Kruskal (a spanning tree; the best
tree when the rate is huge; work a function of the released picks only)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpcli.errors import InternalError
from dpcli.mechanisms.mst import independence_marginal, pair_scores, select_tree
from tests.mechanisms.test_selection_work import RecordedSource

SIZES = (2, 3, 2)
CANDIDATES = list(itertools.combinations(range(len(SIZES)), 2))
# released values: noisy one-way counts (a negative one too) and a noisy total; the scores depend on the data only
# through the exact pair counts
ONE_WAY = [np.array([7, 4]), np.array([5, -1, 3]), np.array([2, 9])]
TOTAL = 12


def pair_counts(rows: list[tuple[int, ...]]) -> dict[tuple[int, int], np.ndarray]:
    out = {}
    for a, b in CANDIDATES:
        counts = np.zeros((SIZES[a], SIZES[b]), dtype=np.int64)
        for row in rows:
            counts[row[a], row[b]] += 1
        out[a, b] = counts.reshape(-1)  # flat, row-major: as the engine returns a marginal
    return out


def scores_of(rows: list[tuple[int, ...]]) -> np.ndarray:
    return pair_scores(pair_counts(rows), ONE_WAY, TOTAL)


ALL_ROWS = list(itertools.product(*(range(s) for s in SIZES)))


def datasets(count: int, seed: int) -> list[list[tuple[int, ...]]]:
    rng = np.random.default_rng(seed)
    return [[ALL_ROWS[i] for i in rng.integers(0, len(ALL_ROWS), rng.integers(0, 15))] for _ in range(count)]


def test_scores_are_the_l1_distance_to_the_rounded_independence_model() -> None:
    rows = [(0, 0, 1), (1, 2, 1), (0, 0, 0)]
    model = independence_marginal(ONE_WAY[0], ONE_WAY[1], TOTAL)
    # p_a = (7, 4)/11, p_b = (5, 0, 3)/8 (the -1 clipped): 12 p_a p_b rounded
    assert model.tolist() == [[5, 0, 3], [3, 0, 2]]
    assert scores_of(rows)[0] == abs(2 - 5) + 0 + 3 + 3 + 0 + abs(1 - 2)
    assert scores_of(rows).dtype == np.int64


def test_a_score_moves_by_at_most_one_when_a_row_is_added_or_removed() -> None:
    worst = 0
    for rows in datasets(40, 1):
        base = scores_of(rows)
        neighbours = [[*rows, extra] for extra in ALL_ROWS] + [rows[:i] + rows[i + 1:] for i in range(len(rows))]
        for other in neighbours:
            worst = max(worst, int(np.abs(scores_of(other) - base).max()))
    assert worst == 1  # at most 1, and reached


def test_a_score_moves_by_at_most_two_when_a_row_is_replaced() -> None:
    worst = 0
    for rows in datasets(15, 2):
        base = scores_of(rows)
        for i, new in itertools.product(range(len(rows)), ALL_ROWS):
            worst = max(worst, int(np.abs(scores_of([*rows[:i], new, *rows[i + 1:]]) - base).max()))
    assert worst == 2


def is_spanning_tree(d: int, edges: tuple[tuple[int, int], ...]) -> bool:
    parent = list(range(d))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for a, b in edges:
        if root(a) == root(b):
            return False  # a cycle
        parent[root(a)] = root(b)
    return len(edges) == d - 1


def test_the_selection_is_a_spanning_tree_of_candidates() -> None:
    rng = np.random.default_rng(3)
    for d in (2, 3, 6, 9):
        candidates = list(itertools.combinations(range(d), 2))
        for rate in ((1, 100), (1, 1), (0, 1)):
            tree = select_tree(d, candidates, rng.integers(0, 50, len(candidates)).astype(np.int64), *rate)
            assert is_spanning_tree(d, tree)
            assert set(tree) <= set(candidates)
    assert select_tree(1, [], np.array([], dtype=np.int64), 1, 1) == ()


def test_a_huge_rate_selects_the_best_tree() -> None:
    # distinct scores: one maximum spanning tree, found by brute force; any other draw has probability below
    # 15 exp(-1000) per round
    d = 6
    candidates = list(itertools.combinations(range(d), 2))
    scores = np.random.default_rng(4).permutation(len(candidates)).astype(np.int64) * 3
    best = max((t for t in itertools.combinations(candidates, d - 1) if is_spanning_tree(d, t)),
               key=lambda t: sum(int(scores[candidates.index(e)]) for e in t))
    tree = select_tree(d, candidates, scores, 1000, 1)
    assert sorted(tree) == sorted(best)
    assert tree[0] == candidates[int(np.argmax(scores))]  # Kruskal's first pick: the best pair


def test_each_rounds_work_depends_on_the_released_picks_only() -> None:
    # neighbouring datasets under one keystream: where the trees drawn agree, so do the CSPRNG bytes used
    rows = datasets(1, 5)[0]
    agreed = 0
    for key in range(10):
        runs = []
        for data in (rows, [*rows, (1, 2, 0)]):
            source = RecordedSource(key)
            runs.append((select_tree(3, CANDIDATES, scores_of(data), 1, 4, source), source.requests))
        if runs[0][0] == runs[1][0]:
            agreed += 1
            assert runs[0][1] == runs[1][1]
    assert agreed


@pytest.mark.parametrize(
    ("d", "candidates", "scores", "match"),
    [
        (3, [(0, 1)], np.array([1], dtype=np.int64), "do not connect"),
        (3, [(0, 1), (1, 3)], np.array([1, 2], dtype=np.int64), "two of the d columns"),
        (3, [(0, 1), (1, 1)], np.array([1, 2], dtype=np.int64), "two of the d columns"),
        (3, [(0, 1), (1, 2), (0, 1)], np.array([1, 2, 3], dtype=np.int64), "twice"),
        (3, [(0, 1), (1, 2)], np.array([1, 2], dtype=np.int32), "int64"),
        (3, [(0, 1), (1, 2)], np.array([1], dtype=np.int64), "one per candidate"),
        (0, [], np.array([], dtype=np.int64), "positive int"),
    ],
)
def test_select_tree_refuses_bad_candidates(d, candidates, scores, match) -> None:
    with pytest.raises(InternalError, match=match):
        select_tree(d, candidates, scores, 1, 1)


def test_pair_scores_refuses_bad_inputs() -> None:
    with pytest.raises(InternalError, match="2x3 integers"):
        pair_scores({(0, 1): np.zeros(5, dtype=np.int64)}, ONE_WAY, TOTAL)
    with pytest.raises(InternalError, match="2x3 integers"):
        pair_scores({(0, 1): np.zeros(6)}, ONE_WAY, TOTAL)
    with pytest.raises(InternalError, match="does not name two columns"):
        pair_scores({(0, 3): np.zeros(4, dtype=np.int64)}, ONE_WAY, TOTAL)
    with pytest.raises(InternalError, match="total"):
        pair_scores({(0, 1): np.zeros(6, dtype=np.int64)}, ONE_WAY, -1)
