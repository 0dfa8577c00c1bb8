"""Faults of a series' piece store (issue 26): a full disk as a piece is stored, and a kill between a piece's store
and its record. Either way the piece is not recorded, so it was never used: the run ends with exit 5 naming the
series' charge (or is killed), the ledger verifies, and the next run of the period draws the piece afresh and
releases it, spending nothing more. The faults are injected around the real store function, which still runs
(as tests/fault_driver.py does for the release path)."""

from __future__ import annotations

import errno
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from dpcli.errors import SpentThenFailed
from dpcli.ledger import JsonlLedger, open_ledger
from dpcli.run.series import release_period
from tests.helpers import clean_env
from tests.run.test_series import AFTER, ROWS, SPEC


@pytest.fixture
def work(tmp_path: Path) -> Path:
    from fractions import Fraction

    from dpcli.core.accounting import Cap

    (tmp_path / "series.yaml").write_text(SPEC)
    (tmp_path / "admissions.csv").write_text("admitted,ward,stay\n" + "".join(f"{d},{w},{s}\n" for d, w, s in ROWS))
    open_ledger(tmp_path / "ledger.jsonl").set_cap("admissions", Cap(Fraction(3), Fraction(0)), allow_raise=False)
    return tmp_path

KILL_AFTER_STORE = """
import os, signal, sys
from datetime import UTC, datetime
from dpcli.ledger import JsonlLedger
from dpcli.run.series import release_period
real = JsonlLedger.store_table
def store_then_die(self, key, data):
    real(self, key, data)
    if data.startswith(b"[{"):  # a piece (the charge's manifest is an object)
        os.kill(os.getpid(), signal.SIGKILL)
JsonlLedger.store_table = store_then_die
release_period(sys.argv[1], period=int(sys.argv[2]), output=sys.argv[3], now=datetime(2027, 2, 1, tzinfo=UTC))
"""


def pieces(work: Path) -> list[str]:
    records = open_ledger(work / "ledger.jsonl").records()
    return [p["id"] for r in records if r.type == "pieces" for p in r.get("pieces")]


def test_a_full_disk_as_a_piece_is_stored_is_exit_5_and_the_piece_is_drawn_on_the_next_run(
    work: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    release_period(work / "series.yaml", period=1, output=work / "p1.csv", now=AFTER)  # the charge
    real = JsonlLedger.store_table

    def full(self: JsonlLedger, key: str, data: bytes) -> Any:
        if data.startswith(b"[{"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, key, data)

    monkeypatch.setattr(JsonlLedger, "store_table", full)
    with pytest.raises(SpentThenFailed, match=r"series was paid for by ledger .* record 1") as info:
        release_period(work / "series.yaml", period=2, output=work / "p2.csv", now=AFTER)
    assert info.value.exit_code == 5
    assert not (work / "p2.csv").exists()
    assert pieces(work) == ["p1"]
    monkeypatch.undo()
    done = release_period(work / "series.yaml", period=2, output=work / "p2.csv", now=AFTER)
    assert not done.charged
    assert pieces(work) == ["p1", "p2"]


@pytest.mark.slow
def test_a_kill_between_a_piece_store_and_its_record_leaves_it_unrecorded_and_drawn_again(work: Path) -> None:
    r = subprocess.run([sys.executable, "-c", KILL_AFTER_STORE, str(work / "series.yaml"), "1", str(work / "p1.csv")],
                       capture_output=True, env=clean_env(), cwd=work, timeout=120)
    assert r.returncode == -9
    records = open_ledger(work / "ledger.jsonl").records()  # verifies
    assert [r.type for r in records] == ["cap", "spend", "released"]  # charged; the piece stored, not recorded
    assert not (work / "p1.csv").exists()
    done = release_period(work / "series.yaml", period=1, output=work / "p1.csv",
                          now=datetime(2027, 2, 1, tzinfo=UTC))
    assert not done.charged
    assert pieces(work) == ["p1"]
