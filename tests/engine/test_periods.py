"""A series' rows in their periods (issue 26): each row's own field puts it in one period (UTC, offsets, naive =
UTC), a missing, unparseable or out-of-range field in none, and the exact aggregates are those of the chosen
periods' rows only, from a CSV and from a Parquet file (text dates and timestamps)."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import polars as pl
import pytest

from dpcli.engine import aggregate, aggregate_periods
from dpcli.engine.periods import period_index
from dpcli.errors import InputError, InternalError
from dpcli.plan.model import Plan, make_plan
from dpcli.specs.load import parse_spec
from tests.spec_builder import spec_text

PARIS = ZoneInfo("Europe/Paris")
COLUMNS = {"ward": "{type: category, categories: [a, b]}", "stay": "{type: int, bounds: [0, 30]}"}
STATS = ["{name: n, kind: count}", "{name: w, kind: count, by: [ward]}", "{name: s, kind: sum, column: stay}"]
ROWS = [
    ("2027-01-01", "a", 3),
    ("2027-01-01T23:59:59Z", "b", 5),
    ("2027-01-02T00:30+01:00", "a", 7),  # 2027-01-01T23:30Z: period 1
    ("2027-01-02", "b", 1),
    ("2027-01-02T10:00", "a", 2),  # naive: UTC
    ("", "a", 9),  # missing: no period
    ("garbage", "b", 9),  # unparseable: no period
    ("2027-01-04", "a", 4),  # after period T = 3: none
    ("2026-12-31T23:59:59Z", "a", 9),  # before the start: none
]
# per period: the count, the counts of wards a and b, the sum of stays
EXPECTED = {1: (3, [2, 1], 15), 2: (2, [1, 1], 3), 3: (0, [0, 0], 0)}


def daily_plan(periods: set[int] | None, csv: str | None = None) -> Plan:
    spec = parse_spec(spec_text(COLUMNS, STATS, csv=csv, extra=(
        "series: {periods: 3, period: {column: admitted, start: 2027-01-01, every: 1 day}}\n")))
    plan = make_plan(spec)
    return plan if periods is None else dataclasses.replace(plan, periods=frozenset(periods))


@pytest.fixture
def admissions(tmp_path: Path) -> Path:
    path = tmp_path / "admissions.csv"
    path.write_text("admitted,ward,stay\n" + "".join(f"{d},{w},{s}\n" for d, w, s in ROWS))
    return path


def answers(plan: Plan, path: Path) -> tuple[int, list[int], int]:
    count, wards, stays = aggregate(plan, path)
    return int(count.counts[0]), wards.counts.tolist(), int(stays.sums[0])  # type: ignore[index]


@pytest.mark.parametrize("period", [1, 2, 3])
def test_a_period_aggregates_its_own_rows_only(admissions: Path, period: int) -> None:
    assert answers(daily_plan({period}), admissions) == EXPECTED[period]


def test_periods_together_add_up(admissions: Path) -> None:
    assert answers(daily_plan({1, 2, 3}), admissions) == (5, [3, 2], 18)


@pytest.mark.parametrize("read", ["lines", "parquet", "quoted_line_breaks"])
def test_periods_grouped_in_one_read_are_each_periods_own(admissions: Path, tmp_path: Path, read: str) -> None:
    """aggregate_periods: one read, its rows grouped by period, gives each period what aggregate of that period
    alone gives (the line reader, a typed file, the RFC 4180 reader)."""
    path, csv = admissions, None
    if read == "parquet":
        path = tmp_path / "admissions.parquet"
        pl.read_csv(admissions, infer_schema=False).write_parquet(path)
    elif read == "quoted_line_breaks":
        csv = "quoted_line_breaks: true"
    grouped = aggregate_periods(daily_plan({1, 2, 3}, csv), path)
    assert sorted(grouped) == [1, 2, 3]
    for period, (count, wards, stays) in grouped.items():
        assert (int(count.counts[0]), wards.counts.tolist(), int(stays.sums[0])) == EXPECTED[period]  # type: ignore[index]
        alone = aggregate(daily_plan({period}, csv), path)
        assert [s.counts.tolist() for s in alone] == [s.counts.tolist() for s in (count, wards, stays)]


def test_a_series_plan_without_periods_is_never_aggregated(admissions: Path) -> None:
    with pytest.raises(InternalError, match="chosen periods"):
        aggregate(daily_plan(None), admissions)


def test_a_missing_period_field_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("admited,ward,stay\n2027-01-01,a,1\n")
    with pytest.raises(InputError, match=r"period field admitted .* \(did you mean 'admited'\?\)"):
        aggregate(daily_plan({1}), path)


@pytest.mark.parametrize("timestamps", [False, True])
def test_parquet_dates_and_timestamps(admissions: Path, tmp_path: Path, timestamps: bool) -> None:
    frame = pl.read_csv(admissions, infer_schema=False)
    if timestamps:  # the same instants as zoned timestamps (Paris: +01:00 in January), the others missing
        paris = [datetime(2027, 1, 1, 1, tzinfo=PARIS), datetime(2027, 1, 2, 0, 59, 59, tzinfo=PARIS),
                 datetime(2027, 1, 2, 0, 30, tzinfo=PARIS), datetime(2027, 1, 2, 1, tzinfo=PARIS),
                 datetime(2027, 1, 2, 11, tzinfo=PARIS), None, None, datetime(2027, 1, 4, 1, tzinfo=PARIS),
                 datetime(2027, 1, 1, 0, 59, 59, tzinfo=PARIS)]
        frame = frame.with_columns(pl.Series("admitted", paris, dtype=pl.Datetime("us", "Europe/Paris")))
    path = tmp_path / "admissions.parquet"
    frame.write_parquet(path)
    for period in (1, 2):
        assert answers(daily_plan({period}), path) == EXPECTED[period]


def test_hourly_periods_across_a_dst_change_are_fixed_lengths_of_utc_time() -> None:
    """Europe's spring change (2027-03-28, 02:00 CET -> 03:00 CEST): hourly periods from midnight +01:00 neither
    skip nor repeat; a local 03:30+02:00 is 01:30 UTC, the third hour."""
    spec = parse_spec(spec_text(extra="series: {periods: 48, period: {column: t, start: '2027-03-28T00:00+01:00', "
                                      "every: 1 hour}}\n"))
    assert spec.series is not None
    texts = ["2027-03-28", "2027-03-27T23:00:00Z", "2027-03-28T00:00+01:00", "2027-03-28 01:59:59.999999+01:00",
             "2027-03-28T03:30+02:00", "2027-02-30", "x", None, "2027-03-27T22:59:59Z", "2027-03-29T23:00Z",
             "2027-03-29T22:59:59.5Z", " 2027-03-28T05:00 "]
    got = pl.DataFrame({"t": texts}).select(period_index(spec.series, pl.col("t")).alias("p"))["p"].to_list()
    assert got == [2, 1, 1, 2, 3, None, None, None, None, None, 48, 7]


def test_an_index_field_holds_whole_numbers_1_to_t() -> None:
    spec = parse_spec(spec_text(extra="series: {periods: 5, period: {column: d}}\n"))
    assert spec.series is not None
    texts = ["1", "5", "6", "0", "-1", "2.0", " 3 ", None, "x"]
    got = pl.DataFrame({"d": texts}).select(period_index(spec.series, pl.col("d")).alias("p"))["p"].to_list()
    assert got == [1, 5, None, None, None, None, 3, None, None]
