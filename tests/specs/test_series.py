"""``series:`` (issue 26): the section's fields and its cross-field rules, each refusal with its reason."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dpcli.errors import SpecError
from dpcli.specs.load import parse_spec
from dpcli.specs.meaning import release_meaning
from tests.spec_builder import spec_text

DAILY = "series: {periods: 365, period: {column: admitted, start: 2027-01-01, every: 1 day}}\n"
WARD = {"ward": "{type: category, categories: [a, b]}", "stay": "{type: int, bounds: [0, 30]}"}


def series_spec(series: str = DAILY, statistics: tuple[str, ...] = ("{name: n, kind: count}",),
                privacy: str = "unit: row, neighbours: add_remove, epsilon: 1", **kw: str) -> str:
    return spec_text(WARD, statistics, privacy=privacy, extra=series, **kw)


def refusal(text: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_spec(text)
    return info.value


def test_a_daily_series_loads_with_its_start_in_utc_and_its_length_in_seconds() -> None:
    spec = parse_spec(series_spec())
    assert spec.series is not None
    assert spec.series.periods == 365
    assert spec.series.design == "per_period"
    assert spec.series.period.start == "2027-01-01T00:00:00+00:00"
    assert spec.series.period.every == 86400
    first, end = spec.series.period.bounds(2)
    assert (first.isoformat(), end.isoformat()) == ("2027-01-02T00:00:00+00:00", "2027-01-03T00:00:00+00:00")


def test_an_offset_start_is_its_instant_in_utc() -> None:
    spec = parse_spec(series_spec(
        "series: {periods: 24, period: {column: t, start: '2027-07-01T00:00+02:00', every: 1 hour}}\n"))
    assert spec.series is not None
    assert spec.series.period.start == "2027-06-30T22:00:00+00:00"


def test_an_index_series_has_no_clock() -> None:
    spec = parse_spec(series_spec("series: {periods: 12, period: {column: month_no}}\n"))
    assert spec.series is not None
    assert spec.series.period.indexed


def test_design_both_takes_half_for_running_totals_by_default() -> None:
    spec = parse_spec(series_spec("series: {periods: 12, period: {column: m}, design: both}\n"))
    assert spec.series is not None
    assert spec.series.running_share == Fraction(1, 2)


def test_the_series_is_part_of_the_meaning() -> None:
    a = release_meaning(parse_spec(series_spec()))
    b = release_meaning(parse_spec(series_spec(DAILY.replace("365", "366"))))
    c = release_meaning(parse_spec(series_spec(DAILY.replace("1 day", "24 hours"))))
    plain = release_meaning(parse_spec(series_spec("")))
    assert len({a, b, plain}) == 3
    assert a == c  # one length, two spellings


@pytest.mark.parametrize(("series", "statistics", "privacy", "path", "words"), [
    ("series: {periods: 3, period: {column: d, start: 2027-01-01}}\n", None, None, "series.period.every",
     "give start and every together"),
    ("series: {periods: 3, period: {column: ward}}\n", None, None, "series.period.column", "is a declared column"),
    ("series: {periods: 0, period: {column: d}}\n", None, None, "series.periods", ""),
    ("series: {periods: 3, period: {column: d, start: 2027-13-01, every: 1 day}}\n", None, None,
     "series.period.start", "not a valid date"),
    ("series: {periods: 3, period: {column: d, start: 2027-01-01, every: 1 month}}\n", None, None,
     "series.period.every", "not a period length"),
    ("series: {periods: 3, period: {column: d}, design: running_totals}\n",
     ("{name: q, kind: median, column: stay}",), None, "statistics[0].kind", "has no running total"),
    ("series: {periods: 3, period: {column: d}, design: running_totals}\n", None,
     "unit: {id: pid, max_rows: 3, missing_id: drop}, neighbours: add_remove, epsilon: 1", "series.design",
     "ids kept between runs, which dpcli never stores"),
    ("series: {periods: 3, period: {column: d}, running_share: 1/2}\n", None, None, "series.running_share",
     "only with design both"),
    ("series: {periods: 3, period: {column: d}}\n", ("{name: n, kind: count, by: [ov]}",), None,
     "statistics[0]", "open keys are not allowed in a series"),
])
def test_refusals_say_why(series: str, statistics: tuple[str, ...] | None, privacy: str | None, path: str,
                          words: str) -> None:
    kw = {}
    if statistics is not None:
        kw["statistics"] = statistics
    if privacy is not None:
        kw["privacy"] = privacy
    text = series_spec(series, **kw)
    if "by: [ov]" in text:
        text = text.replace("columns:\n", "columns:\n  ov: {type: category, categories: open}\n")
        text = text.replace("epsilon: 1}", "epsilon: 1, delta: 1e-6}")
    err = refusal(text)
    assert err.path == path, str(err)
    assert words in str(err)


def test_a_median_is_allowed_per_period() -> None:
    spec = parse_spec(series_spec("series: {periods: 3, period: {column: d}}\n",
                                  ("{name: q, kind: median, column: stay}",)))
    assert spec.series is not None
