"""Issue 9: a fault at every step of the release path, and the invariants that must hold after it.

Each case runs the real `dpcli release` in a child process (tests/fault_driver.py) with one fault (SIGKILL, ENOSPC,
MemoryError, SIGINT/SIGTERM/SIGHUP) right before or after one real step: under the ledger's lock, after the spend,
during the noise, around the release store and the `released` record, around the output's rename and the sidecar's.
Then, whatever happened:

- an output file never exists without its spend, and a failed run leaves no output, sidecar or temporary file;
- the ledger verifies;
- the exit code is the contract's: before the spend a signal ends the run with 128 + its number and nothing spent,
  after it every failure is exit 5 with one line naming the paid record;
- signals wait from the spend until the table is stored, so an interrupted run's release id still has its table;
- a re-run under the same release id never spends again: it writes the stored table, or exits 5 when the table was
  never stored (a paid release id is never drawn again).

Issue 12: the same invariants in a person-level release with open keys, on a file with a person of 3,000 rows and
a person who brings 600 keys nobody else has, with two steps more: as the engine finishes choosing each person's
rows (before the spend: a signal ends the run with 128 + its number, an I/O error is the input's exit 3, a
MemoryError a bug's exit 1, and nothing is spent) and during the open keys' selection (after the spend, like the
noise).

Issue 24: the same matrix against every command that spends through the paid-run protocol (dpcli.run.paid):
`dpcli randomize` (its own draw; no sidecar) with the same invariants, and the frequency release, which spends
nothing: a fault while it writes leaves no output and no ledger record, exits as the contract says (a signal 128 + its
number, an I/O error 5 saying nothing was spent), and its re-run writes the same numbers. Concurrent randomize runs
under one release id spend once and all write the paid file (a run that finds the id paid waits for its file, as a
release waits for its table).

The whole matrix (54 + 66 + 48 + 18 cases) is marked slow (make test-slow); thirteen of them run in `make test`.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dpcli.ledger import JsonlLedger
from tests.fault_driver import ACTIONS, FREQUENCY_STEPS, PERSON_STEPS, RANDOMIZE_STEPS, STEPS
from tests.helpers import TOY_SPEC, clean_env, run_dpcli, run_in_process

SPEC = TOY_SPEC + "  - {name: ages, kind: histogram, column: age, bins: [0, 20, 40, 60, 80, 101]}\n"
DRIVER = Path(__file__).resolve().parents[1] / "fault_driver.py"
RID = "fault-1"
# A signal sent before these steps waits for the table to be stored; at the later ones it is raised at once.
HELD = {"lock", "spent", "noise", "store", "stored"}
SIGNAL = {"sigint": signal.SIGINT, "sigterm": signal.SIGTERM, "sighup": signal.SIGHUP}


@pytest.fixture
def work(make_work: Callable[..., Path]) -> Path:
    work = make_work(SPEC, "age\n34\n71\n15\n52\n99\n", cap="10")
    (work / "out").mkdir()
    return work


# A person-level release with open keys (issue 12). The file: 600 ordinary persons (600 rows for one country, 900 for
# the other, far above the threshold), rows without an id (each a person of its own), one person with 3,000 rows and
# one whose 600 rows each hold a country nobody else has.
PERSON_SPEC = """\
version: 1
dataset: toy
privacy:
  unit: {id: pid, max_rows: 5, max_groups: 3, missing_id: person}
  neighbours: add_remove
  epsilon: 4
  delta: 1e-9
columns:
  age: {type: int, bounds: [0, 100]}
  country: {type: category, categories: open, max_length: 16}
statistics:
  - {name: rows, kind: count}
  - {name: persons, kind: count, of: persons}
  - {name: by_country, kind: count, by: [country]}
  - {name: ages, kind: sum, column: age, clamp: person}
"""


def person_data() -> str:
    lines = ["pid,age,country"]
    lines += [f"p{i},{20 + i % 60},{('Cuba', 'Peru')[i % 2]}" for i in range(600) for _ in range(1 + i % 4)]
    lines += [f",{30 + i},Peru" for i in range(5)]
    lines += [f"many,{i % 101},Cuba" for i in range(3000)]
    lines += [f"keys,44,k{i:04d}" for i in range(600)]
    return "\n".join(lines) + "\n"


@pytest.fixture
def person_work(make_work: Callable[..., Path]) -> Path:
    work = make_work(PERSON_SPEC, person_data())
    # open keys spend a delta: the cap has one
    r = run_in_process("budget", "set", "toy", "--epsilon", "10", "--delta", "1e-5", "--ledger", work / "L.jsonl")
    assert r.returncode == 0, r.stderr
    (work / "out").mkdir()
    return work


def release_args(work: Path, name: str) -> list[str]:
    return ["release", str(work / "spec.yaml"), "-i", str(work / "data.csv"), "-o", str(work / "out" / name),
            "--ledger", str(work / "L.jsonl"), "--release-id", RID, "--lock-timeout", "1", "--quiet"]


def spends(work: Path) -> list:
    return [r for r in JsonlLedger(work / "L.jsonl").records() if r.type == "spend"]  # verifies the chain


def expected(step: str, action: str) -> tuple[int, bool, bool]:
    """(exit code, spent, table stored) for a fault at ``step``."""
    if step == "persons":  # in the engine, before the spend: nothing is spent whatever happens
        if action == "kill":
            return -int(signal.SIGKILL), False, False
        if action in SIGNAL:
            return 128 + int(SIGNAL[action]), False, False
        # an I/O error while the input is read is the input's exit 3; a MemoryError there is a bug's exit 1
        return (3 if action == "oserror" else 1), False, False
    if step == "select":  # while the noise is drawn
        step = "noise"
    recorded = step in ("released", "rename-before", "rename-after", "sidecar")  # the `released` record is written
    if action == "kill":
        return -int(signal.SIGKILL), step != "lock", recorded
    if step == "lock":
        if action in SIGNAL:  # held: the spend goes through, the table is stored, then the signal: exit 5
            return 5, True, True
        # ENOSPC while the ledger appends: exit 5, nothing recorded; MemoryError there: a bug's exit 1, nothing spent
        return (5 if action == "oserror" else 1), False, False
    if action in SIGNAL and step in HELD:
        return 5, True, True
    return 5, True, recorded


def run_case(work: Path, step: str, action: str, args: Callable[[Path, str], list[str]] = release_args) -> None:
    r = subprocess.run([sys.executable, str(DRIVER), step, action, "--", *args(work, "o.csv")],
                       capture_output=True, env=clean_env(), timeout=120)
    err = r.stderr.decode()
    code, spent, stored = expected(step, action)
    assert r.returncode == code, (step, action, r.returncode, err)
    assert "Traceback" not in err
    records = spends(work)  # the ledger verifies
    assert len(records) == (1 if spent else 0), (step, action, err)
    out = sorted(p.name for p in (work / "out").iterdir())
    if action != "kill":
        assert err.startswith("dpcli: error: "), err
        assert err.count("\n") == 1, err
        assert out == [], (step, action, out)  # a failed run leaves no output, sidecar or temporary file
        if spent:
            assert f"record {records[0].seq}" in err, err
            assert ("its table is stored" in err) == stored, err
        if action in SIGNAL and not spent:
            assert "nothing was spent" in err
    elif not spent:
        assert out == []
    # an output never exists without its spend
    if "o.csv" in out:
        assert spent
    # the re-run under the same release id: never a second spend
    again = run_dpcli(*args(work, "again.csv"), cwd=work)
    after = spends(work)
    if spent:
        assert len(after) == 1, (step, action)
        assert again.returncode == (0 if stored else 5), (step, action, again.stderr.decode())
        if not stored:
            assert b"never drawn again" in again.stderr
    else:
        assert again.returncode == 0
        assert len(after) == 1


@pytest.mark.parametrize(("step", "action"), [
    ("lock", "sigint"), ("noise", "sigterm"), ("store", "memory"), ("stored", "kill"), ("rename-after", "sighup"),
    ("sidecar", "oserror"),
])
def test_a_fault_at_each_step_keeps_the_invariants(work: Path, step: str, action: str) -> None:
    run_case(work, step, action)


@pytest.mark.slow
@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("step", STEPS)
def test_every_fault_at_every_step_keeps_the_invariants(work: Path, step: str, action: str) -> None:
    run_case(work, step, action)


@pytest.mark.parametrize(("step", "action"), [
    ("persons", "sigterm"), ("persons", "memory"), ("select", "kill"), ("select", "sigint"),
])
def test_a_fault_in_a_person_level_release_with_many_rows_and_keys(person_work: Path, step: str, action: str) -> None:
    run_case(person_work, step, action)
    no_lone_keys(person_work)


@pytest.mark.slow
@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("step", PERSON_STEPS + STEPS)
def test_every_fault_in_a_person_level_release(person_work: Path, step: str, action: str) -> None:
    run_case(person_work, step, action)
    no_lone_keys(person_work)


def no_lone_keys(work: Path) -> None:
    """The table the release id holds (when it holds one) shows the two common countries and none of the keys only
    the person 'keys' has. Chance, by_country at ε = 1, δ = 1e-9 (`dpcli plan`): noise scale t = 5, threshold
    τ = 112, q = e^(-1/5). Cuba's true count is 605 (600 rows of the ordinary persons, 5 of 'many') and Peru's 905:
    a miss needs Z <= -494, P = q^494/(1+q) < 1e-43. 'keys' reaches g = 3 keys of count 1: one shows when Z >= 111,
    3 q^111/(1+q) = 3.8e-10. (At the former ε = 1/4, δ = 1e-6, t = 20, τ = 290: 3 q^289/(1+q) = 8.2e-7 and Cuba's
    miss 7e-8, for each of the 70 cases that call this.)"""
    again = work / "out" / "again.csv"
    if again.exists():
        table = again.read_text(encoding="utf-8")
        assert "\nby_country,count,,Cuba," in table, table
        assert "\nby_country,count,,Peru," in table, table
        assert ",k0" not in table, table


# -- issue 23: after the release is written, a signal changes nothing; no Python warning reaches stderr -------------


@pytest.mark.parametrize(("step", "action"), [("summary", "sigterm"), ("teardown", "sigint")])
def test_a_signal_after_the_release_is_written_changes_nothing(work: Path, step: str, action: str) -> None:
    """A signal as the command prints its summary, or as the interpreter tears down, came after the spend and the
    output: it used to end the run with 143 or 130 ("interrupted", which the contract reads as nothing spent) or a
    traceback from the atexit callback. Now the run's outcome stands: exit 0, the summary alone."""
    args = [a for a in release_args(work, "o.csv") if a != "--quiet"]
    r = subprocess.run([sys.executable, str(DRIVER), step, action, "--", *args],
                       capture_output=True, env=clean_env(), timeout=120)
    err = r.stderr.decode()
    assert r.returncode == 0, err
    assert err.startswith("dpcli: released "), err
    assert "error" not in err, err
    assert "Exception" not in err, err
    assert len(spends(work)) == 1
    assert (work / "out" / "o.csv").exists()


def test_a_python_warning_never_reaches_stderr(work: Path) -> None:
    """A Python warning raised during a release (here right after the spend, its text naming a path) printed its
    source file and line on stderr; stderr now holds dpcli's own lines only (none under --quiet)."""
    r = subprocess.run([sys.executable, str(DRIVER), "spent", "warn", "--", *release_args(work, "o.csv")],
                       capture_output=True, env=clean_env({"PYTHONWARNINGS": "always"}), timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stderr == b"", r.stderr.decode()
    assert (work / "out" / "o.csv").exists()


# -- issue 24: `dpcli randomize` and the frequency release ------------------------------------------------------

RANDOMIZE_SPEC = """\
version: 1
dataset: survey
privacy:
  unit: row
  neighbours: replace
  epsilon: 2
columns:
  colour: {type: category, categories: [red, green, blue]}
  smoker: {type: bool}
randomize:
  columns: [colour, smoker]
"""
FREQUENCY_SPEC = """\
version: 1
dataset: survey
privacy:
  neighbours: replace
columns:
  colour: {type: category, categories: [red, green, blue]}
  smoker: {type: bool}
statistics:
  - {name: colours, kind: frequency, column: colour, randomized: {epsilon: 1}}
  - {name: smokers, kind: frequency, column: smoker, randomized: {epsilon: 1}}
"""


@pytest.fixture
def randomize_work(make_work: Callable[..., Path]) -> Path:
    work = make_work(RANDOMIZE_SPEC, "colour,smoker\nred,true\ngreen,false\nblue,1\n,\npurple,maybe\n", cap="10",
                     dataset="survey")
    (work / "out").mkdir()
    return work


def randomize_args(work: Path, name: str) -> list[str]:
    return ["randomize", str(work / "spec.yaml"), "-i", str(work / "data.csv"), "-o", str(work / "out" / name),
            "--ledger", str(work / "L.jsonl"), "--release-id", RID, "--lock-timeout", "1", "--quiet"]


@pytest.fixture
def frequency_work(randomize_work: Path) -> Path:
    """A randomize output recorded in the ledger, a frequency spec of it, and its estimates as a clean run wrote them
    (ref.csv)."""
    work = randomize_work
    r = run_in_process("randomize", work / "spec.yaml", "-i", work / "data.csv", "-o", work / "rr.csv",
                       "--ledger", work / "L.jsonl", "--release-id", "rr", "--quiet")
    assert r.returncode == 0, r.stderr
    (work / "freq.yaml").write_text(FREQUENCY_SPEC)
    r = run_in_process(*frequency_args(work, "ref.csv"))
    assert r.returncode == 0, r.stderr
    (work / "ref.csv").write_bytes((work / "out" / "ref.csv").read_bytes())
    for written in (work / "out").iterdir():
        written.unlink()
    return work


def frequency_args(work: Path, name: str) -> list[str]:
    return ["release", str(work / "freq.yaml"), "-i", str(work / "rr.csv"), "-o", str(work / "out" / name),
            "--ledger", str(work / "L.jsonl"), "--release-id", RID, "--lock-timeout", "1", "--quiet"]


def run_frequency_case(work: Path, step: str, action: str) -> None:
    ledger = (work / "L.jsonl").read_bytes()
    r = subprocess.run([sys.executable, str(DRIVER), step, action, "--", *frequency_args(work, "o.csv")],
                       capture_output=True, env=clean_env(), timeout=120)
    err = r.stderr.decode()
    assert "Traceback" not in err
    assert (work / "L.jsonl").read_bytes() == ledger, (step, action)  # nothing spent, nothing recorded
    if action == "kill":
        assert r.returncode == -int(signal.SIGKILL), (step, action, err)
    else:
        # a signal: 128 + its number; an I/O error writing: exit 5; a MemoryError: a bug's exit 1
        code = 128 + int(SIGNAL[action]) if action in SIGNAL else 5 if action == "oserror" else 1
        assert r.returncode == code, (step, action, r.returncode, err)
        assert err.startswith("dpcli: error: "), err
        assert err.count("\n") == 1, err
        if action != "memory":
            assert "nothing was spent" in err, err
        assert sorted(p.name for p in (work / "out").iterdir()) == [], (step, action)
    # the re-run: the same numbers (estimates of a published file), still nothing recorded
    again = run_dpcli(*frequency_args(work, "again.csv"), cwd=work)
    assert again.returncode == 0, again.stderr.decode()
    assert (work / "out" / "again.csv").read_bytes() == (work / "ref.csv").read_bytes()
    assert (work / "L.jsonl").read_bytes() == ledger


@pytest.mark.parametrize(("step", "action"), [("lock", "sigterm"), ("rename-after", "oserror")])
def test_a_fault_in_randomize_keeps_the_invariants(randomize_work: Path, step: str, action: str) -> None:
    run_case(randomize_work, step, action, randomize_args)


@pytest.mark.slow
@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("step", RANDOMIZE_STEPS)
def test_every_fault_in_randomize_keeps_the_invariants(randomize_work: Path, step: str, action: str) -> None:
    run_case(randomize_work, step, action, randomize_args)


@pytest.mark.parametrize(("step", "action"), [("sidecar", "oserror")])
def test_a_fault_in_a_frequency_release_spends_and_leaves_nothing(frequency_work: Path, step: str, action: str) -> None:
    run_frequency_case(frequency_work, step, action)


@pytest.mark.slow
@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("step", FREQUENCY_STEPS)
def test_every_fault_in_a_frequency_release(frequency_work: Path, step: str, action: str) -> None:
    run_frequency_case(frequency_work, step, action)


@pytest.mark.slow
def test_concurrent_randomize_runs_under_one_id_spend_once_and_write_the_same_file(randomize_work: Path) -> None:
    """Eight `dpcli randomize` processes under one release id: one spend, and every run writes the paid file (a run
    that lost the race waits for the winner's stored file; none draws its own)."""
    work = randomize_work
    procs = [subprocess.Popen([sys.executable, "-m", "dpcli", *randomize_args(work, f"out{i}.csv")], env=clean_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(8)]
    codes = [p.wait(timeout=300) for p in procs]
    assert codes == [0] * 8, [p.stderr.read() for p in procs if p.stderr]
    assert len(spends(work)) == 1
    assert len({(work / "out" / f"out{i}.csv").read_bytes() for i in range(8)}) == 1
