"""The JSONL ledger under concurrency, crashes and tampering, through the real command: in this process
(run_in_process, dpcli.cli.app.main as the console script runs it) where the command's outcome is what is checked,
and as child processes where a process is: concurrent runs, kills, a lock held by another process."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.core.accounting import Budget, Cap
from dpcli.errors import BudgetRefused, LedgerError, UsageError
from dpcli.ledger import Delivery, JsonlLedger, Purchase, RandomizedColumn
from dpcli.ledger.base import canonical
from tests.helpers import clean_env, run_dpcli, run_in_process

SPEC = """\
version: 1
dataset: toy
privacy: {unit: row, neighbours: add_remove, epsilon: EPS}
columns:
  age: {type: int, bounds: [0, 100]}
statistics:
  - {name: n, kind: count}
  - {name: ages, kind: histogram, column: age, bins: {start: 0, stop: 110, step: 10}}
"""


env = clean_env


def dpcli(*args: str, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    """The command in this process (~0.05 s against ~0.7 s of CPU for a child's start-up: issue 28)."""
    return run_in_process(*args, env=extra_env)


@pytest.fixture
def work(make_work: Callable[..., Path]) -> Path:
    return make_work(SPEC.replace("EPS", "0.25"), "age\n" + "\n".join(str(a) for a in range(0, 100, 3)) + "\n")


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def release_args(work: Path, out: str, *extra: str) -> list[str]:
    return ["release", str(work / "spec.yaml"), "-i", str(work / "data.csv"), "-o", str(work / out),
            "--ledger", str(work / "ledger.jsonl"), "--quiet", *extra]


# -- concurrency ---------------------------------------------------------------------------------------------------


@pytest.mark.slow  # a soak test (many processes, or 10^7 values): make test-slow and .ci/run run it
def test_twenty_concurrent_releases_never_overspend(work: Path) -> None:
    led = str(work / "ledger.jsonl")
    assert dpcli("budget", "set", "toy", "--epsilon", "1.25", "--ledger", led).returncode == 0
    procs = [
        subprocess.Popen([sys.executable, "-m", "dpcli", *release_args(work, f"out{i}.csv", "--no-reuse")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env())
        for i in range(20)
    ]
    codes = [p.wait(timeout=300) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    assert sorted(codes) == [0] * 5 + [4] * 15
    assert dpcli("ledger", "verify", "--ledger", led).returncode == 0
    show = json.loads(dpcli("budget", "show", "--json", "--ledger", led).stdout)
    assert show == [{"dataset": "toy", "cap": "1.25", "spent": "1.25", "remaining": "0", "releases": 5,
                     "cap_delta": "0", "spent_delta": "0",
                     "spent_pure_epsilon": "1.25", "spent_rho": "0", "unit": "row",
                     "neighbours": "add_remove"}]
    assert len(list(work.glob("out*.csv"))) == 5


def test_lock_timeout_exits_5(work: Path) -> None:
    led = work / "ledger.jsonl"
    assert dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", str(led)).returncode == 0
    before = led.read_bytes()
    fd = os.open(led, os.O_RDONLY)  # the lock is an flock on the ledger file itself (another tool may hold it)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        r = run_dpcli(*release_args(work, "o.csv", "--lock-timeout", "0.5"))  # another process waits
    finally:
        os.close(fd)
    assert r.returncode == 5
    assert "could not lock ledger" in r.stderr.decode()
    assert "within 0.5 s" in r.stderr.decode()
    assert led.read_bytes() == before
    assert not (work / "o.csv").exists()


# -- crashes -------------------------------------------------------------------------------------------------------

# Runs a real release in a child process that SIGKILLs itself right after one step.
KILL_DRIVER = textwrap.dedent(
    """
    import os, signal, sys
    import dpcli.run.release as rel
    import dpcli.publish.writers as out
    from dpcli.ledger.jsonl import JsonlLedger

    step, spec, data, output, ledger = sys.argv[1:6]
    die = lambda: os.kill(os.getpid(), signal.SIGKILL)

    if step == "after_spend":
        spend = JsonlLedger.spend
        def spend_then_die(self, *a, **k):
            spend(self, *a, **k); die()
        JsonlLedger.spend = spend_then_die
    elif step == "after_noise":
        draw = rel.draw_noise
        def draw_then_die(*a, **k):
            draw(*a, **k); die()
        rel.draw_noise = draw_then_die
    else:
        replace = os.replace
        def replace_and_maybe_die(src, dst):
            if os.path.abspath(dst) == os.path.abspath(output):
                if step == "after_temp_written":
                    die()
                replace(src, dst)
                if step == "after_rename":
                    die()
            else:
                replace(src, dst)
        out.os.replace = replace_and_maybe_die
    rel.release(spec, input=data, output=output, ledger=ledger, release_id="nightly")
    """
)


@pytest.mark.parametrize("step", ["after_spend", "after_noise", "after_temp_written", "after_rename"])
def test_kill_at_each_step_never_leaves_unpaid_output(work: Path, step: str) -> None:
    led = work / "ledger.jsonl"
    assert dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", str(led)).returncode == 0
    out = work / "out.csv"
    r = subprocess.run([sys.executable, "-c", KILL_DRIVER, step, str(work / "spec.yaml"), str(work / "data.csv"),
                        str(out), str(led)], capture_output=True, timeout=120, env=env())
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert dpcli("ledger", "verify", "--ledger", str(led)).returncode == 0
    recs = records(led)
    spends = [x for x in recs if x["type"] == "spend"]
    assert len(spends) == 1  # the spend is durable in every case: nothing refunded
    stored = step in ("after_temp_written", "after_rename")  # the table is stored and recorded before the output
    assert len([x for x in recs if x["type"] == "released"]) == int(stored)
    assert out.exists() == (step == "after_rename")  # output only after the rename, never partial
    status = json.loads(dpcli("budget", "show", "--json", "--ledger", str(led)).stdout)
    assert status[0]["spent"] == "0.25"
    # the paid release id is never drawn again: a re-run writes the stored table, or fails with exit 5
    again = dpcli(*release_args(work, "again.csv", "--release-id", "nightly", "--lock-timeout", "0.5"))
    assert again.returncode == (0 if stored else 5), again.stderr
    if not stored:
        assert f"paid for by record {spends[0]['seq']}" in again.stderr.decode()
        assert "never drawn again" in again.stderr.decode()
    elif out.exists():
        assert (work / "again.csv").read_bytes() == out.read_bytes()
    assert len([x for x in records(led) if x["type"] == "spend"]) == 1


# -- tampering -----------------------------------------------------------------------------------------------------


@pytest.fixture
def used_ledger(work: Path) -> Path:
    led = work / "ledger.jsonl"
    assert dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", str(led)).returncode == 0
    for i in range(2):
        assert dpcli(*release_args(work, f"o{i}.csv", "--no-reuse")).returncode == 0
    return led


def edit_epsilon(lines: list[str]) -> list[str]:
    lines[1] = lines[1].replace('"epsilon":"0.25"', '"epsilon":"0.05"')
    return lines


def delete_record(lines: list[str]) -> list[str]:
    return lines[:1] + lines[2:]


def swap_records(lines: list[str]) -> list[str]:
    lines[1], lines[3] = lines[3], lines[1]
    return lines


def insert_record(lines: list[str]) -> list[str]:
    return [*lines[:2], lines[0], *lines[2:]]


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (edit_epsilon, "record 1 has been altered"),
        (delete_record, "record 1 is out of sequence"),
        (swap_records, "record 1 is out of sequence"),
        (insert_record, "record 2 is out of sequence"),
    ],
)
def test_edited_ledger_is_detected_and_release_refuses(used_ledger: Path, work: Path, tamper, message: str) -> None:
    lines = used_ledger.read_text().splitlines()
    used_ledger.write_text("\n".join(tamper(lines)) + "\n")
    r = dpcli("ledger", "verify", "--ledger", str(used_ledger))
    assert r.returncode == 5
    assert message in r.stderr.decode()
    before = used_ledger.read_bytes()
    r = dpcli(*release_args(work, "new.csv", "--no-reuse"))
    assert r.returncode == 5
    assert used_ledger.read_bytes() == before
    assert not (work / "new.csv").exists()


def test_torn_last_line_is_detected(used_ledger: Path) -> None:
    data = used_ledger.read_bytes()
    used_ledger.write_bytes(data[: len(data) - 20])
    r = dpcli("ledger", "verify", "--ledger", str(used_ledger))
    assert r.returncode == 5
    assert "the last record is torn" in r.stderr.decode()


def test_rewritten_chain_consistent_hashes_but_wrong_head_is_detected(used_ledger: Path, work: Path) -> None:
    """An attacker rewrites a spend and recomputes every hash: the chain is self-consistent, the head is not."""
    import hashlib

    recs = records(used_ledger)
    recs[1]["epsilon"] = "0.01"
    prev = "0" * 64
    lines = []
    for rec in recs:
        rec.pop("hash")
        rec["prev"] = prev
        prev = hashlib.sha256(canonical(rec)).hexdigest()
        lines.append(json.dumps({**rec, "hash": prev}, sort_keys=True, separators=(",", ":")))
    used_ledger.write_text("\n".join(lines) + "\n")
    r = dpcli("ledger", "verify", "--ledger", str(used_ledger))
    assert r.returncode == 5
    assert "older than its last recorded head" in r.stderr.decode()
    # and a published release's metadata names a head the rewritten chain does not contain
    (work / "ledger.jsonl.head").unlink()
    r = dpcli("ledger", "verify", "--ledger", str(used_ledger), "--against", str(work / "o0.csv.meta.json"))
    assert r.returncode == 5
    assert "does not contain head" in r.stderr.decode()


def test_older_copy_of_the_ledger_is_detected(work: Path) -> None:
    led = work / "ledger.jsonl"
    assert dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", str(led)).returncode == 0
    old = led.read_bytes()
    assert dpcli(*release_args(work, "o.csv")).returncode == 0
    led.write_bytes(old)  # roll back: the spend is gone
    r = dpcli("ledger", "verify", "--ledger", str(led))
    assert r.returncode == 5
    assert "rolled back or replaced with an older copy" in r.stderr.decode()
    r = dpcli(*release_args(work, "again.csv", "--no-reuse"))
    assert r.returncode == 5
    # without the head file, the release's published metadata still exposes the rollback
    (work / "ledger.jsonl.head").unlink()
    r = dpcli("ledger", "verify", "--ledger", str(led), "--against", str(work / "o.csv.meta.json"))
    assert r.returncode == 5


def test_hmac_key_makes_the_chain_unforgeable(work: Path) -> None:
    led = work / "ledger.jsonl"
    key = {"DPCLI_LEDGER_KEY": "s3cret-key"}
    assert dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", str(led), extra_env=key).returncode == 0
    assert dpcli(*release_args(work, "o.csv"), extra_env=key).returncode == 0
    assert dpcli("ledger", "verify", "--ledger", str(led), extra_env=key).returncode == 0
    # without the key the keyed ledger is refused, not silently trusted
    r = dpcli("ledger", "verify", "--ledger", str(led))
    assert r.returncode == 5
    assert "set DPCLI_LEDGER_KEY" in r.stderr.decode()
    # an editor without the key recomputes plain sha256 hashes: refused
    import hashlib

    recs = records(led)
    prev = "0" * 64
    lines = []
    for rec in recs:
        rec.pop("hash")
        rec.pop("mac", None)
        rec["prev"] = prev
        if rec["type"] == "cap":
            rec["epsilon"] = "100"
        prev = hashlib.sha256(canonical(rec)).hexdigest()
        lines.append(json.dumps({**rec, "hash": prev}, sort_keys=True, separators=(",", ":")))
    led.write_text("\n".join(lines) + "\n")
    (work / "ledger.jsonl.head").unlink()
    r = dpcli("ledger", "verify", "--ledger", str(led), extra_env=key)
    assert r.returncode == 5
    assert "not authenticated with the ledger key" in r.stderr.decode()
    # and the key from a file works the same way
    (work / "key").write_text("s3cret-key\n")
    r = dpcli(*release_args(work, "o2.csv"), extra_env={"DPCLI_LEDGER_KEY_FILE": str(work / "key")})
    assert r.returncode == 5


# -- caps ----------------------------------------------------------------------------------------------------------


def test_caps_lower_freely_raise_only_with_flag(work: Path) -> None:
    led = str(work / "ledger.jsonl")
    assert dpcli("budget", "set", "toy", "--epsilon", "2", "--ledger", led).returncode == 0
    assert dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", led).returncode == 0
    r = dpcli("budget", "set", "toy", "--epsilon", "3", "--ledger", led)
    assert r.returncode == 2
    assert "needs --raise" in r.stderr.decode()  # the CLI's hint (dpcli/errors.py)
    assert dpcli("budget", "set", "toy", "--epsilon", "3", "--raise", "--ledger", led).returncode == 0
    caps = [x for x in records(Path(led)) if x["type"] == "cap"]
    assert [(c["epsilon"], c.get("raise", False)) for c in caps] == [("2", False), ("1", False), ("3", True)]


def test_refusal_names_requested_remaining_and_difference(work: Path) -> None:
    led = str(work / "ledger.jsonl")
    assert dpcli("budget", "set", "toy", "--epsilon", "0.3", "--ledger", led).returncode == 0
    assert dpcli(*release_args(work, "a.csv")).returncode == 0
    r = dpcli(*release_args(work, "b.csv", "--no-reuse"))
    assert r.returncode == 4
    assert r.stderr.decode() == (
        "dpcli: error: budget refused for dataset 'toy': requested ε=0.25, remaining ε=0.05, short by 0.2\n"
    )


# -- re-runs: keyed on the release id, never on the input's bytes ---------------------------------------------------


def spends(led: Path) -> list[dict]:
    return [x for x in records(led) if x["type"] == "spend"]


def test_rerun_under_a_release_id_returns_the_first_table_and_never_reads_the_input(work: Path) -> None:
    led = work / "ledger.jsonl"
    assert dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", str(led)).returncode == 0
    assert dpcli(*release_args(work, "a.csv", "--release-id", "2026-11-23")).returncode == 0
    (work / "data.csv").write_bytes(b"\xff\xfe not even a header")  # unreadable now: never opened by the re-run
    r = dpcli(*release_args(work, "b.csv", "--release-id", "2026-11-23", "--json"))
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stderr)
    assert summary["reused"] is True
    assert summary["epsilon_spent"] == "0"
    assert summary["release_id"] == "2026-11-23"
    assert summary["epsilon_remaining"] == "0.75"
    assert (work / "a.csv").read_bytes() == (work / "b.csv").read_bytes()
    assert len(spends(led)) == 1
    # the same id is read from $DPCLI_RELEASE_ID too
    r = dpcli(*release_args(work, "c.csv"), extra_env={"DPCLI_RELEASE_ID": "2026-11-23"})
    assert r.returncode == 0
    assert (work / "c.csv").read_bytes() == (work / "a.csv").read_bytes()
    assert len(spends(led)) == 1


def test_rerun_outcome_does_not_depend_on_whether_the_data_changed(work: Path) -> None:
    """Finding 2 of issue 8: reuse used to be keyed on the input's bytes, so a re-run told whether a row changed."""
    led = work / "ledger.jsonl"
    assert dpcli("budget", "set", "toy", "--epsilon", "0.75", "--ledger", str(led)).returncode == 0
    assert dpcli(*release_args(work, "a.csv")).returncode == 0
    same = dpcli(*release_args(work, "b.csv", "--json"))  # identical data, no id: a new release
    (work / "data.csv").write_text((work / "data.csv").read_text().replace("\n3\n", "\n4\n"))
    changed = dpcli(*release_args(work, "c.csv", "--json"))
    assert same.returncode == changed.returncode == 0
    a, b = json.loads(same.stderr), json.loads(changed.stderr)
    assert a["reused"] is b["reused"] is False
    assert a["epsilon_spent"] == b["epsilon_spent"] == "0.25"
    assert len(spends(led)) == 3
    # the budget is gone: a fourth run is refused whatever the data holds, and a paid id is served whatever it holds
    assert dpcli(*release_args(work, "d.csv")).returncode == 4


def test_same_id_with_an_edited_spec_is_the_same_release_and_a_named_spec_another(work: Path) -> None:
    """Issue 25: a release id is paid for once per dataset and spec `name:` (tests/run/test_rerun_key.py has the
    rest): an edit that keeps the spec's meaning is the same release; another name is another release."""
    led = work / "ledger.jsonl"
    assert dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", str(led)).returncode == 0
    assert dpcli(*release_args(work, "a.csv", "--release-id", "v1")).returncode == 0
    (work / "spec.yaml").write_text(SPEC.replace("EPS", "0.25") + "# edited\n")
    r = dpcli(*release_args(work, "b.csv", "--release-id", "v1", "--json"))
    assert r.returncode == 0
    assert json.loads(r.stderr)["reused"] is True
    assert len(spends(led)) == 1
    (work / "spec.yaml").write_text("name: other\n" + SPEC.replace("EPS", "0.25"))
    r = dpcli(*release_args(work, "c.csv", "--release-id", "v1", "--json"))
    assert r.returncode == 0
    assert json.loads(r.stderr)["reused"] is False
    assert len(spends(led)) == 2


def test_concurrent_runs_under_one_id_spend_once_and_print_the_same_table(work: Path) -> None:
    led = str(work / "ledger.jsonl")
    assert dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", led).returncode == 0
    procs = [
        subprocess.Popen([sys.executable, "-m", "dpcli", *release_args(work, f"out{i}.csv", "--release-id", "ci-42")],
                         env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for i in range(8)
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]  # read to the end and closed (no ResourceWarning)
    assert [p.returncode for p in procs] == [0] * 8, errors
    assert len(spends(Path(led))) == 1
    outputs = {(work / f"out{i}.csv").read_bytes() for i in range(8)}
    assert len(outputs) == 1


def test_paid_id_whose_table_is_missing_or_altered_fails_and_never_draws_again(work: Path) -> None:
    led = work / "ledger.jsonl"
    assert dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", str(led)).returncode == 0
    assert dpcli(*release_args(work, "a.csv", "--release-id", "x")).returncode == 0
    stored = next((work / "ledger.jsonl.releases").iterdir())
    stored.write_bytes(stored.read_bytes().replace(b'"value":["', b'"value":["1'))
    r = dpcli(*release_args(work, "b.csv", "--release-id", "x"))
    assert r.returncode == 5
    assert "does not match its record" in r.stderr.decode()
    stored.unlink()
    r = dpcli(*release_args(work, "c.csv", "--release-id", "x"))
    assert r.returncode == 5
    assert "missing from the release store" in r.stderr.decode()
    assert "never drawn again" in r.stderr.decode()
    assert len(spends(led)) == 1
    assert not (work / "b.csv").exists()
    assert not (work / "c.csv").exists()


def test_no_reuse_is_accepted_and_changes_nothing(work: Path) -> None:
    led = work / "ledger.jsonl"
    assert dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", str(led)).returncode == 0
    assert dpcli(*release_args(work, "a.csv", "--release-id", "r", "--no-reuse")).returncode == 0
    r = dpcli(*release_args(work, "b.csv", "--release-id", "r", "--no-reuse", "--json"))
    assert r.returncode == 0
    assert json.loads(r.stderr)["reused"] is True
    assert len(spends(led)) == 1


@pytest.mark.parametrize("bad", ["", "-x", "a b", "a/b", "x" * 129, "é"])
def test_malformed_release_ids_are_usage_errors(work: Path, bad: str) -> None:
    r = dpcli(*release_args(work, "a.csv", "--release-id", bad))
    assert r.returncode == 2
    assert "release id" in r.stderr.decode()


# -- the neighbour relation is pinned per dataset -------------------------------------------------------------------


def test_a_release_under_another_relation_is_refused(work: Path) -> None:
    led = work / "ledger.jsonl"
    assert dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", str(led)).returncode == 0
    assert dpcli(*release_args(work, "a.csv")).returncode == 0  # add_remove: pins the dataset
    (work / "spec.yaml").write_text(SPEC.replace("EPS", "0.25").replace("add_remove", "replace"))
    before = led.read_bytes()
    r = dpcli(*release_args(work, "b.csv"))
    assert r.returncode == 2
    assert "accounted under unit 'row' with neighbours 'add_remove'" in r.stderr.decode()
    assert led.read_bytes() == before
    assert not (work / "b.csv").exists()
    show = json.loads(dpcli("budget", "show", "--json", "--ledger", str(led)).stdout)
    assert (show[0]["unit"], show[0]["neighbours"]) == ("row", "add_remove")


def test_budget_set_pins_the_relation_before_any_release(work: Path) -> None:
    led = str(work / "ledger.jsonl")
    assert dpcli("budget", "set", "toy", "--epsilon", "1", "--neighbours", "replace", "--ledger", led).returncode == 0
    r = dpcli(*release_args(work, "a.csv"))  # the spec says add_remove
    assert r.returncode == 2
    assert "neighbours 'replace'" in r.stderr.decode()
    r = dpcli("budget", "set", "toy", "--epsilon", "1", "--neighbours", "add_remove", "--ledger", led)
    assert r.returncode == 2
    assert "accounted under" in r.stderr.decode()
    assert dpcli("budget", "set", "toy", "--epsilon", "2", "--raise", "--ledger", led).returncode == 0  # keeps the pin
    (work / "spec.yaml").write_text(SPEC.replace("EPS", "0.25").replace("add_remove", "replace"))
    assert dpcli(*release_args(work, "b.csv")).returncode == 0


# -- paths ---------------------------------------------------------------------------------------------------------


def test_symlinked_ledger_and_ledger_as_output_or_input_are_refused(work: Path) -> None:
    led = work / "ledger.jsonl"
    assert dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", str(led)).returncode == 0
    (work / "link.jsonl").symlink_to(led)
    r = dpcli("release", str(work / "spec.yaml"), "-i", str(work / "data.csv"), "-o", str(work / "o.csv"),
              "--ledger", str(work / "link.jsonl"))
    assert r.returncode == 2
    assert "symbolic link" in r.stderr.decode()
    before = led.read_bytes()
    r = dpcli("release", str(work / "spec.yaml"), "-i", str(work / "data.csv"), "-o", str(led), "--ledger", str(led))
    assert r.returncode == 2
    assert "is the ledger" in r.stderr.decode()
    r = dpcli("release", str(work / "spec.yaml"), "-i", str(led), "-o", str(work / "o.csv"), "--ledger", str(led))
    assert r.returncode == 2
    assert "is the input file" in r.stderr.decode()
    assert led.read_bytes() == before


def test_library_ledger_api_exact_arithmetic(tmp_path: Path) -> None:
    book = JsonlLedger(tmp_path / "l.jsonl")
    book.set_cap("d", Cap(Fraction(3, 10), Fraction(0)), allow_raise=False)
    book.spend("d", Budget(Fraction(1, 10)))
    book.spend("d", Budget(Fraction(2, 10)))
    status = book.status("d")
    assert status is not None
    assert status.remaining == 0
    with pytest.raises(BudgetRefused) as exc:
        book.spend("d", Budget(Fraction(1, 10**9)))
    assert exc.value.exit_code == 4
    with pytest.raises(UsageError):
        book.set_cap("d", Cap(Fraction(1), Fraction(0)), allow_raise=False)
    (tmp_path / "l.jsonl").write_text("not json\n")
    with pytest.raises(LedgerError):
        JsonlLedger(tmp_path / "l.jsonl").records()


def test_deleted_ledger_with_its_head_left_is_detected(work: Path) -> None:
    led = work / "ledger.jsonl"
    assert dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", str(led)).returncode == 0
    led.unlink()
    r = dpcli("ledger", "verify", "--ledger", str(led))
    assert r.returncode == 5
    assert "rolled back or replaced" in r.stderr.decode()


READER = textwrap.dedent(
    """
    import sys
    from dpcli.ledger import JsonlLedger
    from dpcli.errors import LedgerError
    reader, failures = JsonlLedger(sys.argv[1]), 0
    for _ in range(int(sys.argv[2])):
        try:
            reader.records()
        except LedgerError:
            failures += 1
    print(failures)
    """
)
WRITER = "import sys\nfrom fractions import Fraction\nfrom dpcli.core.accounting import Budget\n" \
    "from dpcli.ledger import JsonlLedger\n" \
    "w = JsonlLedger(sys.argv[1])\nfor _ in range(int(sys.argv[2])): w.spend('d', Budget(Fraction(1, 1000)))\n"


@pytest.mark.slow  # a soak test (many processes, or 10^7 values): make test-slow and .ci/run run it
def test_readers_never_see_a_half_moved_head(tmp_path: Path) -> None:
    """A writer process and two reader processes: every read is a consistent chain (no false rollback from a head
    file moved between reading the records and reading the head, no torn line)."""
    led = tmp_path / "l.jsonl"
    JsonlLedger(led).set_cap("d", Cap(Fraction(1000), Fraction(0)), allow_raise=False)
    run = [sys.executable, "-c"]
    writer = subprocess.Popen([*run, WRITER, str(led), "300"], env=env())
    readers = [subprocess.Popen([*run, READER, str(led), "1500"], stdout=subprocess.PIPE, env=env()) for _ in range(2)]
    assert writer.wait(timeout=300) == 0
    failures = [int(r.communicate(timeout=300)[0]) for r in readers]
    assert failures == [0, 0]
    assert len(JsonlLedger(led).records()) == 301


def test_the_ledger_takes_exact_typed_budgets_and_writes_the_records_it_always_wrote(tmp_path: Path) -> None:
    """Issue 24: the ledger's interface takes a Budget (exact, non-negative) and a Purchase/Delivery; the records on
    disk keep their fields and texts (old ledgers verify, new ones read as before)."""
    with pytest.raises(TypeError):
        Budget(0.1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Budget(Fraction(-1, 10))
    book = JsonlLedger(tmp_path / "L.jsonl")
    book.set_cap("d", Cap(Fraction(100), Fraction(1, 10**6)), allow_raise=False)
    with pytest.raises(TypeError):  # a spend's δ is its selections'; a cap's δ is the Cap's, not a spend's
        Budget(Fraction(1, 10), delta=Fraction(1, 10**6))  # type: ignore[call-arg]
    spend = book.spend("d", Budget(Fraction(1, 10), rho=Fraction(1, 3), selection_delta=Fraction(1, 10**7)),
                       Purchase("r1", "k1", "s1", "row", "replace", ("a", "b"), "randomize"))
    done = book.mark_released("k1", Delivery("r1", "t1", "o1", (RandomizedColumn("a", Fraction(1, 2), "h1"),)))
    assert {k: v for k, v in spend.fields.items() if k not in ("time", "prev")} == {
        "seq": 1, "type": "spend", "dataset": "d", "epsilon": "0.1", "rho": "0.333333333333333334",
        "delta": "0.0000001", "command": "randomize", "release_id": "r1", "release_key": "k1", "spec_sha256": "s1",
        "unit": "row", "neighbours": "replace", "statistics": ["a", "b"],
    }
    assert {k: v for k, v in done.fields.items() if k not in ("time", "prev")} == {
        "seq": 2, "type": "released", "release_key": "k1", "release_id": "r1", "table_sha256": "t1",
        "output_sha256": "o1", "randomized": [{"column": "a", "epsilon": "0.5", "keys_sha256": "h1"}],
    }
    assert [r.as_dict() for r in JsonlLedger(tmp_path / "L.jsonl").records()][1:] == [spend.as_dict(), done.as_dict()]
