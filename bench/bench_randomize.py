"""`dpcli randomize` against its own I/O: the cost of exact randomized response beside reading and writing the columns.

    .venv/bin/python bench/bench_randomize.py                  # 299,000 rows, race/sex/income at ε = 3 per record
    .venv/bin/python bench/bench_randomize.py --rows 2000000 --repeat 3

The input is tests/data/adult.csv's rows sampled with replacement to --rows rows (a fixed numpy seed: a benchmark
file, not a test). Timed, best of --repeat, in this process:

* baseline: polars reads the three columns of the CSV as text and writes them back as CSV (what any copy of the
  columns costs);
* dpcli: `dpcli.run.randomize.randomize(...)` of configs/randomize.yaml's columns into a fresh ledger (spec, paths,
  ledger checks, the read, the spend, the exact sampler, the stored file and the output);
* the sampler alone: `randomize_keys` on the race column's key indices (k = 5, ε = 1).

It prints the times and dpcli's ratio to the baseline, and the sampler's records per second.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dpcli.core.accounting import Cap  # noqa: E402 - after the path: run from a checkout
from dpcli.ledger import open_ledger  # noqa: E402
from dpcli.mechanisms.randomized_response import randomize_keys  # noqa: E402
from dpcli.run.randomize import randomize  # noqa: E402

COLUMNS = ["race", "sex", "income"]


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=299_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dpcli-bench-rr-") as tmp_text:
        tmp = Path(tmp_text)
        adult = pl.read_csv(ROOT / "tests" / "data" / "adult.csv", infer_schema=False)
        picks = np.random.default_rng(20261124).integers(0, adult.height, args.rows)
        data = tmp / "adult.csv"
        adult[picks].write_csv(data)
        print(f"input: {args.rows} rows, {data.stat().st_size / 1e6:.1f} MB", file=sys.stderr)
        spec = tmp / "randomize.yaml"
        shutil.copy(ROOT / "configs" / "randomize.yaml", spec)

        def baseline() -> None:
            pl.read_csv(data, columns=COLUMNS, infer_schema=False).write_csv(tmp / "copy.csv")

        runs = iter(range(10**6))

        def dpcli_run() -> None:
            ledger = tmp / f"ledger{next(runs)}.jsonl"
            open_ledger(ledger).set_cap("adult_local", Cap(Fraction(10), Fraction(0)), False)
            randomize(spec, input=data, output=tmp / "rr.csv", ledger=ledger)

        race = pl.read_csv(data, columns=["race"], infer_schema=False)["race"]
        keys = ["Amer-Indian-Eskimo", "Asian-Pac-Islander", "Black", "Other", "White"]
        indices = race.cast(pl.Enum(keys), strict=False).to_physical().cast(pl.Int64).fill_null(-1).to_numpy()

        base = best(baseline, args.repeat)
        ours = best(dpcli_run, args.repeat)
        sampler = best(lambda: randomize_keys(indices, 5, Fraction(1)), args.repeat)
    print("| rows | polars read+write 3 columns | dpcli randomize (library call) | ratio | sampler alone (k=5, ε=1) |")
    print("|---|---|---|---|---|")
    print(f"| {args.rows} | {base:.3f} s | {ours:.3f} s | {ours / base:.2f}× | {sampler:.3f} s "
          f"({args.rows / sampler / 1e6:.2f} M records/s) |")


if __name__ == "__main__":
    main()
