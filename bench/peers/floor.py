"""The floor: independent noisy 1-way marginals, every column sampled on its own.

The whole ρ is split evenly over the d one-way count vectors (add/remove: L2 sensitivity 1 each, so
σ² = d / (2ρ), rounded up onto a rational), each noised with dpcli's exact discrete Gaussian sampler
(dpcli.core.samplers); the counts are clipped at 0 and normalised (post-processing) and each column of the
output is drawn independently from its own marginal with numpy. Run with the bench's own Python (dpcli's venv).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from common import parse_args, read_codes, read_domain, report, write_codes

import dpcli
from dpcli.core.samplers import discrete_gaussian


def main() -> None:
    args = parse_args()
    columns, sizes = read_domain(args.domain)
    data = read_codes(args.data)
    d = len(columns)
    # σ² = d / (2ρ) rounded up to a multiple of 1e-9: the float ρ is the bench's, the noise is exact
    sigma_squared = Fraction(math.ceil(d / (2 * args.rho) * 10**9), 10**9)
    rng = np.random.default_rng(args.seed)  # post-processing only: sampling rows from released marginals
    out = np.empty((args.rows, d), dtype=np.int64)
    for i, column in enumerate(columns):
        counts = np.bincount(data[:, i], minlength=sizes[column])
        noisy = counts + discrete_gaussian(sigma_squared, sizes[column])
        weights = np.clip(noisy, 0, None).astype(float)
        probabilities = weights / weights.sum() if weights.sum() > 0 else np.full(sizes[column], 1 / sizes[column])
        out[:, i] = rng.choice(sizes[column], size=args.rows, p=probabilities)
    write_codes(args.out, columns, out)
    report(version=f"dpcli {dpcli.__version__} sampler", noise="exact (discrete Gaussian)",
           budget=f"ρ = {args.rho:.6g} split over {d} one-way marginals, σ² = {float(sigma_squared):.6g}")


if __name__ == "__main__":
    main()
