"""Planning time against the number of statistics: it should grow linearly.

    python bench/bench_plan.py                    # 1,000, 4,000 and 30,000 statistics, pure epsilon
    python bench/bench_plan.py --sizes 4000 --zcdp

Per size: the seconds to load the spec (YAML and validation), make the plan, print it (`dpcli plan`), write it as JSON
(`dpcli plan --json`) and build the output table from noise-free counts (release's post-processing), then the wall
time of the real `dpcli plan SPEC` (a fresh process, its output discarded). Statistics are plain counts, with every
tenth a count by a category and every tenth a sum, so that 30,000 of them fit the 1 MiB spec limit. In dpcli 0.2 the
release's totals were summed again for every statistic: 4,000 statistics took 46 s and 30,000 about 45 minutes.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

from dpcli.cli import render_plan
from dpcli.mechanisms.noisy import Noisy
from dpcli.plan.model import make_plan
from dpcli.publish.table import build_table
from dpcli.specs.load import MAX_SPEC_BYTES, load_spec


def spec_text(n: int, zcdp: bool) -> str:
    lines = []
    for i in range(n):
        if i % 10 == 8:
            lines.append(f"  - {{name: s{i}, kind: sum, column: x}}\n")
        elif i % 10 == 9:
            lines.append(f"  - {{name: s{i}, kind: count, by: [c]}}\n")
        else:
            lines.append(f"  - {{name: s{i}, kind: count}}\n")
    privacy = "{rho: 1}" if zcdp else "{epsilon: 1}"
    return (
        f"version: 1\ndataset: bench\nprivacy: {privacy}\ncolumns:\n  x: {{type: int, bounds: [0, 10]}}\n"
        f"  c: {{type: category, categories: [a, b, c]}}\nstatistics:\n{''.join(lines)}"
    )


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 4_000, 30_000])
    parser.add_argument("--zcdp", action="store_true", help="a zCDP release (privacy: {rho: 1}) instead of pure ε")
    args = parser.parse_args(argv)
    print(
        f"{'statistics':>10} {'load':>7} {'plan':>7} {'print':>7} {'json':>7} {'table':>7} {'total':>7}"
        f" {'dpcli plan':>11}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            path = Path(tmp) / f"spec_{n}.yaml"
            path.write_text(spec_text(n, args.zcdp))
            if path.stat().st_size > MAX_SPEC_BYTES:
                print(f"{n:>10} spec of {path.stat().st_size} bytes is over the limit", file=sys.stderr)
                continue
            # partial, not lambda: each call is bound to this iteration's values
            spec, t_load = timed(partial(load_spec, path))
            plan, t_plan = timed(partial(make_plan, spec))
            _, t_print = timed(partial(render_plan.print_plan, plan, io.StringIO()))
            _, t_json = timed(partial(render_plan.plan_json, plan))
            noisy = [
                Noisy(np.zeros(sp.cells, dtype=np.int64), np.zeros(sp.cells, dtype=np.int64)) for sp in plan.statistics
            ]
            _, t_table = timed(partial(build_table, plan, noisy))
            total = t_load + t_plan + t_print + t_json + t_table
            env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
            _, t_cli = timed(partial(subprocess.run, [sys.executable, "-m", "dpcli", "plan", str(path)], env=env,
                                     stdout=subprocess.DEVNULL, check=True))
            print(
                f"{n:>10} {t_load:7.2f} {t_plan:7.2f} {t_print:7.2f} {t_json:7.2f} {t_table:7.2f} {total:7.2f}"
                f" {t_cli:11.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
