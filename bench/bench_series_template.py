#!/usr/bin/env python3
"""Issue 26: what a series' per-period input template costs a run (dpcli.run.series_input).

A daily running-totals series over one small file per day (ROWS rows each); the run of period t, in order, draws the
tree's blocks ending at t and reads the files of their periods. The run reads each file once, its rows grouped by
their own period (SeriesInput.aggregate_periods), each block the sum of its periods' (dpcli.run.series.block_sums);
``--per-piece`` measures the earlier way, one read of every file per piece (the field decides where a row counts, not
its file: pieces x files engine calls). Prints, per period, the pieces, the files and the CPU seconds (process time,
polars' threads included) of opening the files and computing every piece's exact aggregates (no noise, no ledger),
beside one cumulative file of the same rows.

``--factorization``: the run of period t of a factorised series (products 1..t, each weighing periods 1..t) over
the cumulative file, first release at t: one read grouped by period (or, with ``--per-piece``, one read per period).

Usage::

    .venv/bin/python bench/bench_series_template.py [--periods 8 32 128] [--rows 50] [--per-piece]
    .venv/bin/python bench/bench_series_template.py --factorization --periods 365 [--per-piece]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

from dpcli.plan.series import make_series_plan
from dpcli.plan.tree import ending_at
from dpcli.run.prepare import prepare
from dpcli.run.series import SERIES_RELEASE_ID, block_sums
from dpcli.run.series_input import SeriesInput
from dpcli.run.series_products import exact_products
from dpcli.specs.load import load_spec

SPEC = """\
version: 1
dataset: bench
input: INPUT
privacy: {unit: row, neighbours: add_remove, epsilon: 1}
columns:
  ward: {type: category, categories: [a, b]}
  stay: {type: int, bounds: [0, 30]}
statistics:
  - {name: n, kind: count}
  - {name: w, kind: histogram, column: ward}
  - {name: s, kind: sum, column: stay}
series: {periods: 365, period: {column: admitted, start: 2027-01-01, every: 1 day}, design: running_totals}
"""
# the factorisation: Gaussian noise under zCDP, over one cumulative file
FACTORIZED = (SPEC.replace("epsilon: 1", "rho: 1/2").replace("count}", "count, mechanism: gaussian}")
              .replace("ward}", "ward, mechanism: gaussian}").replace("stay}", "stay, mechanism: gaussian}")
              .replace("design: running_totals", "design: running_totals, method: factorization"))


def _run(spec_path: Path, t: int, explicit: Path | None, per_piece: bool) -> tuple[int, int, float]:
    spec = load_spec(spec_path)
    splan = make_series_plan(spec)
    if splan.blocks is None:
        raise SystemExit("a tree's plan")
    blocks = ending_at(t)
    plans = [dataclasses.replace(splan.blocks, periods=frozenset(range(b.first, b.last + 1))) for b in blocks]
    periods = sorted(set().union(*(p.periods or set() for p in plans)))
    ready = prepare(spec, input=explicit, release_id=SERIES_RELEASE_ID, check_ledger=False)
    start = time.process_time()
    with SeriesInput(ready, explicit, periods, 1 << 34, None, lambda _m: None) as rows:
        if per_piece:
            for plan in plans:
                rows.aggregate(plan)
        else:
            block_sums(blocks, rows.aggregate_periods(dataclasses.replace(splan.blocks, periods=frozenset(periods))))
    return len(plans), len(rows.paths), time.process_time() - start


def _factorized(spec_path: Path, t: int, explicit: Path, per_piece: bool) -> float:
    """CPU seconds of the exact products 1..t of a first release at t over one cumulative file."""
    spec = load_spec(spec_path)
    blocks = make_series_plan(spec).blocks
    if blocks is None:
        raise SystemExit("a factorisation's plan")
    ready = prepare(spec, input=explicit, release_id=SERIES_RELEASE_ID, check_ledger=False)
    start = time.process_time()
    with SeriesInput(ready, explicit, range(1, t + 1), 1 << 34, None, lambda _m: None) as rows:
        if per_piece:
            exact_products(list(range(1, t + 1)), 365, lambda s: rows.aggregate(
                dataclasses.replace(blocks, periods=frozenset({s}))))
        else:
            by_period = rows.aggregate_periods(dataclasses.replace(blocks, periods=frozenset(range(1, t + 1))))
            exact_products(list(range(1, t + 1)), 365, by_period.__getitem__)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--periods", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--rows", type=int, default=50)
    parser.add_argument("--per-piece", action="store_true", help="one read of every file per piece (before)")
    parser.add_argument("--factorization", action="store_true", help="a factorised series over one cumulative file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "data").mkdir()
        last = max(args.periods)
        every = []
        for i in range(last):
            day = date(2027, 1, 1) + timedelta(days=i)
            lines = [f"{day}T{h % 24:02d}:00,{'ab'[h % 2]},{h % 31}\n" for h in range(args.rows)]
            every += lines
            (work / "data" / f"adm-{day}.csv").write_text("admitted,ward,stay\n" + "".join(lines))
        (work / "all.csv").write_text("admitted,ward,stay\n" + "".join(every))
        if args.factorization:
            (work / "factorized.yaml").write_text(FACTORIZED.replace("INPUT", "all.csv"))
            print(f"{'period':>6} {'products':>8} {'one file CPU s':>15}")
            for t in args.periods:
                cpu = _factorized(work / "factorized.yaml", t, work / "all.csv", args.per_piece)
                print(f"{t:>6} {t:>8} {cpu:>15.2f}")
            return
        (work / "template.yaml").write_text(SPEC.replace("INPUT", "data/adm-{date}.csv"))
        print(f"{'period':>6} {'pieces':>6} {'files':>5} {'template CPU s':>15} {'one file CPU s':>15}")
        for t in args.periods:
            pieces, files, cpu = _run(work / "template.yaml", t, None, args.per_piece)
            _, _, one = _run(work / "template.yaml", t, work / "all.csv", args.per_piece)
            print(f"{t:>6} {pieces:>6} {files:>5} {cpu:>15.2f} {one:>15.2f}")


if __name__ == "__main__":
    main()
