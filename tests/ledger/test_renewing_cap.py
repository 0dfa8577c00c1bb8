"""A cap that renews per declared period (issue 26, `budget set --per period`), on the ledger's library API: each
period's spends are checked against the cap together, another period starts fresh, a spend names its period, and a
dataset's cap is one kind (lifetime or renewing) for its whole life."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.core.accounting import Budget, Cap
from dpcli.errors import BudgetRefused, ReleaseIdPaid, UsageError
from dpcli.ledger import Purchase, open_ledger


def purchase(release_id: str, period: str | None, name: str | None = None) -> Purchase:
    return Purchase.of("ward", "0" * 64, release_id, "row", "add_remove", ("n",), meaning="m" * 64, name=name,
                       period=period)


def test_two_spends_in_one_period_share_its_cap_and_another_period_starts_fresh(tmp_path: Path) -> None:
    book = open_ledger(tmp_path / "L.jsonl")
    book.set_cap("ward", Cap(Fraction(1), per_period=True), allow_raise=False)
    first = book.spend("ward", Budget(Fraction("0.6")), purchase("2027-01-01", "2027-01-01"))
    assert first.get("period") == "2027-01-01"  # the record names the period it was charged to
    with pytest.raises(BudgetRefused, match=r"in period '2027-01-01'.*remaining ε=0.4") as refused:
        # another spec (name) on the same day's snapshot: the same period's cap
        book.spend("ward", Budget(Fraction("0.6")), purchase("2027-01-01", "2027-01-01", name="other"))
    assert refused.value.period == "2027-01-01"
    book.spend("ward", Budget(Fraction("0.6")), purchase("2027-01-02", "2027-01-02"))  # a new period: the whole cap
    status = book.status("ward")
    assert status is not None
    assert status.per_period
    assert list(status.periods) == ["2027-01-01", "2027-01-02"]
    assert [p.remaining for p in status.periods.values()] == [Fraction("0.4"), Fraction("0.4")]
    assert status.spent == Fraction("1.2")
    assert status.remaining is None
    assert book.status("ward", period="2027-01-03").remaining == 1  # type: ignore[union-attr]
    # the same release id again spends nothing: it is the paid release, whatever its period
    with pytest.raises(ReleaseIdPaid):
        book.spend("ward", Budget(Fraction("0.1")), purchase("2027-01-02", "2027-01-02"))


def test_a_spend_on_a_renewing_cap_must_name_its_period(tmp_path: Path) -> None:
    book = open_ledger(tmp_path / "L.jsonl")
    book.set_cap("ward", Cap(Fraction(1), per_period=True), allow_raise=False)
    with pytest.raises(UsageError, match=r"renews per declared period.*names none"):
        book.spend("ward", Budget(Fraction("0.1")), purchase("r1", None))
    with pytest.raises(UsageError, match=r"names none"):
        book.spend("ward", Budget(Fraction("0.1")))  # a bare spend names no period either
    with pytest.raises(UsageError, match=r"names none"):
        book.check("ward", Budget(Fraction("0.1")))
    assert [r.type for r in book.records()] == ["cap"]


def test_a_lifetime_cap_and_a_renewing_cap_are_never_mixed(tmp_path: Path) -> None:
    book = open_ledger(tmp_path / "L.jsonl")
    book.set_cap("life", Cap(Fraction(3)), allow_raise=False)
    lifetime = book.spend("life", Budget(Fraction(1)), purchase("r1", "r1"))
    assert lifetime.get("period") is None  # a lifetime cap charges the dataset's life: no period recorded
    with pytest.raises(UsageError, match=r"lifetime cap .* cannot take it over") as mixed:
        book.set_cap("life", Cap(Fraction(3), per_period=True), allow_raise=False)
    assert "new dataset name" in str(mixed.value.hint)
    book.set_cap("ward", Cap(Fraction(1), per_period=True), allow_raise=False)
    with pytest.raises(UsageError, match=r"renews per declared period.*lifetime cap cannot take it over") as mixed:
        book.set_cap("ward", Cap(Fraction(1)), allow_raise=False)
    assert "new dataset name" in str(mixed.value.hint)
    # changing the per-period cap is a cap of the same kind: lowering freely, raising with allow_raise
    book.set_cap("ward", Cap(Fraction("0.5"), per_period=True), allow_raise=False)
    raised = book.set_cap("ward", Cap(Fraction(2), per_period=True), allow_raise=True)
    assert raised.get("per") == "period"
    assert raised.get("raise") is True
