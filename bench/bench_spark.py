#!/usr/bin/env python3
"""Spark engine benchmark: the exact aggregates of bench_release.py's spec on Spark ``local[2]`` beside the polars
engine, on the same file, in the same run.

For each input (default: 10M rows, bench/data/people_10000000.csv, and the 3 GB file, 75M rows,
bench/data/people_75000000.csv as bench_bigfile.py makes it, or --big PATH; each generated with
scripts/generate_people.py when missing) and each engine, one child process runs ``aggregate(plan, path)`` (the
internal no-noise path: no ledger, no output) and this script reports

- wall: the child's whole wall time (Python start-up, imports, for Spark the JVM and session start too);
- phase: the time of the aggregate call alone (for Spark after the session is up: what a warm session pays);
- tree peak: the largest sum of RSS over the child's whole process tree (driver, JVM, Python workers), sampled
  from /proc every 0.2 s (a short peak between samples can be missed);
- largest: the kernel's peak RSS of the largest single process among the children so far (getrusage
  RUSAGE_CHILDREN: a running maximum over the whole script, so read it for the first row or when it grows).

The two engines' aggregates are compared too (they must be identical). Figures are noisy on a shared machine:
quote them as ratios of the same run. Needs the `spark` extra and Java 17.

Usage::

    .venv/bin/python bench/bench_spark.py                       # 10M rows and 3 GB, both engines
    .venv/bin/python bench/bench_spark.py --sizes 10000000 --no-big
    .venv/bin/python bench/bench_spark.py --master 'local[2]' --big /path/to/people.csv
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from bench_release import GENERATOR, SPEC_YAML, dataset, log  # noqa: E402 - the same spec and data as the release bench

BIG = Path(__file__).resolve().parent / "data" / "people_75000000.csv"  # bench_bigfile.py's file
BIG_ROWS = 75_000_000


def big_file(path: Path) -> Path:
    """The 3 GB CSV, generated (default seed) when missing."""
    if not path.exists():
        log(f"generating {BIG_ROWS:,} rows -> {path} ...")
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(GENERATOR), "--rows", str(BIG_ROWS), "--output", str(path)], check=True)
    return path


def child(engine: str, path: str, master: str, out: str) -> None:
    """In the child process: one aggregate, its time and result written to ``out`` as JSON."""
    from dpcli.plan.model import make_plan
    from dpcli.specs.load import parse_spec

    plan = make_plan(parse_spec(SPEC_YAML))
    if engine == "spark":
        from dpcli.engine import spark_engine

        spark_engine.session(master)
        t0 = time.perf_counter()
        stats = spark_engine.aggregate(plan, path)
    else:
        from dpcli.engine import aggregate

        t0 = time.perf_counter()
        stats = aggregate(plan, Path(path))
    phase = time.perf_counter() - t0
    result = [[e.counts.tolist(), None if e.sums is None else [str(int(s)) for s in e.sums]] for e in stats]
    Path(out).write_text(json.dumps({"phase": phase, "result": result}))


def _tree_rss(root: int) -> int:
    """Sum of RSS (bytes) of ``root`` and all its descendants, from /proc."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        rss[int(entry)] = int(fields[21]) * page
    total, todo = 0, [root]
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total


class TreePeak:
    """The largest sum of RSS over a running process's tree (``_tree_rss``), sampled every 0.2 s on a thread from
    construction until ``stop()``, which returns it in bytes."""

    def __init__(self, pid: int):
        self.peak = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(pid,), daemon=True)
        self._thread.start()

    def _sample(self, pid: int) -> None:
        while not self._done.wait(0.2):
            self.peak = max(self.peak, _tree_rss(pid))

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.peak


def run_sampled(cmd: list[str], what: str, prefix: str) -> tuple[float, int, dict]:
    """Run ``cmd`` + ``--out FILE`` as a child, sampling its process tree's RSS every 0.2 s.

    Returns (wall seconds, peak tree RSS in bytes, the JSON the child wrote to FILE); shared with bench_spark_persons.
    """
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        out = Path(tmp) / "out.json"
        t0 = time.perf_counter()
        proc = subprocess.Popen([*cmd, "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        tree = TreePeak(proc.pid)
        _, stderr = proc.communicate()
        wall = time.perf_counter() - t0
        peak = tree.stop()
        if proc.returncode != 0:
            raise SystemExit(f"{what} failed ({proc.returncode}):\n{stderr.decode(errors='replace')}")
        return wall, peak, json.loads(out.read_text())


def measure(engine: str, path: Path, master: str) -> dict:
    cmd = [sys.executable, __file__, "--child", engine, str(path), "--master", master]
    wall, peak, data = run_sampled(cmd, f"{engine} on {path}", "dpcli-bench-spark-")
    largest = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # the largest child so far
    return {"wall": wall, "phase": data["phase"], "tree_peak": peak, "largest": largest, "result": data["result"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000000", help="comma-separated row counts (bench/data files)")
    parser.add_argument("--big", type=Path, default=BIG, help="the 3 GB CSV (generated when missing)")
    parser.add_argument("--no-big", action="store_true", help="skip the 3 GB file")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--child", nargs=2, metavar=("ENGINE", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.master, args.out)
        return 0
    inputs = [dataset(int(n)) for n in args.sizes.split(",") if n]
    if not args.no_big:
        inputs.append(big_file(args.big))
    print(f"{'input':<28} {'engine':<8} {'wall s':>8} {'phase s':>8} {'tree peak MB':>13} {'largest MB':>11}")
    status = 0
    for path in inputs:
        results = {}
        for engine in ("polars", "spark"):
            log(f"{engine} on {path} ...")
            r = measure(engine, path, args.master)
            results[engine] = r
            print(
                f"{path.name:<28} {engine:<8} {r['wall']:>8.1f} {r['phase']:>8.1f} {r['tree_peak'] / 2**20:>13.0f} "
                f"{r['largest'] / 2**20:>11.0f}",
                flush=True,
            )
        same = results["polars"]["result"] == results["spark"]["result"]
        ratio = results["spark"]["wall"] / results["polars"]["wall"]
        print(f"{path.name:<28} spark/polars wall {ratio:.2f}; aggregates identical: {same}", flush=True)
        status |= 0 if same else 1
    return status


if __name__ == "__main__":
    sys.exit(main())
