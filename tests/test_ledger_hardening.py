"""Issue 9, the ledger's part: one lock per ledger file whatever its name, charges on a fixed grid, appends that a
full disk cannot tear, an authenticated head, hostile ledger files, read-only ledgers and odd environments.

Every test runs the real code: the `dpcli` command in a subprocess, or the library against real files. Faults are
real where the machine allows (a small tmpfs, a read-only mount, permissions without CAP_DAC_OVERRIDE) and
otherwise injected into the `os` module of a child process, never into dpcli's own functions.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.core.accounting import Budget, Cap
from dpcli.errors import BudgetRefused, LedgerError, UsageError
from dpcli.ledger import JsonlLedger, Purchase
from dpcli.ledger.base import budgets, canonical
from tests.helpers import TOY_SPEC, clean_env, mounted_tmpfs, run_dpcli, run_in_process
from tests.test_ledger_postgres import pg_server, pg_url  # noqa: F401 - the throwaway PostgreSQL server's fixtures

SPEC = TOY_SPEC
KEY = {"DPCLI_LEDGER_KEY": "k-" + "x" * 30}


@pytest.fixture
def work(make_work: Callable[..., Path]) -> Path:
    return make_work(SPEC, "age\n34\n71\n15\n52\n")


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
    assert run_dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", led).returncode == 0
    os.link(led, other)
    before = led.read_bytes()
    for name in (led, other):
        one_line_error(run_dpcli("budget", "show", "--ledger", name), 5, "hard links", "2 names")
        one_line_error(run_dpcli("release", work / "spec.yaml", "-i", work / "data.csv", "-o", work / "o.csv",
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


# -- 7. the head file is authenticated when a key is set --------------------------------------------------------


def keyed_ledger(work: Path) -> Path:
    led = work / "L.jsonl"
    assert run_dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", led, env=KEY).returncode == 0
    for i in range(2):
        r = run_dpcli("release", work / "spec.yaml", "-i", work / "data.csv", "-o", work / f"o{i}.csv",
                      "--ledger", led, env=KEY)
        assert r.returncode == 0, r.stderr
    return led


def test_a_rollback_with_a_forged_head_is_detected_with_a_key(work: Path) -> None:
    led = keyed_ledger(work)
    assert run_dpcli("ledger", "verify", "--ledger", led, env=KEY).returncode == 0
    genuine = led.read_text().splitlines(keepends=True)
    # roll back to the first spend (a genuine prefix: every record's MAC is valid) and write the head it would have
    led.write_text("".join(genuine[:2]))
    seq1 = json.loads(genuine[1])
    (work / "L.jsonl.head").write_text(json.dumps({"seq": 1, "hash": seq1["hash"]}) + "\n")
    one_line_error(run_dpcli("ledger", "verify", "--ledger", led, env=KEY), 5, "not authenticated with the ledger key")
    (work / "L.jsonl.head").write_text(json.dumps({"seq": 1, "hash": seq1["hash"], "mac": "0" * 64}) + "\n")
    one_line_error(run_dpcli("budget", "show", "--ledger", led, env=KEY), 5, "not authenticated")
    (work / "L.jsonl.head").unlink()
    one_line_error(run_dpcli("ledger", "verify", "--ledger", led, env=KEY), 5, "head file", "is missing")
    r = run_dpcli("release", work / "spec.yaml", "-i", work / "data.csv", "-o", work / "again.csv", "--ledger", led,
                  env=KEY)
    one_line_error(r, 5)
    assert led.read_text() == "".join(genuine[:2])
    assert not (work / "again.csv").exists()


def test_a_keyed_ledger_head_from_dpcli_0_2_is_sealed_by_the_operator(work: Path) -> None:
    led = keyed_ledger(work)
    last = lines(led)[-1]
    (work / "L.jsonl.head").write_text(json.dumps({"seq": last["seq"], "hash": last["hash"]}) + "\n")  # as 0.2 wrote it
    key = KEY["DPCLI_LEDGER_KEY"].encode()
    with pytest.raises(LedgerError, match="not authenticated"):
        JsonlLedger(led, key=key).records()
    with pytest.raises(LedgerError, match="does not end at head"):
        JsonlLedger(led, key=key).seal_head(lines(led)[1]["hash"])
    JsonlLedger(led, key=key).seal_head(last["hash"])
    assert run_dpcli("ledger", "verify", "--ledger", led, env=KEY).returncode == 0


def test_a_new_keyed_ledger_has_an_authenticated_head_from_its_first_record(tmp_path: Path) -> None:
    led = tmp_path / "L.jsonl"
    JsonlLedger(led, key=b"k").set_cap("d", Cap(Fraction(1), Fraction(0)), allow_raise=False)
    head = json.loads((tmp_path / "L.jsonl.head").read_text())
    assert head["seq"] == 0
    assert len(head["mac"]) == 64


# -- 8/9. environments, paths and permissions -------------------------------------------------------------------


def test_a_non_utf8_ledger_key_is_used_as_bytes(work: Path) -> None:
    led = work / "L.jsonl"
    base = {os.fsencode(k): os.fsencode(v) for k, v in clean_env().items()}

    def run(key: bytes, *args: object) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dpcli", *map(str, args), "--ledger", str(led)],
                              capture_output=True, env={**base, b"DPCLI_LEDGER_KEY": key}, timeout=120)

    r = run(b"\xff", "budget", "set", "toy", "--epsilon", "1")
    assert r.returncode == 0, r.stderr
    r = run(b"\xff", "ledger", "verify")
    assert r.returncode == 0, r.stderr
    assert b"authenticated with the ledger key" in r.stdout, r.stderr
    one_line_error(run(b"\xfe", "ledger", "verify"), 5, "altered")
    assert JsonlLedger(led, key=b"\xff").records()[0].get("mac") == "hmac-sha256"


def test_published_head_tells_a_mistyped_path_from_a_rollback(work: Path) -> None:
    from dpcli.ledger import published_head

    (work / "o.csv.meta.json").write_text(json.dumps({"ledger": {"head": "ab" * 32}}))
    assert published_head(work / "o.csv.meta.json") == "ab" * 32
    assert published_head("ab" * 8) == "ab" * 8
    for bad, message in ((work / "o.csv.meta.jsn", "cannot read"), (work, "cannot read"),
                         (work / "spec.yaml", "is not a release's metadata file")):
        with pytest.raises(UsageError, match=message):
            published_head(bad)


def test_verify_against_a_mistyped_path_says_cannot_read(work: Path) -> None:
    led = work / "L.jsonl"
    assert run_dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", led).returncode == 0
    r = run_dpcli("ledger", "verify", "--ledger", led, "--against", work / "o.csv.meta.jsn")
    one_line_error(r, 2, "cannot read")


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
    the id never drawn again (tests/test_ledger.py::test_paid_id_whose_table_is_missing_or_altered_...)."""
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


# -- soak: 40 processes on one ledger through different names -------------------------------------------------


def soak_calls(spec: Path, data: Path, out: Path, names: list[str]) -> list[list[str]]:
    """40 commands in a fixed shuffled order, each through one of the names: 24 releases of 0.25 (4 of them under
    one release id), 6 cap changes between 0.75 and 2 (some lower the cap below what is spent), 5 budget shows and
    5 verifies."""
    import random

    wait = ["--lock-timeout", "240"]
    calls: list[list[str]] = []
    for i in range(24):
        rid = ["--release-id", "soak-shared"] if i < 4 else ["--no-reuse"]
        calls.append(["release", str(spec), "-i", str(data), "-o", str(out / f"o{i}.csv"), "--quiet", *wait, *rid])
    calls += [
        ["budget", "set", "toy", "--epsilon", eps, "--raise", *wait]
        for eps in ("1", "1.5", "0.75", "2", "1.25", "1.75")
    ]
    calls += [["budget", "show", "--json"]] * 5 + [["ledger", "verify"]] * 5
    random.Random(9).shuffle(calls)
    return [[*c, "--ledger", names[i % len(names)]] for i, c in enumerate(calls)]


def run_soak(calls: list[list[str]], cwd: Path, env: dict | None = None) -> list[tuple[list[str], int, str]]:
    procs = [(c, subprocess.Popen([sys.executable, "-m", "dpcli", *c], cwd=cwd, env=clean_env(env),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)) for c in calls]
    done = []
    for c, p in procs:
        _, err = p.communicate(timeout=600)
        done.append((c, p.returncode, err.decode()))
    return done


def check_soak(done: list[tuple[list[str], int, str]], records: list, out: Path) -> None:
    for c, code, err in done:
        allowed = (0, 4) if c[0] == "release" else (0,)
        assert code in allowed, (c, code, err)
        assert "Traceback" not in err
    # never overspent: replayed record by record, every spend fit the cap in force when it was appended
    for i, rec in enumerate(records):
        if rec.type == "spend":
            status = budgets(records[: i + 1], "soak")["toy"]
            assert status.cap is not None, (i, status)
            assert status.spent <= status.cap, (i, status)
    spends = [r for r in records if r.type == "spend"]
    released = {r.get("release_key") for r in records if r.type == "released"}
    for s in spends:  # every spend well-formed, and released (no run failed after its spend)
        f = s.fields
        assert (f["dataset"], f["epsilon"], f["unit"], f["neighbours"], f["statistics"]) == (
            "toy", "0.25", "row", "add_remove", ["n"])
        assert isinstance(f["release_id"], str)
        assert len(f["release_key"]) == 40
        assert len(f["spec_sha256"]) == 64
        assert f["release_key"] in released
    assert len({s.get("release_key") for s in spends}) == len(spends)  # the shared id was paid once
    # the caps allow at most 8 spends of 0.25 (the shared id's 3 other runs reuse its table): the rest were refused
    assert 1 <= len(spends) <= 8
    assert sum(code == 4 for c, code, _ in done if c[0] == "release") >= 24 - 8 - 3
    shared = [c for c, code, _ in done if c[0] == "release" and "soak-shared" in c and code == 0]
    fresh_ok = [c for c, code, _ in done if c[0] == "release" and "soak-shared" not in c and code == 0]
    assert len(spends) == len(fresh_ok) + (1 if shared else 0)
    assert len(list(out.glob("o*.csv"))) == len(fresh_ok) + len(shared)


@pytest.mark.slow
def test_soak_file_ledger_through_four_names(work: Path) -> None:
    led, names = names_of(work)
    assert run_dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", led).returncode == 0
    (work / "out").mkdir()
    done = run_soak(soak_calls(work / "spec.yaml", work / "data.csv", work / "out", names), work)
    for name in names:
        assert run_dpcli("ledger", "verify", "--ledger", name, cwd=work).returncode == 0
    check_soak(done, JsonlLedger(led).records(), work / "out")
    assert sorted(p.name for p in (work / "real").iterdir()) == ["L.jsonl", "L.jsonl.head", "L.jsonl.releases"]


@pytest.mark.slow
@pytest.mark.postgres
def test_soak_postgres_ledger_through_four_urls(pg_server, pg_url: str, work: Path) -> None:  # noqa: F811
    from dpcli.ledger.postgres import PostgresLedger

    db, query = pg_url.split("/")[-1].split("?")
    names = [
        pg_url,
        pg_url.replace("postgresql://", "postgres://", 1),
        pg_url.replace("@127.0.0.1:", "@localhost:", 1),
        f"postgresql://{pg_server.user}@/{db}?host={pg_server.dir}&port={pg_server.port}&{query}",  # the unix socket
    ]
    assert run_dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", pg_url).returncode == 0
    (work / "out").mkdir()
    done = run_soak(soak_calls(work / "spec.yaml", work / "data.csv", work / "out", names), work)
    for name in names:
        assert run_dpcli("ledger", "verify", "--ledger", name).returncode == 0
    book = PostgresLedger(pg_url)
    try:
        check_soak(done, book.records(), work / "out")
    finally:
        book.close()
