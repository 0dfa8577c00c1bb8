"""A series' per-period input template (issue 26): ``input: data/adm-{date}.csv`` names one file per period, and the
run of a period opens the file of every period whose rows its pieces need (dpcli.run.series_input). Each row counts
in the period its own field says (a row in file p whose field says q counts in q when q is needed, else nowhere);
a missing file, or one file under two names, is refused before anything is read or spent (exit 3, naming it);
``--input`` overrides the template with one file; ``dpcli plan`` lists each run's files and ``--verbose`` says them.
Exact answers through the no-noise path, as tests/run/test_series.py's."""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest

from dpcli.core.accounting import Cap
from dpcli.errors import InputError
from dpcli.ledger import open_ledger
from dpcli.mechanisms.noise import exact_noisy
from dpcli.plan.series import make_series_plan
from dpcli.plan.tree import blocks_within
from dpcli.publish.writers import write_table
from dpcli.run.prepare import prepare
from dpcli.run.series import SERIES_RELEASE_ID, release_period, tree_table
from dpcli.specs.load import load_spec
from tests.helpers import run_in_process

SPEC = """\
version: 1
dataset: admissions
input: data/adm-{date}.csv
ledger: ledger.jsonl
privacy: {unit: row, neighbours: add_remove, epsilon: 1}
columns:
  ward: {type: category, categories: [a, b]}
  stay: {type: int, bounds: [0, 30]}
statistics:
  - {name: n, kind: count}
  - {name: w, kind: histogram, column: ward}
  - {name: s, kind: sum, column: stay}
series: {periods: 4, period: {column: admitted, start: 2027-01-01, every: 1 day}, design: DESIGN}
"""
# each period's file; some rows sit in another period's file: their own field decides where they count
FILES = {
    "2027-01-01": [("2027-01-01", "a", 3), ("2027-01-01T23:59:59Z", "b", 5),
                   ("2027-01-02T06:00", "a", 6),  # period 2's row in period 1's file
                   ("2027-01-03", "b", 10)],  # period 3's row in period 1's file
    "2027-01-02": [("2027-01-02", "b", 1), ("2027-01-02T10:00", "a", 2), ("garbage", "b", 9), ("", "a", 9),
                   ("2027-01-01T12:00", "a", 4)],  # period 1's row in period 2's file
    "2027-01-03": [("2027-01-03T12:00", "b", 30)],
    "2027-01-04": [("2027-01-04", "a", 4)],
}
AFTER = datetime(2027, 2, 1, tzinfo=UTC)


def _work(tmp_path: Path, design: str) -> Path:
    (tmp_path / "series.yaml").write_text(SPEC.replace("DESIGN", design))
    (tmp_path / "data").mkdir()
    for day, rows in FILES.items():
        (tmp_path / "data" / f"adm-{day}.csv").write_text(
            "admitted,ward,stay\n" + "".join(f"{d},{w},{s}\n" for d, w, s in rows))
    open_ledger(tmp_path / "ledger.jsonl").set_cap("admissions", Cap(Fraction(3), Fraction(0)), allow_raise=False)
    return tmp_path


def _period(work: Path, t: int, **kw: object):  # type: ignore[no-untyped-def]
    return release_period(work / "series.yaml", period=t, output=work / f"p{t}.csv", now=AFTER, **kw)


def _types(work: Path) -> list[str]:
    return [r.type for r in open_ledger(work / "ledger.jsonl").records()]


def test_a_tree_reads_each_needed_period_file_and_rows_count_by_their_own_field(tmp_path: Path) -> None:
    """Period 2 of a tree, first: its pieces b0.0, b0.1, b1.0 need periods 1 and 2, so the run reads both files. The
    period-2 row in file 1 counts in period 2, the period-1 row in file 2 in period 1, the period-3 row in file 1
    nowhere (period 3 is not needed); the exact tables of period 2 match plain sums over each period's rows."""
    from dpcli.run.series_input import SeriesInput

    work = _work(tmp_path, "running_totals")
    spec = load_spec(work / "series.yaml")
    splan = make_series_plan(spec)
    assert splan.blocks is not None
    ready = prepare(spec, output=work / "p2.csv", release_id=SERIES_RELEASE_ID)
    said: list[str] = []
    blocks = {}
    with SeriesInput(ready, None, [1, 2], 1 << 30, None, said.append) as rows:
        for b in blocks_within(2):
            plan = dataclasses.replace(splan.blocks, periods=frozenset(range(b.first, b.last + 1)))
            blocks[b] = exact_noisy(rows.aggregate(plan), plan)
    assert [int(blocks[b][0].counts[0]) for b in blocks_within(2)] == [3, 3, 6]  # b0.0, b0.1, b1.0
    assert any("adm-2027-01-01.csv" in m for m in said)
    assert any("adm-2027-01-02.csv" in m for m in said)
    assert not any("adm-2027-01-03.csv" in m for m in said)
    write_table(tree_table(splan, 2, blocks, None), work / "exact.csv", "csv")
    table = pl.read_csv(work / "exact.csv", infer_schema=False)

    def value(stat: str, span: str, ward: str | None = None) -> str:
        got = table.filter((pl.col("statistic") == stat) & (pl.col("span") == span))
        got = got.filter(pl.col("ward") == ward) if ward is not None else got.filter(pl.col("ward").is_null())
        return got["value"].item()

    assert (value("n", "period"), value("n", "to_date")) == ("3", "6")
    assert (value("s", "period"), value("s", "to_date")) == ("9", "21")  # 6 + 1 + 2; 3 + 5 + 4 + 9
    assert (value("w", "to_date", "a"), value("w", "to_date", "b")) == ("4", "2")


def test_a_period_run_needs_the_files_of_its_pieces_periods_and_refuses_a_missing_one_before_any_spend(
    tmp_path: Path,
) -> None:
    """Period 1 drawn; then period 2's run needs block b1.0 (periods 1..2): period 1's file is missing, so it is
    refused with exit 3 naming that file, before anything is read or drawn. Once period 2 is drawn, the day's file
    alone serves period 3 (its one new block, b0.2)."""
    work = _work(tmp_path, "running_totals")
    _period(work, 1)
    before = _types(work)
    (work / "data" / "adm-2027-01-01.csv").rename(work / "elsewhere.csv")
    with pytest.raises(InputError) as info:
        _period(work, 2)
    assert info.value.exit_code == 3
    assert "adm-2027-01-01.csv" in str(info.value)
    assert "period 1's file" in str(info.value)
    assert _types(work) == before  # no piece drawn, nothing recorded
    (work / "elsewhere.csv").rename(work / "data" / "adm-2027-01-01.csv")
    _period(work, 2)
    for day in ("2027-01-01", "2027-01-02"):
        (work / "data" / f"adm-{day}.csv").unlink()
    _period(work, 3)  # in order, its one missing block is b0.2: the day's file alone
    assert _types(work) == [*before, "pieces", "released", "pieces", "released"]


def test_the_first_period_missing_its_file_spends_nothing(tmp_path: Path) -> None:
    work = _work(tmp_path, "per_period")
    (work / "data" / "adm-2027-01-02.csv").unlink()
    with pytest.raises(InputError, match=r"adm-2027-01-02\.csv.*does not exist"):
        _period(work, 2)
    assert _types(work) == ["cap"]
    _period(work, 1)  # per_period: period 1's run reads period 1's file only
    assert _types(work)[1] == "spend"


def test_one_file_under_two_period_names_is_refused(tmp_path: Path) -> None:
    """Two period names for one file (a symlink) would count its rows twice in a block over both: exit 3."""
    work = _work(tmp_path, "running_totals")
    link = work / "data" / "adm-2027-01-02.csv"
    link.unlink()
    os.symlink(work / "data" / "adm-2027-01-01.csv", link)
    with pytest.raises(InputError, match="under another name"):
        _period(work, 2)
    assert _types(work) == ["cap"]


def test_input_overrides_the_template_with_one_file(tmp_path: Path) -> None:
    work = _work(tmp_path, "per_period")
    every = [row for rows in FILES.values() for row in rows]
    (work / "all.csv").write_text("admitted,ward,stay\n" + "".join(f"{d},{w},{s}\n" for d, w, s in every))
    for day in FILES:
        (work / "data" / f"adm-{day}.csv").unlink()
    said: list[str] = []
    done = _period(work, 3, input=work / "all.csv", progress=said.append)
    assert done.charged
    assert not any("template" in m for m in said)


def test_plan_lists_each_runs_files_check_accepts_the_template_and_verbose_names_them(tmp_path: Path) -> None:
    work = _work(tmp_path, "running_totals")
    plan = run_in_process("plan", work / "series.yaml", "--json")
    assert plan.returncode == 0, plan.stderr
    files = json.loads(plan.stdout)["series"]["files"]
    assert [Path(f).name for f in files["2"]] == ["adm-2027-01-01.csv", "adm-2027-01-02.csv"]  # b1.0's periods
    assert [Path(f).name for f in files["3"]] == ["adm-2027-01-03.csv"]
    text = run_in_process("plan", work / "series.yaml").stdout.decode()
    assert "2 files:" in text
    assert "adm-2027-01-02.csv" in text
    check = run_in_process("check", work / "series.yaml")
    assert check.returncode == 0, check.stderr
    run = run_in_process("release", work / "series.yaml", "--period", "1", "--allow-unfinished", "--output",
                         work / "p1.csv", "--verbose")
    assert run.returncode == 0, run.stderr
    assert "period 1's file: " in run.stderr.decode()
    assert "adm-2027-01-01.csv" in run.stderr.decode()


def test_the_output_may_not_be_a_period_file(tmp_path: Path) -> None:
    from dpcli.errors import UsageError

    work = _work(tmp_path, "per_period")
    target = work / "data" / "adm-2027-01-02.csv"
    before = target.read_bytes()
    with pytest.raises(UsageError, match="input"):
        release_period(work / "series.yaml", period=2, output=target, now=AFTER)
    assert target.read_bytes() == before
    assert _types(work) == ["cap"]
