"""A series on a dataset whose cap renews per declared period (issue 26): each period of a per_period series is
charged to its own period's cap (key: dpcli.run.series.charge_period), once; a person unit needs such a cap; the
running totals are refused there. On JSONL and PostgreSQL."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.core.accounting import Cap
from dpcli.errors import BudgetRefused, UsageError
from dpcli.ledger import open_ledger
from dpcli.ledger.base import Record
from dpcli.run.series import release_period
from tests.pg_server import PgServer
from tests.run.test_series import AFTER, ROWS, SPEC

PERSON = (SPEC.replace("unit: row", "unit: {id: pid, max_rows: 3, missing_id: drop}")
          .replace("kind: sum, column: stay}", "kind: sum, column: stay, clamp: row}")
          .replace("kind: mean, column: stay}", "kind: mean, column: stay, clamp: row}"))

TREE = (SPEC.replace("  - {name: q, kind: median, column: stay}\n", "")  # a median has no running total
        .replace("every: 1 day}}", "every: 1 day}, design: DESIGN}"))


@pytest.fixture(params=["jsonl", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "jsonl":
        return str(tmp_path / "ledger.jsonl")
    server: PgServer = request.getfixturevalue("pg_server")
    return server.create_schema()


def _work(tmp_path: Path, ledger: str, spec: str, renewing: bool = True) -> Path:
    (tmp_path / "series.yaml").write_text(spec.replace("ledger: ledger.jsonl\n", ""))
    (tmp_path / "admissions.csv").write_text(
        "admitted,ward,stay,pid\n" + "".join(f"{d},{w},{s},p{i % 4}\n" for i, (d, w, s) in enumerate(ROWS)))
    open_ledger(ledger).set_cap("admissions", Cap(Fraction(1), Fraction(0), per_period=renewing), allow_raise=False)
    return tmp_path


def _period(work: Path, ledger: str, t: int, out: str | None = None, **kw: object):  # type: ignore[no-untyped-def]
    return release_period(work / "series.yaml", period=t, ledger=ledger, output=work / (out or f"p{t}.csv"),
                          now=AFTER, **kw)


def _spends(ledger: str) -> list[Record]:
    return [r for r in open_ledger(ledger).records() if r.type == "spend"]


@pytest.mark.parametrize("spec", [SPEC, PERSON], ids=["row", "person"])
def test_each_period_is_charged_to_its_own_periods_cap_once(tmp_path: Path, ledger: str, spec: str) -> None:
    work = _work(tmp_path, ledger, spec)
    released = [_period(work, ledger, t) for t in (2, 1, 3)]  # out of order
    assert all(r.charged and r.epsilon_spent == 1 for r in released)
    spends = _spends(ledger)
    # one charge per period, to the period's key (its date), each the series' whole budget; the first is the series'
    assert [(s.get("period"), s.get("epsilon")) for s in spends] == [
        ("2027-01-02", "1"), ("2027-01-01", "1"), ("2027-01-03", "1")]
    assert [s.get("release_id") for s in spends] == ["series", "series:period-1", "series:period-3"]
    count = len(open_ledger(ledger).records())
    again = _period(work, ledger, 1, "again.csv")  # a period released again spends nothing
    assert again.reused
    assert again.epsilon_spent == 0
    assert (work / "again.csv").read_bytes() == (work / "p1.csv").read_bytes()
    assert len(open_ledger(ledger).records()) == count
    # each period's pieces name the spend that paid for that period
    pieces = {p["id"]: r.get("charge") for r in open_ledger(ledger).records() if r.type == "pieces"
              for p in r.get("pieces")}
    assert pieces == {"p2": spends[0].seq, "p1": spends[1].seq, "p3": spends[2].seq}
    meta = json.loads((work / "p1.csv.meta.json").read_text())
    assert meta["ledger"]["period"] == "2027-01-01"
    assert "k·ε" in meta["ledger"]["cap_note"]
    assert "a person present in k periods has k times the budget" in meta["series"]["unit_note"]
    reissued = json.loads((work / "again.csv.meta.json").read_text())
    assert reissued["ledger"]["period"] == "2027-01-01"  # the re-run names the period's own spend


def test_a_period_is_bounded_by_its_own_cap(tmp_path: Path, ledger: str) -> None:
    work = _work(tmp_path, ledger, SPEC)
    _period(work, ledger, 1)
    (work / "other.yaml").write_text(("name: other\n" + SPEC).replace("ledger: ledger.jsonl\n", ""))
    count = len(open_ledger(ledger).records())
    with pytest.raises(BudgetRefused, match="in period '2027-01-01'"):  # period 1's cap is spent; exit 4
        release_period(work / "other.yaml", period=1, ledger=ledger, output=work / "o.csv", now=AFTER)
    assert len(open_ledger(ledger).records()) == count
    release_period(work / "other.yaml", period=2, ledger=ledger, output=work / "o.csv", now=AFTER)  # its own cap


@pytest.mark.parametrize(("spec", "renewing", "words"), [
    (PERSON, False, "needs a cap that renews per declared period"),
    (TREE.replace("DESIGN", "running_totals"), True, "cannot be charged there"),
    (TREE.replace("DESIGN", "both"), True, "cannot be charged there"),
], ids=["person-lifetime", "running-renewing", "both-renewing"])
def test_refused_before_anything_is_read(tmp_path: Path, ledger: str, spec: str, renewing: bool, words: str) -> None:
    work = _work(tmp_path, ledger, spec, renewing)
    (work / "admissions.csv").unlink()  # refused before the input is read
    with pytest.raises(UsageError) as info:
        _period(work, ledger, 1)
    assert words in str(info.value)
    assert [r.type for r in open_ledger(ledger).records()] == ["cap"]


def test_an_index_series_charges_period_n(tmp_path: Path) -> None:
    ledger = str(tmp_path / "ledger.jsonl")
    work = _work(tmp_path, ledger, SPEC.replace("{column: admitted, start: 2027-01-01, every: 1 day}",
                                                "{column: day}"))
    (work / "admissions.csv").write_text("day,ward,stay\n1,a,3\n2,b,4\n")
    _period(work, ledger, 2)
    assert [s.get("period") for s in _spends(ledger)] == ["period-2"]
