"""The ledger's commands as library calls (dpcli.ledger.admin) and which ledgers a command names
(dpcli.ledger.named): what `dpcli budget` and `dpcli ledger` do, without the command line."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.errors import LedgerError
from dpcli.ledger.admin import budget_statuses, ledger_records, set_budget, verify_ledger
from dpcli.ledger.named import LedgerSource, OtherLedger, cap_elsewhere, other_ledger

SPEC = """\
version: 1
dataset: toy
ledger: {ledger}
privacy: {{unit: row, neighbours: add_remove, epsilon: 1}}
columns:
  age: {{type: int, bounds: [0, 9]}}
statistics:
  - {{name: rows, kind: count}}
"""


def test_a_cap_set_through_the_library_is_read_back_and_verified(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    first = set_budget(ledger, "toy", Fraction(3), Fraction(0))
    assert first.new_here
    assert first.status is not None
    assert first.status.remaining == 3
    again = set_budget(ledger, "toy", Fraction(2), Fraction(0))
    assert not again.new_here
    assert again.status is not None
    assert again.status.cap == 2
    assert set(budget_statuses(ledger)) == {"toy"}
    records = ledger_records(ledger)
    assert [r.type for r in records] == ["cap", "cap"]
    report = verify_ledger(ledger, [records[0].hash])  # an older head is in the chain
    assert report.records == 2
    assert report.head == records[-1].hash
    with pytest.raises(LedgerError, match="does not contain head 0000000000000000"):
        verify_ledger(ledger, ["0" * 64])


def test_another_ledger_named_and_a_cap_that_may_be_in_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    used, other = tmp_path / "used.jsonl", tmp_path / "other.jsonl"
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(ledger=other.name))
    monkeypatch.delenv("DPCLI_LEDGER", raising=False)
    assert other_ledger(str(used), None) is None
    assert other_ledger(str(used), used) is None  # the same ledger named twice
    pair = OtherLedger(str(used), LedgerSource.EXPLICIT, str(other), LedgerSource.SPEC)
    assert other_ledger(str(used), other) == pair
    monkeypatch.setenv("DPCLI_LEDGER", str(other))
    assert other_ledger(None, used) == OtherLedger(str(other), LedgerSource.ENVIRONMENT, str(used), LedgerSource.SPEC)
    monkeypatch.delenv("DPCLI_LEDGER")
    # no cap or spend of toy in the ledger used: its cap may be in the spec's
    assert cap_elsewhere(spec, str(used)) == ("toy", pair)
    set_budget(used, "toy", Fraction(1), Fraction(0))
    assert cap_elsewhere(spec, str(used)) is None
    assert cap_elsewhere(tmp_path / "missing.yaml", str(used)) is None  # unreadable now: the refusal alone is said
