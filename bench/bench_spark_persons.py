#!/usr/bin/env python3
"""Spark engine benchmark for person-level releases: the same panel file and statistics at row level and under a
person unit, on Spark ``local[2]`` beside the polars engine, in one run.

A panel CSV (default 1M rows, 100k persons, rows in random order; generated into bench/data/ once, seeded) is
aggregated four ways, each in its own child process (the internal no-noise path: no ledger, no output):
polars and Spark, each at row level and under ``unit: {id: person_id, max_rows: 5, max_groups: 3}``. Reported per
run, as bench_spark.py does: wall (the child's whole time, Spark's session start included), phase (the aggregate
call alone, for Spark after the session is up), warm (the same call again in the same process: Spark's first job
also pays the JVM's warm-up and its Python workers' start) and the peak RSS of the child's process tree (sampled
every 0.2 s).
The two engines' aggregates are compared (same secret: they must be identical). Quote ratios of one run.

Usage::

    .venv/bin/python bench/bench_spark_persons.py                  # 1M rows, 100k persons
    .venv/bin/python bench/bench_spark_persons.py --rows 3000000 --persons 300000
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from bench_spark import run_sampled  # noqa: E402 - the same child run and process-tree RSS sampling as the row-level bench

DATA_DIR = ROOT / "bench" / "data"
SECRET = bytes(range(32))
COLUMNS = """\
columns:
  age:     {type: int, bounds: [0, 100]}
  income:  {type: float, bounds: [0, 200000], precision: 1}
  sex:     {type: category, categories: [F, M]}
  region:  {type: category, categories: [north, south, east, west]}
  country: {type: category, categories: open, max_length: 16}
"""
ROW_STATISTICS = """\
statistics:
  - {name: rows, kind: count}
  - {name: by_sex_region, kind: count, by: [sex, region]}
  - {name: ages, kind: histogram, column: age, bins: {start: 0, stop: 110, step: 10}}
  - {name: income, kind: sum, column: income, by: [region]}
  - {name: mean_age, kind: mean, column: age, by: [sex]}
  - {name: by_country, kind: count, by: [country]}
"""
PERSON_STATISTICS = """\
statistics:
  - {name: rows, kind: count}
  - {name: persons, kind: count, of: persons}
  - {name: by_sex_region, kind: count, by: [sex, region]}
  - {name: ages, kind: histogram, column: age, bins: {start: 0, stop: 110, step: 10}}
  - {name: income, kind: sum, column: income, by: [region], clamp: person}
  - {name: mean_age, kind: mean, column: age, by: [sex], clamp: row}
  - {name: by_country, kind: count, by: [country]}
"""
UNITS = {"row": "row", "person": "{id: person_id, max_rows: 5, max_groups: 3, missing_id: drop}"}


def spec_text(unit: str) -> str:
    statistics = ROW_STATISTICS if unit == "row" else PERSON_STATISTICS
    return (
        f"version: 1\ndataset: panel\nprivacy: {{epsilon: 1, delta: 1e-6, unit: {UNITS[unit]}}}\n"
        f"{COLUMNS}{statistics}"
    )


def panel(rows: int, persons: int) -> Path:
    """The panel CSV (seeded): person ids with 1 to ~40 rows each, 1% of ids missing, rows in random order."""
    path = DATA_DIR / f"panel_{rows}_{persons}.csv"
    if path.exists():
        return path
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    rng = random.Random(12)
    countries = [f"country-{k}" for k in range(60)]
    weights = [rng.choice([1, 2, 4, 8, 16, 40]) for _ in range(persons)]
    ids = rng.choices(range(persons), weights, k=rows)
    with path.open("w") as out:
        out.write("person_id,age,income,sex,region,country\n")
        for i in ids:
            pid = "" if rng.random() < 0.01 else f"p{i}"
            out.write(
                f"{pid},{rng.randint(0, 99)},{rng.randint(0, 150000)},{rng.choice('FM')},"
                f"{rng.choice(('north', 'south', 'east', 'west'))},{rng.choice(countries)}\n"
            )
    return path


def child(engine: str, unit: str, path: str, master: str, out: str) -> None:
    from dpcli.plan.model import make_plan
    from dpcli.specs.load import parse_spec

    plan = make_plan(parse_spec(spec_text(unit)))
    if engine == "spark":
        from dpcli.engine import spark_engine

        spark_engine.session(master)
        run = partial(spark_engine.aggregate, plan, path, secret=SECRET)
    else:
        from dpcli.engine import aggregate

        run = partial(aggregate, plan, Path(path), secret=SECRET)
    t0 = time.perf_counter()
    stats = run()
    phase = time.perf_counter() - t0
    # again in the same process: Spark's first job pays the JVM's warm-up and the Python workers' start and imports
    t0 = time.perf_counter()
    run()
    warm = time.perf_counter() - t0
    result = []
    for e in stats:
        sums = None if e.sums is None else [str(int(s)) for s in e.sums]
        entries = None if e.keys is None else sorted(zip(e.keys, e.counts.tolist(), strict=True))
        result.append([e.counts.tolist() if e.keys is None else None, sums, entries])
    Path(out).write_text(json.dumps({"phase": phase, "warm": warm, "result": result}))


def measure(engine: str, unit: str, path: Path, master: str) -> dict:
    cmd = [sys.executable, __file__, "--child", engine, unit, str(path), "--master", master]
    wall, peak, data = run_sampled(cmd, f"{engine}/{unit}", "dpcli-bench-spark-persons-")
    return {"wall": wall, "phase": data["phase"], "warm": data["warm"], "tree_peak": peak, "result": data["result"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--persons", type=int, default=100_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--child", nargs=3, metavar=("ENGINE", "UNIT", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.master, args.out)
        return 0
    path = panel(args.rows, args.persons)
    print(f"{path.name}: {args.rows:,} rows, {args.persons:,} persons, master {args.master}")
    print(f"{'engine':<8} {'unit':<7} {'wall s':>8} {'phase s':>8} {'warm s':>8} {'tree peak MB':>13}")
    runs = {}
    for engine in ("polars", "spark"):
        for unit in ("row", "person"):
            r = runs[engine, unit] = measure(engine, unit, path, args.master)
            print(f"{engine:<8} {unit:<7} {r['wall']:>8.1f} {r['phase']:>8.1f} {r['warm']:>8.1f} "
                  f"{r['tree_peak'] / 2**20:>13.0f}", flush=True)
    status = 0
    for unit in ("row", "person"):
        same = runs["polars", unit]["result"] == runs["spark", unit]["result"]
        status |= 0 if same else 1
        spark, polars = runs["spark", unit], runs["polars", unit]
        print(f"{unit}: spark/polars phase {spark['phase'] / polars['phase']:.1f}x, warm "
              f"{spark['warm'] / polars['warm']:.1f}x, wall {spark['wall'] / polars['wall']:.1f}x; aggregates "
              f"identical: {same}")
    for engine in ("polars", "spark"):
        person, row = runs[engine, "person"], runs[engine, "row"]
        print(f"{engine}: person/row phase {person['phase'] / row['phase']:.2f}x, "
              f"warm {person['warm'] / row['warm']:.2f}x")
    return status


if __name__ == "__main__":
    sys.exit(main())
