#!/usr/bin/env python3
"""dpcli against OpenDP's polars integration: the same three statistics at 1M rows, our wall time over theirs.

The release: a count by state (51 declared keys), a histogram of age (73 one-year bins, 18..90) and a mean of
hours_per_week by sex, pure ε = 1 split evenly over the three, on bench_release.py's cached synthetic CSV.

- dpcli: the `dpcli release` command (a subprocess) and the library call `dpcli.run.release.release()` in this warm
  process (bench_release.time_dpcli / time_library);
- OpenDP 0.16: `dp.Context.compositor` over `pl.scan_csv` with a margin bounding the length, then per statistic
  `context.query()...group_by(KEY).agg(dp.len() | .dp.mean(bounds)).with_keys(DECLARED_KEYS).release().collect()`
  (declared keys, as dpcli's, so neither spends on key selection). It runs in its own venv (OpenDP 0.16 pins
  polars 1.x, dpcli needs polars >= 2.1): bench/data/opendp-venv, made on first use (pip: opendp[polars]==0.16.*).
  Timed as a fresh process (like the command) and, inside that process, after the imports (like the library).

Best of --repeat (default 3) each, all in the same run. OpenDP's semantics differ in details (its mean is a noisy
sum over a noisy count with float noise; nulls are filtered the same way), so this compares the cost of a
comparable release, not identical outputs.

Usage::

    .venv/bin/python bench/bench_opendp.py                # 1M rows
    .venv/bin/python bench/bench_opendp.py --rows 100000 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OPENDP_VENV = HERE / "data" / "opendp-venv"
OPENDP_REQUIREMENT = "opendp[polars]==0.16.*"


def child(csv: str, public: dict) -> None:
    """The OpenDP release, run by the OpenDP venv's Python: prints its seconds after the imports as JSON."""
    import warnings

    import opendp.prelude as dp
    import polars as pl

    warnings.simplefilter("ignore", FutureWarning)  # dp.len's coming change of default; the default is used
    dp.enable_features("contrib")
    t0 = time.perf_counter()
    schema = {"age": pl.Int64, "sex": pl.String, "state": pl.String, "education": pl.String,
              "employed": pl.String, "hours_per_week": pl.Int64, "income": pl.Float64}
    context = dp.Context.compositor(
        data=pl.scan_csv(csv, schema=schema, ignore_errors=True),
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(epsilon=1.0),
        split_evenly_over=3,
        margins=[dp.polars.Margin(by=[], max_length=public["max_length"])],  # a public bound on the row count
    )
    lo, hi = public["age"]
    by_state = (context.query().group_by("state").agg(dp.len())
                .with_keys(pl.LazyFrame({"state": public["states"]})).release().collect())
    age_hist = (context.query().filter(pl.col("age").is_not_null())
                .with_columns(pl.col("age").clip(lo, hi)).group_by("age").agg(dp.len())
                .with_keys(pl.LazyFrame({"age": list(range(lo, hi + 1))})).release().collect())
    mean_hours = (context.query().filter(pl.col("hours_per_week").is_not_null())
                  .group_by("sex").agg(pl.col("hours_per_week").fill_null(0).dp.mean(tuple(public["hours"])))
                  .with_keys(pl.LazyFrame({"sex": public["sexes"]})).release().collect())
    seconds = time.perf_counter() - t0
    shapes = [by_state.height, age_hist.height, mean_hours.height]
    print(json.dumps({"seconds": seconds, "shapes": shapes, "opendp": dp.__version__ if hasattr(dp, "__version__")
                      else "?", "polars": pl.__version__}))


def opendp_python() -> Path:
    """The OpenDP venv's Python, made on first use."""
    python = OPENDP_VENV / "bin" / "python"
    if not python.exists():
        import bench_release as br

        br.log(f"creating {OPENDP_VENV} with {OPENDP_REQUIREMENT} (once) ...")
        subprocess.run([sys.executable, "-m", "venv", str(OPENDP_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", OPENDP_REQUIREMENT], check=True)
    return python


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows of the synthetic CSV (default 1,000,000)")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs (default 3)")
    ap.add_argument("--child", nargs=2, metavar=("CSV", "PUBLIC_JSON"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child[0], json.loads(args.child[1]))
        return 0

    sys.path.insert(0, str(HERE))
    import bench_release as br

    csv = br.dataset(args.rows)
    dpcli = br.find_dpcli()
    if dpcli is None:
        br.log("error: no dpcli executable (looked next to the Python interpreter, in .venv/bin and on PATH)")
        return 1
    public = {"states": br.STATES, "sexes": br.SEXES, "age": [br.AGE_LO, br.AGE_HI],
              "hours": [br.HOURS_LO, br.HOURS_HI], "max_length": 10 * args.rows}
    python = opendp_python()
    cmd = [str(python), str(Path(__file__).resolve()), "--child", str(csv), json.dumps(public)]

    br.log(f"{args.rows:,} rows: dpcli release x{args.repeat} ...")
    dp_cmd = br.time_dpcli(dpcli, csv, args.repeat)
    br.log(f"{args.rows:,} rows: dpcli library x{args.repeat} ...")
    dp_lib, _scan = br.time_library(csv, args.repeat)
    br.log(f"{args.rows:,} rows: OpenDP x{args.repeat} ...")
    od_proc = od_lib = float("inf")
    report: dict = {}
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        od_proc = min(od_proc, time.perf_counter() - t0)
        report = json.loads(out.strip().splitlines()[-1])
        od_lib = min(od_lib, report["seconds"])
    if report["shapes"] != [len(br.STATES), br.AGE_HI - br.AGE_LO + 1, len(br.SEXES)]:
        br.log(f"warning: unexpected OpenDP result shapes {report['shapes']}")

    print(f"{args.rows:,} rows; count by state, 73-bin age histogram, mean hours by sex; pure ε=1; best of "
          f"{args.repeat} each, same run")
    print(f"{'':34}{'dpcli_s':>8}  {'opendp_s':>8}  {'dpcli/opendp':>12}")
    print(f"{'fresh process (the command)':34}{dp_cmd:8.3f}  {od_proc:8.3f}  {dp_cmd / od_proc:12.2f}")
    print(f"{'in process, after imports':34}{dp_lib:8.3f}  {od_lib:8.3f}  {dp_lib / od_lib:12.2f}")
    print(f"(OpenDP {report['opendp']} with polars {report['polars']} in {OPENDP_VENV.relative_to(HERE.parent)}; "
          "dpcli's in-process figure is dpcli.run.release.release() with its ledger, exact noise and atomic write)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
