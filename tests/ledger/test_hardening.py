"""Issue 9, the ledger's part: one lock per ledger file whatever its name, charges on a fixed grid, appends that a
full disk cannot tear, an authenticated head, hostile ledger files, read-only ledgers and odd environments.

Every test runs the real code: the `dpcli` command in a subprocess (in this process where only its outcome is
checked), or the library against real files. Faults are
real where the machine allows (a small tmpfs, a read-only mount, permissions without CAP_DAC_OVERRIDE) and
otherwise injected into the `os` module of a child process, never into dpcli's own functions.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import os
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.core.accounting import Budget, Cap
from dpcli.errors import BudgetRefused, LedgerError
from dpcli.ledger import JsonlLedger, Purchase
from dpcli.ledger.base import budgets, canonical
from tests.helpers import clean_env, mounted_tmpfs, run_dpcli, run_in_process

KEY = {"DPCLI_LEDGER_KEY": "k-" + "x" * 30}


def one_line_error(r: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    err = r.stderr.decode() if isinstance(r.stderr, bytes) else r.stderr
    assert r.returncode == code, (r.returncode, err)
    assert err.startswith("dpcli: error: "), err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def child(script: str, *args: object, env: dict | None = None, cwd: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=clean_env(env), cwd=cwd)


@contextmanager
def flocked(path: Path):
    """Hold the ledger's lock as another tool would: `flock LEDGER ...`."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# Spends through the library in a tight loop and reports what happened, as JSON on stdout.
SPENDER = textwrap.dedent(
    """
    import json, sys
    from fractions import Fraction
    from dpcli.core.accounting import Budget
    from dpcli.errors import BudgetRefused, LedgerError
    from dpcli.ledger import JsonlLedger
    path, n = sys.argv[1], int(sys.argv[2])
    ok = refused = failed = 0
    message = ""
    for _ in range(n):
        try:
            JsonlLedger(path, lock_timeout=60).spend("d", Budget(Fraction(1, 100)))
            ok += 1
        except BudgetRefused:
            refused += 1
        except LedgerError as exc:
            failed += 1
            message = str(exc)
    print(json.dumps({"ok": ok, "refused": refused, "failed": failed, "message": message}))
    """
)


def spenders(names: list[str], n: int, cwd: Path) -> list[dict]:
    procs = [child(SPENDER, name, n, cwd=cwd) for name in names]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr.decode()[-2000:]
        out.append(json.loads(stdout))
    return out


# -- 1. one lock per ledger file, whatever its name --------------------------------------------------------------


def test_a_hard_link_cannot_overspend_and_is_refused(work: Path) -> None:
    """Two processes spend through two hard links of one ledger, room for 100 spends, 150 attempts each. With a lock
    named after the path they locked separately: spends past the cap, or a torn chain. Now both are refused."""
    led, other = work / "L.jsonl", work / "H.jsonl"
    JsonlLedger(led).set_cap("d", Cap(Fraction(1), Fraction(0)), allow_raise=False)
    os.link(led, other)
    results = spenders([str(led), str(other)], 150, work)
    recorded_by_processes = sum(r["ok"] for r in results)
    other.unlink()  # one name again: the ledger is usable and tells what happened
    records = JsonlLedger(led).records()  # raises on a torn chain
    status = budgets(records, "L")["d"]
    assert status.spent <= status.cap, f"overspent: {status.spent} of {status.cap}"
    assert status.releases == recorded_by_processes
    assert recorded_by_processes == 0, results
    assert all("hard links" in r["message"] for r in results), results


ROUND_SPENDER = textwrap.dedent(
    """
    import json, sys, time
    from fractions import Fraction
    from dpcli.core.accounting import Budget
    from dpcli.errors import BudgetRefused, LedgerError
    from dpcli.ledger import JsonlLedger
    directory, name, rounds, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    ok, message = [], ""
    for r in range(rounds):
        time.sleep(max(0.0, start + 0.1 * r - time.time()))  # both processes spend at the same moment
        try:
            JsonlLedger(f"{directory}/{name}{r}.jsonl", lock_timeout=10).spend("d", Budget(Fraction(1, 100)))
            ok.append(r)
        except BudgetRefused:
            pass
        except LedgerError as exc:
            message = str(exc)
    print(json.dumps({"ok": ok, "message": message}))
    """
)


@pytest.mark.slow  # a soak test (many processes, or 10^7 values): make test-slow and .ci/run run it
def test_two_processes_spending_through_two_hard_links_never_both_pass_a_cap_for_one(work: Path) -> None:
    """40 ledgers, each with room for one spend and a second name (a hard link); in each round one process spends
    through each name at the same moment. With the lock named after the path both passed the cap in some round."""
    rounds = 40
    for r in range(rounds):
        JsonlLedger(work / f"L{r}.jsonl").set_cap("d", Cap(Fraction(1, 100), Fraction(0)), allow_raise=False)
        os.link(work / f"L{r}.jsonl", work / f"H{r}.jsonl")
    start = time.time() + 2  # after both interpreters have started
    procs = [child(ROUND_SPENDER, work, name, rounds, start) for name in ("L", "H")]
    results = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    both = sorted(set(results[0]["ok"]) & set(results[1]["ok"]))
    assert not both, f"both spends passed a cap that allowed one in rounds {both}"
    assert all("hard links" in r["message"] for r in results), results


def test_a_hard_linked_ledger_is_refused_by_every_command_through_every_name(work: Path) -> None:
    led, other = work / "L.jsonl", work / "H.jsonl"
    assert run_in_process("budget", "set", "toy", "--epsilon", "1", "--ledger", led).returncode == 0
    os.link(led, other)
    before = led.read_bytes()
    for name in (led, other):
        one_line_error(run_in_process("budget", "show", "--ledger", name), 5, "hard links", "2 names")
        one_line_error(run_in_process("release", work / "spec.yaml", "-i", work / "data.csv", "-o", work / "o.csv",
                                      "--ledger", name), 5, "hard links")
    assert led.read_bytes() == before
    assert not (work / "o.csv").exists()
    assert not (work / "H.jsonl.head").exists()


def names_of(work: Path) -> tuple[Path, list[str]]:
    """A ledger under work/real and four names of it, valid from the cwd ``work``."""
    (work / "real").mkdir()
    (work / "link").symlink_to(work / "real", target_is_directory=True)
    led = work / "real" / "L.jsonl"
    return led, [
        "real/L.jsonl",
        str(led),
        str(work / "real" / ".." / "real" / "L.jsonl"),
        str(work / "link" / "L.jsonl"),
    ]


def test_every_other_name_shares_the_lock(work: Path) -> None:
    led, names = names_of(work)
    assert run_dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", led).returncode == 0
    with flocked(led):
        for name in names:
            r = run_dpcli("budget", "set", "toy", "--epsilon", "0.5", "--lock-timeout", "0.2", "--ledger", name,
                          cwd=work)
            one_line_error(r, 5, "could not lock ledger", "within 0.2 s")
    assert len(lines(led)) == 1


def test_concurrent_spends_through_mixed_names_never_overspend_and_share_one_head(work: Path) -> None:
    led, names = names_of(work)
    JsonlLedger(led).set_cap("d", Cap(Fraction(1), Fraction(0)), allow_raise=False)
    results = spenders(names * 2, 20, work)  # 8 processes, 160 attempts, room for 100
    assert sum(r["ok"] for r in results) == 100, results
    assert sum(r["failed"] for r in results) == 0, results
    records = JsonlLedger(led).records()
    assert len(records) == 101
    assert budgets(records, "L")["d"].spent == 1
    assert sorted(p.name for p in (work / "real").iterdir()) == ["L.jsonl", "L.jsonl.head"]
    # one head for all names: a rollback made through one name is caught through every other
    old = b"".join(led.read_bytes().splitlines(keepends=True)[:50])
    led.write_bytes(old)
    for name in names:
        one_line_error(run_dpcli("ledger", "verify", "--ledger", name, cwd=work), 5, "rolled back")


# -- 2. charges on a fixed grid: no sequence of valid releases makes the ledger unreadable -------------------------


def long_share(base: int, power: int) -> Fraction:
    """A share of about 0.33 with a denominator of ~2,200 digits (as two valid specs with long exact shares)."""
    q = base**power
    p = q // 3
    while math.gcd(p, q) != 1:
        p += 1
    return Fraction(p, q)


def test_two_long_exact_shares_no_longer_brick_the_ledger(work: Path) -> None:
    led = work / "L.jsonl"
    book = JsonlLedger(led)
    book.set_cap("toy", Cap(Fraction(1), Fraction(0)), allow_raise=False)
    a, b = long_share(3, 4600), long_share(7, 2600)  # coprime denominators: their exact sum has ~4,400 digits
    assert len(str(a.denominator)) > 2000
    assert len(str(b.denominator)) > 2000
    book.spend("toy", Budget(a))
    book.spend("toy", Budget(b))
    for rec, share in zip([x for x in lines(led) if x["type"] == "spend"], (a, b), strict=True):
        charged = Fraction(rec["epsilon"])
        assert share <= charged < share + Fraction(1, 10**18)
        assert (charged * 10**18).denominator == 1
    show = run_dpcli("budget", "show", "--json", "--ledger", led)
    assert show.returncode == 0, show.stderr
    assert run_dpcli("ledger", "show", "--ledger", led).returncode == 0
    assert run_dpcli("ledger", "verify", "--ledger", led).returncode == 0
    (toy,) = json.loads(show.stdout)
    assert Fraction(toy["spent"]) >= a + b
    assert len(toy["spent"]) < 40
    # the next spend works, and one past the cap is refused (exit 4), not a crash
    book.spend("toy", Budget(Fraction(1, 10)))
    with pytest.raises(BudgetRefused) as exc:
        book.spend("toy", Budget(long_share(11, 2100)))
    assert "requested ε=0.33" in str(exc.value)
    r = run_dpcli("release", work / "spec.yaml", "-i", work / "data.csv", "-o", work / "o.csv", "--ledger", led)
    one_line_error(r, 4, "budget refused")


def test_charges_round_up_so_three_thirds_do_not_fit_a_cap_of_one(tmp_path: Path) -> None:
    """The documented price of the grid: 1/3 is charged 0.333333333333333334."""
    book = JsonlLedger(tmp_path / "L.jsonl")
    book.set_cap("d", Cap(Fraction(1), Fraction(0)), allow_raise=False)
    assert book.spend("d", Budget(Fraction(1, 3))).get("epsilon") == "0.333333333333333334"
    book.spend("d", Budget(Fraction(1, 3)))
    with pytest.raises(BudgetRefused):
        book.spend("d", Budget(Fraction(1, 3)))
    # what is left is on the grid too, and fits exactly
    assert book.status("d").remaining == Fraction(333333333333333332, 10**18)
    book.spend("d", Budget(Fraction(333333333333333332, 10**18)))
    assert book.status("d").remaining == 0


def test_a_cap_beyond_the_digit_limit_is_a_usage_error(tmp_path: Path) -> None:
    led = tmp_path / "L.jsonl"
    r = run_dpcli("budget", "set", "toy", "--epsilon", "0." + "3" * 150, "--ledger", led)
    one_line_error(r, 2, "at most 100 digits")
    assert run_dpcli("budget", "set", "toy", "--epsilon", "1/3", "--delta", "1e-99", "--ledger", led).returncode == 0
    one_line_error(run_dpcli("budget", "set", "toy", "--epsilon", "1e-100", "--ledger", led), 2, "at most 100 digits")


def rehash(records: list[dict]) -> str:
    """The ledger text of ``records`` with every link and hash recomputed (an editor without the key)."""
    prev, out = "0" * 64, []
    for rec in records:
        rec = {k: v for k, v in rec.items() if k != "hash"}
        rec["prev"] = prev
        try:
            prev = hashlib.sha256(canonical(rec)).hexdigest()
        except UnicodeEncodeError:  # a lone surrogate: not UTF-8, so no hash dpcli computes can match
            prev = hashlib.sha256(json.dumps(rec, sort_keys=True).encode()).hexdigest()
        out.append(json.dumps({**rec, "hash": prev}, sort_keys=True, separators=(",", ":")))
    return "\n".join(out) + "\n"


def _spend(records: list[dict], **fields: object) -> list[dict]:
    return [*records, {"seq": len(records), "type": "spend", "dataset": "toy", "time": "t", "epsilon": "0.1", **fields}]


HOSTILE_RECORDS = {
    "epsilon_of_5000_digits": lambda r: _spend(r, epsilon="1" * 5000),
    "epsilon_1e999999": lambda r: _spend(r, epsilon=float("inf")),  # json.dumps writes Infinity
    "cap_of_1e400": lambda r: [*r, {**r[0], "seq": 1, "epsilon": "1e400"}],
    "seq_true": lambda r: [*r, {**r[0], "seq": True}],
    "statistics_not_text": lambda r: _spend(r, statistics=[1, 2]),
    "dataset_not_text": lambda r: _spend(r, dataset={"a": 1}),
    "lone_surrogate": lambda r: _spend(r, dataset="\ud800"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_RECORDS))
def test_hostile_ledger_records_exit_5(work: Path, case: str) -> None:
    led = work / "L.jsonl"
    assert run_dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", led).returncode == 0
    text = rehash(HOSTILE_RECORDS[case](lines(led)))
    led.write_text(text.replace("Infinity", "1e999999"))  # json reads both as inf: the hash still matches
    (work / "L.jsonl.head").unlink()  # an unkeyed ledger's head can be forged or removed anyway
    procs = [subprocess.Popen([sys.executable, "-m", "dpcli", *cmd, "--ledger", str(led)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=clean_env())
             for cmd in (["budget", "show"], ["ledger", "show"], ["ledger", "verify"])]
    for p in procs:
        out, err = p.communicate(timeout=60)
        one_line_error(subprocess.CompletedProcess(p.args, p.returncode, out, err), 5, "ledger")


@pytest.mark.parametrize(
    "head",
    ['{"seq": 1e400, "hash": "H"}', '{"seq": 1' + "0" * 5000 + ', "hash": "H"}', '{"seq": "0", "hash": "H"}',
     "[0]", '{"seq": 0, "hash": "H"}' + " " * 5000, '{"seq": -1, "hash": "H"}'],
    ids=["seq_1e400", "seq_5000_digits", "seq_text", "not_an_object", "oversized", "genesis_with_a_hash"],
)
def test_hostile_head_files_exit_5(work: Path, head: str) -> None:
    led = work / "L.jsonl"
    assert run_dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", led).returncode == 0
    (work / "L.jsonl.head").write_text(head.replace("H", lines(led)[0]["hash"]))
    one_line_error(run_dpcli("ledger", "verify", "--ledger", led), 5, "head file", "unreadable")


# -- 3. a full disk or a short write during an append leaves the ledger exactly as it was ------------------------


FAULTY_WRITE = textwrap.dedent(
    """
    import errno, os, sys
    from fractions import Fraction
    from dpcli.core.accounting import Budget
    from dpcli.errors import LedgerError
    from dpcli.ledger import JsonlLedger, Purchase
    mode, path = sys.argv[1], sys.argv[2]
    real_write = os.write
    def write(fd, data):
        if b'"type":"spend"' not in bytes(data):
            return real_write(fd, data)
        done = real_write(fd, bytes(data)[: len(data) // 2])  # the disk filled half way through the record
        if mode == "enospc":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return done
    os.write = write
    try:
        JsonlLedger(path).spend("d", Budget(Fraction(1, 10)), Purchase("r", "k", "s", "row", "add_remove", ("n",)))
    except LedgerError as exc:
        print(exc)
    """
)


@pytest.mark.parametrize("mode", ["short", "enospc"])
def test_a_failed_append_is_truncated_back(tmp_path: Path, mode: str) -> None:
    led = tmp_path / "L.jsonl"
    JsonlLedger(led).set_cap("d", Cap(Fraction(1), Fraction(0)), allow_raise=False)
    JsonlLedger(led).spend("d", Budget(Fraction(1, 10)))
    before, head = led.read_bytes(), (tmp_path / "L.jsonl.head").read_bytes()
    p = child(FAULTY_WRITE, mode, led)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert b"Traceback" not in err, err
    assert led.read_bytes() == before
    assert (tmp_path / "L.jsonl.head").read_bytes() == head
    assert "nothing was recorded" in out.decode(), out
    assert sorted(x.name for x in tmp_path.iterdir()) == ["L.jsonl", "L.jsonl.head"]
    assert run_dpcli("ledger", "verify", "--ledger", led).returncode == 0
    JsonlLedger(led).spend("d", Budget(Fraction(1, 10)))  # and the next spend works
    assert len(JsonlLedger(led).records()) == 3


def fill(directory: Path) -> Path:
    """Fill a filesystem to the last byte; returns the filler file."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            try:
                if os.write(fd, b"\0" * 4096) == 0:
                    break
            except OSError as exc:
                if exc.errno != errno.ENOSPC:  # only a full disk ends the filling
                    raise
                break
        for size in (512, 1):  # and the last part-page
            try:
                while os.write(fd, b"\0" * size):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_at_the_head_write_records_nothing_and_recovers(work: Path) -> None:
    """Room for a small record in the ledger's last page, none for a head file: nothing recorded, exit 5 (not 1 after
    the record was appended), and once space returns the ledger works."""
    with mounted_tmpfs(work / "small", "size=64k") as small:
        led = small / "L.jsonl"
        assert run_dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", led).returncode == 0
        before, head = led.read_bytes(), (small / "L.jsonl.head").read_bytes()
        filler = fill(small)
        r = run_dpcli("budget", "set", "toy", "--epsilon", "2", "--raise", "--ledger", led)
        one_line_error(r, 5, "No space left on device", "nothing was recorded")
        r = run_dpcli("release", work / "spec.yaml", "-i", work / "data.csv", "-o", work / "o.csv", "--ledger", led)
        one_line_error(r, 5, "No space left on device")
        assert led.read_bytes() == before
        assert (small / "L.jsonl.head").read_bytes() == head
        assert sorted(x.name for x in small.iterdir()) == ["L.jsonl", "L.jsonl.head", "filler"]
        assert not (work / "o.csv").exists()
        filler.unlink()
        assert run_dpcli("budget", "set", "toy", "--epsilon", "2", "--raise", "--ledger", led).returncode == 0
        assert run_dpcli("ledger", "verify", "--ledger", led).returncode == 0


def test_a_full_disk_during_the_append_leaves_the_ledger_as_it_was(work: Path) -> None:
    """One free page: the head is staged, the 40 KB record does not fit (a real short write or ENOSPC)."""
    with mounted_tmpfs(work / "small", "size=256k") as small:
        led = small / "L.jsonl"
        book = JsonlLedger(led)
        book.set_cap("d", Cap(Fraction(1), Fraction(0)), allow_raise=False)
        spare = small / "spare"
        spare.write_bytes(b"\0" * 4096)
        filler = fill(small)
        spare.unlink()
        before, head = led.read_bytes(), (small / "L.jsonl.head").read_bytes()
        big = Purchase("r", "k", "s", "row", "add_remove", tuple(f"statistic_{i:04d}_" + "x" * 30 for i in range(1000)))
        with pytest.raises(LedgerError) as exc:
            book.spend("d", Budget(Fraction(1, 10)), big)
        assert led.read_bytes() == before
        assert (small / "L.jsonl.head").read_bytes() == head
        assert "nothing was recorded" in str(exc.value)
        assert "\n" not in str(exc.value)
        filler.unlink()
        book.spend("d", Budget(Fraction(1, 10)), big)
        assert run_dpcli("ledger", "verify", "--ledger", led).returncode == 0
