#!/usr/bin/env python3
"""Issue 27: the quality of dpcli's tree estimator (dpcli/postprocess/synth_model.py) against a naive one, on the
Adult extract (tests/data/adult.csv, 48,842 rows), the whole MST pipeline run with dpcli's own pieces.

The file is discretised once (13 columns: the categories as they are, '?' a category; age, hours per week, capital
gain and loss in fixed bins; fnlwgt and education_num left out). At each rho, split as MST does (1/3 one-ways,
1/3 selection, 1/3 measurement; add/remove neighbours):
- the d one-ways measured with the exact discrete Gaussian (dpcli.core.samplers), sigma**2 = d / (2 rho/3);
- the tree selected by dpcli.mechanisms.mst (scores against the one-ways' independence model, d - 1 exact
  exponential-mechanism draws at eps_sel = sqrt(8 (rho/3) / (d - 1)), rate eps_sel / 2);
- the d - 1 selected pairs measured, sigma**2 = (d - 1) / (2 rho/3);
then from the same measurements, n rows are sampled by
- **tree**: ``fit_tree`` + ``sample_codes`` (inverse-variance one-ways projected onto the simplex, each pair
  corrected to them, projected and fitted by IPF; sampled along the tree);
- **naive**: each measured table clipped at 0 and normalised on its own; the root from its clipped one-way, each
  child from its parent's row of the clipped pair table (inconsistent margins).
The figures: the average total-variation distance between the true and the synthetic 1-way marginals (13) and 2-way
marginals (78), the mean over R repetitions (each with fresh noise) and its standard error. dpcli's sampler takes
no seed (a CSPRNG), so the digits move from run to run within the standard errors.

Scale: ``fit_tree`` and ``sample_codes`` for 1,000,000 rows of 15 columns (sizes 2 to 40 drawn once, noisy tree
pairs at sigma**2 = 4), CPU time and the process's peak RSS after it (which includes the codes, 1,000,000 x 15 int32
= 60 MB).

Usage: ``.venv/bin/python bench/bench_synth_estimator.py [--reps 5] [--rho 0.01 0.1 1]``
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import resource
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl

from dpcli.core.samplers import discrete_gaussian
from dpcli.mechanisms.mst import pair_scores, select_tree
from dpcli.postprocess.synth_model import fit_tree, noisy_total, sample_codes

ROOT = Path(__file__).resolve().parent.parent
ADULT = ROOT / "tests" / "data" / "adult.csv"
CATEGORIES = ["workclass", "education", "marital_status", "occupation", "relationship", "race", "sex",
              "native_country", "income"]
BINS = {"age": [17, 25, 35, 45, 55, 65, 91], "hours_per_week": [1, 20, 35, 41, 50, 61, 100],
        "capital_gain": [0, 1, 5000, 100000], "capital_loss": [0, 1, 2000, 5000]}


def discretised() -> tuple[np.ndarray, list[int], list[str]]:
    frame = pl.read_csv(ADULT, infer_schema_length=0)
    names, columns, sizes = [], [], []
    for name in ["age", *CATEGORIES[:4], "relationship", "race", "sex", "capital_gain", "capital_loss",
                 "hours_per_week", "native_country", "income"]:
        values = frame[name].fill_null("?").str.strip_chars()
        if name in BINS:
            numbers = values.cast(pl.Int64).to_numpy()
            codes = np.searchsorted(np.array(BINS[name]), numbers, side="right") - 1
            size = len(BINS[name]) - 1
        else:
            keys = sorted(set(values.to_list()))
            lookup = {k: i for i, k in enumerate(keys)}
            codes = np.array([lookup[v] for v in values.to_list()])
            size = len(keys)
        names.append(name)
        columns.append(np.clip(codes, 0, size - 1))
        sizes.append(size)
    return np.stack(columns, axis=1).astype(np.int64), sizes, names


def marginal(codes: np.ndarray, sizes: list[int], cols: tuple[int, ...]) -> np.ndarray:
    flat = np.ravel_multi_index(tuple(codes[:, c] for c in cols), tuple(sizes[c] for c in cols))
    return np.bincount(flat, minlength=math.prod(sizes[c] for c in cols)).astype(np.int64)


def tv(true: np.ndarray, synthetic: np.ndarray) -> float:
    return 0.5 * float(np.abs(true / true.sum() - synthetic / max(synthetic.sum(), 1)).sum())


def average_tv(codes: np.ndarray, synthetic: np.ndarray, sizes: list[int]) -> tuple[float, float]:
    d = len(sizes)
    one = [tv(marginal(codes, sizes, (a,)), marginal(synthetic, sizes, (a,))) for a in range(d)]
    two = [tv(marginal(codes, sizes, p), marginal(synthetic, sizes, p)) for p in itertools.combinations(range(d), 2)]
    return float(np.mean(one)), float(np.mean(two))


def naive_sample(sizes: list[int], one_ways: list[np.ndarray], pairs: dict, rows: int) -> np.ndarray:
    rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))
    d = len(sizes)

    def clipped(x: np.ndarray) -> np.ndarray:
        x = np.clip(x.astype(np.float64), 0, None)
        return x / x.sum() if x.sum() > 0 else np.full(x.shape, 1.0 / x.size)

    neighbours: dict[int, list[tuple[int, np.ndarray]]] = {a: [] for a in range(d)}
    for (a, b), y in pairs.items():
        table = y.reshape(sizes[a], sizes[b])
        neighbours[a].append((b, table))
        neighbours[b].append((a, table.T))
    out = np.zeros((rows, d), dtype=np.int64)
    out[:, 0] = rng.choice(sizes[0], rows, p=clipped(one_ways[0]))
    seen, queue = {0}, [0]
    while queue:
        parent = queue.pop(0)
        for child, table in neighbours[parent]:
            if child in seen:
                continue
            seen.add(child)
            queue.append(child)
            for v in range(sizes[parent]):
                mask = out[:, parent] == v
                out[mask, child] = rng.choice(sizes[child], int(mask.sum()), p=clipped(table[v]))
    return out


def run(codes: np.ndarray, sizes: list[int], rho: Fraction) -> dict[str, tuple[float, float]]:
    d = len(sizes)
    part = rho / 3
    sigma2_one = Fraction(d) / (2 * part)
    sigma2_pair = Fraction(d - 1) / (2 * part)
    one_ways = [marginal(codes, sizes, (a,)) + discrete_gaussian(sigma2_one, sizes[a]) for a in range(d)]
    candidates = list(itertools.combinations(range(d), 2))
    exact = {p: marginal(codes, sizes, p) for p in candidates}
    total = max(noisy_total(one_ways, sigma2_one), 1)
    scores = pair_scores(exact, one_ways, total)
    eps_sel = Fraction(math.sqrt(8 * float(part) / (d - 1))).limit_denominator(10**6)
    rate = eps_sel / 2
    tree = select_tree(d, candidates, scores, rate.numerator, rate.denominator)
    pairs = {p: exact[p] + discrete_gaussian(sigma2_pair, exact[p].size) for p in tree}
    n = len(codes)
    model = fit_tree(sizes, one_ways, sigma2_one, pairs, sigma2_pair)
    return {"tree": average_tv(codes, sample_codes(model, n, os.urandom(32)), sizes),
            "naive": average_tv(codes, naive_sample(sizes, one_ways, pairs, n), sizes)}


def scale() -> None:
    rng = np.random.default_rng(0)
    sizes = [int(s) for s in rng.integers(2, 41, 15)]
    one_ways = [rng.integers(0, 5000, s) for s in sizes]
    pairs = {(a, a + 1): rng.integers(-5, 1000, sizes[a] * sizes[a + 1]) for a in range(14)}
    started = time.process_time()
    model = fit_tree(sizes, one_ways, 4, pairs, 4)
    fitted = time.process_time()
    codes = sample_codes(model, 1_000_000, os.urandom(32))
    done = time.process_time()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"scale: 15 columns, sizes {sizes}: fit_tree {fitted - started:.2f} s CPU, sample_codes of "
          f"{len(codes):,} rows {done - fitted:.2f} s CPU, peak RSS {peak:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--rho", type=str, nargs="+", default=["0.01", "0.1", "1"])
    args = parser.parse_args()
    scale()
    codes, sizes, names = discretised()
    print(f"Adult: {len(codes)} rows, {len(sizes)} columns, sizes {dict(zip(names, sizes, strict=True))}")
    print("| rho | estimator | avg TV 1-way | avg TV 2-way |")
    print("|---|---|---|---|")
    for rho_text in args.rho:
        rho = Fraction(rho_text)
        started = time.perf_counter()
        results = [run(codes, sizes, rho) for _ in range(args.reps)]
        for name in ("tree", "naive"):
            one = np.array([r[name][0] for r in results])
            two = np.array([r[name][1] for r in results])
            se = math.sqrt(args.reps)
            print(f"| {rho_text} | {name} | {one.mean():.4f} ± {one.std(ddof=1) / se:.4f} "
                  f"| {two.mean():.4f} ± {two.std(ddof=1) / se:.4f} |")
        print(f"(rho {rho_text}: {time.perf_counter() - started:.1f} s for {args.reps} repetitions)", flush=True)


if __name__ == "__main__":
    main()
