#!/usr/bin/env python3
"""Issue 26: what a series' per-period input template costs a run (dpcli.run.series_input).

A daily running-totals series over one small file per day (ROWS rows each); the run of period t, in order, draws the
tree's blocks ending at t and reads the files of their periods. Each piece scans every file the run opened (the
field decides where a row counts, not its file), so the work is pieces x files engine calls. Prints, per period, the
pieces, the files and the CPU seconds (process time, polars' threads included) of opening the files and computing
every piece's exact aggregates (no noise, no ledger), beside one cumulative file of the same rows.

Usage::

    .venv/bin/python bench/bench_series_template.py [--periods 8 32 128] [--rows 50]
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
from dpcli.run.series import SERIES_RELEASE_ID
from dpcli.run.series_input import SeriesInput
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


def _run(spec_path: Path, t: int, explicit: Path | None) -> tuple[int, int, float]:
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
        for plan in plans:
            rows.aggregate(plan)
    return len(plans), len(rows.paths), time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--periods", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--rows", type=int, default=50)
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
        (work / "template.yaml").write_text(SPEC.replace("INPUT", "data/adm-{date}.csv"))
        print(f"{'period':>6} {'pieces':>6} {'files':>5} {'template CPU s':>15} {'one file CPU s':>15}")
        for t in args.periods:
            pieces, files, cpu = _run(work / "template.yaml", t, None)
            _, _, one = _run(work / "template.yaml", t, work / "all.csv")
            print(f"{t:>6} {pieces:>6} {files:>5} {cpu:>15.2f} {one:>15.2f}")


if __name__ == "__main__":
    main()
