"""Fast tests of dpcli.core.samplers: arguments, shapes, the CSPRNG, rare code paths and quick goodness of fit.

Statistical rules (shared with tests/statistical/test_sampler_conformance.py): no seeds, no retries; every
chi-squared bin expects at least 20 draws; each statistical check uses ALPHA = 1e-8, and the two files
together hold fewer than 50 such checks, so the suite fails by chance with probability below 1e-6.
"""

from __future__ import annotations

import copy
import itertools
import math
import os
import pickle
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpcli.core import samplers
from dpcli.core.samplers import (
    RandomSource,
    bernoulli_exp,
    default_source,
    discrete_gaussian,
    discrete_laplace,
    geometric_exp,
)

ALPHA = 1e-8
MIN_EXPECTED = 20


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def chi2_against(counts, probs) -> tuple[float, float]:
    """(statistic, rejection threshold at ALPHA) for observed counts against exact bin probabilities."""
    counts = np.asarray(counts, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    assert abs(probs.sum() - 1) < 1e-9
    expected = probs * counts.sum()
    assert expected.min() >= MIN_EXPECTED, expected.min()
    stat = float(((counts - expected) ** 2 / expected).sum())
    return stat, float(stats.chi2.isf(ALPHA, len(probs) - 1))


def laplace_mass(lo: float, hi: float, scale: Fraction) -> float:
    """P(lo <= X <= hi) for the discrete Laplace (closed form), lo/hi integers or +-inf."""
    lam = float(1 / Fraction(scale))
    q = math.exp(-lam)

    def positive(a, b):  # sum over a..b of q**x, a >= 1, times (1-q)/(1+q)
        if a > b:
            return 0.0
        width = math.inf if b == math.inf else b + 1 - a
        return math.exp(-lam * a) * (-math.expm1(-lam * width)) / (1 + q)

    total = positive(max(lo, 1), hi)
    total += positive(max(-hi, 1), -lo)
    if lo <= 0 <= hi:
        total += -math.expm1(-lam) / (1 + q)
    return total


def binned_test(samples, edges, mass) -> tuple[float, float]:
    """Bins (-inf, e0), [e0, e1), ..., [e_last, inf); outer bins absorb the exact tail mass and are merged
    inwards until they expect MIN_EXPECTED draws. ``mass(lo, hi)`` is P(lo <= X <= hi)."""
    n = len(samples)
    edges = [int(e) for e in edges]

    def probs_of(ed):
        bounds = [-math.inf, *ed, math.inf]
        return [mass(lo, hi - 1) for lo, hi in itertools.pairwise(bounds)]  # inf - 1 == inf

    probs = probs_of(edges)
    # Unimodal distributions: merge the tail bin inwards while it or its neighbour expects too few draws.
    while min(probs[0], probs[1]) * n < MIN_EXPECTED:
        edges.pop(0)
        first = probs.pop(0)
        probs[0] += first
    while min(probs[-1], probs[-2]) * n < MIN_EXPECTED:
        edges.pop()
        last = probs.pop()
        probs[-1] += last
    counts = np.bincount(np.searchsorted(np.array(edges, dtype=np.int64), samples, side="right"), minlength=len(probs))
    return chi2_against(counts, probs)


class ScriptedSource(RandomSource):
    """A real RandomSource whose next uint64 words are taken from a script first (to force rare paths)."""

    def __init__(self, words):
        super().__init__()
        self.script = [int(w) for w in words]

    def uint64(self, n):
        out = super().uint64(n)
        take = min(n, len(self.script))
        if take:
            out[:take] = np.array(self.script[:take], dtype=np.uint64)
            del self.script[:take]
        return out


# ----------------------------------------------------------------------------------------------
# argument validation, dtypes and sizes
# ----------------------------------------------------------------------------------------------

BAD_VALUES = [0, -1, Fraction(-1, 2), Fraction(0), Fraction(2**48 + 1), Fraction(1, 2**48 + 1), Fraction(2**48 + 1, 3)]


@pytest.mark.parametrize("sampler", [discrete_laplace, discrete_gaussian])
@pytest.mark.parametrize("value", BAD_VALUES)
def test_bad_scale_is_value_error(sampler, value):
    with pytest.raises(ValueError, match=r"must be > 0|needs numerator and denominator <= 2\*\*48"):
        sampler(value, 10)


@pytest.mark.parametrize("sampler", [discrete_laplace, discrete_gaussian])
@pytest.mark.parametrize("value", [1.0, 0.5, "1", True, None, np.float64(2.0)])
def test_non_rational_scale_is_type_error(sampler, value):
    with pytest.raises(TypeError):
        sampler(value, 10)


@pytest.mark.parametrize("sampler", [discrete_laplace, discrete_gaussian])
@pytest.mark.parametrize("value", [Fraction(2**48), Fraction(1, 2**48), Fraction(2**48 - 1, 2**48), 3, Fraction(7, 3)])
def test_extreme_but_valid_scales(sampler, value):
    out = sampler(value, 2000)
    assert out.dtype == np.int64
    assert out.shape == (2000,)


@pytest.mark.parametrize("sampler", [discrete_laplace, discrete_gaussian])
def test_bad_size(sampler):
    with pytest.raises(ValueError, match="size must be >= 0"):
        sampler(Fraction(1), -1)
    with pytest.raises(TypeError):
        sampler(Fraction(1), 2.0)
    with pytest.raises(TypeError):
        sampler(Fraction(1), True)


@pytest.mark.parametrize("sampler", [discrete_laplace, discrete_gaussian])
@pytest.mark.parametrize("size", [0, 1, 2, 1023, 1024, 1025, 5000])
def test_dtype_and_size(sampler, size):
    out = sampler(Fraction(3, 2), size, source=RandomSource())
    assert isinstance(out, np.ndarray)
    assert out.dtype == np.int64
    assert out.shape == (size,)
    assert out.flags.writeable
    assert out.flags.owndata


def test_size_accepts_numpy_int():
    assert discrete_laplace(Fraction(1), np.int64(7)).shape == (7,)


def test_bernoulli_exp_shapes_and_validation():
    assert bernoulli_exp(1, 2).shape == ()
    assert bernoulli_exp(1, 2).dtype == bool
    out = bernoulli_exp(np.array([[0, 1, 2]]), np.array([[1], [3]]))
    assert out.shape == (2, 3)
    assert out.dtype == bool
    assert bernoulli_exp(np.zeros(0, dtype=np.int64), 1).shape == (0,)
    assert bernoulli_exp(np.zeros(1000, dtype=np.int64), 7).all()  # exp(0) = 1
    assert bernoulli_exp([0, 5], [1, 1]).shape == (2,)
    for num, den in [(-1, 1), (1, 0), (1, -3), (2**63, 1), (1, 2**63), (np.array([1, -1]), 1)]:
        with pytest.raises(ValueError, match=r"(num|den) must be in \["):
            bernoulli_exp(num, den)
    for num, den in [(0.5, 1), (1, 2.0), (True, 1), (Fraction(1, 2), 1), (np.array([0.5]), 1)]:
        with pytest.raises(TypeError):
            bernoulli_exp(num, den)


def test_geometric_exp_validation():
    assert geometric_exp(1, 1, 0).shape == (0,)
    out = geometric_exp(3, 7, 100)
    assert out.dtype == np.int64
    assert out.shape == (100,)
    assert (out >= 0).all()
    for num, den, size in [(0, 1, 5), (1, 0, 5), (-1, 2, 5), (1, 1, -1), (2**48 + 1, 1, 5), (1, 2**48 + 1, 5)]:
        with pytest.raises(ValueError, match=r"must be >= 1|size must be >= 0|<= 2\*\*48"):
            geometric_exp(num, den, size)
    with pytest.raises(TypeError):
        geometric_exp(0.5, 1, 5)
    # A ratio is reduced before the 2**48 check.
    assert geometric_exp(2**49, 2**49, 5).shape == (5,)


def test_integers_below_validation_and_shapes():
    src = RandomSource()
    for bad in [0, -1, 2**63, np.array([3, 0]), [5, 2**63]]:
        with pytest.raises(ValueError, match=r"every bound must be in \[1, 2\*\*63\)"):
            src.integers_below(bad, size=3)
    for bad in [2.5, np.array([1.5]), True]:
        with pytest.raises(TypeError):
            src.integers_below(bad)
    assert src.integers_below(5).shape == ()
    out = src.integers_below(5, size=1000)
    assert out.dtype == np.int64
    assert out.shape == (1000,)
    assert out.min() >= 0
    assert out.max() < 5
    bounds = np.array([1, 2, 3, 10**12, 2**63 - 1] * 200)
    out = src.integers_below(bounds)
    assert out.shape == bounds.shape
    assert (out >= 0).all()
    assert (out < bounds).all()
    assert (out[bounds == 1] == 0).all()
    assert src.integers_below(np.array([[3, 4], [5, 6]])).shape == (2, 2)
    assert src.integers_below(7, size=(2, 3)).shape == (2, 3)
    assert src.integers_below(7, size=0).shape == (0,)


def test_random_bytes_and_uint64():
    src = RandomSource()
    assert src.random_bytes(0) == b""
    data = src.random_bytes(1000)
    assert isinstance(data, bytes)
    assert len(data) == 1000
    words = src.uint64(3000)
    assert words.dtype == np.uint64
    assert words.shape == (3000,)
    assert words.flags.writeable
    assert len(np.unique(words)) == 3000  # a collision among 3000 random 64-bit words: p < 2**-40
    with pytest.raises(ValueError, match="n must be >= 0"):
        src.uint64(-1)
    with pytest.raises(TypeError):
        src.random_bytes(1.0)


def test_source_cannot_be_copied():
    src = RandomSource()
    for action in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(TypeError):
            action(src)


def test_default_source_is_shared():
    assert default_source() is default_source()
    assert isinstance(default_source(), RandomSource)


def test_rekeys_after_byte_limit():
    src = RandomSource()
    src._REKEY_BYTES = 4096
    first_encryptor = src._encryptor
    data = src.random_bytes(10_000)
    assert len(data) == 10_000
    assert src._encryptor is not first_encryptor
    assert src._used <= 4096


# ----------------------------------------------------------------------------------------------
# CSPRNG: fork safety and exactly uniform integers
# ----------------------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_rekeys():
    src = RandomSource()
    src.random_bytes(64)
    default_source().random_bytes(64)
    children = []
    for _ in range(2):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: report 32 bytes from each source, then leave without running any cleanup
            try:
                os.close(r)
                os.write(w, src.random_bytes(32) + default_source().random_bytes(32))
            finally:
                os._exit(0)
        os.close(w)
        children.append((pid, r))
    outputs = []
    for pid, r in children:
        chunks = []
        while chunk := os.read(r, 4096):
            chunks.append(chunk)
        os.close(r)
        os.waitpid(pid, 0)
        outputs.append(b"".join(chunks))
    assert all(len(o) == 64 for o in outputs)
    parent_next = src.random_bytes(32) + default_source().random_bytes(32)
    # Without re-keying, both children and the parent would continue the same keystream: all equal.
    assert outputs[0][:32] != outputs[1][:32]
    assert outputs[0][32:] != outputs[1][32:]
    assert parent_next[:32] not in (outputs[0][:32], outputs[1][:32])
    assert parent_next[32:] not in (outputs[0][32:], outputs[1][32:])


def test_pid_change_rekeys():
    """The PID check re-keys even when a fork bypassed os.register_at_fork (e.g. a raw fork syscall)."""
    src = RandomSource()
    before = src._encryptor
    src._pid = -1
    src.random_bytes(8)
    assert src._encryptor is not before
    assert src._pid == os.getpid()


def test_integers_below_small_bound_is_uniform():
    n = 1_000_000
    out = RandomSource().integers_below(7, size=n)
    stat, threshold = chi2_against(np.bincount(out, minlength=7), [1 / 7] * 7)
    assert stat < threshold


def test_integers_below_large_bounds_are_uniform():
    """Bounds where plain ``w % bound`` is visibly biased: the harness must see that, and our draws must pass."""
    src = RandomSource()
    n = 1_000_000
    bound = 3 * 2**61  # 2**64 = 2*bound + 2**62: plain modulo puts 3/8 of the mass in each of the first two thirds
    stat, threshold = chi2_against(np.bincount(src.integers_below(bound, size=n) >> 61, minlength=3), [1 / 3] * 3)
    assert stat < threshold
    naive = src.uint64(n) % np.uint64(bound)
    stat, threshold = chi2_against(np.bincount((naive >> np.uint64(61)).astype(np.int64), minlength=3), [1 / 3] * 3)
    assert stat > threshold  # the test has power against modulo bias

    bound = 2**62 + 1  # near 2**62, not a power of two: 8 bins of 2**59 values, the last holding one more
    out = src.integers_below(bound, size=n)
    bins = np.minimum(out >> 59, 7)
    probs = [Fraction(2**59, bound)] * 7 + [Fraction(2**59 + 1, bound)]
    stat, threshold = chi2_against(np.bincount(bins, minlength=8), [float(p) for p in probs])
    assert stat < threshold


def test_integers_below_array_of_bounds_is_uniform():
    src = RandomSource()
    reps = 200_000
    bounds = np.tile(np.array([3, 5, 6, 1_000_003]), reps)
    out = src.integers_below(bounds)
    for b in (3, 5, 6):
        stat, threshold = chi2_against(np.bincount(out[bounds == b], minlength=b), [1 / b] * b)
        assert stat < threshold
    big = out[bounds == 1_000_003]
    stat, threshold = chi2_against(np.bincount(big * 10 // 1_000_003, minlength=10), _decile_probs(1_000_003))
    assert stat < threshold


def _decile_probs(bound: int) -> list[float]:
    """Exact probability that u * 10 // bound == i for u uniform in [0, bound)."""
    counts = [0] * 10
    for i in range(10):
        lo = -(-i * bound // 10)  # smallest u with u*10 >= i*bound
        hi = -(-(i + 1) * bound // 10)
        counts[i] = hi - lo
    return [c / bound for c in counts]


def test_rejected_word_is_redrawn():
    bound = 3 * 2**61  # words >= 2*bound lie in the incomplete block
    src = ScriptedSource([2**64 - 1, 2 * bound, 5])
    assert samplers._below_scalar(src, bound, 1)[0] == 5
    src = ScriptedSource([2**64 - 1, 12, 34])
    assert src.integers_below(np.array([bound, 7])).tolist() == [34, 5]
    src = ScriptedSource([2**64 - 1, 3, 2**64 - 2, 9])
    assert samplers._below_array(src, np.array([bound, bound], dtype=np.uint64)).tolist() == [9, 3]


# ----------------------------------------------------------------------------------------------
# rare paths of the exact Bernoulli samplers
# ----------------------------------------------------------------------------------------------


def test_bern_exp1_series_tail():
    """u == 0 means K > 9; the series then continues with Bernoulli(1/10), Bernoulli(1/11), ..."""
    runs = 3000
    successes = sum(bool(samplers._bern_exp1(ScriptedSource([0]), 1)[0][0]) for _ in range(runs))
    # P(K odd | K > 9) = sum over odd k >= 11 of P(K = k | K > 9), with P(K > k | K > 9) = 9!/k!.
    p = sum(Fraction(math.factorial(9), math.factorial(k - 1)) - Fraction(math.factorial(9), math.factorial(k))
            for k in range(11, 60, 2))
    assert stats.binomtest(successes, runs, float(p)).pvalue > ALPHA


@pytest.mark.parametrize(("num", "den"), [(1, 3), (5, 2), (0, 1)])
def test_scalar_fallback_is_exact(num, den):
    src = RandomSource()
    runs = 20_000
    successes = sum(samplers._bern_exp_scalar(src, num, den) for _ in range(runs))
    p = math.exp(-num / den)
    if p == 1:
        assert successes == runs
    else:
        assert stats.binomtest(successes, runs, p).pvalue > ALPHA


def test_bernoulli_exp_huge_denominators():
    """den * K above 2**63 splits the draw into Bernoulli(r/den) and Bernoulli(1/K)."""
    n = 200_000
    den = 2**62 + 1
    num = den - 1  # gamma just below 1: rounds with K >= 2 overflow den*K
    out = bernoulli_exp(np.full(n, num, dtype=np.int64), den)
    assert stats.binomtest(int(out.sum()), n, math.exp(-num / den)).pvalue > ALPHA
    dens = np.tile(np.array([den, 3], dtype=np.int64), n // 2)
    nums = np.tile(np.array([num, 7], dtype=np.int64), n // 2)
    out = bernoulli_exp(nums, dens)
    assert stats.binomtest(int(out[0::2].sum()), n // 2, math.exp(-num / den)).pvalue > ALPHA
    assert stats.binomtest(int(out[1::2].sum()), n // 2, math.exp(-7 / 3)).pvalue > ALPHA


def test_bernoulli_exp_per_lane_parameters():
    n = 300_000
    nums = np.tile(np.array([1, 5, 0, 40]), n)
    dens = np.tile(np.array([3, 2, 9, 16]), n)
    out = bernoulli_exp(nums, dens)
    for j, (a, b) in enumerate([(1, 3), (5, 2), (0, 9), (40, 16)]):
        k = int(out[j::4].sum())
        if a == 0:
            assert k == n
        else:
            assert stats.binomtest(k, n, math.exp(-a / b)).pvalue > ALPHA


def test_gaussian_decides_huge_proposals_exactly(monkeypatch):
    """A proposal whose exponent does not fit in int64 goes through the Python-integer path."""
    real = samplers._signed_geometric
    calls = []

    def fake(src, t, s, m):
        y, keep = real(src, t, s, m)
        if not calls:
            y[:3] = [2**40, -(2**40), 2**62]
            keep[:3] = True
        calls.append(m)
        return y, keep

    monkeypatch.setattr(samplers, "_signed_geometric", fake)
    out = discrete_gaussian(Fraction(100), 2000)
    assert out.shape == (2000,)
    assert np.abs(out).max() < 2**20  # acceptance probability of those proposals is below exp(-2**40)
    assert calls  # the patched proposal ran


def test_gaussian_small_sigma_tail_proposal(monkeypatch):
    """sigma < 1 (d > 1): a huge proposal also takes the exact Python path."""
    real = samplers._signed_geometric
    calls = []

    def fake(src, t, s, m):
        y, keep = real(src, t, s, m)
        if not calls:
            y[0] = 2**50
            keep[0] = True
        calls.append(m)
        return y, keep

    monkeypatch.setattr(samplers, "_signed_geometric", fake)
    out = discrete_gaussian(Fraction(1, 2**40), 5000)
    assert calls
    assert (out == 0).all()  # sigma = 2**-20: any nonzero value has probability < exp(-2**39)


def test_geometric_overflow_is_reported(monkeypatch):
    monkeypatch.setattr(samplers, "_geometric_e1", lambda src, n: np.full(n, 2**40, dtype=np.int64))
    with pytest.raises(OverflowError):
        discrete_laplace(Fraction(2**40), 5)


def test_module_uses_no_float_sampler():
    source = Path(samplers.__file__).read_text(encoding="utf-8")
    banned = ["np." + "random", "random." + "random(", "." + "normal(", "." + "gauss(",
              "float(", "float64", "np.exp(", "math.exp("]
    for word in banned:
        assert word not in source, word
    assert "import random" not in source


# ----------------------------------------------------------------------------------------------
# quick goodness of fit (the thorough version is tests/statistical/test_sampler_conformance.py)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("scale", "width"), [(Fraction(1), 1), (Fraction(3, 2), 1), (Fraction(1000), 40)])
def test_discrete_laplace_fits_exact_pmf(scale, width):
    n = 1_000_000
    samples = discrete_laplace(scale, n)
    edges = np.arange(-40 * int(scale) - 40, 40 * int(scale) + 41, width) - width // 2
    stat, threshold = binned_test(samples, edges, lambda lo, hi: laplace_mass(lo, hi, scale))
    assert stat < threshold


def test_discrete_gaussian_quick_fit():
    n = 1_000_000
    samples = discrete_gaussian(Fraction(9, 4), n)
    xs = np.arange(-60, 61)
    kernel = [math.exp(-x * x / 4.5) for x in xs]
    z = sum(kernel)
    pmf = dict(zip(xs.tolist(), [k / z for k in kernel], strict=True))

    def mass(lo, hi):
        lo = max(lo, -60)
        hi = min(hi, 60)
        return sum(pmf[x] for x in range(int(lo), int(hi) + 1)) if lo <= hi else 0.0

    stat, threshold = binned_test(samples, np.arange(-15, 17), mass)
    assert stat < threshold


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


# --- the exponential mechanism (distribution: tests/statistical/test_exponential_mechanism.py) ----------------


def test_exponential_choice_peels_distinct_indices_in_draw_order() -> None:
    from dpcli.core.samplers import exponential_choice

    picks = exponential_choice([5, 1, 9, 3], 1, 1, k=4)
    assert picks.dtype == np.int64
    assert sorted(picks.tolist()) == [0, 1, 2, 3]
    assert exponential_choice([5, 1], 1, 1, k=0).size == 0


def test_exponential_choice_takes_a_far_best_score_first() -> None:
    from dpcli.core.samplers import exponential_choice

    # any other first draw has probability below exp(-10**6): never, in any run
    assert exponential_choice([0, -(10**6), 10**6, -(10**30)], 1, 1, k=2).tolist()[0] == 2
    assert exponential_choice(np.array([-(10**6), 0]), 1, 1).tolist() == [1]


def test_exponential_sample_at_rate_zero_is_uniform_support() -> None:
    from dpcli.core.samplers import exponential_sample

    draws = exponential_sample([0, -(10**40), 7], 0, 1, 3000)
    assert set(draws.tolist()) == {0, 1, 2}  # each index has probability 1/3: all three appear (miss: 3 * (2/3)**3000)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda f: f([1, 2], 1, 0), ValueError),
        (lambda f: f([1, 2], -1, 1), ValueError),
        (lambda f: f([], 1, 1), ValueError),
        (lambda f: f([1, 2], 1.0, 1), TypeError),
        (lambda f: f([1, 2], 1, 1, k=3), ValueError),
    ],
)
def test_exponential_choice_refuses_bad_arguments(call, error) -> None:
    from dpcli.core.samplers import exponential_choice

    with pytest.raises(error):
        call(exponential_choice)


def test_permute_and_flip_takes_int64_gaps_with_a_zero_and_saturates_scores() -> None:
    from dpcli.core.samplers import GAP_CAP, permute_and_flip, saturated_gaps

    # int64 scores spanning the whole range: exact uint64 differences, saturated
    assert saturated_gaps(np.array([5, -(2**63), 2**63 - 1], dtype=np.int64)).tolist() == [GAP_CAP, GAP_CAP, 0]
    assert saturated_gaps(np.array([7, 3, 7], dtype=np.int64)).tolist() == [0, 4, 0]
    assert saturated_gaps([10**30, 0, -(10**40)]).tolist() == [0, GAP_CAP, GAP_CAP]
    assert permute_and_flip(np.array([GAP_CAP, 0, GAP_CAP], dtype=np.int64), 1, 1) == 1  # never a capped gap
    with pytest.raises(ValueError, match="gaps must be a non-empty 1-d int64 array"):
        permute_and_flip(np.array([0, 1], dtype=np.int32), 1, 1)
    with pytest.raises(ValueError, match=r"<= 2\*\*48"):
        permute_and_flip(np.array([0, 1], dtype=np.int64), 1, 2**49 + 1)  # outside the geometric sampler's domain
