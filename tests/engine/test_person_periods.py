"""A series under a person unit (issue 26): each period's exact aggregates hold that period's rows only, on every
reader of the person path (CSV, quoted CSV, Parquet), and a person's rows are bounded after the period filter, so the
K rows kept in a period never depend on that person's rows in other periods."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl
import pytest

from dpcli.engine import aggregate
from dpcli.plan.series import make_series_plan
from dpcli.specs.load import load_spec

SPEC = """\
version: 1
dataset: visits
input: visits.FORMAT
privacy: {unit: {id: pid, max_rows: MAX, missing_id: drop}, neighbours: add_remove, epsilon: 1}
columns:
  ward: {type: category, categories: [a, b]}
CSV
statistics:
  - {name: n, kind: count}
  - {name: w, kind: histogram, column: ward}
series: {periods: 3, period: {column: day, start: 2027-01-01, every: 1 day}}
"""

# (day, ward, person): p1 has five rows on day 1 and one on day 2; rows with no period (blank, broken, after T)
ROWS = [
    *[("2027-01-01", "a", "p1")] * 5, ("2027-01-02", "b", "p1"),
    ("2027-01-01T10:00Z", "b", "p2"), ("2027-01-02", "a", "p2"), ("2027-01-03", "a", "p3"),
    ("", "a", "p4"), ("garbage", "b", "p4"), ("2027-01-04", "a", "p5"),
]


def _counts(tmp_path: Path, fmt: str, max_rows: int) -> list[int]:
    frame = pl.DataFrame(ROWS, schema=["day", "ward", "pid"], orient="row")
    if fmt == "parquet":
        frame.write_parquet(tmp_path / "visits.parquet")
    else:
        frame.write_csv(tmp_path / "visits.csv")
    csv = "csv: {quoted_line_breaks: true}" if fmt == "quoted" else ""
    text = SPEC.replace("FORMAT", "parquet" if fmt == "parquet" else "csv").replace("MAX", str(max_rows))
    (tmp_path / "s.yaml").write_text(text.replace("CSV\n", csv + "\n" if csv else ""))
    plan = make_series_plan(load_spec(tmp_path / "s.yaml")).main
    path = tmp_path / ("visits.parquet" if fmt == "parquet" else "visits.csv")
    return [int(aggregate(dataclasses.replace(plan, periods=frozenset({t})), path)[0].counts.sum())
            for t in (1, 2, 3)]


@pytest.mark.parametrize("fmt", ["csv", "quoted", "parquet"])
def test_each_period_counts_its_own_rows_under_a_person_unit(tmp_path: Path, fmt: str) -> None:
    assert _counts(tmp_path, fmt, max_rows=10) == [6, 2, 1]


def test_a_persons_rows_are_bounded_within_the_period(tmp_path: Path) -> None:
    # K = 1: p1 keeps one of its day-1 rows in period 1, and its day-2 row in period 2 (bounded after the filter;
    # bounded before it, p1's one kept row would be a day-1 row and period 2 would lose it)
    assert _counts(tmp_path, "csv", max_rows=1) == [2, 2, 1]
