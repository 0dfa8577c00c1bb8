"""Issue 23, finding 6: nothing overflows after the spend. Parameters derived from the spec are rounded at plan time
onto values the samplers accept (rounding only towards more noise); those computed after the spend from noisy values
(a quantile interval's levels q -/+ E / n_lo) are rounded outwards onto the public grid 1/D, so the interval draws'
temperature is the plan's scale times D whatever the noisy count.

Before the fix, a 16-digit epsilon made a level's denominator (and so the draw's temperature) overflow 2^63 for some
noisy counts: ValueError after the spend, exit 5 (4 of 12 releases on Adult at epsilon 0.1234567891234567)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dpcli.core.samplers import MAX_PARAM
from dpcli.mechanisms.quantiles import intervals
from dpcli.plan import quantiles
from dpcli.plan.model import make_plan
from dpcli.specs.grid import candidate_grid
from dpcli.specs.load import parse_spec

SPEC = """\
version: 1
dataset: adult
privacy: {{unit: row, neighbours: {neighbours}, {budget}}}
columns:
  age: {{type: int, bounds: [17, 90]}}
  sex: {{type: category, categories: [Female, Male]}}
statistics:
  - {{name: median_age, kind: quantile, column: age, q: [{levels}], interval: {{share: {share}}}{by}}}
"""
TRUTH = 32_561  # rows with an age in the Adult extract (tests/data/adult.csv)


@pytest.mark.parametrize(
    ("budget", "neighbours", "levels", "share", "by"),
    [
        ("epsilon: 0.1234567891234567", "add_remove", "0.5", "0.3", ""),
        ("rho: 0.0123456789123456", "add_remove", "0.1234567, 0.5", "0.3333333333333333", ""),
        ("epsilon: 0.9876543219876543", "replace", "0.25, 0.75", "0.1234567891234567", ", by: [sex]"),
    ],
)
def test_no_noisy_count_pushes_an_interval_draw_outside_the_samplers_domain(
    budget: str, neighbours: str, levels: str, share: str, by: str
) -> None:
    plan = make_plan(parse_spec(SPEC.format(budget=budget, neighbours=neighbours, levels=levels, share=share, by=by)))
    sp = plan.statistics[0]
    stat = sp.statistic
    column = plan.spec.columns["age"]
    _, spacing, m = candidate_grid(column, stat.step)  # type: ignore[union-attr]
    count = sp.component(quantiles.INTERVAL_COUNT)
    draw = sp.components[len(stat.levels) + 1]  # type: ignore[union-attr]
    halfwidth = count.halfwidth(quantiles.INTERVAL_PART_CONFIDENCE)
    bound = draw.halfwidth(quantiles.INTERVAL_PART_CONFIDENCE)
    # the draws' temperature is public and in the sampler's domain
    grid = quantiles.interval_grid(draw.scale)  # type: ignore[arg-type]
    t = draw.scale * grid  # type: ignore[operator]
    assert t.numerator <= MAX_PARAM
    assert t.denominator <= MAX_PARAM
    assert grid >= 2**24
    # every level any noisy count gives lies on the grid 1/D, outside the exact level (coverage kept)
    noisy_values = [*range(TRUTH - 300, TRUTH + 301), -(2**62), 0, 1, halfwidth, halfwidth + 1, 2**62]
    for q in stat.levels:  # type: ignore[union-attr]
        for noisy in noisy_values:
            low, high = quantiles.interval_levels(q, noisy, halfwidth, bound, grid)
            n_lo = noisy - halfwidth
            for level, exact in ((low, q - Fraction(bound, max(n_lo, 1))), (high, q + Fraction(bound, max(n_lo, 1)))):
                if level is not None:
                    assert grid % level.denominator == 0
                    assert 0 < level < 1
                    assert (level <= exact) if level is low else (level >= exact)
    # and the release's own draws run for those noisy counts (every 10th around the truth, and the extremes; bins
    # shaped like Adult's ages)
    rng = np.random.default_rng(0)
    bins = np.bincount(rng.binomial(m - 1, 0.3, TRUTH), minlength=m).reshape(1, -1).astype(np.int64)
    cells = 2 if by else 1
    counts = np.tile(bins, (cells, 1))
    values = np.zeros((cells, len(stat.levels)), dtype=np.int64)  # type: ignore[union-attr]
    for noisy in noisy_values[::10] + noisy_values[-6:]:
        low_ends, high_ends = intervals(
            counts, stat.levels, values, np.full(cells, noisy), halfwidth, draw.scale, bound, spacing, m,  # type: ignore[union-attr,arg-type]
            column.grid_bounds[1] - column.grid_bounds[0],
        )
        assert (low_ends >= 0).all()
        assert (high_ends <= column.grid_bounds[1] - column.grid_bounds[0]).all()


# ---------------------------------------------------------------------------------------------------------------
# Every statistic kind, through the real CLI release, with extreme but valid budgets, bounds and sizes: each run ends
# before the spend (exit 2, a refusal the spec's numbers earn) or releases (exit 0); none fails after it (exit 5).

WALK_COLUMNS = """\
columns:
  i: {type: int, bounds: [-1e15, 1e15]}
  x: {type: float, bounds: [-1e15, 1e15], precision: 1e6}
  c: {type: category, categories: [a, b, c]}
"""
WALK_STATISTICS = [
    "{name: n, kind: count, by: [c]%s}",
    "{name: h, kind: histogram, column: c%s}",
    "{name: s, kind: sum, column: x%s}",
    "{name: mu, kind: mean, column: x%s}",
    "{name: v, kind: variance, column: x%s}",
    "{name: sd, kind: std, column: x, by: [c]%s}",
    "{name: q, kind: quantile, column: i, q: [0.1234567, 0.5, 0.9], step: 4e9, interval: {share: 0.3}}",
    "{name: med, kind: median, column: x, step: 4e9, by: [c], interval: {share: 0.1234567891234567}}",
    "{name: top, kind: top_k, column: c, k: 2}",
    "{name: mo, kind: mode, column: c}",
]
GAUSSIAN_KINDS = ("n", "h", "s", "mu", "v", "sd")


def walk_spec(data: str, budget: str, gaussian: bool, only: int | None = None) -> str:
    mechanism = ", mechanism: gaussian" if gaussian else ""
    chosen = WALK_STATISTICS if only is None else [WALK_STATISTICS[only]]
    lines = [("  - " + (s % mechanism if "%s" in s else s)) for s in chosen]
    return (f"version: 1\ndataset: walk\ninput: {data}\nprivacy: {{unit: row, neighbours: add_remove, {budget}}}\n"
            + WALK_COLUMNS + "statistics:\n" + "\n".join(lines) + "\n")


def walk_data(path, rows: int, seed: int) -> str:
    """``rows`` rows: values at both bounds, near zero and random; keys of each kind and missing cells."""
    rng = np.random.default_rng(seed)
    values = [-(10**15), 10**15, 0, -1, 1, *rng.integers(-(10**15), 10**15, max(0, rows - 5)).tolist()][:rows]
    keys = ["a", "b", "c", ""]
    text = "i,x,c\n" + "".join(f"{v},{-v},{keys[k % 4]}\n" for k, v in enumerate(values))
    path.write_text(text)
    return str(path)


@pytest.mark.slow
def test_every_kind_with_extreme_parameters_never_fails_after_the_spend(tmp_path) -> None:
    from tests.helpers import run_in_process

    ledger = tmp_path / "ledger.jsonl"
    assert run_in_process("budget", "set", "walk", "--epsilon", "1000000", "--delta", "0.5",
                          "--ledger", ledger).returncode == 0
    pure = ["epsilon: 0.000001", "epsilon: 100", "epsilon: 0.1234567891234567"]
    zcdp = ["rho: 1e-12", "rho: 100", "rho: 0.0123456789123456"]
    runs: list[tuple[str, str, bool, int | None]] = []
    for rows, seed in ((0, 0), (1, 1), (3000, 2)):
        data = walk_data(tmp_path / f"d{rows}.csv", rows, seed)
        runs += [(data, b, False, None) for b in pure + zcdp]
        runs += [(data, b, True, None) for b in zcdp]
    extreme = walk_data(tmp_path / "extreme.csv", 200, 3)
    for k in range(len(WALK_STATISTICS)):  # each kind alone: the whole (smallest or largest) budget on it
        runs += [(extreme, b, False, k) for b in ("epsilon: 0.000001", "epsilon: 100", "rho: 1e-12", "rho: 100")]
        if WALK_STATISTICS[k].split(",")[0].split()[-1] in GAUSSIAN_KINDS:
            runs += [(extreme, b, True, k) for b in ("rho: 1e-12", "rho: 100")]
    outcomes = []
    for j, (data, budget, gaussian, only) in enumerate(runs):
        spec = tmp_path / f"spec{j}.yaml"
        spec.write_text(walk_spec(data, budget, gaussian, only))
        result = run_in_process("release", spec, "--ledger", ledger, "-o", tmp_path / f"out{j}.csv")
        outcomes.append((result.returncode, budget, gaussian, only, data, result.stderr.decode()[-300:]))
    failed = [o for o in outcomes if o[0] not in (0, 2)]
    assert not failed, failed
    # every kind reached its draws (released) in some run of its own, and most combined runs did
    assert {o[3] for o in outcomes if o[0] == 0} >= set(range(len(WALK_STATISTICS))), outcomes
    released = [o for o in outcomes if o[0] == 0 and o[3] is None]
    assert len(released) >= 9, [o for o in outcomes if o[0] != 0 and o[3] is None]
