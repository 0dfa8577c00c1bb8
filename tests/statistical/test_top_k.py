"""Chi-squared conformance of a top_k's draw (dpcli.mechanisms.topk.choose) against the exact law of permute-and-flip
peeled k
times at the plan's temperature: P(ordered keys) = product over the draws of permute-and-flip's P(key | the keys left),
keys accepted with probability exp(-(best - count) / t), t = factor D / eps0 (factor 2 under replace). This checks the
plan's temperature is what reaches the sampler (a swapped fraction or a lost factor 2 fails); the sampler's own law is
tested in test_exponential_mechanism.py, whose harness and exact tuple law this file reuses.

No seeds, no retries; threshold scipy.stats.chi2.isf(1e-8, df) per check (the statistical checks of the suite stay
under 100, so a correct mechanism fails by chance with probability below 1e-6); the power check feeds the same
draws the law of the add/remove temperature (half this one) and requires a rejection.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from dpcli.mechanisms.topk import choose
from dpcli.plan.model import make_plan
from dpcli.specs.load import parse_spec
from tests.spec_builder import spec_text
from tests.statistical.test_exponential_mechanism import chi2_fit, peeling_probs

SPEC = spec_text(
    {"c": "{type: category, categories: [a, b, c, d]}"}, ["{name: top, kind: top_k, column: c, k: 2}"],
    privacy="epsilon: 1, neighbours: replace",
)


@pytest.mark.slow
def test_a_top_k_draws_ordered_keys_with_the_exact_law_of_its_temperature() -> None:
    sp = make_plan(parse_spec(SPEC)).statistics[0]
    t = sp.component("choice").scale
    assert t == 4  # eps0 = 1/2 per draw, replace: 2 D / eps0
    counts, n = np.array([6, 5, 3, 0]), 8_000
    seen = Counter(tuple(choose(sp, counts).tolist()) for _ in range(n))
    for rate, fits in [(1 / t, True), (Fraction(1, 2), False)]:
        probs = peeling_probs(counts.tolist(), Fraction(rate), 2)
        keys = list(probs)
        stat, threshold = chi2_fit(np.array([seen[key] for key in keys]), np.array([probs[key] for key in keys]))
        assert (stat < threshold) == fits, (rate, stat, threshold)
