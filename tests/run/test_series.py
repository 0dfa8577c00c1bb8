"""A series released period by period (issue 26), through the library on a JSONL ledger: the charge made once,
later periods spending nothing, each period's table frozen (a re-run returns the same bytes), periods out of order,
the refusals before anything is read or spent, the exact answers of a period's table through the no-noise path, and
the piece store's faults (a piece deleted or altered by hand: exit 5, never drawn again; a piece stored but not
recorded, as a kill between the two leaves it: drawn again, the first never used)."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import polars as pl
import pytest

from dpcli.engine import aggregate
from dpcli.errors import SpentThenFailed, UsageError
from dpcli.ledger import open_ledger
from dpcli.ledger.base import Record, piece_key
from dpcli.mechanisms.noise import exact_noisy
from dpcli.plan.series import make_series_plan
from dpcli.publish.sidecar import SIDECAR_SCHEMA
from dpcli.publish.store import encode_table
from dpcli.publish.writers import write_table
from dpcli.run.series import release_period
from dpcli.specs.load import load_spec, parse_spec

SPEC = """\
version: 1
dataset: admissions
input: admissions.csv
ledger: ledger.jsonl
privacy: {unit: row, neighbours: add_remove, epsilon: 1}
columns:
  ward: {type: category, categories: [a, b]}
  stay: {type: int, bounds: [0, 30]}
statistics:
  - {name: n, kind: count}
  - {name: w, kind: histogram, column: ward}
  - {name: s, kind: sum, column: stay}
  - {name: m, kind: mean, column: stay}
  - {name: q, kind: median, column: stay}
series: {periods: 3, period: {column: admitted, start: 2027-01-01, every: 1 day}}
"""
ROWS = [
    ("2027-01-01", "a", 3), ("2027-01-01T23:59:59Z", "b", 5), ("2027-01-02T00:30+01:00", "a", 7),
    ("2027-01-02", "b", 1), ("2027-01-02T10:00", "a", 2), ("", "a", 9), ("garbage", "b", 9),
    ("2027-01-03T12:00", "b", 30), ("2027-01-04", "a", 4),
]
AFTER = datetime(2027, 2, 1, tzinfo=UTC)  # every period has ended


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "series.yaml").write_text(SPEC)
    (tmp_path / "admissions.csv").write_text("admitted,ward,stay\n" + "".join(f"{d},{w},{s}\n" for d, w, s in ROWS))
    open_ledger(tmp_path / "ledger.jsonl").set_cap("admissions", _cap(3), allow_raise=False)
    return tmp_path


def _cap(epsilon: int):  # type: ignore[no-untyped-def]
    from fractions import Fraction

    from dpcli.core.accounting import Cap

    return Cap(Fraction(epsilon), Fraction(0))


def period(work: Path, t: int, out: str | None = None, **kw: object):  # type: ignore[no-untyped-def]
    return release_period(work / "series.yaml", period=t, output=work / (out or f"p{t}.csv"), now=AFTER, **kw)


def records(work: Path) -> list[Record]:
    return open_ledger(work / "ledger.jsonl").records()


def test_the_first_period_charges_the_series_once_and_later_ones_spend_nothing(work: Path) -> None:
    first = period(work, 2)
    assert first.charged
    assert first.epsilon_spent == 1
    later = [period(work, 1), period(work, 3)]
    assert all(not r.charged and r.epsilon_spent == 0 for r in later)
    recs = records(work)
    spends = [r for r in recs if r.type == "spend"]
    assert len(spends) == 1
    assert spends[0].get("release_id") == "series"
    assert spends[0].get("epsilon") == "1"
    pieces = [p["id"] for r in recs if r.type == "pieces" for p in r.get("pieces")]
    assert pieces == ["p2", "p1", "p3"]  # each drawn once, when first needed
    assert all(r.get("charge") == spends[0].seq for r in recs if r.type == "pieces")
    status = open_ledger(work / "ledger.jsonl").status("admissions")
    assert status is not None
    assert status.spent == 1


def test_a_rerun_returns_the_same_bytes_and_spends_nothing_reading_no_input(work: Path) -> None:
    period(work, 1)
    before = (work / "p1.csv").read_bytes()
    count = len(records(work))
    (work / "admissions.csv").unlink()  # a re-run reads no input
    again = period(work, 1, "again.csv")
    assert again.reused
    assert again.epsilon_spent == 0
    assert (work / "again.csv").read_bytes() == before
    assert len(records(work)) == count


def test_running_totals_to_date_need_every_earlier_period_and_tables_stay_frozen(work: Path) -> None:
    period(work, 2)  # out of order: period 1 is not released yet
    assert "to_date" not in (work / "p2.csv").read_text()
    period(work, 1)
    period(work, 3)
    table = pl.read_csv(work / "p3.csv", infer_schema=False)
    assert set(table["span"]) == {"period", "to_date"}
    assert table.filter(pl.col("statistic") == "q")["span"].to_list() == ["period"]  # a median has no total
    period(work, 2, "p2-again.csv")
    assert "to_date" not in (work / "p2-again.csv").read_text()  # frozen: never revised


@pytest.mark.parametrize(("kw", "words"), [
    ({"period": 4}, "new spec `name:`"),
    ({"period": 0}, "not a period of this series"),
    ({"period": 2, "release_id": "2027-01-03"}, "disagree"),
    ({}, "one period per run"),
    ({"release_id": "nightly"}, "names no period"),
])
def test_refusals_before_anything_is_read_or_spent(work: Path, kw: dict[str, object], words: str) -> None:
    with pytest.raises(UsageError) as info:
        release_period(work / "series.yaml", output=work / "x.csv", now=AFTER, **kw)  # type: ignore[arg-type]
    assert words in str(info.value) + str(info.value.hint)
    assert [r.type for r in records(work)] == ["cap"]


def test_an_unfinished_period_is_refused_unless_allowed(work: Path) -> None:
    early = datetime(2027, 1, 2, 12, tzinfo=UTC)
    with pytest.raises(UsageError, match="has not ended"):
        release_period(work / "series.yaml", period=2, output=work / "x.csv", now=early)
    release_period(work / "series.yaml", period=2, output=work / "x.csv", now=early, allow_unfinished=True)


def test_a_date_like_release_id_names_its_period(work: Path) -> None:
    done = release_period(work / "series.yaml", release_id="2027-01-03", output=work / "x.csv", now=AFTER)
    assert done.period == 3


def test_a_piece_deleted_by_hand_is_exit_5_and_never_drawn_again(work: Path) -> None:
    period(work, 1)
    period(work, 2)
    series_key = next(r for r in records(work) if r.type == "spend").get("release_key")
    store = work / "ledger.jsonl.releases"
    target = next(p for p in store.iterdir() if p.name == f"{piece_key(series_key, 'p1')}.json")
    target.unlink()
    with pytest.raises(SpentThenFailed, match="recorded piece p1 is missing"):
        period(work, 3)  # its running total needs period 1's piece
    drawn = [p["id"] for r in records(work) if r.type == "pieces" for p in r.get("pieces")]
    assert drawn.count("p1") == 1


def test_an_altered_piece_is_exit_5(work: Path) -> None:
    period(work, 1)
    series_key = next(r for r in records(work) if r.type == "spend").get("release_key")
    path = work / "ledger.jsonl.releases" / f"{piece_key(series_key, 'p1')}.json"
    path.write_bytes(path.read_bytes().replace(b"[", b"[1,", 1))
    with pytest.raises(SpentThenFailed, match="altered"):
        period(work, 2)


def test_a_piece_stored_but_never_recorded_is_drawn_again(work: Path) -> None:
    """What a kill between the store and the record leaves: bytes in the store that no record names. They were
    never used (a table is made only from recorded pieces), so the piece is drawn afresh and recorded."""
    period(work, 1)
    series_key = next(r for r in records(work) if r.type == "spend").get("release_key")
    stale = work / "ledger.jsonl.releases" / f"{piece_key(series_key, 'p2')}.json"
    stale.write_bytes(b"[]")
    period(work, 2)
    recorded = next(p for r in records(work) if r.type == "pieces" for p in r.get("pieces") if p["id"] == "p2")
    import hashlib

    assert hashlib.sha256(stale.read_bytes()).hexdigest() == recorded["sha256"]


def test_a_spec_without_a_series_refuses_a_period(work: Path) -> None:
    (work / "plain.yaml").write_text(SPEC.split("series:")[0])
    with pytest.raises(UsageError, match="has no series"):
        release_period(work / "plain.yaml", period=1, output=work / "x.csv")


def test_the_sidecar_states_the_series(work: Path) -> None:
    period(work, 1)
    meta = json.loads((work / "p1.csv.meta.json").read_text())
    jsonschema.validate(meta, json.loads(SIDECAR_SCHEMA.read_text()))
    series = meta["series"]
    assert (series["periods"], series["design"], series["period"], series["pieces"]) == (3, "per_period", 1, ["p1"])
    assert series["charge"]["record"] == 1
    assert series["period_rule"]["every_seconds"] == 86400


def test_exact_answers_of_a_period_table_through_the_no_noise_path(work: Path) -> None:
    """The table of period 3 from exact aggregates (no noise): each period's own values, and the running totals
    over 1..3, against plain Python sums over the rows each period holds."""
    from dpcli.run.series import period_table

    spec = load_spec(work / "series.yaml")
    plan = make_series_plan(spec).main
    states = [exact_noisy(aggregate(p := dataclasses.replace(plan, periods=frozenset({t})), work / "admissions.csv"), p)
              for t in (1, 2, 3)]
    table = period_table(dataclasses.replace(plan, periods=frozenset({3})), 3, states[2], states[:2])
    write_table(table, work / "exact.csv", "csv")
    rows = pl.read_csv(work / "exact.csv", infer_schema=False)

    def value(stat: str, span: str, ward: str | None = None) -> str:
        got = rows.filter((pl.col("statistic") == stat) & (pl.col("span") == span))
        if ward is not None:
            got = got.filter(pl.col("ward") == ward)
        return got["value"].item()

    assert value("n", "period") == "1"
    assert value("n", "to_date") == "6"
    assert value("w", "to_date", "a") == "3"
    assert value("w", "to_date", "b") == "3"
    assert value("s", "period") == "30"
    assert value("s", "to_date") == "48"
    assert value("m", "to_date") == "8"  # 48 / 6
    assert encode_table(table)  # a period's table is stored as any release's


def test_parse_only_spec_has_no_period_table() -> None:
    spec = parse_spec(SPEC)
    assert spec.series is not None
    assert make_series_plan(spec).charge.epsilon == 1
