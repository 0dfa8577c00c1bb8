"""Partition selection's release probability, measured: a key only one person holds, with that person's count r in
it, is released with probability P[r + Z >= tau] for Z the plan's discrete Laplace noise, and the plan's delta
bounds the chance that any of the g keys one person can bring is released.

Rules (as tests/statistical/test_sampler_conformance.py): no seeds and no retries. Each check draws N = 10^7
entries through the release path (dpcli.mechanisms.noise.draw_noise, the real samplers) and counts the released ones;
the
count K ~ Bin(N, p) is accepted when binom.ppf(A, N, p) <= K <= binom.isf(A, N, p) with A = 1e-8 per side, for p the
exact tail computed here from its closed form (P[Z >= m] = q^m / (1 + q), q = exp(-1/t), m >= 1). Three checks
(a count of 1 under unit: row; 1 and r = 2 under a person unit), two sides each: a correct mechanism fails this
file by chance with probability below 6 * 1e-8 < 1e-6.

Power: the acceptance interval at the plan's threshold and the ones at a threshold one lower or one higher are
disjoint (asserted), so a threshold off by one, a release of the exact count or noise of another scale would be
rejected with probability near 1.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpcli.engine import ExactStatistic
from dpcli.mechanisms.noise import draw_noise
from dpcli.plan.model import Plan, make_plan
from dpcli.specs.load import parse_spec
from tests.spec_builder import spec_text

N = 10_000_000
CHUNK = 1_000_000
A = 1e-8


def plan_of(unit: str, delta: str) -> Plan:
    # the largest delta a spec takes puts the release probability where 10^7 draws measure it well (~5e-3)
    text = spec_text(
        {"country": "{type: category, categories: open, max_length: 8}"}, ["{name: c, kind: count, by: [country]}"],
        privacy=f"unit: {unit}, neighbours: add_remove, epsilon: 1, delta: {delta}",
        dataset="selection_test", input="/nonexistent/never-read.csv",
    )
    return make_plan(parse_spec(text))


def tail(scale: Fraction, m: int) -> float:
    """P[Z >= m] for Z ~ discrete Laplace(scale)."""
    q = math.exp(-1 / float(scale))
    return q**m / (1 + q) if m >= 1 else 1 - q ** (1 - m) / (1 + q)


def acceptance(p: float) -> tuple[int, int]:
    return int(stats.binom.ppf(A, N, p)), int(stats.binom.isf(A, N, p))


def released(plan: Plan, count: int) -> int:
    """How many of N entries, each a key only one person holds with ``count`` in it, the release keeps."""
    keys = tuple((0, f"k{i}") for i in range(CHUNK))
    total = 0
    for _ in range(N // CHUNK):
        exact = ExactStatistic(np.full(CHUNK, count, dtype=np.int64), None, keys)
        (noisy,) = draw_noise(plan, [exact])
        assert noisy.keys is not None
        assert len(noisy.keys) == len(noisy.counts)
        assert np.all(noisy.counts >= plan.statistics[0].selection.threshold)
        total += len(noisy.keys)
    return total


@pytest.mark.slow
@pytest.mark.parametrize(
    ("unit", "delta"),
    [("row", "0.01"), ("{id: pid, max_rows: 4, max_groups: 2, max_rows_per_group: 2, missing_id: drop}", "0.01")],
)
def test_a_single_person_key_is_released_with_the_exact_tail_probability(unit, delta):
    plan = plan_of(unit, delta)
    sp = plan.statistics[0]
    sel, scale = sp.selection, sp.component("count").scale
    tau, g, r = sel.threshold, sel.keys, sel.per_key
    # the plan's delta bounds the person's g keys, each with count r (exact closed form, float: far from the bound)
    assert g * tail(scale, tau - r) <= float(sel.delta)
    for count in sorted({1, r}):
        p = tail(scale, tau - count)
        assert 1e-3 < p < 0.5  # measurable with N draws
        lo, hi = acceptance(p)
        # the test can fail: a threshold one step off moves the count out of the interval
        assert acceptance(tail(scale, tau - 1 - count))[0] > hi
        assert acceptance(tail(scale, tau + 1 - count))[1] < lo
        k = released(plan, count)
        assert lo <= k <= hi, (count, k, lo, hi, p * N)
