#!/usr/bin/env python3
"""How fast could a person-level release be on this machine? The floor under issue 12's cost target.

bench_persons.py measures the person-level release against the row-level release on the same file (issue 12 asks
for at most 2x at 10M rows and 1M persons). This script measures, in one process and on the same file, the parts of
that work that any exact person-level method has to do, each on its own:

1. ``row``: the row-level release's aggregates (``dpcli.engine.aggregate``), the baseline;
2. ``person``: the person-level release's aggregates, as bench_persons.py runs them;
3. ``read+id``: every chunk read as the person-level reader reads it (the used columns and the id field), with one
   keyed hash of the id (the least a method needs to know whose row it is), pipelined over two workers as the
   engine does; nothing kept;
4. ``read+keyed``: the same with what the engine computes per row (``PersonRows.keyed``: the id's two hashes, h,
   the sort key, the cells the statistics read), no sort and no cut;
5. the selection of K rows per person among all 10M rows, held in memory at once (so: no memory bound), by the
   cheapest means polars and numpy give: ``argsort+gather`` (the sort key's arg_sort and the gather of the held
   columns in that order, the core of a sort-based cut), ``argsort+gather narrow`` (the same with the narrowest row
   a selection could hold: the key and ONE 64-bit column, as if the id's other hash and every cell were packed into
   it), ``group_by(person)`` (a hash table of the persons, counting rows and nothing more: the core of a hash-based
   selection), and ``np.sort(key)`` (the keys alone sorted, no payload moved: less than any selection needs, a
   bound no method reaches).

The floors are (4) plus the cheaper of the narrow sort and the group_by, over (1): what an implementation on polars
and numpy cannot go below with the per-row work the engine does; and (3) plus the same, the bound if the row hash
and the cells cost nothing. Best of N for each, printed beside the measured ratio (2)/(1).

Usage::

    .venv/bin/python bench/bench_person_floor.py [--rows N] [--persons N] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_persons as bp

from dpcli.engine import aggregate
from dpcli.engine.persons import _KEY, _PID, ID_COLUMN, PersonRows
from dpcli.engine.polars_engine import LineAggregator, pipelined
from dpcli.engine.source import CsvSource
from dpcli.plan.model import make_plan
from dpcli.specs.load import parse_spec

SECRET = bytes(32)


def best(repeat: int, run: Callable[[], Any]) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - t0)
    return min(times), result


def read_all(csv: Path, plan: Any, query: Callable[[pl.LazyFrame], pl.LazyFrame], keep: bool) -> list[pl.DataFrame]:
    """Every chunk's quote-blind read (the bench file has no quotes) through ``query``, two chunks in flight."""
    frames: list[pl.DataFrame] = []
    with CsvSource(csv, plan.spec) as source:
        reader = LineAggregator(plan, source.layout)
        jobs = (
            (lambda read=reads[0]: query(read).collect())
            for reads in map(reader._reads, source.chunks())
            if reads is not None
        )
        pipelined(jobs, frames.append if keep else (lambda frame: None))
    return frames


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--persons", type=int, default=1_000_000)
    ap.add_argument("--max-rows", type=int, default=4, help="K, rows kept per person")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    csv = bp.dataset(args.rows, args.persons)
    row_plan = make_plan(parse_spec(bp.spec_text(None)))
    person_plan = make_plan(parse_spec(bp.spec_text(args.max_rows)))
    rows = PersonRows(person_plan, SECRET)
    used = rows.used
    print(f"load average {os.getloadavg()[0]:.2f}; {csv.name}; K={args.max_rows}; best of {args.repeat}")

    figures: dict[str, float] = {}
    figures["row"], _ = best(args.repeat, lambda: aggregate(row_plan, csv))
    figures["person"], _ = best(args.repeat, lambda: aggregate(person_plan, csv, secret=SECRET))
    id_only = lambda read: read.select(pl.col(ID_COLUMN).hash(rows.seeds.person).alias(_PID), *used)  # noqa: E731
    figures["read+id"], _ = best(args.repeat, lambda: read_all(csv, person_plan, id_only, keep=False))
    figures["read+keyed"], _ = best(args.repeat, lambda: read_all(csv, person_plan, rows.keyed, keep=False))
    held = pl.concat(read_all(csv, person_plan, rows.keyed, keep=True), rechunk=True)
    figures["argsort+gather"], _ = best(args.repeat, lambda: held[held[_KEY].arg_sort()])
    narrow = held.select(_KEY, _PID)
    figures["argsort+gather narrow"], _ = best(args.repeat, lambda: narrow[narrow[_KEY].arg_sort()])
    figures["group_by(person)"], _ = best(args.repeat, lambda: held.group_by(_PID).len())
    keys = held[_KEY].to_numpy()
    figures["np.sort(key)"], _ = best(args.repeat, lambda: np.sort(keys))

    base = figures["row"]
    print(f"{'part':22} {'seconds':>8} {'/ row':>7}")
    for name, seconds in figures.items():
        print(f"{name:22} {seconds:8.2f} {seconds / base:7.2f}")
    selection = min(figures["argsort+gather narrow"], figures["group_by(person)"])
    for name in ("read+keyed", "read+id"):
        floor = figures[name] + selection
        print(f"floor: {name} + the cheaper selection core = {floor:.2f} s = {floor / base:.2f} x row")
    print(f"(with np.sort(key) as the selection: {(figures['read+id'] + figures['np.sort(key)']) / base:.2f} x row)")
    print(f"measured person/row: {figures['person'] / base:.2f} (issue 12's target: <= {bp.TARGET})")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
