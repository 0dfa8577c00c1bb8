"""Coverage of a quantile's value-unit interval (``interval: {share: S}``; dpcli.mechanisms.quantiles.intervals, as
dpcli.mechanisms.noise.draw_quantiles runs it): over RUNS independent releases on the engine's exact bins, each level's
[ci_low, ci_high] must hold a q-quantile of the rows (some v with #{x < v} <= q n <= #{x <= v}) in at least 95% of
them. Checked with a fixed binomial threshold: at a true miss rate of 5% the misses exceed
scipy.stats.binom.isf(ALPHA, RUNS, 0.05) with probability <= ALPHA (1e-6 split over the checks); no seeds, no
retries. The data: heavy ties (ages-like), and distinct values; at spacing 1 and at a coarser step. A power check
runs the same harness on intervals without their widening (the draws at q itself) and requires it to fail, and a
width check requires the interval to be far narrower than the column's range (coverage by [lo, hi] proves nothing).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpcli.engine import aggregate
from dpcli.mechanisms import quantiles
from dpcli.mechanisms.noise import draw_quantiles
from dpcli.plan.model import make_plan
from dpcli.specs.grid import candidate_grid
from dpcli.specs.load import parse_spec

RUNS = 2000
CHECKS = 12  # binomial checks in this file: each at ALPHA / CHECKS
ALPHA = 1e-6
THRESHOLD = int(stats.binom.isf(ALPHA / CHECKS, RUNS, 0.05))
LEVELS = "0.1, 0.5, 0.9"

SPEC = """version: 1
dataset: d
privacy: {{unit: row, neighbours: add_remove, epsilon: {epsilon}}}
columns:
  x: {{type: int, bounds: [0, 99]}}
statistics:
  - {{name: q, kind: quantile, column: x, q: [{levels}], interval: {{share: 0.5}}{step}}}
"""

RNG = np.random.default_rng()  # the data only: any data must be covered


def tied_rows() -> list[int]:
    """3000 rows on 40 values (many rows per value, like ages), skewed."""
    return sorted(int(v) for v in np.minimum(RNG.geometric(0.08, 3000) + 20, 99))


def distinct_rows() -> list[int]:
    """90 distinct values: no ties (released at a larger epsilon: the rank bound must stay well below n)."""
    return sorted(int(v) for v in RNG.choice(100, 90, replace=False))


def covered(rows: list[int], q: float, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Per run: does [low, high] hold a q-quantile v of the rows (#{x < v} <= q n <= #{x <= v})? The q-quantiles
    form [q_low, q_high] on the integer grid; the intervals meet iff low <= q_high and high >= q_low."""
    x = np.asarray(rows)
    n = len(x)
    grid = np.arange(0, 100)
    below = np.searchsorted(x, grid, side="left")  # #{x < v}
    through = np.searchsorted(x, grid, side="right")  # #{x <= v}
    ok = grid[(below <= q * n) & (q * n <= through)]
    return (low <= ok.max()) & (high >= ok.min())


def releases(
    tmp_path: Path, rows: list[int], step: str, epsilon: int, widen: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """(ci_low, ci_high) in grid units, RUNS x levels: RUNS releases of the plan on the engine's bins of ``rows``."""
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{x}\n" for x in rows))
    plan = make_plan(parse_spec(SPEC.format(levels=LEVELS, step=step, epsilon=epsilon)))
    sp = plan.statistics[0]
    column = plan.spec.columns["x"]
    exact = aggregate(plan, tmp_path / "d.csv")[0]
    tiled = dataclasses.replace(exact, counts=np.tile(exact.counts, RUNS))  # RUNS identical cells, independent draws
    if widen:
        noisy = draw_quantiles(column, sp, tiled)
        assert noisy.interval is not None
        assert noisy.choices is not None
        first, spacing, _ = candidate_grid(column, sp.statistic.step)  # type: ignore[union-attr]
        values = first + noisy.choices * spacing
        low, high = (first + end for end in noisy.interval)
        assert (low <= values).all()
        assert (values <= high).all()
        return low, high
    # the power check's broken mechanism: the interval's draws at the level itself (no rank bound, no count)
    first, spacing, m = candidate_grid(column, sp.statistic.step)  # type: ignore[union-attr]
    counts = np.asarray(tiled.counts).reshape(RUNS, -1)
    draw = sp.components[len(sp.statistic.levels) + 1]  # type: ignore[union-attr]
    levels = sp.statistic.levels  # type: ignore[union-attr]
    values = quantiles.choose(counts, levels, tuple(c.scale for c in sp.components[: len(levels)]), spacing, m)
    n = counts.sum(axis=1)
    low, high = quantiles.intervals(counts, levels, values, n, 0, draw.scale, 0, spacing, m, 99)  # type: ignore[arg-type]
    return first + low, first + high


@pytest.mark.slow
@pytest.mark.parametrize(("data", "step"), [("tied", ""), ("tied", ", step: 3"), ("distinct", "")])
def test_each_level_is_covered_in_at_least_95_percent(tmp_path: Path, data: str, step: str) -> None:
    rows = tied_rows() if data == "tied" else distinct_rows()
    low, high = releases(tmp_path, rows, step, 2 if data == "tied" else 30)
    for j, q in enumerate((0.1, 0.5, 0.9)):
        misses = int((~covered(rows, q, low[:, j], high[:, j])).sum())
        assert misses <= THRESHOLD, (q, misses, THRESHOLD)
    # not vacuous: the interval is drawn, far inside the column's range (99 grid units)
    assert float((high - low).mean()) < 40, float((high - low).mean())


@pytest.mark.slow
def test_the_harness_rejects_intervals_without_their_rank_bound(tmp_path: Path) -> None:
    rows = distinct_rows()
    low, high = releases(tmp_path, rows, "", 2, widen=False)  # draws spread over tens of candidates
    misses = [int((~covered(rows, q, low[:, j], high[:, j])).sum()) for j, q in enumerate((0.1, 0.5, 0.9))]
    assert max(misses) > THRESHOLD, (misses, THRESHOLD)
