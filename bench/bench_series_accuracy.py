#!/usr/bin/env python3
"""Issue 26: the accuracy of a series' designs for running totals (cumulative counts), to choose the defaults.

For T periods (default 365 and 8760), Laplace and Gaussian noise (a record changes one period by 1: Delta = 1), the
variance of the running total's error at t = T, its mean and max over t = 1..T, and the period value's (mean and max
over t), for:

- **summed**: per-period releases at the whole budget, the running total their sum (dpcli.postprocess.series);
- **tree, cover sum**: the dyadic blocks, each at budget / h (h = ceil(log2(T + 1))), the running total the sum of the
  cover's blocks, the period value its level-0 block;
- **tree + Honaker**: the same blocks, GLS over every block inside [1, t] (dpcli.postprocess.series.estimate_tree);
- **factorisation** (Gaussian only): the square-root (Toeplitz) factorisation A = L L of the lower-triangular all-ones
  matrix, L's coefficients those of (1 - x)^(-1/2), binom(2j, j) / 4^j. L is ROUNDED onto the integers at scale 2^k
  (C = round(2^k L), still lower-triangular Toeplitz with 2^k on its diagonal), the noise is an integer discrete
  Gaussian on the integer products C x with sigma^2 = |C's largest column|^2 / (2 rho) (its first column: every
  column of C is a shifted, truncated copy of it), and the running totals are B (C x + z) with B = A C^-1 exactly,
  so the estimate is unbiased and its error B z includes the rounding. Also the unrounded real matrix, for reference.

Units: Gaussian figures are variances times rho (the series' total rho, Delta = 1: one release's sigma^2 is
1 / (2 rho)); Laplace figures times epsilon^2 (one release's variance 2 / epsilon^2). They are the continuous
limits, exact for the estimators: the exact discrete noises' variances are at most these (the discrete Gaussian's is
below sigma^2; the discrete Laplace's is 2 t^2 - 1/6 + O(1/t^2) at scale t), so every figure is an upper bound that
is tight at the budgets one uses.

Cross-check at T = 365 (``--simulate R``): R replicates of every design drawn with dpcli's exact samplers
(dpcli/core/samplers.py) at rho = 0.01 / epsilon = 0.1, the empirical variances beside the analytic ones with their
standard errors. dpcli's samplers take no seed (a CSPRNG keyed from os.urandom, by design), so the simulation's
digits change from run to run within the printed standard errors.

Usage::

    .venv/bin/python bench/bench_series_accuracy.py                 # T = 365 and 8760, simulation with 2000 replicates
    .venv/bin/python bench/bench_series_accuracy.py --periods 365 --bits 16 --simulate 0
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpcli.core.samplers import discrete_gaussian, discrete_laplace
from dpcli.plan.factorization import column_norm_squared
from dpcli.plan.factorization import weights as product_weights
from dpcli.plan.tree import (
    blocks_within,
    cover,
    cover_variances,
    exact_noise_variance,
    honaker_variances,
    levels,
    summed_variances,
    tree_weights,
)
from dpcli.postprocess.series import estimate_tree, linear_halfwidth


@dataclass(frozen=True)
class Row:
    design: str
    to_date: np.ndarray  # variance of the running total at t = 1..T (units above)
    period: np.ndarray  # variance of period t's value at t = 1..T


def tree_rows(periods: int, one: float, block: float) -> list[Row]:
    """Summed, cover and Honaker, given one period's and one block's noise variance in the figure's units."""
    ts = range(1, periods + 1)
    summed = [summed_variances(t) for t in ts]
    covered = [cover_variances(t) for t in ts]
    honaker = [honaker_variances(t) for t in ts]
    return [
        Row("per-period releases summed", one * np.array([v.to_date for v in summed]), one * np.ones(periods)),
        Row("tree, cover sum", block * np.array([v.to_date for v in covered]), block * np.ones(periods)),
        Row("tree + Honaker (GLS)", block * np.array([v.to_date for v in honaker]),
            block * np.array([v.period for v in honaker])),
    ]


def sqrt_coefficients(periods: int) -> np.ndarray:
    """binom(2j, j) / 4^j for j < T: the coefficients of (1 - x)^(-1/2), L's first column."""
    c = np.ones(periods)
    for j in range(1, periods):
        c[j] = c[j - 1] * (2 * j - 1) / (2 * j)
    return c


def series_inverse(c: np.ndarray) -> np.ndarray:
    """The first T coefficients of 1 / c(x) (c[0] != 0): the first column of the inverse lower-triangular Toeplitz."""
    d = np.zeros(len(c))
    d[0] = 1.0 / c[0]
    for n in range(1, len(c)):
        d[n] = -float(c[1 : n + 1] @ d[n - 1 :: -1][:n]) / c[0]
    return d


@dataclass(frozen=True)
class Factorisation:
    lattice: np.ndarray  # C's first column (integers; the real L's when bits is None)
    sensitivity_squared: float  # |C's largest column|^2
    reconstruct: np.ndarray  # B's first column: B = A C^-1, lower-triangular Toeplitz


def factorisation(periods: int, bits: int | None) -> Factorisation:
    c = sqrt_coefficients(periods)
    lattice = c if bits is None else np.round(c * 2**bits)
    inverse = series_inverse(lattice)  # C^-1's first column
    return Factorisation(lattice, float(lattice @ lattice), np.cumsum(inverse))  # A C^-1 = cumsum of C^-1's column


def factorisation_row(periods: int, bits: int | None) -> Row:
    """sigma^2 = S^2 / (2 rho): times rho, S^2 / 2. Running total at t: row t of B, |B[0:t]|^2; period t: the row
    difference, C^-1's first column's first t coefficients."""
    f = factorisation(periods, bits)
    noise = f.sensitivity_squared / 2
    inverse = np.diff(f.reconstruct, prepend=0.0)
    name = "factorisation, real (not exact)" if bits is None else f"factorisation on 2^{bits} lattice"
    return Row(name, noise * np.cumsum(f.reconstruct**2), noise * np.cumsum(inverse**2))


def released_factorisation_row(periods: int) -> Row:
    """``method: factorization`` as dpcli releases it (dpcli.plan.factorization: its exact lattice, rounded half up,
    and its estimate weights), in the same units: sigma^2 times rho = |c_1|^2 / 2."""
    noise = column_norm_squared(periods) / 2
    pairs = [product_weights(periods, t) for t in range(1, periods + 1)]
    return Row("factorisation as released (method: factorization)",
               noise * np.array([float(total @ total) for _period, total in pairs]),
               noise * np.array([float(period @ period) for period, _total in pairs]))


def table(periods: int, mechanism: str, bits: int) -> list[Row]:
    h = levels(periods)
    if mechanism == "gaussian":
        # sigma^2 = 1 / (2 rho) for a period, h / (2 rho) for a block (rho / h each)
        return [*tree_rows(periods, 0.5, h / 2), factorisation_row(periods, bits), factorisation_row(periods, None),
                released_factorisation_row(periods)]
    # a period's scale 1 / epsilon (variance 2 / epsilon^2), a block's h / epsilon
    return tree_rows(periods, 2.0, 2.0 * h * h)


def print_table(rows_by: dict[tuple[int, str], list[Row]]) -> None:
    print("| T | noise (units) | design | var at t = T | sd at t = T | mean var over t | max var over t |"
          " period var: mean over t | period var: max |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (periods, mechanism), rows in rows_by.items():
        unit = "Gaussian (1/ρ)" if mechanism == "gaussian" else "Laplace (1/ε²)"
        for r in rows:
            print(f"| {periods} | {unit} | {r.design} | {r.to_date[-1]:.4g} | {math.sqrt(r.to_date[-1]):.4g} |"
                  f" {r.to_date.mean():.4g} | {r.to_date.max():.4g} | {r.period.mean():.4g} | {r.period.max():.4g} |")


def simulate(periods: int, bits: int, replicates: int) -> None:
    """Every design drawn with dpcli's exact samplers; empirical variance (times rho or epsilon^2) of the running
    total at T, its mean over t, and the period value at T, beside the analytic figure."""
    rho, epsilon = Fraction(1, 100), Fraction(1, 10)
    h = levels(periods)
    blocks = blocks_within(periods)
    print(f"\nsimulation, T = {periods}, {replicates} replicates, dpcli's exact samplers (rho = {rho}, eps = {epsilon};"
          " variances times rho or eps^2, as above)")
    print("| noise | design | var at T: analytic | simulated ± 2 se | mean over t: analytic | simulated |")
    print("|---|---|---|---|---|---|")
    for mechanism in ("gaussian", "laplace"):
        rows = {r.design: r for r in table(periods, mechanism, bits)}
        if mechanism == "gaussian":
            per_period = lambda n: discrete_gaussian(1 / (2 * rho), n)  # noqa: E731
            per_block = lambda n: discrete_gaussian(Fraction(h) / (2 * rho), n)  # noqa: E731
            unit = float(rho)
        else:
            per_period = lambda n: discrete_laplace(1 / epsilon, n)  # noqa: E731
            per_block = lambda n: discrete_laplace(h / epsilon, n)  # noqa: E731
            unit = float(epsilon**2)
        errors: dict[str, np.ndarray] = {}  # (t, replicate) error of the running total
        summed = per_period(periods * replicates).reshape(periods, replicates).astype(float)
        errors["per-period releases summed"] = np.cumsum(summed, axis=0)
        noise = {b: per_block(replicates) for b in blocks}
        cover_sum = np.zeros((periods, replicates))
        honaker = np.zeros((periods, replicates))
        for t in range(1, periods + 1):
            est = estimate_tree(noise, t, 1.0)
            honaker[t - 1] = est.to_date
            cover_sum[t - 1] = np.sum([noise[b] for b in cover(t)], axis=0)
        errors["tree, cover sum"] = cover_sum
        errors["tree + Honaker (GLS)"] = honaker
        if mechanism == "gaussian":
            f = factorisation(periods, bits)
            variance = Fraction(round(f.sensitivity_squared)) / (2 * rho)
            z = discrete_gaussian(variance, periods * replicates).reshape(periods, replicates).astype(float)
            b = f.reconstruct
            # error at t: sum_{s <= t} B[t - s] z_s (B lower-triangular Toeplitz)
            toeplitz = np.zeros((periods, periods))
            for lag in range(periods):
                toeplitz[np.arange(lag, periods), np.arange(periods - lag)] = b[lag]
            errors[f"factorisation on 2^{bits} lattice"] = toeplitz @ z
        for design, err in errors.items():
            sq = err**2 * unit
            at_t = sq[-1]
            se = at_t.std(ddof=1) / math.sqrt(replicates)
            r = rows[design]
            print(f"| {mechanism} | {design} | {r.to_date[-1]:.4g} | {at_t.mean():.4g} ± {2 * se:.2g} |"
                  f" {r.to_date.mean():.4g} | {sq.mean():.4g} |")


def halfwidths(periods: int) -> None:
    """The rigorous 95% half-width (dpcli.postprocess.series.linear_halfwidth) of the running total at t = T, at
    rho = 0.01 / epsilon = 0.1, beside the normal approximation 1.96 sd that dpcli does not use."""
    rho, epsilon = Fraction(1, 100), Fraction(1, 10)
    h = levels(periods)
    _, _, honaker = tree_weights(periods)
    designs = {
        "per-period releases summed": (np.ones(periods), Fraction(1) / (2 * rho), 1 / epsilon),
        "tree, cover sum": (np.ones(len(cover(periods))), Fraction(h) / (2 * rho), h / epsilon),
        "tree + Honaker (GLS)": (honaker, Fraction(h) / (2 * rho), h / epsilon),
    }
    _, released = product_weights(periods, periods)
    # Gaussian only: no Laplace scale (0), its Laplace cells print a dash
    released_variance = Fraction(column_norm_squared(periods)) / (2 * rho)
    designs["factorisation as released (Gaussian only)"] = (released, released_variance, Fraction(0))
    print(f"\n95% half-width of the running total at t = T = {periods} (rho = {rho}, epsilon = {epsilon})")
    print("| design | Gaussian: rigorous | 1.96 sd | Laplace: rigorous | 1.96 sd |")
    print("|---|---|---|---|---|")
    for design, (w, variance, scale) in designs.items():
        g_sd = math.sqrt(exact_noise_variance("discrete_gaussian", variance) * float(w @ w))
        if not scale:
            gaussian = linear_halfwidth(w, "discrete_gaussian", variance)
            print(f"| {design} | {gaussian:.1f} | {1.96 * g_sd:.1f} | — | — |")
            continue
        l_sd = math.sqrt(exact_noise_variance("discrete_laplace", scale) * float(w @ w))
        print(f"| {design} | {linear_halfwidth(w, 'discrete_gaussian', variance):.1f} | {1.96 * g_sd:.1f} |"
              f" {linear_halfwidth(w, 'discrete_laplace', scale):.1f} | {1.96 * l_sd:.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--periods", default="365,8760", help="comma-separated horizons T")
    parser.add_argument("--bits", type=int, default=16, help="the factorisation's lattice: C = round(2^k L)")
    parser.add_argument("--simulate", type=int, default=2000, help="replicates of the T = 365 cross-check (0: none)")
    args = parser.parse_args()
    horizons = [int(p) for p in args.periods.split(",")]
    rows_by = {(p, m): table(p, m, args.bits) for p in horizons for m in ("gaussian", "laplace")}
    print_table(rows_by)
    print("\nthe factorisation's lattice: k against the exact real matrix (variance times rho, running total at T)")
    for p in horizons:
        real = factorisation_row(p, None).to_date[-1]
        parts = [f"k={k}: {factorisation_row(p, k).to_date[-1]:.5g}" for k in (4, 8, 12, 16, 20)]
        print(f"T = {p}: real {real:.5g}; " + ", ".join(parts))
    for p in horizons:
        halfwidths(p)
    if args.simulate:
        simulate(365, args.bits, args.simulate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
