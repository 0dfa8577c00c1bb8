#!/usr/bin/env python3
"""Person-level benchmark (issue 12): a person-level release against the row-level release on the same file, and
peak memory against the number of persons.

1. the data: bench/data/persons_<rows>_<persons>.csv (git-ignored, generated once here with numpy and polars):
   person_id, age, sex, state, hours_per_week; each row's person drawn uniformly from <persons> ids and the rows in
   random order (a person's rows scattered through the file: the hard case for memory);
2. the same three aggregates as bench/bench_release.py (a count by state, a 73-bin age histogram, a mean of hours by
   sex) at row level and under `unit: {id: person_id, max_rows: K, missing_id: drop}` (the mean with clamp: row),
   each run as `dpcli.engine.aggregate` in a child process of its own: the child reports the aggregate's time,
   os.wait4 the child's peak RSS;
3. the same person-level release on a file with as many rows and 10x fewer persons.

Prints best-of-N times, the person/row ratio (issue 12: <= 2.0 at 10M rows with 1M persons) and the peak RSS of
each run; exits 1 if the ratio is over the target or a run failed.

Usage::

    .venv/bin/python bench/bench_persons.py                          # 10M rows, 1M and 100k persons, K=4
    .venv/bin/python bench/bench_persons.py --rows 1000000 --persons 100000 --repeat 1
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_release as br  # the spec's columns and statistics are bench_release's

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "bench" / "data"
TARGET = 2.0
BLOCK = 1_000_000  # rows generated at a time


def dataset(rows: int, persons: int, seed: int = 12) -> Path:
    """The cached CSV of ``rows`` rows of ``persons`` persons (generated if missing)."""
    path = DATA_DIR / f"persons_{rows}_{persons}.csv"
    if path.exists():
        return path
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    br.log(f"generating {rows:,} rows of {persons:,} persons -> {path.relative_to(ROOT)} ...")
    rng = np.random.default_rng(seed)
    partial = path.with_suffix(".partial")
    with open(partial, "wb") as fh:
        fh.write(b"person_id,age,sex,state,hours_per_week\n")
        for start in range(0, rows, BLOCK):
            n = min(BLOCK, rows - start)
            frame = pl.DataFrame({
                "person_id": pl.Series(rng.integers(0, persons, n)).cast(pl.String).str.zfill(7),
                "age": rng.integers(br.AGE_LO - 2, br.AGE_HI + 3, n),
                "sex": np.asarray(br.SEXES)[rng.integers(0, len(br.SEXES), n)],
                "state": np.asarray(br.STATES)[rng.integers(0, len(br.STATES), n)],
                "hours_per_week": rng.integers(br.HOURS_LO, br.HOURS_HI + 1, n),
            })
            frame.write_csv(fh, include_header=False, line_terminator="\n")
    partial.rename(path)
    return path


def spec_text(k: int | None) -> str:
    """bench_release's spec, at row level (k None) or per person with at most k rows each."""
    text = br.SPEC_YAML
    if k is None:
        return text
    text = text.replace("privacy: {unit: row,", f"privacy: {{unit: {{id: person_id, max_rows: {k}, missing_id: drop}},")
    return text.replace("by: [sex]}", "by: [sex], clamp: row}")


CHILD = """
import sys, time
from dpcli.engine import aggregate
from dpcli.plan.model import make_plan
from dpcli.specs.load import parse_spec
plan = make_plan(parse_spec(open({spec!r}).read()))
t0 = time.perf_counter()
exact = aggregate(plan, {csv!r}, secret=bytes(32))
print(time.perf_counter() - t0, sum(int(e.counts.sum()) for e in exact))
"""


def run_child(spec: Path, csv: Path) -> tuple[float, float, int]:
    """(aggregate seconds, peak RSS MiB, total count) of one aggregate in a child process."""
    code = CHILD.format(spec=str(spec), csv=str(csv))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"the child exited with {proc.returncode}")
    seconds, total = out.split()
    return float(seconds), usage.ru_maxrss / 1024, int(total)


def best(spec: Path, csv: Path, repeat: int) -> tuple[float, float, int]:
    runs = [run_child(spec, csv) for _ in range(repeat)]
    return min(r[0] for r in runs), max(r[1] for r in runs), runs[0][2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--persons", type=int, default=1_000_000)
    ap.add_argument("--max-rows", type=int, default=4, help="K, rows kept per person")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    many = dataset(args.rows, args.persons)
    few = dataset(args.rows, args.persons // 10)
    print(f"load average {os.getloadavg()[0]:.2f}; {args.rows:,} rows; K={args.max_rows}; best of {args.repeat}")
    with tempfile.TemporaryDirectory(prefix="dpcli-bench-") as tmp:
        row_spec, person_spec = Path(tmp) / "row.yaml", Path(tmp) / "person.yaml"
        row_spec.write_text(spec_text(None), encoding="utf-8")
        person_spec.write_text(spec_text(args.max_rows), encoding="utf-8")
        print(f"{'input':34} {'unit':8} {'aggregate_s':>11} {'peak_rss_MiB':>12} {'counted':>12}")
        results = {}
        for name, spec, csv in [
            ("row", row_spec, many), ("person", person_spec, many), ("person", person_spec, few),
        ]:
            results[(name, csv)] = r = best(spec, csv, args.repeat)
            print(f"{csv.name:34} {name:8} {r[0]:11.2f} {r[1]:12.0f} {r[2]:12,}", flush=True)
    ratio = results[("person", many)][0] / results[("row", many)][0]
    rss = results[("person", many)][1] / results[("person", few)][1]
    print(f"person/row time on {many.name}: {ratio:.2f} (target <= {TARGET})")
    print(f"peak RSS, {args.persons:,} persons / {args.persons // 10:,} persons, same rows: {rss:.2f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
