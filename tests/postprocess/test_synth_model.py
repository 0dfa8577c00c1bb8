"""dpcli.postprocess.synth_model (issue 27): the tree model from released marginals and the rows sampled from it.

Statistical rule (as the samplers' tests): chi-squared at ALPHA = 1e-8 per marginal, no retries; 7 checks here. The
rows are drawn from fixed 32-byte seeds (sample_codes is reproducible from its seed) and the noise of the noisy
inputs from seeded numpy generators, so every outcome here is fixed: nothing fails by chance, and a seed for which a
correct estimator and sampler would be rejected has probability below 7e-8.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpcli.errors import InternalError
from dpcli.postprocess.synth_model import (
    fit_tree,
    iter_codes,
    noisy_total,
    project_simplex,
    sample_codes,
)

ALPHA = 1e-8
SIZES = (3, 4, 2, 5)
TREE = ((0, 1), (1, 2), (1, 3))


def tree_distribution() -> np.ndarray:
    """A joint distribution over SIZES that factorises on TREE: P(x0) P(x1|x0) P(x2|x1) P(x3|x1), with some zeros."""
    rng = np.random.default_rng(11)
    p0 = rng.dirichlet(np.ones(3))
    p1 = rng.dirichlet(np.ones(4), size=3)
    p1[0, 2] = 0.0  # a structural zero: code 2 of column 1 never follows code 0 of column 0
    p1 /= p1.sum(axis=1, keepdims=True)
    p2 = rng.dirichlet(np.ones(2), size=4)
    p3 = rng.dirichlet(np.full(5, 0.5), size=4)
    return np.einsum("a,ab,bc,bd->abcd", p0, p1, p2, p3)


def marginal_of(joint: np.ndarray, keep: tuple[int, ...]) -> np.ndarray:
    return joint.sum(axis=tuple(i for i in range(joint.ndim) if i not in keep))


def exact_inputs(joint: np.ndarray, n: int) -> tuple[list[np.ndarray], dict[tuple[int, int], np.ndarray]]:
    """Exact marginals of n rows (expected counts rounded), as the 'noisy' measurements; pairs flat, row-major."""
    one_ways = [np.rint(n * marginal_of(joint, (a,))).astype(np.int64) for a in range(len(SIZES))]
    pairs = {p: np.rint(n * marginal_of(joint, p)).astype(np.int64).reshape(-1) for p in TREE}
    return one_ways, pairs


def counts(codes: np.ndarray, cols: tuple[int, ...]) -> np.ndarray:
    flat = np.ravel_multi_index(tuple(codes[:, c] for c in cols), tuple(SIZES[c] for c in cols))
    return np.bincount(flat, minlength=int(np.prod([SIZES[c] for c in cols])))


def chi2_rejects(observed: np.ndarray, probs: np.ndarray) -> bool:
    n = observed.sum()
    support = probs > 0
    assert observed[~support].sum() == 0  # a cell of probability 0 is never drawn
    expected = probs[support] * n
    assert expected.min() >= 20
    stat = float(((observed[support] - expected) ** 2 / expected).sum())
    return stat > stats.chi2.isf(ALPHA, int(support.sum()) - 1)


def test_with_exact_marginals_the_sample_has_the_trees_marginals() -> None:
    joint = tree_distribution()
    one_ways, pairs = exact_inputs(joint, 10**6)
    model = fit_tree(SIZES, one_ways, Fraction(1, 10**6), pairs, Fraction(1, 10**6))
    assert model.total == pytest.approx(10**6, abs=1)
    for (a, b), table in model.pairs.items():  # consistent: each pair's margins are its columns' distributions
        np.testing.assert_allclose(table.sum(axis=1), model.one_way[a], atol=1e-9)
        np.testing.assert_allclose(table.sum(axis=0), model.one_way[b], atol=1e-9)
    codes = sample_codes(model, 200_000, bytes(range(32)))
    for a in range(len(SIZES)):
        assert not chi2_rejects(counts(codes, (a,)), marginal_of(joint, (a,)))
    for pair in TREE:
        assert not chi2_rejects(counts(codes, pair), marginal_of(joint, pair).reshape(-1))


def test_the_check_sees_a_model_off_the_tree() -> None:
    # power: the same sample against the independence model of columns 1 and 3 (which the tree makes dependent)
    joint = tree_distribution()
    one_ways, pairs = exact_inputs(joint, 10**6)
    codes = sample_codes(fit_tree(SIZES, one_ways, 1e-6, pairs, 1e-6), 200_000, bytes(32))
    independent = np.outer(marginal_of(joint, (1,)), marginal_of(joint, (3,))).reshape(-1)
    assert chi2_rejects(counts(codes, (1, 3)), independent)


def noisy_inputs(seed: int, scale: float) -> tuple[list[np.ndarray], dict[tuple[int, int], np.ndarray]]:
    rng = np.random.default_rng(seed)
    one_ways, pairs = exact_inputs(tree_distribution(), 500)
    one_ways = [y + np.rint(rng.normal(0, scale, y.size)).astype(np.int64) for y in one_ways]
    pairs = {p: y + np.rint(rng.normal(0, scale, y.size)).astype(np.int64) for p, y in pairs.items()}
    return one_ways, pairs


def test_codes_stay_in_the_domain_whatever_the_noise() -> None:
    for seed, scale in itertools.product(range(4), (1.0, 50.0, 5_000.0)):
        one_ways, pairs = noisy_inputs(seed, scale)
        model = fit_tree(SIZES, one_ways, scale**2, pairs, scale**2)
        for p in model.one_way:
            assert (p >= 0).all()
            assert p.sum() == pytest.approx(1)
        codes = sample_codes(model, 5_000, seed.to_bytes(32, "little"))
        assert codes.dtype == np.int32
        assert codes.shape == (5_000, len(SIZES))
        assert (codes >= 0).all()
        assert (codes < np.array(SIZES)).all()


def test_negative_measurements_are_handled() -> None:
    # every measurement negative: a tiny budget's worst case. The total is 0 rows, the model still a distribution.
    one_ways = [np.full(s, -40, dtype=np.int64) for s in SIZES]
    one_ways[3][2] = -1  # the least negative cell: the projection's only survivor
    pairs = {(a, b): np.full(SIZES[a] * SIZES[b], -9, dtype=np.int64) for a, b in TREE}
    assert noisy_total(one_ways, 100, pairs, 100) == 0
    model = fit_tree(SIZES, one_ways, 100, pairs, 100)
    np.testing.assert_allclose(model.one_way[3], [0, 0, 1, 0, 0])
    codes = sample_codes(model, 1_000, bytes(32))
    assert (codes[:, 3] == 2).all()
    # a deeply negative code of a column is projected away and never drawn
    one_ways, pairs = noisy_inputs(0, 1.0)
    one_ways[0][1] = -10**6
    pairs[0, 1].reshape(3, 4)[1] = -10**6
    codes = sample_codes(fit_tree(SIZES, one_ways, 1, pairs, 1), 20_000, bytes(32))
    assert not (codes[:, 0] == 1).any()


def test_the_same_seed_gives_the_same_rows_however_they_are_chunked() -> None:
    one_ways, pairs = noisy_inputs(1, 5.0)
    model = fit_tree(SIZES, one_ways, 25, pairs, 25)
    seed = bytes(range(1, 33))
    first = sample_codes(model, 3_001, seed)
    again = sample_codes(fit_tree(SIZES, one_ways, 25, pairs, 25), 3_001, seed)
    assert first.tobytes() == again.tobytes()
    assert np.concatenate(list(iter_codes(model, 3_001, seed, chunk_rows=7))).tobytes() == first.tobytes()
    assert sample_codes(model, 3_001, bytes(32)).tobytes() != first.tobytes()
    assert sample_codes(model, 0, seed).shape == (0, len(SIZES))


def test_a_forest_samples_each_component_from_its_root() -> None:
    joint = tree_distribution()
    one_ways, pairs = exact_inputs(joint, 10**5)
    del pairs[1, 3]  # column 3 alone: drawn from its one-way, independently
    codes = sample_codes(fit_tree(SIZES, one_ways, 1e-6, pairs, 1e-6), 2_000, bytes(32))
    assert set(codes[:, 3].tolist()) <= set(np.flatnonzero(marginal_of(joint, (3,))).tolist())


def test_noisy_total_is_the_inverse_variance_mean_of_the_sums() -> None:
    # sums 100 (variance 2 * 1) and 110 (variance 3 * 1): (100/2 + 110/3) / (1/2 + 1/3) = 104
    assert noisy_total([np.array([60, 40]), np.array([10, 50, 50])], 1) == 104
    # a pair (variance 6 * 6 = 36) with sum 140 moves it a little: weights 1/2, 1/3, 1/36
    assert noisy_total([np.array([60, 40]), np.array([10, 50, 50])], 1, {(0, 1): np.full(6, 140 // 6 + 1)}, 6) == 105
    with pytest.raises(InternalError, match="come together"):
        noisy_total([np.array([1])], 1, {(0, 1): np.zeros(1)}, None)


def test_project_simplex_is_the_euclidean_projection() -> None:
    assert project_simplex(np.array([0.5, 0.5])).tolist() == [0.5, 0.5]
    assert project_simplex(np.array([2.0, 0.0, -1.0])).tolist() == [1.0, 0.0, 0.0]
    np.testing.assert_allclose(project_simplex(np.array([0.6, 0.6, 0.1])), [0.5, 0.5, 0.0], atol=1e-15)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: fit_tree((2, 2, 2), [np.zeros(2)] * 3, 1, {(0, 1): np.zeros(4), (1, 2): np.zeros(4),
                                                              (0, 2): np.zeros(4)}, 1), "not an edge of a tree"),
        (lambda: fit_tree((2, 2), [np.zeros(2)] * 2, 1, {(0, 1): np.zeros(5)}, 1), "2x2"),
        (lambda: fit_tree((2, 3), [np.zeros(2)] * 2, 1, {}, 1), "not 3 numbers"),
        (lambda: fit_tree((2, 2), [np.zeros(2)] * 2, 0, {}, 1), "positive"),
        (lambda: fit_tree((2, 2), [np.zeros(2)] * 2, [1], {}, 1), "one sigma"),
        (lambda: fit_tree((2, 2), [np.zeros(2)] * 2, 1, {(0, 1): np.zeros(4)}, {(1, 0): 1}), "one sigma"),
        (lambda: sample_codes(fit_tree((2,), [np.ones(2)], 1, {}, 1), 3, bytes(31)), "32 bytes"),
        (lambda: sample_codes(fit_tree((2,), [np.ones(2)], 1, {}, 1), -1, bytes(32)), "rows"),
    ],
)
def test_bad_inputs_are_refused(call, match) -> None:
    with pytest.raises(InternalError, match=match):
        call()


def test_domain_compression_merges_the_codes_below_three_sigma_and_expands_to_them_only() -> None:
    """MST's compression, from released one-ways: codes under 3σ share the last code (at least two of them), their
    counts add up there, and a merged row expands only to a merged code, in proportion to its noisy count."""
    from dpcli.postprocess.synth_model import compress_counts, compress_domain, expand_codes

    noisy = np.array([900, 4, -3, 700, 14, 16])
    code_map = compress_domain(noisy, 25)  # 3σ = 15
    assert code_map.tolist() == [0, 3, 3, 1, 3, 2]
    assert compress_counts(np.arange(12).reshape(6, 2), [code_map, np.arange(2)]).tolist() == [
        0, 1, 6, 7, 10, 11, 2 + 4 + 8, 3 + 5 + 9]
    assert compress_domain(np.array([900, 4, 700]), 25).tolist() == [0, 1, 2]  # one small code: nothing merged
    codes = np.array([3] * 4000 + [0, 1, 2])
    expanded = expand_codes(codes, code_map, noisy, np.random.PCG64(5))
    assert expanded[-3:].tolist() == [0, 3, 5]
    merged = expanded[:-3]
    assert set(merged.tolist()) <= {1, 4}  # -3 has weight 0: never drawn
    share = float(np.mean(merged == 1))
    assert abs(share - 4 / 18) < 0.05  # 4000 draws: sd 0.007, so 7 sd
