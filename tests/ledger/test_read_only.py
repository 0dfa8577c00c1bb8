"""Read-only ledgers and odd environments (issue 9): a ledger on a read-only mount or without write permission can be
verified and shown; every command that reads it takes the lock timeout; a key file or a release store that cannot
serve is refused before the spend. Faults are real where the machine allows (a read-only mount, permissions)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.core.accounting import Budget, Cap
from dpcli.ledger import JsonlLedger, Purchase
from tests.helpers import clean_env, mounted_tmpfs, run_dpcli, run_in_process
from tests.ledger.test_hardening import flocked, lines, one_line_error


def test_budget_set_never_creates_directories(work: Path) -> None:
    led = work / "nowhere" / "deeper" / "L.jsonl"
    one_line_error(run_dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", led), 2,
                   f"its directory {led.parent} does not exist")
    assert not (work / "nowhere").exists()


def read_only_commands(led: Path, cmd_prefix: list[str] | None = None) -> None:
    for args, expect in ((["ledger", "verify"], "ledger OK: 2 record(s)"), (["ledger", "show"], "spend"),
                         (["budget", "show"], "toy")):
        r = subprocess.run([*(cmd_prefix or []), sys.executable, "-m", "dpcli", *args, "--ledger", str(led)],
                           capture_output=True, env=clean_env(), timeout=120)
        assert r.returncode == 0, (args, r.stderr)
        assert expect in r.stdout.decode(), (args, r.stderr)
    r = subprocess.run([*(cmd_prefix or []), sys.executable, "-m", "dpcli", "budget", "set", "toy", "--epsilon", "2",
                        "--raise", "--ledger", str(led)], capture_output=True, env=clean_env(), timeout=120)
    one_line_error(r, 5, "cannot write ledger")


def ledger_copy(work: Path, target: Path) -> Path:
    """A ledger of two records and its head, copied into ``target`` as an auditor would receive them."""
    (work / "src").mkdir()
    JsonlLedger(work / "src" / "L.jsonl").set_cap("toy", Cap(Fraction(1), Fraction(0)), allow_raise=False)
    JsonlLedger(work / "src" / "L.jsonl").spend(
        "toy", Budget(Fraction(1, 4)), Purchase("r", "k", "s", "row", "add_remove", ("n",))
    )
    for name in ("L.jsonl", "L.jsonl.head"):
        shutil.copyfile(work / "src" / name, target / name)
    return target / "L.jsonl"


def test_a_read_only_mounted_ledger_can_be_verified_and_shown(work: Path) -> None:
    with mounted_tmpfs(work / "ro", "size=64k") as ro:
        led = ledger_copy(work, ro)
        r = subprocess.run(["mount", "-o", "remount,ro", str(ro)], capture_output=True)
        if r.returncode != 0:
            pytest.skip(f"cannot remount read-only: {r.stderr.decode()[:80]}")
        read_only_commands(led)


def test_a_read_only_ledger_by_permissions_can_be_verified_and_shown(work: Path) -> None:
    prefix: list[str] = []
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):  # pragma: no cover
            pytest.skip("running as root without setpriv: permissions cannot be made to apply")
        caps = "-dac_override,-dac_read_search"
        prefix = ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}"]
    (work / "ro").mkdir()
    led = ledger_copy(work, work / "ro")
    for p in (led, work / "ro" / "L.jsonl.head"):
        p.chmod(0o444)
    (work / "ro").chmod(0o555)
    try:
        read_only_commands(led, prefix)
    finally:
        (work / "ro").chmod(0o755)


def test_every_command_that_reads_the_ledger_takes_the_lock_timeout(work: Path) -> None:
    """Issue 23: `budget show`, `ledger show`, `ledger verify`, `plan --ledger` and `report --ledger` had no
    --lock-timeout (they waited the default 30 s for a writer). Each now takes it and ends with exit 5 in one line
    while another holds the ledger's lock (here `flock` from this process: another open file, another lock)."""
    led = work / "L.jsonl"
    assert run_in_process("budget", "set", "toy", "--epsilon", "1", "--ledger", led).returncode == 0
    assert run_in_process("release", work / "spec.yaml", "-i", work / "data.csv", "-o", work / "o.csv",
                          "--ledger", led).returncode == 0
    wait = ("--ledger", led, "--lock-timeout", "0.05")
    with flocked(led):
        for args in (("budget", "show"), ("ledger", "show"), ("ledger", "verify"),
                     ("plan", work / "spec.yaml"), ("report", work / "o.csv", "-o", work / "r.html"),
                     ("budget", "set", "toy", "--epsilon", "0.5"),
                     ("release", work / "spec.yaml", "-i", work / "data.csv", "-o", work / "p.csv")):
            one_line_error(run_in_process(*args, *wait), 5, "could not lock ledger", "--lock-timeout")
    for value in ("inf", "nan", "-1", "1e7"):  # inf waited forever; the largest is 10^6 s
        r = run_in_process("budget", "set", "toy", "--epsilon", "0.5", "--ledger", led, f"--lock-timeout={value}")
        one_line_error(r, 2, "--lock-timeout")
    assert [x["type"] for x in lines(led)] == ["cap", "spend", "released"]


# -- issue 23: a key file, a release store and a stored table that are not what they should be --------------------


def test_a_key_file_that_is_not_a_regular_file_is_refused_without_hanging(work: Path) -> None:
    """A FIFO named by DPCLI_LEDGER_KEY_FILE hung `ledger verify` (and every command that reads the ledger) in the
    key file's open. Now a FIFO or a directory (or a device) is exit 2, one line, at once. The FIFO in a subprocess
    (with a timeout as a safety net): in process, the old code would hang the test run."""
    led = work / "L.jsonl"
    assert run_in_process("budget", "set", "toy", "--epsilon", "1", "--ledger", led).returncode == 0
    os.mkfifo(work / "key.fifo")
    r = run_dpcli("ledger", "verify", "--ledger", led, env={"DPCLI_LEDGER_KEY_FILE": str(work / "key.fifo")},
                  timeout=60)
    one_line_error(r, 2, "DPCLI_LEDGER_KEY_FILE", "not a regular file")
    for args in (["budget", "show"], ["release", work / "spec.yaml", "-i", work / "data.csv", "-o", work / "o.csv"]):
        r = run_in_process(*args, "--ledger", led, env={"DPCLI_LEDGER_KEY_FILE": str(work)})  # a directory
        one_line_error(r, 2, "DPCLI_LEDGER_KEY_FILE", "not a regular file")


@pytest.mark.parametrize("store", ["a file", "a read-only mount"])
def test_a_release_store_that_cannot_take_a_table_is_refused_before_the_spend(work: Path, store: str) -> None:
    """A release store that is a file or read-only was found only after the spend: exit 5, ε spent, the release id
    never written. Now the store is checked before anything is read or spent (and again under the ledger's lock)."""
    led = work / "L.jsonl"
    assert run_in_process("budget", "set", "toy", "--epsilon", "1", "--ledger", led).returncode == 0
    before = led.read_bytes()
    with contextlib.ExitStack() as stack:
        if store == "a file":
            (work / "L.jsonl.releases").write_text("not a directory\n")
        else:
            stack.enter_context(mounted_tmpfs(work / "L.jsonl.releases", "ro,size=64k"))
        r = run_in_process("release", work / "spec.yaml", "-i", work / "data.csv", "-o", work / "out.csv",
                           "--ledger", led, "--release-id", "x")
        one_line_error(r, 5, "release store", "nothing was spent")
    assert led.read_bytes() == before
    assert not (work / "out.csv").exists()
    # once the store is usable the same id is released, once
    if store == "a file":
        (work / "L.jsonl.releases").unlink()
    r = run_in_process("release", work / "spec.yaml", "-i", work / "data.csv", "-o", work / "out.csv",
                       "--ledger", led, "--release-id", "x")
    assert r.returncode == 0, r.stderr
    assert [x["type"] for x in lines(led)] == ["cap", "spend", "released"]


@pytest.mark.parametrize("replacement", ["a FIFO", "a symbolic link to it"])
def test_a_stored_table_that_is_not_a_regular_file_fails_the_reissue_and_never_draws_again(
    work: Path, replacement: str
) -> None:
    """A FIFO in place of a stored table hung the re-issue under its release id. Now a stored table that is not a
    regular file (not followed through a symlink either) fails as an altered table does: exit 5, nothing written,
    the id never drawn again (tests/ledger/test_jsonl.py::test_paid_id_whose_table_is_missing_or_altered_...)."""
    led = work / "L.jsonl"
    assert run_in_process("budget", "set", "toy", "--epsilon", "1", "--ledger", led).returncode == 0
    release = ("release", work / "spec.yaml", "-i", work / "data.csv", "--ledger", led, "--release-id", "x")
    assert run_in_process(*release, "-o", work / "a.csv").returncode == 0
    stored = next((work / "L.jsonl.releases").iterdir())
    stored.rename(work / "moved.json")
    if replacement == "a FIFO":
        os.mkfifo(stored)
    else:
        stored.symlink_to(work / "moved.json")
    # the FIFO in a subprocess, with a timeout as a safety net: in process, the old code would hang the test run
    again = (*release, "-o", work / "b.csv")
    r = run_dpcli(*again, timeout=60) if replacement == "a FIFO" else run_in_process(*again)
    one_line_error(r, 5, "not a regular file", "never drawn again")
    assert not (work / "b.csv").exists()
    assert [x["type"] for x in lines(led)] == ["cap", "spend", "released"]
