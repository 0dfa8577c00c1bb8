"""Start-up: each command's whole process against `python -c pass` and `python -c "import polars"`, same run.

    python bench/bench_startup.py                       # best of 9 of each command, interleaved
    python bench/bench_startup.py --before /tmp/main    # the same commands from another source tree beside them
    python bench/bench_startup.py --importtime          # then, per command, its costliest imports (-X importtime)

The commands are `dpcli --version`, `dpcli -h`, `dpcli plan configs/example.yaml`, `dpcli budget show` of an empty
ledger, and `dpcli check` and `dpcli release` of configs/example.yaml on its first 20 rows (the release spends under
a fresh release id each time, on a throwaway ledger with a large cap): what a user waits for before any data is read.
Each is a fresh process, run in turn with the others (A B C ... A B C ...) so a drift of the shared machine's speed
touches them all; the table gives each one's best wall time and its CPU time in that run (os.wait4), and its ratio
to the interpreter alone and to the interpreter importing polars. With --before DIR (a source tree of another
commit, e.g. `git archive main | tar -x -C DIR`) every dpcli command runs again with DIR first on PYTHONPATH, and the
table has a before/after ratio per command. No figure here is asserted by a test (tests/cli/test_startup.py checks
which modules each command imports, not its time).
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
# -P: the working directory is not put first on sys.path, so --before's PYTHONPATH (or else the installed package)
# is what runs, as for the console script
DPCLI = [PYTHON, "-P", "-c", "import sys; from dpcli.__main__ import main; sys.argv[0] = 'dpcli'; main()"]


def commands(work: Path) -> dict[str, list[str]]:
    spec = str(ROOT / "configs" / "example.yaml")
    tiny, ledger = str(work / "tiny.csv"), str(work / "ledger.jsonl")
    return {
        "python -c pass": [PYTHON, "-P", "-c", "pass"],
        "python -c 'import numpy'": [PYTHON, "-P", "-c", "import numpy"],
        "python -c 'import polars'": [PYTHON, "-P", "-c", "import polars"],
        "dpcli --version": [*DPCLI, "--version"],
        "dpcli -h": [*DPCLI, "-h"],
        "dpcli plan configs/example.yaml": [*DPCLI, "plan", spec],
        "dpcli budget show (empty ledger)": [*DPCLI, "budget", "show", "--ledger", str(work / "empty.jsonl")],
        "dpcli check configs/example.yaml (20 rows)": [*DPCLI, "check", spec, "--input", tiny],
        "dpcli release configs/example.yaml (20 rows)": [
            *DPCLI, "release", spec, "--input", tiny, "--ledger", ledger, "--output", str(work / "out.csv"),
            "--release-id", "{release_id}",
        ],
    }


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + sys) seconds of one run of ``argv``, its output discarded; a failure stops the bench."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read() if proc.stderr else b""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        sys.exit(f"bench_startup: {' '.join(argv)} exited {proc.returncode}: {err.decode(errors='replace')[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime


def prepare(work: Path, env: dict[str, str]) -> None:
    with (ROOT / "sample_data" / "people.csv").open(encoding="utf-8") as fh:
        (work / "tiny.csv").write_text("".join(itertools.islice(fh, 21)), encoding="utf-8")
    subprocess.run([*DPCLI, "budget", "set", "people", "--epsilon", "1000000", "--ledger", str(work / "ledger.jsonl")],
                   check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=9, help="runs of each command (the best is kept)")
    parser.add_argument("--before", type=Path, help="another source tree whose dpcli runs beside this one")
    parser.add_argument("--importtime", action="store_true", help="print each dpcli command's costliest imports")
    args = parser.parse_args(argv)
    if not (ROOT / "sample_data" / "people.csv").exists():
        sys.exit("bench_startup: sample_data/people.csv is missing: run `make sample-data` first")

    base_env = {k: v for k, v in os.environ.items() if not k.startswith("DPCLI_") and k != "PYTHONPATH"}
    trees = {"": dict(base_env)}
    if args.before is not None:
        trees[" (before)"] = {**base_env, "PYTHONPATH": str(args.before.resolve())}
    work = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    try:
        cases: list[tuple[str, list[str], dict[str, str]]] = []
        for suffix, env in trees.items():
            tree_work = work / (suffix.strip(" ()") or "after")
            tree_work.mkdir()
            prepare(tree_work, env)
            for name, command in commands(tree_work).items():
                if suffix and not name.startswith("dpcli"):
                    continue
                cases.append((name + suffix, command, env))
        best: dict[str, tuple[float, float]] = {}
        runs = itertools.count()
        for round_ in range(args.repeat + 1):  # the first round warms the page cache and the bytecode; not counted
            for name, command, env in cases:
                release_id = f"bench-{next(runs)}"
                wall, cpu = run_once([a.replace("{release_id}", release_id) for a in command], env)
                if round_ > 0 and (name not in best or wall < best[name][0]):
                    best[name] = (wall, cpu)
        python_s, polars_s = best["python -c pass"][0], best["python -c 'import polars'"][0]
        print(f"best of {args.repeat}, interleaved; {sys.version.split()[0]}; load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        header = f"{'command':50} {'wall s':>7} {'cpu s':>7} {'/ python':>9} {'/ polars':>9}"
        if args.before is not None:
            header += f" {'/ before':>9}"
        print(header)
        for name, (wall, cpu) in best.items():
            line = f"{name:50} {wall:7.3f} {cpu:7.3f} {wall / python_s:8.1f}× {wall / polars_s:8.2f}×"
            if args.before is not None and not name.endswith("(before)") and name + " (before)" in best:
                line += f" {wall / best[name + ' (before)'][0]:8.2f}×"
            print(line)
        if args.importtime:
            for name, command in commands(work / "after").items():
                if name.startswith("dpcli") and "release" not in name:
                    print(f"\n{name}: the costliest imports (cumulative µs, -X importtime)")
                    r = subprocess.run([PYTHON, "-X", "importtime", *command[1:]], capture_output=True, text=True,
                                       env=base_env, cwd=ROOT)
                    rows = [line.split("|") for line in r.stderr.splitlines()
                            if line.startswith("import time:") and "cumulative" not in line]
                    top = sorted(rows, key=lambda row: -int(row[1]))[:12]
                    print("\n".join(f"  {int(row[1]):8d}  {row[2].rstrip()}" for row in top))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
