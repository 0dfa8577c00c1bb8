#!/usr/bin/env python3
"""Big-file benchmark: `dpcli release` on a ~3 GB CSV (75M rows), wall time and PEAK RSS, beside polars' streaming
engine computing the same three aggregates on the same file. Issue 11 requires dpcli's peak RSS <= 512 MB.

1. the CSV: --csv PATH if given, else bench/data/people_75000000.csv, generated once by scripts/generate_people.py
   (default seed; ~3.0 GB; regenerated when the generator is newer);
2. `dpcli release` of bench_release.py's spec (a count by state, a 73-bin age histogram, a mean of hours by sex) as
   a subprocess, after `dpcli budget set` on a fresh ledger in a temporary directory;
3. the same aggregates with polars' streaming engine, each a subprocess of the same Python: `pl.collect_all(...,
   engine="streaming")` of the three lazy queries (one scan each), and one streaming pass grouping by all three
   keys at once (as dpcli reads), summed into the three aggregates after;

each child's wall time and peak resident set size (os.wait4's rusage of that child alone: ru_maxrss, KiB on
Linux; file-backed pages of an mmap count too). Prints both and exits 1 if dpcli's peak RSS is over --max-rss-mb
(default 512) or a run failed. A bench, not a test: run it by hand or with `make bench`.

Usage::

    .venv/bin/python bench/bench_bigfile.py --csv PATH          # an existing copy of the generated file
    .venv/bin/python bench/bench_bigfile.py --rows 10000000        # a smaller file, same measurement
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
import bench_release as br  # the spec, the data cache and the polars queries are bench_release's

DEFAULT_ROWS = 75_000_000
MAX_RSS_MB = 512

# The streaming polars baseline, run in a child so that its peak RSS is its own. collect_all under the streaming
# engine scans once per query (no shared scan), which keeps its memory bounded: what the issue measured.
POLARS_STREAMING = """
import sys
sys.path.insert(0, {bench!r})
import polars as pl
import bench_release as br
lf = pl.scan_csv({csv!r}, schema=br.SCHEMA, ignore_errors=True)
by_state, age_hist, mean_hours = pl.collect_all(br._three_queries(lf), engine="streaming")
assert by_state.height == len(br.STATES) and mean_hours.height == len(br.SEXES), "unexpected result shapes"
"""

# The same in one streaming pass, as dpcli reads: one group-by over the three keys (a few thousand groups), whose
# small result is then summed into the three marginals in memory.
POLARS_ONE_PASS = """
import sys
sys.path.insert(0, {bench!r})
import polars as pl
import bench_release as br
lf = pl.scan_csv({csv!r}, schema=br.SCHEMA, ignore_errors=True)
hours = pl.col("hours_per_week").clip(br.HOURS_LO, br.HOURS_HI)
cube = (lf.group_by("state", pl.col("age").clip(br.AGE_LO, br.AGE_HI), "sex")
        .agg(pl.len(), hours.sum().alias("hours"), hours.count().alias("with_hours"))
        .collect(engine="streaming"))
by_state = cube.filter(pl.col("state").is_in(br.STATES)).group_by("state").agg(pl.col("len").sum())
age_hist = cube.filter(pl.col("age").is_not_null()).group_by("age").agg(pl.col("len").sum())
mean_hours = (cube.filter(pl.col("sex").is_in(br.SEXES)).group_by("sex")
              .agg(pl.col("hours").sum() / pl.col("with_hours").sum()))
assert by_state.height == len(br.STATES) and mean_hours.height == len(br.SEXES), "unexpected result shapes"
"""


def measure(cmd: list[str]) -> tuple[float, float, int, str]:
    """Run ``cmd``; (wall seconds, peak RSS in MiB of that child alone, exit status, the tail of its stderr)."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read()[-3000:].decode("utf-8", "replace")
    return wall, usage.ru_maxrss / 1024, proc.returncode, tail


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", type=Path, help="an existing people CSV (default: generate --rows rows, cached)")
    ap.add_argument("--rows", type=int, default=DEFAULT_ROWS, help=f"rows to generate (default {DEFAULT_ROWS:,})")
    ap.add_argument("--max-rss-mb", type=float, default=MAX_RSS_MB,
                    help=f"dpcli's peak RSS limit in MiB: over it, exit 1 (default {MAX_RSS_MB})")
    ap.add_argument("--skip-polars", action="store_true", help="measure dpcli only")
    args = ap.parse_args(argv)

    csv = args.csv if args.csv is not None else br.dataset(args.rows)
    if not csv.is_file():
        ap.error(f"{csv} is not a file")
    dpcli = br.find_dpcli()
    if dpcli is None:
        br.log("error: no dpcli executable (looked next to the Python interpreter, in .venv/bin and on PATH)")
        return 1
    size_gb = csv.stat().st_size / 1e9
    failed = False
    with tempfile.TemporaryDirectory(prefix="dpcli-bigfile-") as tmp:
        spec, ledger = Path(tmp) / "people.yaml", Path(tmp) / "ledger.jsonl"
        spec.write_text(br.SPEC_YAML, encoding="utf-8")
        subprocess.run([str(dpcli), "budget", "set", "people", "--epsilon", "1000", "--ledger", str(ledger)],
                       check=True, capture_output=True)
        br.log(f"dpcli release on {csv} ({size_gb:.2f} GB) ...")
        dp = measure([str(dpcli), "release", str(spec), "--input", str(csv), "--output", str(Path(tmp) / "out.csv"),
                      "--ledger", str(ledger), "--quiet"])
    if dp[2] != 0:
        br.log(f"error: dpcli release exited {dp[2]}; its stderr:\n{dp[3]}")
        failed = True
    baselines = {}
    if not args.skip_polars:
        for name, script in (("polars streaming", POLARS_STREAMING), ("polars one pass", POLARS_ONE_PASS)):
            br.log(f"{name} on the same file ...")
            code = script.format(bench=str(Path(__file__).resolve().parent), csv=str(csv))
            baselines[name] = measure([sys.executable, "-c", code])
            if baselines[name][2] != 0:
                br.log(f"error: {name} exited {baselines[name][2]}; its stderr:\n{baselines[name][3]}")
                failed = True

    print(f"{csv.name}: {size_gb:.2f} GB; count by state, 73-bin age histogram, mean hours by sex; one run each")
    print(f"{'':24}{'wall_s':>8}  {'peak_rss_MiB':>11}")
    print(f"{'dpcli release':24}{dp[0]:8.1f}  {dp[1]:11.0f}")
    for name, pol in baselines.items():
        print(f"{name:24}{pol[0]:8.1f}  {pol[1]:11.0f}   dpcli / this: time {dp[0] / pol[0]:.2f}x, "
              f"peak RSS {dp[1] / pol[1]:.2f}x")
    if baselines:
        print("(polars streaming: collect_all of the three lazy queries under the streaming engine, one scan each;"
              " polars one pass: one streaming group-by over state, age and sex, summed into the three after)")
    over = dp[1] > args.max_rss_mb
    verdict = "OVER" if over else "within"
    print(f"dpcli peak RSS {dp[1]:.0f} MiB: {verdict} the {args.max_rss_mb:.0f} MiB limit (issue 11)")
    return 1 if failed or over else 0


if __name__ == "__main__":
    sys.exit(main())
