"""OpenDP's contingency table (opendp.extras.mbi, 0.16: `--algorithm mst` or `aim`), on the bench's codes.

Budget: zCDP at the bench's ρ (`dp.loss_of(rho=ρ)`, δ = 0: every column's keys are given, so OpenDP itself
refuses a δ > 0). Neighbours: add/remove (`dp.unit_of(contributions=1)`, symmetric distance). Keys: the public
codes of every column; OpenDP adds a null key to each (a latent cell for values outside the keys), which the
synthetic data may use: those cells are written as -1 and count against OpenDP in the bench's distances.
Defaults kept: half of ρ on the one-way marginals, the algorithm's own split of the rest. Noise: OpenDP's exact
discrete Gaussian on the integer counts, its exact noisy max for selection; estimation by mbi (float).
"""

from __future__ import annotations

from importlib.metadata import version

import numpy as np
import opendp.prelude as dp
import polars as pl
from common import parse_args, read_domain, report, write_codes


def main() -> None:
    args = parse_args()
    columns, sizes = read_domain(args.domain)
    np.random.seed(args.seed)  # mbi's sampling draws from np.random
    dp.enable_features("contrib")
    frame = pl.scan_csv(args.data, schema=dict.fromkeys(columns, pl.Int64))
    context = dp.Context.compositor(
        data=frame,
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(rho=args.rho),
    )
    algorithm = {"mst": dp.mbi.MST, "aim": dp.mbi.AIM}[args.algorithm]()
    table = (
        context.query(rho=args.rho)
        .contingency_table(keys={c: list(range(sizes[c])) for c in columns}, algorithm=algorithm)
        .release()
    )
    synthetic = table.synthesize(rows=args.rows).select(columns).fill_null(-1)
    write_codes(args.out, columns, synthetic.to_numpy().astype(np.int64))
    report(version=f"opendp {version('opendp')} (mbi {version('mbi')})",
           noise="exact (discrete Gaussian, noisy max); estimation float",
           budget=f"ρ = {args.rho:.6g} (zCDP, δ = 0)")


if __name__ == "__main__":
    main()
