#!/usr/bin/env python3
"""Variance and std (issue 13) against a mean of the same shape, in the same run: what the third noisy part (the sum
of squares) and the variance's post-processing cost.

Two cases, each a real `dpcli release` child process per kind (mean, variance, std), alternated, --repeat times:

- **cells**: the statistic by two category columns of K keys each (K² cells, default 10^6), over a small input:
  the cost after the spend (noise on three parts instead of two, the interval per cell);
- **rows**: the statistic of hours_per_week (float, default precision: squares on their own grid) by sex over
  bench/data/people_1000000.csv (scripts/generate_people.py): the scan's cost of the squares.

Reports the median wall time and peak RSS (os.wait4, like /usr/bin/time's %M) per kind and the ratios to the mean.

Usage::

    .venv/bin/python bench/bench_variance.py                  # 10^6 cells, 1M rows, 3 runs each
    .venv/bin/python bench/bench_variance.py --keys 2000 --rows 100000 --repeat 5

Progress goes to stderr, the table to stdout. Exit status 1 if a dpcli run failed.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERATOR = ROOT / "scripts" / "generate_people.py"
KINDS = ("mean", "variance", "std")

CELLS_SPEC = """\
version: 1
dataset: bench
privacy: {{epsilon: 1}}
columns:
  x: {{type: int, bounds: [0, 100]}}
  a: {{type: category, categories: [{keys}]}}
  b: {{type: category, categories: [{keys}]}}
statistics:
  - {{name: s, kind: {kind}, column: x, by: [a, b]}}
"""

ROWS_SPEC = """\
version: 1
dataset: bench
privacy: {{epsilon: 1}}
columns:
  hours_per_week: {{type: float, bounds: [1, 99]}}
  sex: {{type: category, categories: [Female, Male]}}
statistics:
  - {{name: s, kind: {kind}, column: hours_per_week, by: [sex]}}
"""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def people(rows: int) -> Path:
    path = ROOT / "bench" / "data" / f"people_{rows}.csv"
    if not path.exists():
        log(f"generating {path.relative_to(ROOT)} ...")
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(GENERATOR), "--rows", str(rows), "--output", str(path)], check=True)
    return path


def release(spec: str, data: Path, work: Path) -> tuple[float, int]:
    """(wall seconds, peak RSS in KiB) of one `dpcli release` child process on a fresh ledger."""
    (work / "s.yaml").write_text(spec)
    ledger = work / f"L{time.monotonic_ns()}.jsonl"
    dpcli = [sys.executable, "-m", "dpcli"]
    subprocess.run([*dpcli, "budget", "set", "bench", "--epsilon", "100", "--ledger", str(ledger)], check=True,
                   capture_output=True)
    start = time.perf_counter()
    proc = subprocess.Popen([*dpcli, "release", str(work / "s.yaml"), "-i", str(data), "-o", str(work / "out.csv"),
                             "--ledger", str(ledger), "--quiet"], stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        assert proc.stderr is not None
        raise RuntimeError(proc.stderr.read().decode())
    return wall, usage.ru_maxrss


def measure(name: str, specs: dict[str, str], data: Path, repeat: int) -> list[str]:
    times: dict[str, list[float]] = {k: [] for k in KINDS}
    peaks: dict[str, list[int]] = {k: [] for k in KINDS}
    with tempfile.TemporaryDirectory(prefix="dpcli-bench-variance-") as tmp:
        for i in range(repeat):
            for kind in KINDS:  # alternated, so a slow moment of the shared machine hits every kind alike
                wall, peak = release(specs[kind], data, Path(tmp))
                times[kind].append(wall)
                peaks[kind].append(peak)
                log(f"{name} run {i + 1}/{repeat} {kind}: {wall:.2f} s, {peak / 1024:.0f} MiB")
    base_t, base_m = statistics.median(times["mean"]), statistics.median(peaks["mean"])
    out = []
    for kind in KINDS:
        t, m = statistics.median(times[kind]), statistics.median(peaks[kind])
        out.append(f"| {name} | {kind} | {t:.2f} | {t / base_t:.2f} | {m / 1024:.0f} | {m / base_m:.2f} |")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1000, help="keys of each by: column (cells = keys²)")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the people file")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    keys = ", ".join(f"k{i}" for i in range(args.keys))
    rows: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix="dpcli-bench-variance-data-") as tmp:
            small = Path(tmp) / "small.csv"
            rng = random.Random(1)
            small.write_text("x,a,b\n" + "".join(
                f"{rng.randint(0, 100)},k{rng.randrange(args.keys)},k{rng.randrange(args.keys)}\n" for _ in range(2000)
            ))
            specs = {k: CELLS_SPEC.format(keys=keys, kind=k) for k in KINDS}
            rows += measure(f"{args.keys ** 2} cells", specs, small, args.repeat)
        specs = {k: ROWS_SPEC.format(kind=k) for k in KINDS}
        rows += measure(f"{args.rows} rows", specs, people(args.rows), args.repeat)
    except RuntimeError as exc:
        log(f"dpcli failed: {exc}")
        return 1
    print("| case | kind | wall s (median) | / mean | peak MiB (median) | / mean |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
