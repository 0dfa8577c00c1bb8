"""`dpcli audit` audits a series (issue 26): the period field in candidate rows, every piece through the real engine,
targets over all the pieces at once, and a broken series plan caught by the search alone (no noise drawn: a pair
whose exact loss exceeds the claim proves the bug). The statistical audits (noise drawn) are in
tests/statistical/test_audit_series.py (slow)."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.audit.neighbours import Neighbours, find_neighbours
from dpcli.audit.series import SeriesLayout, layout_of, period_texts, periods_of
from dpcli.engine import ExactStatistic, aggregate
from dpcli.errors import InternalError
from dpcli.plan.model import Plan
from dpcli.plan.series import SeriesPlan, make_series_plan
from dpcli.specs.load import parse_spec
from tests.spec_builder import spec_text

INDEXED = "series: {periods: 3, period: {column: day}%s}\n"
DATED = "series: {periods: %d, period: {column: at, start: 2027-01-01T00:00:00+01:00, every: 1 hour}%s}\n"


def series_plan(neighbours: str, series: str, stats: list[str] | None = None) -> SeriesPlan:
    return make_series_plan(parse_spec(spec_text(
        {"k": "{type: category, categories: [a, b]}"}, stats or ["{name: n, kind: count}"],
        privacy=f"unit: row, neighbours: {neighbours}, epsilon: 1", extra=series,
    )))


def search(splan: SeriesPlan, folder: Path, layout: SeriesLayout | None = None) -> dict[str, Neighbours]:
    layout = layout or layout_of(splan)[0]
    folder.mkdir(parents=True, exist_ok=True)
    found, _ = find_neighbours(layout.plan, folder, None, layout)
    return {nb.target.label: nb for nb in found}


def scaled(plan: Plan, factor: Fraction) -> Plan:
    """Every Laplace scale of the plan times ``factor`` (a sensitivity or a share that far off)."""
    return dataclasses.replace(plan, statistics=tuple(
        dataclasses.replace(sp, components=tuple(dataclasses.replace(c, scale=c.scale * factor)
                                                 for c in sp.components))
        for sp in plan.statistics))


def test_candidate_periods_reach_every_case_of_a_dated_field() -> None:
    """First and last instants, start and end of the horizon, before and after, offsets, naive, missing, invalid:
    read by the engine's own rule. The start carries +01:00: period 1 begins at 2026-12-31T23:00Z."""
    series = parse_spec(spec_text({"k": "{type: category, categories: [a, b]}"}, extra=DATED % (8760, ""))).series
    assert series is not None
    texts = period_texts(series)
    got = dict(zip(texts, periods_of(series, texts), strict=True))
    assert got["2026-12-31T23:00:00Z"] == 1
    assert got["2026-12-31T23:59:59.999999Z"] == 1
    assert got["2027-01-01T00:00:00Z"] == 2
    assert got["2027-01-01T05:30:00+05:30"] == 2
    assert got["2026-12-31T22:59:59.999999Z"] is None  # before the start
    assert got["2027-12-31T22:59:59.999999Z"] == 8760  # the end of the horizon
    assert got["2027-12-31T23:00:00Z"] is None  # after period T
    assert got["2027-01-01T00:00:00"] == 2
    assert got["2027-01-01 00:00:00"] == 2
    assert got["2026-12-31T15:59:59.999999-08:00"] == 1
    assert got["2027-01-02"] == 26  # a date alone: midnight UTC
    assert got[""] is None
    assert got["n/a"] is None
    assert got["2026-02-30"] is None
    assert 4381 in got.values()  # a period in the middle


def test_a_per_period_series_is_searched_over_its_periods(tmp_path: Path) -> None:
    """add_remove: a row counts in one period (loss ε); replace: a row moving between periods reaches the by:[period]
    derivation's 2 (loss ε, never above it)."""
    splan = series_plan("add_remove", INDEXED % "")
    add = search(splan, tmp_path / "a")
    assert add["(series)"].target.claimed_loss == splan.charge.epsilon  # the one charge the ledger records
    assert add["n"].pair_loss == 1
    assert add["(series)"].pair_loss == 1
    moved = search(series_plan("replace", INDEXED % ""), tmp_path / "r")["n"]
    assert moved.pair_loss == 1
    labels = {c.label for c in moved.noised}  # the row left one period and joined another
    assert moved.person_d is not None
    assert len(labels) == 2
    assert all(x.startswith("period ") for x in labels)


def test_a_replace_sensitivity_of_1_instead_of_2_is_caught(tmp_path: Path) -> None:
    """The plan of a series under replace with the count's sensitivity taken as 1 (no by:[period]): halved scales.
    The search finds a row moving between periods whose loss is twice the claim."""
    splan = series_plan("replace", INDEXED % "")
    assert splan.per_period is not None
    broken = dataclasses.replace(splan, per_period=scaled(splan.per_period, Fraction(1, 2)))
    found = search(broken, tmp_path)
    for label in ("n", "(series)"):
        assert found[label].pair_loss == 2 * found[label].target.claimed_loss, label


@pytest.mark.slow  # ~15 s: about 800 engine runs (h + 2 per candidate dataset)
def test_the_tree_is_searched_over_its_blocks_at_their_per_block_share(tmp_path: Path) -> None:
    """Running totals (T = 8760, h = 14 levels): a row changes one block per level, each at ε/h: the loss over the
    whole tree is ε; a replace moving a row from period 1 to T changes two blocks on every level but the top's."""
    splan = series_plan("add_remove", DATED % (8760, ", design: running_totals"))
    assert splan.levels == 14
    found = search(splan, tmp_path)
    assert found["n"].pair_loss == 1 == found["n"].target.claimed_loss
    assert len(found["n"].noised) == 14  # one block per level


def test_a_wrong_per_block_share_is_caught(tmp_path: Path) -> None:
    """Each block drawn at the whole ε (not ε/h): a row changes h blocks, so the loss is h times the claim."""
    splan = series_plan("add_remove", INDEXED % ", design: running_totals")
    assert splan.blocks is not None
    assert splan.levels == 2
    broken = dataclasses.replace(splan, blocks=scaled(splan.blocks, Fraction(1, 2)))
    found = search(broken, tmp_path)
    assert found["(series)"].pair_loss == 2 * found["(series)"].target.claimed_loss


def test_an_engine_that_counts_a_row_outside_its_period_is_caught(tmp_path: Path) -> None:
    """Fault injection: an engine that reads every period's rows whatever the piece (the series' filter lost)."""
    def every_period(plan: Plan, path: Path, *, secret: bytes | None = None) -> list[ExactStatistic]:
        return aggregate(dataclasses.replace(plan, periods=frozenset({1, 2, 3})), path, secret=secret)

    splan = series_plan("add_remove", INDEXED % "")
    with pytest.raises(InternalError, match="in a period its field does not put it in"):
        search(splan, tmp_path, layout_of(splan, every_period)[0])


PERSON = "unit: {id: pid, max_rows: 2, missing_id: drop}, neighbours: %s, epsilon: 1"


def person_series_plan(neighbours: str = "add_remove", stats: list[str] | None = None,
                       series: str = INDEXED % "") -> SeriesPlan:
    return make_series_plan(parse_spec(spec_text(
        {"k": "{type: category, categories: [a, b]}"}, stats or ["{name: n, kind: count}"],
        privacy=PERSON % neighbours, extra=series,
    )))


def test_a_person_unit_series_audits_one_period_against_one_periods_cap(tmp_path: Path) -> None:
    """Under a person unit each period is a person-level release of its own rows, charged to its own period's cap:
    period 1's release is audited against the per-period budget, with candidate persons' rows in period 1 and in
    others (and none); a person with K rows in period 1 reaches the claim exactly, never past it."""
    splan = person_series_plan()
    assert splan.per_period is not None
    found = search(splan, tmp_path)
    assert list(found) == ["n", "(period 1)"]
    whole = found["(period 1)"]
    assert whole.target.claimed_loss == splan.per_period.epsilon == 1  # one period's budget, not k periods'
    assert whole.pair_loss == 1  # a count of K = 2 rows at ε / 2 per row
    assert [c.label for c in whole.noised] == ["period 1"]


@pytest.mark.slow  # ~2 s: about 300 engine runs
def test_a_person_unit_series_with_a_dated_field_audits_period_1_through_every_case_of_the_field(
        tmp_path: Path) -> None:
    """Hourly periods, T = 8,760: a person's rows at period 1's first and last instants, in period 2, at T, before
    the start, after T, with offsets, naive, missing, unparseable: period 1's release within one period's claim, and
    the person's rows elsewhere changing none of its exact values."""
    found = search(person_series_plan(series=DATED % (8760, "")), tmp_path)
    assert found["(period 1)"].pair_loss == found["(period 1)"].target.claimed_loss == 1


@pytest.mark.slow  # ~1.6 s: two statistics, every pair of candidate persons
def test_a_person_unit_series_under_replace_stays_within_one_periods_claim(tmp_path: Path) -> None:
    splan = person_series_plan("replace", ["{name: n, kind: count}", "{name: h, kind: histogram, column: k}"])
    found = search(splan, tmp_path)
    for label in ("n", "h", "(period 1)"):
        assert 0 < found[label].pair_loss <= found[label].target.claimed_loss, label


def test_an_engine_that_ignores_the_period_filter_under_a_person_unit_is_caught(tmp_path: Path) -> None:
    """Fault injection: a person-level engine that reads every period's rows whatever the period audited. A person
    keeps at most K rows either way, so the period's loss stays within its claim; what catches it is that a
    person's rows in other periods change the period's exact values."""
    def every_period(plan: Plan, path: Path, *, secret: bytes | None = None) -> list[ExactStatistic]:
        return aggregate(dataclasses.replace(plan, periods=frozenset({1, 2, 3})), path, secret=secret)

    splan = person_series_plan()
    with pytest.raises(InternalError, match="a person's rows in other periods"):
        search(splan, tmp_path, layout_of(splan, every_period)[0])
