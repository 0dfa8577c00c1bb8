"""A series' dyadic blocks (dpcli/plan/tree.py): what they cover, the cover of [1, t], and the designs' variances."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcli.errors import InternalError
from dpcli.plan.tree import (
    Block,
    blocks_within,
    cover,
    cover_variances,
    ending_at,
    exact_noise_variance,
    honaker_variances,
    levels,
    summed_variances,
    tree_blocks,
    variances_at,
)

horizons = st.integers(min_value=1, max_value=1000)


@given(horizons)
def test_levels_is_ceil_log2_of_t_plus_1_and_the_tree_has_that_many(periods: int) -> None:
    assert levels(periods) == math.ceil(math.log2(periods + 1) - 1e-12)
    assert max(b.level for b in tree_blocks(periods)) + 1 == levels(periods)


@settings(max_examples=40)
@given(horizons)
def test_a_period_lies_in_one_block_per_level_so_at_most_h_blocks(periods: int) -> None:
    blocks = tree_blocks(periods)
    assert len(blocks) == len(set(blocks)) == 2 * periods - bin(periods).count("1")
    assert all(b.last <= periods for b in blocks)
    hits = np.zeros(periods + 2, dtype=int)
    for b in blocks:
        hits[b.first : b.last + 1] += 1
    assert hits[1 : periods + 1].max() <= levels(periods)
    assert hits[1] == levels(periods)  # period 1 is in a block of every level


@given(st.integers(min_value=1, max_value=100_000))
def test_the_cover_partitions_one_to_t_with_maximal_blocks(t: int) -> None:
    blocks = cover(t)
    assert blocks[0].first == 1
    assert blocks[-1].last == t
    assert all(a.last + 1 == b.first for a, b in itertools.pairwise(blocks))
    assert len(blocks) == bin(t).count("1")
    # maximal: no block's parent fits inside [1, t]
    assert all(Block(b.level + 1, b.index // 2).last > t for b in blocks)


@settings(max_examples=40)
@given(st.integers(min_value=1, max_value=300))
def test_blocks_within_are_every_block_ending_by_t_and_ending_at_those_ending_at_t(t: int) -> None:
    within = blocks_within(t)
    everything = {Block(level, i) for level in range(t.bit_length() + 1) for i in range(2 * t)}
    assert set(within) == {b for b in everything if b.last <= t}
    assert set(ending_at(t)) == {b for b in everything if b.last == t}
    assert set(cover(t)) <= set(within)
    for b in within:
        if b.level:
            left, right = b.children()
            assert (left.first, right.last, left.last + 1) == (b.first, b.last, right.first)


def test_block_keys_and_bounds() -> None:
    b = Block(3, 7)
    assert (b.first, b.last, b.size, b.key) == (57, 64, 8, "b3.7")
    assert sorted([Block(1, 0), Block(0, 5)]) == [Block(0, 5), Block(1, 0)]
    with pytest.raises(InternalError):
        Block(0, 0).children()
    with pytest.raises(InternalError):
        cover(0)


def test_the_issues_analytic_expectations_at_365() -> None:
    """Gaussian, Delta = 1, total rho: per period sigma^2 = 1/(2 rho); a block rho/h so sigma^2 = h/(2 rho)."""
    h = levels(365)
    block = h / 2  # one block's variance, units 1/rho
    assert summed_variances(365).to_date * 0.5 == 182.5
    assert honaker_variances(365).to_date * block == pytest.approx(16.28, abs=0.01)
    worst = max(honaker_variances(t).to_date for t in range(1, 366)) * block
    assert worst == pytest.approx(21.61, abs=0.01)
    assert cover_variances(365).to_date * block == 27.0
    # Laplace: a block's scale h / eps, variance 2 h^2 / eps^2 against a period's 2 / eps^2: 81 times
    assert cover_variances(365).period * h**2 == 81


def test_exact_noise_variances_agree_with_their_distributions() -> None:
    q = math.exp(-1 / 3)
    support = np.arange(-400, 401)
    pmf = q ** np.abs(support)
    assert exact_noise_variance("discrete_laplace", Fraction(3)) == pytest.approx(
        float((support**2 * pmf).sum() / pmf.sum()), rel=1e-12
    )
    gauss = np.exp(-(support.astype(float) ** 2) / (2 * 0.3))
    assert exact_noise_variance("discrete_gaussian", Fraction(3, 10)) == pytest.approx(
        float((support**2 * gauss).sum() / gauss.sum()), rel=1e-12
    )
    assert exact_noise_variance("discrete_gaussian", Fraction(3, 10)) < 0.3  # below sigma^2 (CKS 2020)
    assert exact_noise_variance("discrete_laplace", Fraction(10**9)) == pytest.approx(2e18, rel=1e-9)


def test_variances_at_scale_the_designs_units_by_one_pieces_noise() -> None:
    block = exact_noise_variance("discrete_laplace", Fraction(9, 2))
    at = variances_at("running_totals", 365, "discrete_laplace", Fraction(9, 2))
    assert at.to_date == pytest.approx(block * honaker_variances(365).to_date)
    assert variances_at("per_period", 10, "discrete_gaussian", Fraction(50)).to_date == pytest.approx(10 * 50)
    with pytest.raises(InternalError):
        variances_at("both", 3, "discrete_gaussian", Fraction(1))
