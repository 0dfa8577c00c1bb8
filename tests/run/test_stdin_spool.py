"""The stdin spool of `dpcli release` (issue 9): it never outlives the run (a signal, an idle timeout), its cap ends
the run with exit 3 before the spend, a regular --input-file spools nothing, and its errors name standard input."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpcli.errors import InputError, UsageError
from dpcli.run.release import release
from tests.helpers import clean_env, run_dpcli
from tests.run.test_release_safety import DATA, ledger_state, one_line_error

# -- the stdin spool -------------------------------------------------------------------------------------------------


def spool_env(work: Path) -> dict:
    (work / "tmp").mkdir(exist_ok=True)
    return {"TMPDIR": str(work / "tmp")}


def release_stdin(work: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "dpcli", "release", str(work / "spec.yaml"), "-i", "-", "-o",
            str(work / "o.csv"), "--ledger", str(work / "L.jsonl"), *extra]


def test_empty_stdin_names_standard_input_not_the_spool(work: Path) -> None:
    r = subprocess.run(release_stdin(work), input=b"", capture_output=True, env=clean_env(spool_env(work)))
    err = one_line_error(r, 3, "standard input")
    assert str(work / "tmp") not in err
    assert "dpcli-" not in err
    assert list((work / "tmp").iterdir()) == []


def test_the_spool_cap_ends_the_run_with_exit_3_before_the_spend(work: Path) -> None:
    before = ledger_state(work)
    big = DATA + b"50\n" * 1000
    r = subprocess.run(release_stdin(work, "--max-input-bytes", "1k"), input=big, capture_output=True,
                       env=clean_env(spool_env(work)))
    one_line_error(r, 3, "--max-input-bytes", "nothing was spent")
    assert ledger_state(work) == before
    assert list((work / "tmp").iterdir()) == []
    r = subprocess.run(release_stdin(work, "--max-input-bytes", "1M"), input=big, capture_output=True,
                       env=clean_env(spool_env(work)))
    assert r.returncode == 0, r.stderr.decode()
    assert list((work / "tmp").iterdir()) == []


@pytest.mark.parametrize("value", ["2x", "0", "-5", "1e9"])
def test_a_bad_spool_cap_is_a_usage_error(work: Path, value: str) -> None:
    r = run_dpcli("release", work / "spec.yaml", "-i", "-", "--ledger", work / "L.jsonl", "--max-input-bytes", value,
                  stdin=DATA)
    one_line_error(r, 2, "--max-input-bytes")


@pytest.mark.parametrize("value", ["inf", "1e12", "nan", "-1"])
def test_an_input_timeout_beyond_its_range_is_a_usage_error(work: Path, value: str) -> None:
    r = run_dpcli("release", work / "spec.yaml", "-i", "-", "--ledger", work / "L.jsonl",
                  f"--input-timeout={value}", stdin=DATA)
    one_line_error(r, 2, "--input-timeout")


def test_library_errors_name_no_flag_and_the_cli_adds_it(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A library caller reads the fact in the library's words (its keyword arguments); the CLI's one line names the
    flag in their place and appends the hint (dpcli/errors.py, dpcli/cli/app.py main)."""
    from dpcli.engine.inputs import check_input_timeout, parse_size
    from dpcli.ledger import resolve_ledger

    monkeypatch.delenv("DPCLI_LEDGER", raising=False)
    for call in (lambda: check_input_timeout(-1.0), lambda: parse_size("2x"), lambda: resolve_ledger(None, None)):
        with pytest.raises(UsageError) as caught:
            call()
        assert "--" not in str(caught.value), str(caught.value)
        assert caught.value.option or caught.value.hint
    with pytest.raises(UsageError, match=r"^input_timeout: must be between 0 and 1000000 seconds") as caught:
        check_input_timeout(float("nan"))
    assert caught.value.option == "--input-timeout"
    r = run_dpcli("release", work / "spec.yaml", "-i", "-", "--ledger", work / "L.jsonl", "--input-timeout=nan",
                  stdin=DATA)
    assert r.stderr.decode() == (
        "dpcli: error: --input-timeout: must be between 0 and 1000000 seconds (0 waits forever)\n"
    )
    r = run_dpcli("release", work / "spec.yaml", "-i", "-", stdin=DATA)
    one_line_error(r, 2, "no ledger", "; pass --ledger PATH or URL")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_while_spooling_removes_the_private_spool_and_spends_nothing(work: Path, signum: int) -> None:
    before = ledger_state(work)
    proc = subprocess.Popen(release_stdin(work), stdin=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=clean_env(spool_env(work)))
    assert proc.stdin is not None
    proc.stdin.write(DATA)  # a header and some rows, then the writer stalls
    proc.stdin.flush()
    deadline = time.monotonic() + 30
    spool: list[Path] = []
    while time.monotonic() < deadline and not any(d.glob("input.csv") for d in spool):
        spool = list((work / "tmp").glob("dpcli-*"))
        time.sleep(0.05)
    assert len(spool) == 1
    assert stat.S_IMODE(spool[0].stat().st_mode) == 0o700  # a private directory
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signum, err
    assert err.decode() == f"dpcli: error: interrupted by {signal.Signals(signum).name}; nothing was spent\n"
    assert list((work / "tmp").iterdir()) == []
    assert ledger_state(work) == before


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_lock_wait_ends_the_run_while_the_lock_is_held_with_nothing_spent(
    work: Path, signum: int
) -> None:
    """Signals are held from the spend's write until the table is stored, but not during the wait for the ledger's
    lock: a Ctrl-C there used to be held too, so the run waited, spent and then exited 5."""
    import fcntl
    import queue
    import threading

    before = ledger_state(work)
    proc = subprocess.Popen(release_stdin(work, "--verbose", "--lock-timeout", "60"), stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=clean_env(spool_env(work)))
    assert proc.stdin is not None
    assert proc.stderr is not None
    lines: queue.Queue[bytes] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in iter(proc.stderr.readline, b"")], daemon=True)
    reader.start()

    def wait_for(phase: bytes) -> None:
        while phase not in lines.get(timeout=30):
            pass

    proc.stdin.write(DATA)
    proc.stdin.flush()
    wait_for(b"budget available")  # the ledger was read; now it spools standard input, holding no lock
    with open(work / "L.jsonl", "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another writer holds the ledger
        proc.stdin.close()
        wait_for(b"exact aggregates computed")  # next: the spend, which waits for the lock
        time.sleep(0.5)
        proc.send_signal(signum)
        # a guard, not a time limit: a run that waited for the lock could not end while this test holds it, so
        # ending with 128 + signum and nothing spent before the lock is released is the evidence
        proc.wait(timeout=120)
        assert ledger_state(work) == before
    reader.join(timeout=10)
    proc.stderr.close()  # read to its end by the reader thread
    last = list(lines.queue)[-1].decode()
    assert proc.returncode == 128 + signum, last
    assert last == f"dpcli: error: interrupted by {signal.Signals(signum).name}; nothing was spent\n"
    assert not (work / "o.csv").exists()
    assert list((work / "tmp").iterdir()) == []


def test_an_idle_timeout_removes_the_spool(work: Path) -> None:
    with subprocess.Popen(release_stdin(work, "--input-timeout", "0.5"), stdin=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=clean_env(spool_env(work))) as proc:  # closes its pipes
        assert proc.stdin is not None
        proc.stdin.write(DATA)
        proc.stdin.flush()  # and the writer stalls, its end kept open
        proc.wait(timeout=30)
        assert proc.stderr is not None
        err = proc.stderr.read()
    assert proc.returncode == 3
    assert b"--input-timeout" in err
    assert list((work / "tmp").iterdir()) == []


def test_input_file_spools_nothing_for_a_regular_file(work: Path) -> None:
    from dpcli.engine.inputs import InputFile

    with InputFile(work / "data.csv") as src:
        assert src.path == work / "data.csv"
        assert not src.spooled


def test_the_spool_error_names_standard_input_in_library_use(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    read, write = os.pipe()
    os.close(write)  # an empty standard input
    with io.TextIOWrapper(io.FileIO(read, "r")) as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        with pytest.raises(InputError) as caught:
            release(work / "spec.yaml", input="-", output=work / "o.csv", ledger=work / "L.jsonl")
    assert "standard input" in str(caught.value)
    assert "dpcli-" not in str(caught.value)
