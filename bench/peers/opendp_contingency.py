"""OpenDP's contingency table (opendp.extras.mbi, 0.16: `--algorithm mst` or `aim`), on the bench's codes.

Budget: zCDP at the bench's ρ (`dp.loss_of(rho=ρ)`, δ = 0: every column's keys are given, so OpenDP itself
refuses a δ > 0). Neighbours: add/remove (`dp.unit_of(contributions=1)`, symmetric distance). Keys: the public
codes of every column; OpenDP adds a null key to each (a latent cell for values outside the keys), which the
synthetic data may use: those cells are written as -1 and count against OpenDP in the bench's distances.
Defaults kept: half of ρ on the one-way marginals, the algorithm's own split of the rest (MST: one float step of
its split patched, see below). Noise: OpenDP's exact
discrete Gaussian on the integer counts, its exact noisy max for selection; estimation by mbi (float).
"""

from __future__ import annotations

from importlib.metadata import version

import numpy as np
import opendp.extras.mbi._mst as mst_module
import opendp.prelude as dp
import polars as pl
from common import parse_args, read_domain, report, write_codes


def main() -> None:
    args = parse_args()
    columns, sizes = read_domain(args.domain)
    np.random.seed(args.seed)  # mbi's sampling draws from np.random
    dp.enable_features("contrib")
    frame = pl.scan_csv(args.data, schema=dict.fromkeys(columns, pl.Int64))
    algorithm = {"mst": dp.mbi.MST, "aim": dp.mbi.AIM}[args.algorithm]()
    keys = {c: list(range(sizes[c])) for c in columns}
    if args.algorithm == "mst":
        # OpenDP 0.16's MST refuses its own selection split on most budgets at 13 columns: it gives each of the
        # d - 1 = 12 selections prior(share / 12) (one float step down), and the 12 spends, summed rounding up, then
        # exceed the share by one unit in the last place ("insufficient budget for query: 0.0005890599999999996 >
        # 0.0005890599999999995" at ε = 1; opendp/opendp#2789). Stepping down by 2^-40 relative instead of one ulp
        # makes each spend fit: every selection spends about 1e-12 less (relative) than OpenDP meant, no more.
        mst_module.prior = lambda x: float(x) * (1 - 2**-40)
    context = dp.Context.compositor(
        data=frame, privacy_unit=dp.unit_of(contributions=1), privacy_loss=dp.loss_of(rho=args.rho)
    )
    table = context.query(rho=args.rho).contingency_table(keys=keys, algorithm=algorithm).release()
    # Its default ("round": mbi 1.1.0's randomized rounding) first, as a user gets it; then "sample" (i.i.d. draws
    # from the same fitted model, nothing spent): mbi 1.1.0's rounding gives columns that share a parent in the tree
    # spuriously correlated rows (mbi 2.0 shuffles within each parent group for that reason), which costs the 2-way
    # and 3-way marginals more than the noise does.
    for method, path in (("round", args.out), ("sample", args.out.with_suffix(".sample.csv"))):
        synthetic = table.synthesize(rows=args.rows, method=method).select(columns).fill_null(-1)
        write_codes(path, columns, synthetic.to_numpy().astype(np.int64))
    report(version=f"opendp {version('opendp')} (mbi {version('mbi')})",
           noise="exact (discrete Gaussian, noisy max); estimation float",
           budget=f"ρ = {args.rho!r} (zCDP, δ = 0)",
           extra={f"opendp-{args.algorithm} (sample)": str(args.out.with_suffix(".sample.csv"))})


if __name__ == "__main__":
    main()
