"""The synth measurements' noise has the plan's law (issue 27): ``dpcli.run.synth.draw_state`` with the real discrete
Gaussian, many times over fixed exact marginals (the engine's scan of a small CSV), and the noisy − exact values of the
one-way marginals and of the selected pairs pooled per step.

With σ² the plan's (``one_way_sigma2``, ``pair_sigma2``), n pooled values X (independent: every cell of every draw
gets its own noise) and a mean known to be 0, Σ X² / σ² is χ²_n up to the discrete Gaussian's variance, which for
σ² ≥ 1 differs from σ² by less than 1e-8 relatively (Canonne, Kamath & Steinke 2020, Fact 18); each check's band is
the χ²_n quantiles at 1e-8 on each side, and the mean's is ±5.7 σ / √n (a normal tail of 1e-8 per side): four checks
per test, so a correct sampler fails with probability below 1e-7. Power: a variance off by 20 % lands outside every
band at these n (checked below on the plan's own numbers). No seeds, no retries.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpcli.engine import aggregate
from dpcli.plan.synth import make_synth_plan
from dpcli.postprocess.synth_model import compress_counts
from dpcli.run.synth import draw_state
from dpcli.specs.load import parse_spec

ALPHA = 1e-8
MEAN_Z = 5.7  # the normal's upper 1e-8 quantile is 5.61
DRAWS = 2_500

SPEC = """\
version: 1
dataset: town
privacy: {unit: row, neighbours: NEIGHBOURS, rho: 0.5}
columns:
  age:      {type: int, bounds: [18, 90]}
  sex:      {type: category, categories: [F, M]}
  employed: {type: bool}
synth:
  method: mst
  columns:
    age:      {bins: [18, 30, 45, 65, 91], values: uniform}
    sex:      {}
    employed: {missing: keep}
"""

ROWS = "age,sex,employed\n20,F,true\n35,M,false\n50,F,\n70,M,true\n25,M,true\n44,F,false\n101,X,maybe\n"


def _band(n: int) -> tuple[float, float]:
    """Σ X² / σ²'s acceptance band: the χ²_n quantiles at ALPHA on each side."""
    return float(stats.chi2.ppf(ALPHA, n)), float(stats.chi2.isf(ALPHA, n))


def _check(noise: np.ndarray, sigma2: Fraction, what: str) -> None:
    n = noise.size
    lo, hi = _band(n)
    # power: a variance 20 % off would fall outside the band (so the check can fail)
    assert 0.8 * n < lo, f"{what}: {n} values are too few for the band"
    assert hi < 1.2 * n, f"{what}: {n} values are too few for the band"
    statistic = float((noise.astype(np.float64) ** 2).sum()) / float(sigma2)
    assert lo <= statistic <= hi, (
        f"{what}: Σ X²/σ² = {statistic:.1f} outside [{lo:.1f}, {hi:.1f}] for n = {n} (sample variance "
        f"{statistic * float(sigma2) / n:.4f} vs σ² = {float(sigma2)})"
    )
    bound = MEAN_Z * math.sqrt(float(sigma2) / n)
    assert abs(float(noise.mean())) <= bound, f"{what}: mean {noise.mean():.4f} beyond ±{bound:.4f}"


@pytest.mark.slow  # ~11 s of CPU per relation (2,500 runs of the draw): make test-slow
@pytest.mark.parametrize("neighbours", ["add_remove", "replace"])
def test_measurements_have_the_plans_variance_and_no_bias(tmp_path: Path, neighbours: str) -> None:
    plan = make_synth_plan(parse_spec(SPEC.replace("NEIGHBOURS", neighbours)))
    data = tmp_path / "people.csv"
    data.write_text(ROWS, encoding="utf-8")
    exact = aggregate(plan.exact_plan, data)
    d = len(plan.sizes)
    counts = [np.asarray(e.counts, dtype=np.int64) for e in exact]
    pair_counts = {pair: counts[d + k] for k, pair in enumerate(plan.candidates)}
    one_way_noise, pair_noise = [], []
    for _ in range(DRAWS):
        state = draw_state(plan, exact)
        one_way_noise += [noisy - c for noisy, c in zip(state.one_way, counts[:d], strict=True)]
        # a pair is measured over the codes compressed from that draw's noisy one-ways (dpcli.run.synth)
        pair_noise += [noisy - compress_counts(pair_counts[p], [state.maps[p[0]], state.maps[p[1]]])
                       for p, noisy in zip(state.selected, state.pairs, strict=True)]
    _check(np.concatenate(one_way_noise), plan.one_way_sigma2, "one-way marginals")
    _check(np.concatenate(pair_noise), plan.pair_sigma2, "selected pair marginals")
