"""The ledger's authenticated head (issue 9): with DPCLI_LEDGER_KEY a rollback with a forged head is detected, a 0.2
head is sealed by the operator, a new keyed ledger is authenticated from its first record; a published head tells a
mistyped path from a rollback. Through the real `dpcli` command or the library against real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.core.accounting import Cap
from dpcli.errors import LedgerError, UsageError
from dpcli.ledger import JsonlLedger
from tests.helpers import clean_env, run_in_process
from tests.ledger.test_hardening import KEY, lines, one_line_error


def keyed_ledger(work: Path) -> Path:
    led = work / "L.jsonl"
    assert run_in_process("budget", "set", "toy", "--epsilon", "1", "--ledger", led, env=KEY).returncode == 0
    for i in range(2):
        r = run_in_process("release", work / "spec.yaml", "-i", work / "data.csv", "-o", work / f"o{i}.csv",
                      "--ledger", led, env=KEY)
        assert r.returncode == 0, r.stderr
    return led


def test_a_rollback_with_a_forged_head_is_detected_with_a_key(work: Path) -> None:
    led = keyed_ledger(work)
    assert run_in_process("ledger", "verify", "--ledger", led, env=KEY).returncode == 0
    genuine = led.read_text().splitlines(keepends=True)
    # roll back to the first spend (a genuine prefix: every record's MAC is valid) and write the head it would have
    led.write_text("".join(genuine[:2]))
    seq1 = json.loads(genuine[1])
    (work / "L.jsonl.head").write_text(json.dumps({"seq": 1, "hash": seq1["hash"]}) + "\n")
    one_line_error(run_in_process("ledger", "verify", "--ledger", led, env=KEY), 5,
                   "not authenticated with the ledger key")
    (work / "L.jsonl.head").write_text(json.dumps({"seq": 1, "hash": seq1["hash"], "mac": "0" * 64}) + "\n")
    one_line_error(run_in_process("budget", "show", "--ledger", led, env=KEY), 5, "not authenticated")
    (work / "L.jsonl.head").unlink()
    one_line_error(run_in_process("ledger", "verify", "--ledger", led, env=KEY), 5, "head file", "is missing")
    r = run_in_process("release", work / "spec.yaml", "-i", work / "data.csv", "-o", work / "again.csv",
                       "--ledger", led, env=KEY)
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
    assert run_in_process("ledger", "verify", "--ledger", led, env=KEY).returncode == 0


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
    assert run_in_process("budget", "set", "toy", "--epsilon", "1", "--ledger", led).returncode == 0
    r = run_in_process("ledger", "verify", "--ledger", led, "--against", work / "o.csv.meta.jsn")
    one_line_error(r, 2, "cannot read")
