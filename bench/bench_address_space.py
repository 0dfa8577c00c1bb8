#!/usr/bin/env python3
"""The address space a `dpcli release` maps (VmPeak) against its memory estimate, with and without the allocator
settings of dpcli/core/resources.py (issue 23): the figures behind ``ADDRESS_SPACE_BASE_MB`` and
``ADDRESS_SPACE_PER_THREAD_MB``, and the smallest ``ulimit -v`` under which each release ran.

Each release runs in a child process through a launcher that applies (or not) the settings, runs the real command
(``dpcli.cli.app.main``) and writes its own VmPeak, VmHWM and thread count from /proc at exit. Releases: a 14-cell spec
over 1,000 rows, the same over 200k and 2M rows, a 5M-cell histogram over 1,000 rows; polars threads 1, 2 and 8.
Then, with the settings (and the check left out), a bisection for the smallest RLIMIT_AS (to 20 MB) under which
each ran (exit 0), beside what ``check_address_space`` asks for. Linux only.

Usage::

    .venv/bin/python bench/bench_address_space.py [--threads 1,2,8] [--no-search]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

LAUNCHER = """\
import atexit, os, sys
settings, peak_file = sys.argv[1], sys.argv[2]
if settings.startswith("on"):
    from dpcli.core.resources import set_allocators
    set_allocators()
if settings == "on-unchecked":  # the search: find what the release needs, not what the check asks
    import dpcli.run.release
    dpcli.run.release.check_address_space = lambda memory_mb: None
def peak():
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    with open(peak_file, "w") as out:
        out.write(" ".join(status[k].split()[0] for k in ("VmPeak", "VmHWM", "Threads")))
atexit.register(peak)
sys.argv = ["dpcli", *sys.argv[3:]]
from dpcli.cli.app import main
main()
"""

SPEC = """\
version: 1
dataset: bench
privacy: {unit: row, neighbours: add_remove, epsilon: 1}
columns:
  age: {type: int, bounds: [0, 100]}
  sex: {type: category, categories: [F, M]}
  income: {type: float, bounds: [0, 5000000], precision: 1}
statistics:
"""
RELEASES = {
    "14 cells": SPEC + "  - {name: n, kind: count, by: [sex]}\n  - {name: h, kind: histogram, column: age, "
    "bins: [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 101]}\n  - {name: m, kind: mean, column: age}\n",
    "5M cells": SPEC + "  - {name: h, kind: histogram, column: income, bins: {start: 0, stop: 5000000, step: 1}}\n",
}
CASES = [("14 cells", 1_000), ("14 cells", 200_000), ("14 cells", 2_000_000), ("5M cells", 1_000)]


def write_data(path: Path, rows: int) -> None:
    with path.open("w") as out:
        out.write("age,sex,income\n")
        for start in range(0, rows, 100_000):
            out.write("".join(f"{i % 101},{'FM'[i % 2]},{i * 7919 % 5_000_000}.5\n"
                              for i in range(start, min(rows, start + 100_000))))


def run(work: Path, release: str, rows: int, settings: str, threads: int, limit_mb: int | None = None,
        ) -> tuple[int, str]:
    ledger = work / f"L-{os.getpid()}.jsonl"
    for stale in work.glob(ledger.name + "*"):
        if stale.is_file():
            stale.unlink()
    env = {**os.environ, "POLARS_MAX_THREADS": str(threads)}
    env.pop("_RJEM_MALLOC_CONF", None)
    subprocess.run([sys.executable, "-m", "dpcli", "budget", "set", "bench", "--epsilon", "100", "--ledger",
                    str(ledger)], check=True, capture_output=True, env=env)
    spec = work / f"{release.split()[0]}.yaml"
    peak = work / "peak"
    peak.unlink(missing_ok=True)
    command = [sys.executable, "-c", LAUNCHER, settings, str(peak), "release", str(spec), "-i",
               str(work / f"data-{rows}.csv"), "-o", str(work / "o.csv"), "--ledger", str(ledger), "--quiet"]
    if limit_mb is not None:
        command = ["prlimit", f"--as={limit_mb * 2**20}", *command]
    r = subprocess.run(command, capture_output=True, env=env, timeout=900)
    return r.returncode, peak.read_text() if peak.exists() else ""


def mb(kb: str) -> str:
    return str(int(kb) // 1024) if kb.isdigit() else kb


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1,2,8", help="polars thread counts (POLARS_MAX_THREADS)")
    parser.add_argument("--no-search", action="store_true", help="skip the search for the smallest ulimit -v")
    args = parser.parse_args()
    from dpcli.core.resources import address_space_needed_mb
    from dpcli.plan.cost import release_cost
    from dpcli.plan.model import make_plan
    from dpcli.specs.load import load_spec

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        estimates = {}
        for release, text in RELEASES.items():
            (work / f"{release.split()[0]}.yaml").write_text(text)
            estimates[release] = release_cost(make_plan(load_spec(work / f"{release.split()[0]}.yaml"))).memory_mb
        for rows in sorted({rows for _, rows in CASES}):
            print(f"writing {rows} rows", file=sys.stderr)
            write_data(work / f"data-{rows}.csv", rows)
        print("| release | rows | polars threads | estimate MB | settings | VmPeak MB | VmHWM MB | threads |")
        print("|---|---|---|---|---|---|---|---|")
        for release, rows in CASES:
            for threads in map(int, args.threads.split(",")):
                for settings in ("off", "on"):
                    code, peak = run(work, release, rows, settings, threads)
                    vm_peak, hwm, os_threads = [*peak.split(), "?", "?", "?"][:3]
                    print(f"| {release} | {rows} | {threads} | {estimates[release]} | {settings} | {mb(vm_peak)} | "
                          f"{mb(hwm)} | {os_threads} |" + ("" if code == 0 else f" exit {code}"), flush=True)
        if args.no_search:
            return 0
        print("\n| release | rows | polars threads | smallest ulimit -v that ran, MB | check_address_space asks |")
        print("|---|---|---|---|---|")
        for release, rows in CASES:
            threads = 2
            os.environ["POLARS_MAX_THREADS"] = str(threads)
            asked = address_space_needed_mb(estimates[release])
            failed, ran = 200, 2000  # bisection to 20 MB: the release fails at `failed` and runs at `ran`
            while ran - failed > 20:
                middle = (failed + ran) // 2
                if run(work, release, rows, "on-unchecked", threads, middle)[0] == 0:
                    ran = middle
                else:
                    failed = middle
            print(f"| {release} | {rows} | {threads} | {ran} | {asked} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
