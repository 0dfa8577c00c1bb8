"""``dpcli release --period N`` (issue 26) from the command line: the exit codes of a series' refusals, the run's
lines (the one charge, then nothing spent), ``dpcli plan``'s series section, ``budget show`` / ``ledger show``
progress; and two processes releasing one period at once drawing its piece once (slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import clean_env, run_in_process
from tests.run.test_series import ROWS, SPEC


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "series.yaml").write_text(SPEC)
    (tmp_path / "admissions.csv").write_text("admitted,ward,stay\n" + "".join(f"{d},{w},{s}\n" for d, w, s in ROWS))
    r = run_in_process("budget", "set", "admissions", "--epsilon", "3", "--ledger", tmp_path / "ledger.jsonl")
    assert r.returncode == 0, r.stderr
    return tmp_path


def release(work: Path, *args: object) -> subprocess.CompletedProcess:
    return run_in_process("release", work / "series.yaml", "--allow-unfinished", *args, cwd=work)


def test_periods_from_the_command_line(work: Path) -> None:
    first = release(work, "--period", "2", "-o", "p2.csv")
    assert first.returncode == 0, first.stderr
    assert b"charged the series \xce\xb5=1, once for all its periods" in first.stderr
    later = release(work, "--release-id", "2027-01-01", "-o", "p1.csv")
    assert later.returncode == 0
    assert b"spent nothing: the series was charged by ledger record 1" in later.stderr
    again = release(work, "--period", "2", "-o", "again.csv", "--json")
    summary = json.loads(again.stderr)
    assert (summary["series_period"], summary["reused"], summary["epsilon_spent"]) == (2, True, "0")
    assert (work / "again.csv").read_bytes() == (work / "p2.csv").read_bytes()
    shown = run_in_process("budget", "show", "--ledger", work / "ledger.jsonl")
    assert b"2 of 3 periods released (1-2); 2 piece(s) drawn" in shown.stdout
    shown = run_in_process("budget", "show", "--ledger", work / "ledger.jsonl", "--json")
    assert json.loads(shown.stdout)[0]["series"][0]["released"] == [1, 2]
    ledger = run_in_process("ledger", "show", "--ledger", work / "ledger.jsonl")
    assert b"(a series of 3 periods, per_period)" in ledger.stdout
    assert b"series pieces p1" in ledger.stdout


@pytest.mark.parametrize(("args", "words"), [
    ((), b"releases one period per run"),
    (("--period", "4"), b"start the next series with a new spec `name:`"),
    (("--period", "1", "--release-id", "2027-01-02"), b"disagree"),
])
def test_refusals_are_exit_2(work: Path, args: tuple[str, ...], words: bytes) -> None:
    r = release(work, *args, "-o", "x.csv")
    assert r.returncode == 2, r.stderr
    assert words in r.stderr, r.stderr
    assert not (work / "x.csv").exists()


def test_an_unfinished_period_is_exit_2_without_the_flag(work: Path) -> None:
    r = run_in_process("release", work / "series.yaml", "--period", "3", "-o", "x.csv", cwd=work)
    assert r.returncode == 2
    assert b"has not ended" in r.stderr
    assert b"--allow-unfinished" in r.stderr


def test_plan_shows_the_series(work: Path) -> None:
    r = run_in_process("plan", work / "series.yaml", "--at-period", "2")
    assert r.returncode == 0
    text = r.stdout.decode()
    assert "series: 3 periods, design per_period; charged once, ε=1" in text
    assert "n at period 2: ±15 / ±3" in text  # one period's noise; the sum of two: wider, less than twice
    assert "unit row: a series protects one row" in text
    doc = json.loads(run_in_process("plan", work / "series.yaml", "--json").stdout)
    assert doc["series"]["reads"]["3"] == [3]


@pytest.mark.slow
@pytest.mark.parametrize("periods", [(1, 1), (1, 2)])
def test_two_processes_at_once_charge_once_and_draw_each_piece_once(work: Path, periods: tuple[int, int]) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-m", "dpcli", "release", str(work / "series.yaml"), "--period", str(t),
                          "--allow-unfinished", "-q", "-o", str(work / f"out{i}.csv")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(), cwd=work)
        for i, t in enumerate(periods)
    ]
    for p in procs:
        _out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    records = [json.loads(line) for line in (work / "ledger.jsonl").read_text().splitlines()]
    assert [r["type"] for r in records].count("spend") == 1
    drawn = [p["id"] for r in records if r["type"] == "pieces" for p in r["pieces"]]
    assert sorted(drawn) == [f"p{t}" for t in sorted(set(periods))]
    assert len(drawn) == len(set(drawn))
    if periods[0] == periods[1]:
        assert (work / "out0.csv").read_bytes() == (work / "out1.csv").read_bytes()


@pytest.mark.parametrize(("edit", "words"), [
    (("unit: row", "unit: {id: pid, max_rows: 3, missing_id: drop}"), b"needs a cap that renews per declared period"),
    (("dataset: admissions", "dataset: admissions\nengine: spark"), b"Spark does not filter rows"),
])
def test_check_refuses_what_a_series_run_refuses(work: Path, edit: tuple[str, str], words: bytes) -> None:
    spec = work / "series.yaml"
    text = spec.read_text().replace(*edit)
    if "pid" in edit[1]:  # a person unit: the sums and means name their clamp
        text = text.replace("kind: sum, column: stay}", "kind: sum, column: stay, clamp: row}")
        text = text.replace("kind: mean, column: stay}", "kind: mean, column: stay, clamp: row}")
    spec.write_text(text)
    # a person unit's refusal needs the ledger (a renewing cap would take it): `check --ledger` asks it
    checked = run_in_process("check", spec, "--ledger", work / "ledger.jsonl", cwd=work)
    released = release(work, "--period", "1", "-o", "x.csv")
    assert checked.returncode == released.returncode == 2
    assert words in checked.stderr
    assert words in released.stderr
