"""Quantiles (issue 13): accuracy of the median on a census-like file, and the cost of a 10^5-candidate quantile.

    .venv/bin/python bench/bench_quantile.py                  # 299k rows, 1000 runs, 10^5 candidates, best of 3
    .venv/bin/python bench/bench_quantile.py --runs 5000 --repeat 5

1. Accuracy: a 299k-row file made by sampling tests/data/adult.csv's rows with replacement (seeded; the Adult
   extract, CC BY 4.0, tests/data/README.md), `{kind: median, column: age}` at epsilon 0.25 with age bounds 17-90.
   The engine's exact bins are computed once, then the mechanism runs ``--runs`` times on them
   (dpcli.mechanisms.quantiles.choose,
   the release's own draw): how often the released median equals the true one (from the sorted ages, in plain
   Python), and the mean absolute error. Beside it, the same draw with the utility -|b #{x < c} - a n| (rows equal to
   c counted below it, as in Smith 2011 and Tumult): the baseline the issue quotes (off by about half a year).
2. Cost: a median over 10^5 candidates (int column, bounds [0, 99999]) of 10^6 uniform rows: the mechanism on the
   exact bins (rank counts, utilities, the exact draw), best of ``--repeat``; beside it, in the same run, discrete
   Laplace noise on a histogram of the same 10^5 cells (what a histogram release draws), and their ratio.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl

from dpcli.core.samplers import exponential_choice
from dpcli.engine import aggregate
from dpcli.mechanisms import quantiles
from dpcli.mechanisms.noise import add_discrete_laplace
from dpcli.plan.model import make_plan
from dpcli.specs.grid import candidate_grid
from dpcli.specs.load import parse_spec

ROOT = Path(__file__).resolve().parent.parent
ADULT = ROOT / "tests" / "data" / "adult.csv"

MEDIAN_SPEC = """version: 1
dataset: bench
privacy: {{unit: row, neighbours: add_remove, epsilon: {eps}}}
columns:
  age: {{type: int, bounds: [17, 90]}}
statistics:
  - {{name: median_age, kind: median, column: age}}
"""

WIDE_SPEC = """version: 1
dataset: bench
privacy: {unit: row, neighbours: add_remove, epsilon: 1}
columns:
  x: {type: int, bounds: [0, 99999]}
statistics:
  - {name: median_x, kind: median, column: x}
"""


def true_median(ages: list[int]) -> int:
    """The value m with #{x < m} <= n/2 and #{x > m} <= n/2 (unique on a file with ties at the middle)."""
    ordered = sorted(ages)
    n = len(ordered)
    for m in sorted(set(ordered)):
        below = sum(1 for x in ordered if x < m) if n < 1000 else int(np.searchsorted(ordered, m, "left"))
        above = n - int(np.searchsorted(ordered, m, "right"))
        if 2 * below <= n and 2 * above <= n:
            return m
    raise AssertionError("no median")


def accuracy(rows: int, runs: int, eps: str, folder: Path) -> None:
    adult = pl.read_csv(ADULT, columns=["age"])
    sample = adult.sample(n=rows, with_replacement=True, seed=20261124)
    path = folder / "census.csv"
    sample.write_csv(path)
    plan = make_plan(parse_spec(MEDIAN_SPEC.format(eps=eps)))
    sp = plan.statistics[0]
    column = plan.spec.columns["age"]
    first, spacing, m = candidate_grid(column, None)
    bins = aggregate(plan, path)[0].counts
    truth = true_median(sample["age"].to_list())
    comp = sp.components[0]
    t0 = time.perf_counter()
    chosen = quantiles.choose(np.tile(bins, (runs, 1)), (Fraction(1, 2),), (comp.scale,), spacing, m)[:, 0]
    took = time.perf_counter() - t0
    released = first + chosen * spacing
    hits = int((released == truth).sum())
    # the baseline utility -|b lt - a n| (rows equal to c counted with those above): same sensitivity and scale
    lt, _, _ = quantiles.rank_counts(bins.reshape(1, -1), spacing, m)
    n = int(bins.sum())
    baseline = -np.abs(2 * lt[0] - n)
    assert comp.scale is not None
    other = np.array([first + int(exponential_choice(baseline, comp.scale.denominator, comp.scale.numerator)[0])
                      for _ in range(runs)])
    print(f"median age, {rows} rows sampled from Adult with replacement, epsilon {eps}, {m} candidates, {runs} runs")
    print(f"  true median {truth}; rank-error bound (95%) {float(comp.halfwidth(0.95) * comp.unit):.1f} rows")
    print(f"  dpcli (u = -|lt - gt|):        exact in {hits}/{runs} = {hits / runs:.2%}, "
          f"mean |error| {float(np.abs(released - truth).mean()):.3f} years ({took:.2f} s for the {runs} draws)")
    other_hits = int((other == truth).sum())
    print(f"  baseline (u = -|2 lt - n|):     exact in {other_hits}/{runs} = {other_hits / runs:.2%}, "
          f"mean |error| {float(np.abs(other - truth).mean()):.3f} years")


def cost(repeat: int, folder: Path) -> None:
    rng = np.random.default_rng(1)
    path = folder / "wide.csv"
    pl.DataFrame({"x": rng.integers(0, 100_000, 1_000_000)}).write_csv(path)
    plan = make_plan(parse_spec(WIDE_SPEC))
    sp = plan.statistics[0]
    column = plan.spec.columns["x"]
    _, spacing, m = candidate_grid(column, None)
    bins = aggregate(plan, path)[0].counts
    scale = sp.components[0].scale
    assert scale is not None and m == 100_000

    def best(fn) -> float:
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    mechanism = best(lambda: quantiles.choose(bins.reshape(1, -1), (Fraction(1, 2),), (scale,), spacing, m))
    laplace = best(lambda: add_discrete_laplace(bins, Fraction(2)))
    print(f"a median over {m} candidates (10^6 rows), best of {repeat}:")
    print(f"  exponential mechanism on the exact bins: {mechanism:.3f} s")
    print(f"  baseline, discrete Laplace on {m} histogram cells: {laplace:.3f} s; ratio {mechanism / laplace:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=299_000)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--epsilon", default="0.25")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dpcli-bench-quantile-") as tmp:
        print("building the files ...", file=sys.stderr)
        accuracy(args.rows, args.runs, args.epsilon, Path(tmp))
        cost(args.repeat, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
