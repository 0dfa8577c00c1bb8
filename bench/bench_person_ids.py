#!/usr/bin/env python3
"""What telling persons apart by their id's text costs (issue 23, finding 8), against the two 64-bit hashes of the
id that did it before, in the same run on the same file.

Before, ``dpcli.engine.persons`` held two keyed polars hashes of each row's id and took two rows for one person's
when both agreed: a collision of two ids merged two persons (2K rows moved by one person's presence), and polars'
seeded XXH3 is no PRF. Now a person is the id's text (one keyed hash still orders the rows). This script runs the
person-level aggregates of bench_persons.py (10M rows, 1M persons, K=4 by default) with each ``PersonRows``: the
current one, and the one of a git revision (default: the last commit before the change), loaded from ``git show``
into the polars engine of a child process. Each run is a child process: its aggregate time and peak RSS. Prints
best-of-N times, peak RSS and the ratios current / before.

Usage::

    .venv/bin/python bench/bench_person_ids.py                       # 10M rows, 1M persons, K=4, best of 3
    .venv/bin/python bench/bench_person_ids.py --rows 1000000 --persons 100000 --repeat 1
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_persons as bp

ROOT = Path(__file__).resolve().parent.parent
# a commit of main whose persons.py told persons apart by two hashes of the id (the bench's spec has
# missing_id: drop, so that version's missing_id: person defect, issue 23's finding 12, does not show here)
BEFORE = "cb3675c"

CHILD = """
import importlib.util, sys, time
from dpcli.engine import aggregate, polars_engine
from dpcli.plan.model import make_plan
from dpcli.specs.load import parse_spec
if {module!r}:
    spec = importlib.util.spec_from_file_location("persons_before", {module!r})
    before = sys.modules["persons_before"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(before)
    polars_engine.PersonRows = before.PersonRows  # the engine builds its PersonRows by this name
plan = make_plan(parse_spec(open({spec_path!r}).read()))
t0 = time.perf_counter()
exact = aggregate(plan, {csv!r}, secret=bytes(32))
print(time.perf_counter() - t0, sum(int(e.counts.sum()) for e in exact))
"""


def run_child(spec: Path, csv: Path, module: str) -> tuple[float, float, float, int]:
    """(aggregate seconds, the child's CPU seconds, its peak RSS MiB, total count) of one aggregate in a child
    process. The CPU time (user + system, the interpreter's start included) moves less with the machine's load than
    the wall time does."""
    code = CHILD.format(spec_path=str(spec), csv=str(csv), module=module)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("the child failed")
    seconds, total = out.split()
    return float(seconds), usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, int(total)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--persons", type=int, default=1_000_000)
    ap.add_argument("--max-rows", type=int, default=4, help="K, rows kept per person")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--before", default=BEFORE, help="the git revision whose persons.py is the baseline")
    args = ap.parse_args(argv)
    csv = bp.dataset(args.rows, args.persons)
    print(f"load average {os.getloadavg()[0]:.2f}; {csv.name}; K={args.max_rows}; best of {args.repeat}; "
          f"before = {args.before}")
    with tempfile.TemporaryDirectory(prefix="dpcli-bench-") as tmp:
        spec = Path(tmp) / "person.yaml"
        spec.write_text(bp.spec_text(args.max_rows), encoding="utf-8")
        old = Path(tmp) / "persons_before.py"
        old.write_bytes(subprocess.run(["git", "show", f"{args.before}:dpcli/engine/persons.py"], cwd=ROOT,
                                       check=True, capture_output=True).stdout)
        runs: dict[str, list[tuple[float, float, float, int]]] = {"before (two id hashes)": [], "now (id text)": []}
        for _ in range(args.repeat):  # interleaved, so that a change of load hits both alike
            runs["before (two id hashes)"].append(run_child(spec, csv, str(old)))
            runs["now (id text)"].append(run_child(spec, csv, ""))
    print(f"{'persons told by':24} {'aggregate_s':>11} {'cpu_s':>7} {'peak_rss_MiB':>12} {'counted':>12}")
    best = {}
    for name, rs in runs.items():
        best[name] = (min(r[0] for r in rs), min(r[1] for r in rs), max(r[2] for r in rs), rs[0][3])
        print(f"{name:24} {best[name][0]:11.2f} {best[name][1]:7.2f} {best[name][2]:12.0f} {best[name][3]:12,}")
    (t0, u0, m0, c0), (t1, u1, m1, c1) = best.values()
    print(f"now / before: time {t1 / t0:.2f}, CPU {u1 / u0:.2f}, peak RSS {m1 / m0:.2f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0 if c0 == c1 else 1  # the same rows counted either way (no two of these ids collide)


if __name__ == "__main__":
    sys.exit(main())
