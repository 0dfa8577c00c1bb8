"""MST's scale (issue 27): `dpcli synth` on generated CSVs of 15 columns (5 numeric with bins, 10 categorical),
at several row counts, as whole processes: wall time and peak RSS, and the ratio of each to the smallest file's, so
memory bounded by the domain sizes rather than the row count shows as a flat peak.

    .venv/bin/python bench/bench_synth_scale.py --rows 100000 1000000

The files are generated into a temporary directory (never committed); the columns are correlated in a chain, so the
tree has something to find. Figures in docs/benchmarks.md, "Synthetic data at scale".
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import measured, peak_bytes  # a command's own peak RSS, through a fork launcher

ROOT = Path(__file__).resolve().parents[1]
DPCLI = [sys.executable, "-m", "dpcli"]
NUMERIC = 5
CATEGORICAL = 10
SIZES = [2, 3, 4, 5, 6, 8, 10, 12, 20, 40]  # the categorical columns' keys




def generate(path: Path, rows: int, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    columns: dict[str, np.ndarray] = {}
    previous = rng.integers(0, 100, rows)
    for i in range(NUMERIC):
        value = np.clip(previous + rng.integers(-15, 16, rows), 0, 99)
        columns[f"n{i}"] = value
        previous = value
    for i, size in enumerate(SIZES):
        shifted = (previous * size // 100 + rng.integers(0, 2, rows)) % size
        columns[f"c{i}"] = shifted
        previous = shifted * 100 // size
    with path.open("w") as fh:
        fh.write(",".join(columns) + "\n")
        block = 200_000
        for start in range(0, rows, block):
            parts = [np.char.add("k", columns[n][start:start + block].astype(str)) if n.startswith("c")
                     else columns[n][start:start + block].astype(str) for n in columns]
            lines = parts[0]
            for p in parts[1:]:
                lines = np.char.add(np.char.add(lines, ","), p)
            fh.write("\n".join(lines.tolist()) + "\n")


def spec_text(data: Path) -> str:
    cols = [f"  n{i}: {{type: int, bounds: [0, 99]}}" for i in range(NUMERIC)]
    cols += [f"  c{i}: {{type: category, categories: [{', '.join(f'k{k}' for k in range(s))}]}}"
             for i, s in enumerate(SIZES)]
    synth = [f"    n{i}: {{bins: {{start: 0, stop: 100, step: 10}}}}" for i in range(NUMERIC)]
    synth += [f"    c{i}: {{}}" for i in range(len(SIZES))]
    return "\n".join([
        "version: 1", "dataset: scale", f"input: {data}", "privacy: {unit: row, neighbours: add_remove, rho: 1}",
        "columns:", *cols, "synth:", "  method: mst", "  columns:", *synth, "",
    ])


def run(rows: int, work: Path) -> tuple[float, float]:
    data = work / f"rows-{rows}.csv"
    if not data.exists():
        generate(data, rows)
    spec = work / f"spec-{rows}.yaml"
    spec.write_text(spec_text(data))
    ledger = work / f"ledger-{rows}.jsonl"
    ledger.unlink(missing_ok=True)
    subprocess.run([*DPCLI, "budget", "set", "scale", "--epsilon", "100", "--delta", "1e-6", "--ledger", str(ledger)],
                   check=True, capture_output=True)
    peak_file = work / "peak"
    started = time.perf_counter()
    # through a small launcher that forks once more: a child's peak RSS would include this process's (Linux folds
    # the replaced image's high-water mark in at exec), and this one held the generated columns
    done = subprocess.run(measured([*DPCLI, "synth", str(spec), "--ledger", str(ledger), "-o", str(work / "out.csv"),
                                    "-q"], peak_file),
                          capture_output=True, cwd=ROOT, env={**os.environ})
    wall = time.perf_counter() - started
    if done.returncode:
        sys.exit(done.stderr.decode())
    return wall, peak_bytes(peak_file) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        results = [(rows, *run(rows, work)) for rows in sorted(args.rows)]
    base_wall, base_peak = results[0][1], results[0][2]
    print("| rows | columns | wall (s) | peak RSS (MiB) | wall / smallest | peak / smallest |")
    print("|---:|---:|---:|---:|---:|---:|")
    for rows, wall, peak in results:
        print(f"| {rows:,} | {NUMERIC + CATEGORICAL} | {wall:.1f} | {peak:.0f} | {wall / base_wall:.2f} | "
              f"{peak / base_peak:.2f} |")


if __name__ == "__main__":
    main()
