"""Process limits and signals from the first instant (issue 23): out of file descriptors, an open-file or an
address-space limit, a signal while dpcli loads or during a polars query: one line, the contract's code, nothing
spent."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import clean_env
from tests.run.test_release_safety import ledger_state, one_line_error

# -- issue 23: process limits and signals from the first instant --------------------------------------------------


def test_an_open_file_limit_is_said_as_one_and_spends_nothing(work: Path) -> None:
    """`ulimit -n 5` ended this release with exit 3 "cannot read input" (an input error, for a limit of the process;
    `ulimit -n 8` did on a 200k-row file), 6 or 7 that file's with exit 5 "cannot read ledger". Now: exit 1 naming
    the limit, before anything is read."""
    import resource

    before = ledger_state(work)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (5, 5))

    r = subprocess.run([sys.executable, "-m", "dpcli", "release", str(work / "spec.yaml"), "-i", str(work / "data.csv"),
                        "-o", str(work / "o.csv"), "--ledger", str(work / "L.jsonl")],
                       capture_output=True, env=clean_env({"RUST_BACKTRACE": "0"}), preexec_fn=limit, timeout=60)
    one_line_error(r, 1, "too many open files", "ulimit -n", "nothing was read or spent")
    assert ledger_state(work) == before
    assert not (work / "o.csv").exists()


# Runs the real entry point (python -m dpcli) and sends itself a signal (argv[1]) as typer is imported: while the
# command line is still loading, before cli.main runs.
SIGNAL_WHILE_LOADING = """\
import os, runpy, sys

signum = int(sys.argv[1])

class SignalOnImport:
    def find_spec(self, name, path, target=None):
        if name == "typer":
            os.kill(os.getpid(), signum)
        return None

sys.meta_path.insert(0, SignalOnImport())
sys.argv = ["dpcli", *sys.argv[2:]]
runpy.run_module("dpcli", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_dpcli_loads_is_one_line_saying_nothing_was_spent(work: Path, signum: int) -> None:
    """The handlers were installed by cli.main, after typer (and for a release, polars and numpy) were imported: a
    SIGTERM in that first second killed the run without a word, and a SIGINT printed a traceback."""
    before = ledger_state(work)
    r = subprocess.run([sys.executable, "-c", SIGNAL_WHILE_LOADING, str(int(signum)), "release",
                        str(work / "spec.yaml"), "-i", str(work / "data.csv"), "-o", str(work / "o.csv"),
                        "--ledger", str(work / "L.jsonl")], capture_output=True, env=clean_env(), timeout=60)
    assert r.stderr.decode() == f"dpcli: error: interrupted by {signal.Signals(signum).name}; nothing was spent\n"
    assert r.returncode == 128 + signum
    assert ledger_state(work) == before
    assert not (work / "o.csv").exists()


# A polars query whose own function sends SIGINT to the process while the query runs, under dpcli's handlers;
# argv[1] == "ignored": SIGINT was ignored by the parent (a script's `cmd &`), as dpcli finds it at start.
SIGINT_DURING_A_POLARS_QUERY = """\
import os, signal, sys
from dpcli.core import signals
if sys.argv[1] == "ignored":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
signals.install()
import polars as pl

def interrupt(column):
    os.kill(os.getpid(), signal.SIGINT)
    return column

query = pl.LazyFrame({"a": list(range(1000))}).select(pl.col("a").map_batches(interrupt, return_dtype=pl.Int64).sum())
with signals.Held() as hold:
    hold.hold_from_here()
    print("query", query.collect().item(), flush=True)
    try:
        hold.release()
        print("released: nothing raised", flush=True)
    except BaseException as exc:
        print("released:", type(exc).__name__, flush=True)
"""


@pytest.mark.parametrize("inherited", ["ignored", "handled"])
def test_polars_native_sigint_handler_never_overrides_dpcli(inherited: str) -> None:
    """polars installs a native SIGINT handler as it loads (it stops a running query with KeyboardInterrupt): with
    SIGINT inherited ignored, a query was interrupted anyway (issue 25). dpcli sets each disposition again once
    polars is loaded: an ignored SIGINT stays ignored, and a held one waits for the end of the held stretch."""
    r = subprocess.run([sys.executable, "-c", SIGINT_DURING_A_POLARS_QUERY, inherited],
                       capture_output=True, env=clean_env(), timeout=60)
    expected = "nothing raised" if inherited == "ignored" else "Interrupted"
    assert r.stdout.decode() == f"query 499500\nreleased: {expected}\n", (r.stdout, r.stderr.decode()[-500:])


ROWS_SPEC = """\
version: 1
dataset: toy
privacy: {unit: row, neighbours: add_remove, epsilon: 1}
columns:
  age: {type: int, bounds: [0, 100]}
  sex: {type: category, categories: [F, M]}
  income: {type: float, bounds: [0, 5000000], precision: 1}
statistics:
"""
LIMIT_RELEASES = {
    # the 200k-row release
    "200k rows": ROWS_SPEC + "  - {name: n, kind: count, by: [sex]}\n  - {name: m, kind: mean, column: age}\n",
    # a 5M-cell histogram, ~429 MB by the documented estimate
    "5M cells": ROWS_SPEC
    + "  - {name: h, kind: histogram, column: income, bins: {start: 0, stop: 5000000, step: 1}}\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("release", sorted(LIMIT_RELEASES))
def test_under_an_address_space_limit_a_release_runs_or_ends_in_one_line(tmp_path: Path, release: str) -> None:
    """Under `prlimit --as` between 600 and 1000 MB a 200k-row release aborted in the allocator (SIGABRT, no message)
    and a 5M-cell histogram too, though under the documented estimate: glibc gave each of polars' threads a 64 MB
    arena, and Rust aborts on a failed allocation. Now each run either releases (one spend, its output) or ends
    before anything is read: exit 1, one line naming the limit, the ledger unchanged. Never a signal."""
    import resource

    from dpcli.ledger import JsonlLedger
    from tests.helpers import run_in_process

    (tmp_path / "spec.yaml").write_text(LIMIT_RELEASES[release])
    rows = 200_000 if release == "200k rows" else 1_000
    (tmp_path / "data.csv").write_text(
        "age,sex,income\n" + "".join(f"{i % 101},{'FM'[i % 2]},{i * 7919 % 5_000_000}.5\n" for i in range(rows)))
    r = run_in_process("budget", "set", "toy", "--epsilon", "100", "--ledger", tmp_path / "L.jsonl")
    assert r.returncode == 0, r.stderr
    for limit_mb in (600, 700, 800, 900, 1000):
        spent_before = len([x for x in JsonlLedger(tmp_path / "L.jsonl").records() if x.type == "spend"])
        (tmp_path / "o.csv").unlink(missing_ok=True)

        def limit(limit_mb: int = limit_mb) -> None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_mb * 2**20, limit_mb * 2**20))

        # the timeout is a safety net against a hang, not a claim about speed
        r = subprocess.run([sys.executable, "-m", "dpcli", "release", str(tmp_path / "spec.yaml"), "-i",
                            str(tmp_path / "data.csv"), "-o", str(tmp_path / "o.csv"), "--ledger",
                            str(tmp_path / "L.jsonl"), "--quiet"],
                           capture_output=True, env=clean_env(), preexec_fn=limit, timeout=600)
        spends = [x for x in JsonlLedger(tmp_path / "L.jsonl").records() if x.type == "spend"]
        if r.returncode == 0:
            assert len(spends) == spent_before + 1
            assert (tmp_path / "o.csv").exists()
            assert r.stderr == b""
        else:
            one_line_error(r, 1, "ulimit -v", "nothing was read or spent")
            assert len(spends) == spent_before, limit_mb
            assert not (tmp_path / "o.csv").exists(), limit_mb
