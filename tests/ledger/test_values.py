"""The ledger's typed values (issue 24): a cap is a frozen, exact ``Cap``; a purchase's release key is computed by
``Purchase.of``, the one place every command that spends gets it; the records on disk are as they always were."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.core.accounting import Cap
from dpcli.ledger import JsonlLedger, Purchase
from dpcli.ledger.base import release_key, rerun_key


def test_a_cap_is_an_exact_frozen_value_and_its_record_is_unchanged(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        Cap(0.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Cap(Fraction(1), Fraction(-1, 10))
    cap = Cap(Fraction(1, 3), Fraction(1, 10**6))
    with pytest.raises(AttributeError):
        cap.epsilon = Fraction(9)  # type: ignore[misc]
    book = JsonlLedger(tmp_path / "L.jsonl")
    first = book.set_cap("d", cap, allow_raise=False)
    raised = book.set_cap("d", Cap(Fraction(2)), allow_raise=True, unit="person:pid", neighbours="add_remove")
    assert {k: v for k, v in first.fields.items() if k not in ("time", "prev")} == {
        "seq": 0, "type": "cap", "dataset": "d", "epsilon": "1/3", "delta": "0.000001",
    }
    assert {k: v for k, v in raised.fields.items() if k not in ("time", "prev")} == {
        "seq": 1, "type": "cap", "dataset": "d", "epsilon": "2", "delta": "0", "raise": True, "unit": "person:pid",
        "neighbours": "add_remove",
    }
    status = book.status("d")
    assert status is not None
    assert (status.cap, status.cap_delta, status.unit) == (Fraction(2), Fraction(0), "person:pid")


def test_a_purchase_names_its_release_by_the_one_release_key() -> None:
    """Since issue 25 the key is (dataset, the spec's name, release id); 0.3's byte key is kept beside it."""
    bought = Purchase.of("people", "ab" * 32, "2026-11", "row", "add_remove", ("n",), "randomize", meaning="cd" * 32)
    assert bought.release_key == rerun_key("people", None, "2026-11")
    assert bought.byte_key == release_key("people", "ab" * 32, "2026-11")
    assert bought == Purchase("2026-11", bought.release_key, "ab" * 32, "row", "add_remove", ("n",), "randomize",
                              "cd" * 32, None, bought.byte_key)
    named = Purchase.of("people", "ef" * 32, "2026-11", "row", "add_remove", ("n",), meaning="cd" * 32, name="w")
    assert named.release_key == rerun_key("people", "w", "2026-11") != bought.release_key
    assert named.fields()["spec_name"] == "w"
