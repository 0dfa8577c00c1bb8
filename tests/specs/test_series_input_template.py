"""A series' per-period input template in the spec (dpcli.specs.input_template): what ``{date}`` and ``{period}``
name, where a template is refused (outside a series, a URL, ``{date}`` of periods it cannot name), and what is not a
template (no placeholder, standard input). Parse only: no file is opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpcli.errors import SpecError, UsageError
from dpcli.specs.load import parse_spec

SPEC = """\
version: 1
dataset: admissions
input: INPUT
privacy: {unit: row, neighbours: add_remove, epsilon: 1}
columns:
  ward: {type: category, categories: [a, b]}
statistics:
  - {name: n, kind: count}
series: {periods: 48, period: RULE}
"""
DAILY = "{column: admitted, start: 2027-01-01, every: 1 day}"


def _spec(input_text: str, rule: str = DAILY, series: bool = True):  # type: ignore[no-untyped-def]
    text = SPEC.replace("INPUT", input_text).replace("RULE", rule)
    return parse_spec(text if series else text.split("series:")[0], base_dir=Path("/srv/specs"))


def _files(input_text: str, rule: str, periods: list[int]) -> list[str]:
    spec = _spec(input_text, rule)
    p = spec.series.period
    return [str(spec.input_template.file(t, None if p.indexed else p.start_time(), p.every)) for t in periods]


@pytest.mark.parametrize(("input_text", "rule", "names"), [
    ("data/adm-{date}.csv", DAILY, ["/srv/specs/data/adm-2027-01-01.csv", "/srv/specs/data/adm-2027-01-30.csv"]),
    ("/in/{date}.csv", "{column: at, start: 2027-03-28T00:00Z, every: 1 hour}",
     ["/in/2027-03-28T00.csv", "/in/2027-03-29T05.csv"]),
    # a day starting at +01:00's midnight: its first hour in UTC (2026-12-31T23), never a name shared by two days
    ("d/{date}.csv", "{column: at, start: 2027-01-01T00:00+01:00, every: 1 day}",
     ["/srv/specs/d/2026-12-31T23.csv", "/srv/specs/d/2027-01-29T23.csv"]),
    ("d/{period}/rows-{period}.csv", "{column: day_no}", ["/srv/specs/d/1/rows-1.csv", "/srv/specs/d/30/rows-30.csv"]),
])
def test_a_template_names_each_periods_file(input_text: str, rule: str, names: list[str]) -> None:
    assert _files(input_text, rule, [1, 30]) == names


@pytest.mark.parametrize(("input_text", "rule", "series", "words"), [
    ("data/{date}.csv", DAILY, False, "this spec has no series"),
    ("data/{period}.csv", DAILY, False, "this spec has no series"),
    ("data/{date}.csv", "{column: day_no}", True, "use {period}"),
    ("data/{date}.csv", "{column: at, start: 2027-01-01, every: 30 minutes}", True, "use {period}"),
    ("data/{date}.csv", "{column: at, start: 2027-01-01T00:30Z, every: 1 hour}", True, "use {period}"),
    ("'s3a://bucket/{date}.csv'", DAILY, True, "not a URL"),
])
def test_a_template_is_refused_where_it_cannot_name_the_periods_files(
    input_text: str, rule: str, series: bool, words: str,
) -> None:
    with pytest.raises(SpecError) as info:
        _spec(input_text, rule, series)
    assert words in str(info.value)
    assert "input" in str(info.value)


def test_a_template_is_refused_with_the_factorisation() -> None:
    text = SPEC.replace("INPUT", "data/{period}.csv").replace("RULE", "{column: day_no}")
    text = text.replace("epsilon: 1}", "rho: 1/2}").replace("kind: count}", "kind: count, mechanism: gaussian}")
    text = text.replace("series: {periods: 48,", "series: {periods: 48, design: running_totals, method: factorization,")
    with pytest.raises(SpecError, match="not read by method factorization"):
        parse_spec(text, base_dir=Path("/srv/specs"))
    parse_spec(text.replace("data/{period}.csv", "data/all.csv"), base_dir=Path("/srv/specs"))  # one file: accepted


@pytest.mark.parametrize("input_text", ["data/{day}.csv", "'-'"])
def test_no_placeholder_and_standard_input_are_not_templates(input_text: str) -> None:
    assert _spec(input_text).input_template is None
    assert _spec(input_text, series=False).input_template is None


def test_a_template_is_not_read_by_spark(tmp_path: Path) -> None:
    """A template's files are opened by dpcli itself, one by one, with the polars engine: with Spark it is refused
    (exit 2) before anything is read, as every series is."""
    from dpcli.run.series import release_period

    (tmp_path / "s.yaml").write_text(SPEC.replace("INPUT", "d/{date}.csv").replace("RULE", DAILY)
                                     + "engine: spark\nledger: l.jsonl\n")
    with pytest.raises(UsageError, match="Spark") as info:
        release_period(tmp_path / "s.yaml", period=1, output=tmp_path / "o.csv")
    assert info.value.exit_code == 2
