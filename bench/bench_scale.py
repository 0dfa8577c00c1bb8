#!/usr/bin/env python3
"""Scale benchmark (issue 28): rows per second and peak memory of the `dpcli release` command at 1M, 10M and 100M
rows, plain CSV and gzip, and the Spark engine on ``local[2]`` on the largest file.

For each size (default 1M, 10M and 100M rows) it

1. makes the input once, git-ignored under bench/data/: ``people_<rows>.csv`` with scripts/generate_people.py (as
   bench_release.py does; 100M rows = 4.0 GB) and ``people_<rows>.csv.gz`` beside it with the system's ``gzip``
   at its default level (6), if missing;
2. runs the whole `dpcli release` command of bench_release.py's spec (a count by state, a 73-bin age histogram, a
   mean of hours by sex) on each, as a user would: a fresh process, a new release each time (no --release-id) on a
   ledger in a temporary directory. A gzip input is given the public limit on its decompressed size explicitly,
   ``--max-input-bytes`` (default 16 GiB otherwise), set here to the next GiB above the plain file's size: a user
   states a bound they know, never one read off the data;
3. with ``--spark``, the same command with ``--engine spark --spark-master local[2]`` on the largest plain file.

Reported per run: wall seconds (best of --repeat, one run at 100M rows), rows per second, input MB per second, and
peak RSS: for the polars engine the kernel's peak resident set of the dpcli process (os.wait4, through
bench/measure.py's launcher), for Spark the largest sum of RSS over the whole process tree (driver, JVM, Python
workers) sampled every 0.2 s from /proc.

Usage::

    .venv/bin/python bench/bench_scale.py                          # 1M, 10M, 100M; plain and gzip
    .venv/bin/python bench/bench_scale.py --sizes 1000000,10000000 --repeat 3
    .venv/bin/python bench/bench_scale.py --spark                  # and Spark local[2] on the largest file

Needs ~8 GB of disk at 100M rows (the CSV and its .gz). Spark needs the `spark` extra and Java 17.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_release as br  # the spec and the generated data are bench_release's
from bench_spark import TreePeak  # the process tree's peak RSS, sampled from /proc
from measure import measured, peak_bytes  # a command's own peak RSS, through a fork launcher

GIB = 1 << 30


def gzipped(csv: Path) -> Path:
    """``csv``.gz beside it (the system's gzip, default level), made once."""
    path = csv.with_name(csv.name + ".gz")
    if path.exists() and path.stat().st_mtime >= csv.stat().st_mtime:
        return path
    br.log(f"gzip {csv.name} ...")
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as out:
        subprocess.run(["gzip", "-c", str(csv)], stdout=out, check=True)
    partial.replace(path)
    return path


def run(cmd: list[str], tree: bool, peak_file: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS in bytes of ``cmd``: its own peak (through bench/measure.py's launcher, so that this
    process's polars is not counted), or with ``tree`` the largest sampled sum over its process tree."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd if tree else measured(cmd, peak_file), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    sampler = TreePeak(proc.pid) if tree else None
    _, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    peak = sampler.stop() if sampler is not None else 0
    if proc.returncode != 0:
        raise SystemExit(f"`{' '.join(cmd)}` failed ({proc.returncode}):\n{stderr.decode(errors='replace')}")
    return wall, peak if tree else peak_bytes(peak_file)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=br.parse_sizes, default=br.parse_sizes("1000000,10000000,100000000"))
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs below 100M rows (default 3)")
    ap.add_argument("--spark", action="store_true", help="also the Spark engine (local[2]) on the largest file")
    ap.add_argument("--no-gzip", action="store_true", help="plain CSV only")
    args = ap.parse_args(argv)
    dpcli = br.find_dpcli()
    if dpcli is None:
        ap.error("no dpcli executable")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs")
    print(f"{'input':34} {'engine':7} {'runs':>4} {'wall_s':>8} {'rows/s':>12} {'MB/s':>7} {'peak_MiB':>9}")
    with tempfile.TemporaryDirectory(prefix="dpcli-bench-scale-") as tmp_name:
        tmp = Path(tmp_name)
        spec = tmp / "people.yaml"
        spec.write_text(br.SPEC_YAML, encoding="utf-8")
        ledger = tmp / "ledger.jsonl"
        subprocess.run([str(dpcli), "budget", "set", "people", "--epsilon", "100000", "--ledger", str(ledger)],
                       check=True, stdout=subprocess.DEVNULL)
        largest: Path | None = None
        for rows in args.sizes:
            csv = br.dataset(rows)
            largest = csv
            inputs = [(csv, [])]
            if not args.no_gzip:
                limit = (csv.stat().st_size // GIB + 1) * GIB  # public: a bound above the size, stated by the user
                inputs.append((gzipped(csv), ["--max-input-bytes", str(limit)]))
            runs = 1 if rows >= 100_000_000 else args.repeat
            for path, extra in inputs:
                cmd = [str(dpcli), "release", str(spec), "--input", str(path), "--output", str(tmp / "out.csv"),
                       "--ledger", str(ledger), "--quiet", *extra]
                best = min((run(cmd, tree=False, peak_file=tmp / "peak") for _ in range(runs)), key=lambda r: r[0])
                report(path, "polars", runs, rows, csv.stat().st_size, *best)
        if args.spark and largest is not None:
            rows = int(largest.stem.split("_")[1])
            cmd = [str(dpcli), "release", str(spec), "--input", str(largest), "--output", str(tmp / "out.csv"),
                   "--ledger", str(ledger), "--quiet", "--engine", "spark", "--spark-master", "local[2]"]
            report(largest, "spark", 1, rows, largest.stat().st_size, *run(cmd, tree=True, peak_file=tmp / "peak"))
    print(f"load average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def report(path: Path, engine: str, runs: int, rows: int, size: int, wall: float, peak: int) -> None:
    print(f"{path.name:34} {engine:7} {runs:>4} {wall:8.2f} {rows / wall:12,.0f} {size / wall / 1e6:7.0f}"
          f" {peak / 2**20:9.0f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
