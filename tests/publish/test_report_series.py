"""``dpcli report`` of a series period's table (issue 26): the series' facts (horizon, design, the one charge and its
record, how far it has gone, what the unit protects), each linear statistic drawn as a time plot over the periods
released up to this one, from the ledger's frozen tables (released values only: never a later period, never one not
released), and the Markdown summary of each period appended once per period."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest

from dpcli.core.accounting import Cap
from dpcli.errors import LedgerError
from dpcli.ledger import open_ledger
from dpcli.ledger.base import period_key
from dpcli.publish.report import make_report
from dpcli.publish.report_data import load
from dpcli.run.series import release_period
from tests.run.test_series import AFTER, ROWS, SPEC

# the series' spec of tests/run/test_series.py with fewer statistics (each one drawn costs the report ~0.1 s): a
# count, a histogram and a median (not linear: no time plot)
SHORT = "\n".join(line for line in SPEC.splitlines() if not line.startswith(("  - {name: s,", "  - {name: m,"))) + "\n"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "series.yaml").write_text(SHORT)
    (tmp_path / "admissions.csv").write_text("admitted,ward,stay\n" + "".join(f"{d},{w},{s}\n" for d, w, s in ROWS))
    open_ledger(tmp_path / "ledger.jsonl").set_cap("admissions", Cap(Fraction(3), Fraction(0)), allow_raise=False)
    return tmp_path


def period(work: Path, t: int) -> Path:
    release_period(work / "series.yaml", period=t, output=work / f"p{t}.csv", now=AFTER)
    return work / f"p{t}.csv"


def published(path: Path, statistic: str, span: str) -> list[tuple[int, float, float, float]]:
    table = pl.read_csv(path, infer_schema=False).filter((pl.col("statistic") == statistic) & (pl.col("span") == span))
    return [(int(r["period"]), float(r["value"]), float(r["ci_low"]), float(r["ci_high"]))
            for r in table.iter_rows(named=True)]


def plotted(points: list) -> list[tuple[int, float, float, float]]:  # type: ignore[type-arg]
    return [(p.period, p.value, p.ci_low, p.ci_high) for p in points]


def test_a_period_is_drawn_with_the_periods_released_before_it_as_they_were_published(work: Path) -> None:
    tables = {t: period(work, t) for t in (1, 3)}  # period 2 not released yet
    data = make_report(tables[3], work / "r3.html", ledger=work / "ledger.jsonl", summary_md=work / "sum.md")
    series = data.series
    assert series is not None
    assert (series.period, series.periods, series.design, series.charge_record) == (3, 3, "per_period", 1)
    assert series.released == (1, 3)
    n = series.points["n"]["all rows"]
    assert plotted(n["period"]) == published(tables[1], "n", "period") + published(tables[3], "n", "period")
    assert plotted(series.points["w"]["b"]["period"]) == [
        *published(tables[1], "w", "period")[1:], *published(tables[3], "w", "period")[1:]]
    assert "q" not in series.points  # a median is not linear: no time plot
    page = (work / "r3.html").read_text()
    for words in ("period 3 of 3", "ε=1</b> once for all its periods (ledger record 1)", "2 of 3 periods are "
                  "released (1, 3)", "a patient with 50 visits spends 50 times the budget", "all rows · period 3"):
        assert words in page, words
    assert page.count("<figure class='plot time'") == 2  # n, w
    summary = (work / "sum.md").read_text()
    assert "### dpcli release: admissions (series period 3 of 3, ledger record 1)" in summary
    assert "charged once (ledger record 1) for all its 3 periods" in summary
    assert "2 of 3 periods released" in summary

    # period 2 released now: its table (period 1's too) has the running totals; period 1's report shows no later one
    tables[2] = period(work, 2)
    data = make_report(tables[2], work / "r2.html", ledger=work / "ledger.jsonl", summary_md=work / "sum.md")
    assert data.series is not None
    n = data.series.points["n"]["all rows"]
    assert plotted(n["period"]) == published(tables[1], "n", "period") + published(tables[2], "n", "period")
    assert plotted(n["to_date"]) == published(tables[1], "n", "to_date") + published(tables[2], "n", "to_date")
    assert "all rows · total to period 2" in (work / "r2.html").read_text()
    from dpcli.publish.report_series import series_view  # new with the series' report (the test fails above first)

    first = series_view(load(tables[1]), open_ledger(work / "ledger.jsonl"))  # the report's data, not drawn
    assert first is not None
    assert [p.period for p in first.points["n"]["all rows"]["period"]] == [1]
    # one summary per period, though every period names the series' one charge
    assert (work / "sum.md").read_text().count("### dpcli release: admissions (series period") == 2


def test_without_a_ledger_the_period_is_drawn_alone_and_says_so(work: Path) -> None:
    period(work, 1)
    table = period(work, 2)
    data = make_report(table, work / "r.html")
    assert data.series is not None
    assert data.series.released is None
    assert [p.period for p in data.series.points["n"]["all rows"]["period"]] == [2]
    page = (work / "r.html").read_text()
    assert "no ledger was given: the plot shows this period alone" in page
    assert "how many periods are released is not known here" in page


def test_an_altered_frozen_table_is_exit_5(work: Path) -> None:
    period(work, 1)
    table = period(work, 2)
    charge = next(r for r in open_ledger(work / "ledger.jsonl").records() if r.type == "spend")
    stored = work / "ledger.jsonl.releases" / f"{period_key(str(charge.get('release_key')), 1)}.json"
    stored.write_bytes(stored.read_bytes().replace(b"1", b"2", 1))
    with pytest.raises(LedgerError, match="frozen table of period 1"):
        make_report(table, work / "r.html", ledger=work / "ledger.jsonl")
