"""Issue 25, finding 4: signals sent from a shell script, as cron jobs and CI steps send them.

A POSIX shell starts a background job (`cmd &`) with SIGINT ignored: dpcli must leave it ignored for the whole run
(docs/spec.md, "Runs, paths and failures"). polars' native part installs a SIGINT handler of its own as it loads,
some tenths of a second before the package is done and dpcli can put the disposition back; a SIGINT then reached
polars' handler (it sets polars' own interrupt flag). A signal that is delivered (SIGTERM under `&`, SIGINT to a
command the script runs in the foreground) ends the run at any moment with the documented line and code, and a
spend is printed exactly when the ledger holds one.
"""

from __future__ import annotations

import ast
import json
import random
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import clean_env
from tests.spec_builder import spec_text

SPEC = spec_text(
    {"age": "{type: int, bounds: [0, 100]}", "hours": "{type: int, bounds: [0, 80]}"},
    ["{name: n, kind: count}", "{name: s, kind: sum, column: hours}", "{name: m, kind: median, column: age}"],
)
RELEASE = ["release", "spec.yaml", "--input", "data.csv", "-o", "out.csv", "--ledger", "L.jsonl"]


def _dpcli(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in [sys.executable, "-m", "dpcli", *args])


def _spends(work: Path) -> int:
    return sum(json.loads(line)["type"] == "spend" for line in (work / "L.jsonl").read_text().splitlines())


def _rows(n: int) -> str:
    rng = random.Random(25)
    return "age,hours\n" + "".join(f"{rng.randint(0, 100)},{rng.randint(0, 80)}\n" for _ in range(n))


# Run in the dpcli process itself, before its entry point: SIGINT ignored as a script's `&` leaves it, and a probe
# that, each time a polars module is looked up while polars loads (from its native part's load to the end), notes
# whether a SIGINT could reach a handler: not ignored and not blocked in some thread. Then the real entry point.
_PROBE = """
import os, signal, sys
from importlib.abc import MetaPathFinder
signal.signal(signal.SIGINT, signal.SIG_IGN)
reachable = []
def sigint_reachable():
    status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
    if int(status["SigIgn"], 16) & 2:
        return False
    blocked = []
    for task in os.listdir("/proc/self/task"):
        try:
            text = open(f"/proc/self/task/{task}/status").read()
        except FileNotFoundError:
            continue
        blocked.append(int(dict(l.split(":", 1) for l in text.splitlines())["SigBlk"], 16) & 2)
    return not all(blocked)
class Probe(MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.startswith("polars."):
            reachable.append((name, sigint_reachable()))
        return None
sys.meta_path.insert(0, Probe())
sys.argv = ["dpcli", *sys.argv[2:]]
try:
    from dpcli.__main__ import main
    main()
finally:
    with open(PROBE_OUT, "w") as fh:
        fh.write(repr(reachable))
"""


def test_an_ignored_sigint_never_reaches_a_handler_while_polars_loads(make_work: Callable[..., Path]) -> None:
    work = make_work(SPEC, _rows(20), cap="10")
    probe = _PROBE.replace("PROBE_OUT", repr(str(work / "probe.txt")))
    r = subprocess.run([sys.executable, "-c", probe, "--", *RELEASE], cwd=work, env=clean_env(), capture_output=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    samples = ast.literal_eval((work / "probe.txt").read_text())  # the (module, reachable) pairs it noted
    assert len(samples) > 10  # polars loaded while the probe watched
    assert [name for name, reachable in samples if reachable] == []


def test_sigint_to_a_background_release_is_ignored_and_its_spend_printed(make_work: Callable[..., Path]) -> None:
    """The issue's script: `dpcli release ... &`, then kill -INT: the run goes on, spends once and says so."""
    work = make_work(SPEC, _rows(20), cap="10")
    r = _signalled_from_a_script(work, "INT", 0.5, background=True)
    assert r.returncode == 0, r.stderr
    assert "spent ε=1" in r.stderr
    assert _spends(work) == 1


def _signalled_from_a_script(work: Path, sig: str, delay: float, *, background: bool) -> subprocess.CompletedProcess:
    """`dpcli release` from `sh -c`, sent SIG after ``delay`` seconds. ``background``: started as `cmd &` (SIGINT
    ignored, as every POSIX shell starts a background job without job control) and signalled by its pid; else run in
    the script's foreground (exec) and signalled by a background `kill` in the same script."""
    release = _dpcli(*RELEASE)
    if background:
        script = f"{release} & pid=$!; sleep {delay}; kill -{sig} $pid; wait $pid"
    else:
        script = f"(sleep {delay}; kill -{sig} $$) & exec {release}"
    return subprocess.run(["sh", "-c", script], cwd=work, env=clean_env(), capture_output=True, text=True,
                          timeout=600)


def _check_outcome(work: Path, r: subprocess.CompletedProcess, sig: str, before: int, what: str) -> str:
    """The contract's outcomes of a signalled run; returns which one it was."""
    spent = _spends(work) - before
    err = r.stderr
    assert spent in (0, 1), (what, err)
    assert (spent == 1) == ("spent ε=1" in err or "record" in err), (what, spent, err)  # a spend printed <=> recorded
    if r.returncode == 0:  # the signal was ignored, or came once the outcome was decided
        assert spent == 1, (what, err)
        assert err.startswith("dpcli: released "), (what, err)
        return "released"
    signum = int(signal.Signals[f"SIG{sig}"])
    if r.returncode in (-signum, 128 + signum) and "dpcli" not in err:
        # before dpcli's first instruction (the interpreter starting): the signal's default action ends the process,
        # as any program's; the shell may say "Terminated". Nothing was read, written or spent.
        assert spent == 0, (what, err)
        assert not (work / "out.csv").exists(), what
        return "ended before dpcli started"
    if r.returncode == 128 + signum:
        assert err == f"dpcli: error: interrupted by SIG{sig}; nothing was spent\n", (what, err)
        assert spent == 0, (what, err)
        assert not (work / "out.csv").exists(), what
        return "interrupted"
    assert r.returncode == 5, (what, r.returncode, err)  # after the spend: the one line names the paid record
    assert err.startswith("dpcli: error: "), (what, err)
    assert err.count("\n") == 1, (what, err)
    assert spent == 1, (what, err)
    return "failed after the spend"


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "background"), [("INT", True), ("TERM", True), ("INT", False)])
def test_a_signal_from_a_script_at_many_points_of_a_run(
    make_work: Callable[..., Path], sig: str, background: bool
) -> None:
    """A sweep of delays over a run slowed by 300 000 rows: at each, the exit code and message are the contract's,
    and the ledger holds a spend exactly when one was printed; SIGINT under `&` is ignored at every point."""
    work = make_work(SPEC, _rows(300_000), cap="1000")
    started = time.monotonic()
    first = subprocess.run(["sh", "-c", _dpcli(*RELEASE)], cwd=work, env=clean_env(), capture_output=True, text=True,
                           timeout=600)
    length = time.monotonic() - started  # only to spread the delays over a run, never asserted on
    assert first.returncode == 0, first.stderr
    outcomes = []
    # from the start to past the end; the last well past it (3x the first run, which a loaded machine can slow)
    delays = [round(length * step / 14, 2) for step in range(15)] + [round(3 * length + 1, 2)]
    for delay in delays:
        (work / "out.csv").unlink(missing_ok=True)
        before = _spends(work)
        r = _signalled_from_a_script(work, sig, delay, background=background)
        outcomes.append(_check_outcome(work, r, sig, before, f"SIG{sig} after {delay} s"))
    if sig == "INT" and background:
        assert set(outcomes) == {"released"}, outcomes
    else:  # the sweep reached both the time before the spend and the run's end
        assert "interrupted" in outcomes, outcomes
        assert "released" in outcomes, outcomes
