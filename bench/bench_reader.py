#!/usr/bin/env python3
"""Reader benchmark: `dpcli.engine.aggregate` (one line = one record) against the read path it replaced.

The baseline is the previous engine's single polars scan, reproduced here: ``scan_csv`` with RFC 4180 quoting
across lines and strict UTF-8 (which let one record's open quote swallow the records after it, and one byte that
is not UTF-8 fail the run), grouped by the same queries. Both run in this process, alternately, ``--runs`` times
each; the table gives the median wall time and the ratio new/old.

Files (generated once, cached under bench/data/, which git ignores):
- ``people_<rows>.csv``: scripts/generate_people.py with its default seed and messiness (no quote at all);
- ``people_<rows>_q1.csv``: the same with every field of 1% of the lines quoted (a writer that quotes some lines);
- ``people_<rows>_q1bad.csv``: the 1% file where one in ten of those lines has an unterminated quote instead
  (before its last field, which is therefore still read: the aggregates are the same as the other files');
- ``people_<rows>_q100.csv``: every field of every line quoted (a writer that quotes everything);
- ``people_<rows>_crlf.csv``: the quote-free file with CRLF line ends (read as a CR file: the first column, age
  here, is read as text and cast).

Usage::

    .venv/bin/python bench/bench_reader.py                          # 10M rows, 5 runs each
    .venv/bin/python bench/bench_reader.py --rows 1000000 --runs 3
    .venv/bin/python bench/bench_reader.py --cases none,q100

The q1bad figures have no meaningful baseline (the old reader mis-reads that file), only a time.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dpcli.engine import aggregate  # noqa: E402
from dpcli.engine.cells import Queries, column_types, used_columns  # noqa: E402
from dpcli.plan.model import make_plan  # noqa: E402
from dpcli.specs.load import parse_spec  # noqa: E402

GENERATOR = ROOT / "scripts" / "generate_people.py"
DATA_DIR = ROOT / "bench" / "data"
CASES = ("none", "q1", "q1bad", "q100", "crlf")


def _generator():
    spec = importlib.util.spec_from_file_location("generate_people", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()
SPEC = f"""\
version: 1
dataset: people
privacy: {{epsilon: 1}}
columns:
  age:            {{type: int, bounds: [18, 90]}}
  sex:            {{type: category, categories: [{", ".join(GEN.SEXES)}]}}
  state:          {{type: category, categories: [{", ".join(GEN.STATES)}]}}
  hours_per_week: {{type: int, bounds: [0, 99]}}
  income:         {{type: float, bounds: [0, 500000], precision: 1}}
statistics:
  - {{name: people_by_state, kind: count, by: [state]}}
  - {{name: age_hist, kind: histogram, column: age, bins: {{start: 18, stop: 91, step: 1}}}}
  - {{name: mean_hours_by_sex, kind: mean, column: hours_per_week, by: [sex]}}
  - {{name: total_income, kind: sum, column: income}}
"""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def fresh(path: Path, *sources: Path) -> bool:
    return path.exists() and all(path.stat().st_mtime >= s.stat().st_mtime for s in sources)


def people(rows: int) -> Path:
    path = DATA_DIR / f"people_{rows}.csv"
    if not fresh(path, GENERATOR):
        log(f"generating {path} ...")
        GEN.write_people(path, rows)
    return path


def quoted_variant(rows: int, case: str) -> Path:
    """Every field quoted on every line (q100), on every 100th line (q1), or q1 with one in ten of those lines
    ending in an unterminated quote (q1bad); or CRLF line ends (crlf). Written in chunks: memory stays bounded."""
    source = people(rows)
    path = DATA_DIR / f"people_{rows}_{case}.csv"
    if fresh(path, source, Path(__file__)):
        return path
    log(f"writing {path} ...")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    n = 0
    with open(source, "rb") as src, open(tmp, "wb") as out:
        header = src.readline()
        out.write(header[:-1] + b"\r\n" if case == "crlf" else header)
        while True:
            lines = src.readlines(64 << 20)
            if not lines:
                break
            for i, line in enumerate(lines, n):
                if case == "crlf":
                    lines[i - n] = line[:-1] + b"\r\n"
                elif case == "q100" or i % 100 == 0:
                    fields = line.rstrip(b"\n").split(b",")
                    if case == "q1bad" and i % 1000 == 0:
                        lines[i - n] = b",".join(fields[:-1]) + b',"' + fields[-1] + b"\n"
                    else:
                        lines[i - n] = b",".join(b'"' + f + b'"' for f in fields) + b"\n"
            n += len(lines)
            out.writelines(lines)
    os.replace(tmp, path)
    return path


def baseline(plan, path: Path) -> list[pl.DataFrame]:
    """The previous engine's read: one scan_csv call as it was, then the same grouping queries."""
    spec = plan.spec
    used = used_columns(spec)
    scan = pl.scan_csv(
        path,
        has_header=True,
        infer_schema=False,
        schema_overrides=column_types(spec.columns, used),
        ignore_errors=True,
        raise_if_empty=False,
        truncate_ragged_lines=True,
        encoding="utf8",
        glob=False,
    ).select(used)
    queries = Queries(plan, pl.Int128())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pl.collect_all(queries.apply(scan), engine="streaming")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=5, help="timed runs of each reader per file (median reported)")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of: {', '.join(CASES)}")
    args = ap.parse_args(argv)
    plan = make_plan(parse_spec(SPEC))
    cases = [c for c in args.cases.split(",") if c]
    print(f"rows={args.rows} runs={args.runs} polars={pl.__version__} threads={pl.thread_pool_size()}")
    print(f"{'file':8} {'MB':>6} {'old s':>7} {'new s':>7} {'new/old':>8}")
    reference = None  # every file holds the same records: the first one's aggregates
    for case in cases:
        path = people(args.rows) if case == "none" else quoted_variant(args.rows, case)
        aggregate(plan, path)  # warm the page cache and polars
        old, new = [], []
        for _ in range(args.runs):
            t = time.perf_counter()
            result = aggregate(plan, path)
            new.append(time.perf_counter() - t)
            if case != "q1bad":
                t = time.perf_counter()
                baseline(plan, path)
                old.append(time.perf_counter() - t)
        got = [(e.counts.tolist(), None if e.sums is None else e.sums.tolist()) for e in result]
        reference = reference or got
        assert got == reference, f"{case}: the same records must give the same aggregates"  # also for q1bad
        o = statistics.median(old) if old else float("nan")
        m = statistics.median(new)
        print(f"{case:8} {path.stat().st_size / 1e6:6.0f} {o:7.2f} {m:7.2f} {m / o if old else float('nan'):8.2f}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
