#!/usr/bin/env python3
"""Consistent counts (issue 14, dpcli.postprocess.consistency) against the raw noisy ones, on tests/data/adult.csv.

Five count statistics of one release: the total, counts by sex, by sex x race, an age histogram (10-year bins
covering every age, 17..91) and the age histogram by sex x race (the finest table). Every row of Adult has a sex, a
race and an age in the bins, so the five count the same rows and are consistent-able. Each gets discrete Laplace
noise with the release's epsilon split evenly (each statistic has L1 sensitivity 1 under add/remove-one-row), the
same sampler a release uses (dpcli.mechanisms.noise.add_discrete_laplace), on the exact aggregates, --repeat times.

Prints the mean absolute error per statistic (raw noisy table vs consistent table, and consistent + non-negative),
averaged over cells and repetitions, and the ratio consistent / raw. The MAE should fall: every margin is
re-estimated from every measurement of it.

Usage::

    .venv/bin/python bench/bench_consistency.py                   # epsilon 1, 200 repetitions
    .venv/bin/python bench/bench_consistency.py --epsilon 0.5 --repeat 500
"""

from __future__ import annotations

import argparse
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl

from dpcli.mechanisms.noise import add_discrete_laplace
from dpcli.postprocess.consistency import Measurement, make_consistent, noise_variance

ADULT = Path(__file__).resolve().parent.parent / "tests" / "data" / "adult.csv"
AGE_EDGES = list(range(17, 98, 10))  # [17, 27), ..., [87, 97): ages are 17..90


def exact_tables() -> tuple[dict[str, int], dict[str, tuple[tuple[str, ...], np.ndarray]]]:
    frame = pl.read_csv(ADULT, columns=["age", "sex", "race"])
    sexes = sorted(frame["sex"].unique().to_list())
    races = sorted(frame["race"].unique().to_list())
    ages = frame["age"].to_numpy()
    assert ages.min() >= AGE_EDGES[0] and ages.max() < AGE_EDGES[-1], "the bins must cover every age"
    sex = np.searchsorted(sexes, frame["sex"].to_numpy())
    race = np.searchsorted(races, frame["race"].to_numpy())
    age = np.searchsorted(AGE_EDGES, ages, side="right") - 1
    sizes = {"sex": len(sexes), "race": len(races), "age": len(AGE_EDGES) - 1}
    finest = np.zeros((sizes["sex"], sizes["race"], sizes["age"]), dtype=np.int64)
    np.add.at(finest, (sex, race, age), 1)
    tables = {
        "total": ((), np.array([finest.sum()])),
        "by_sex": (("sex",), finest.sum(axis=(1, 2))),
        "by_sex_race": (("sex", "race"), finest.sum(axis=2).reshape(-1)),
        "age_histogram": (("age",), finest.sum(axis=(0, 1))),
        "age_by_sex_race": (("sex", "race", "age"), finest.reshape(-1)),
    }
    return sizes, tables


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilon", type=Fraction, default=Fraction(1))
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    sizes, tables = exact_tables()
    scale = len(tables) / args.epsilon  # sensitivity 1 over each statistic's share
    variance = noise_variance("discrete_laplace", scale, None)
    errors: dict[str, dict[str, float]] = {name: {"raw": 0.0, "consistent": 0.0, "nonneg": 0.0} for name in tables}
    for _ in range(args.repeat):
        measurements = [
            Measurement(name, dims, add_discrete_laplace(exact, scale), variance)
            for name, (dims, exact) in tables.items()
        ]
        fitted = make_consistent(measurements, sizes)
        clipped = make_consistent(measurements, sizes, nonnegative=True)
        for m in measurements:
            exact = tables[m.name][1]
            errors[m.name]["raw"] += float(np.abs(m.values - exact).mean())
            errors[m.name]["consistent"] += float(np.abs(fitted[m.name] - exact).mean())
            errors[m.name]["nonneg"] += float(np.abs(clipped[m.name] - exact).mean())
    print(f"adult.csv, epsilon {args.epsilon} split over {len(tables)} counts (discrete Laplace t={float(scale):g}), "
          f"{args.repeat} repetitions: mean absolute error per cell")
    print(f"{'statistic':<18}{'cells':>6}{'raw':>10}{'consistent':>12}{'+nonneg':>10}{'ratio':>8}")
    for name, e in errors.items():
        raw, fit, nonneg = (e[k] / args.repeat for k in ("raw", "consistent", "nonneg"))
        cells = len(tables[name][1])
        print(f"{name:<18}{cells:>6}{raw:>10.3f}{fit:>12.3f}{nonneg:>10.3f}{fit / raw:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
