"""The ledger's own commands as library calls (``dpcli budget set/show``, ``dpcli ledger show/verify``): each opens
the ledger at a location (resolve_ledger finds it) and answers from its verified chain."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from dpcli.core.accounting import Cap
from dpcli.errors import LedgerError
from dpcli.ledger import open_ledger
from dpcli.ledger.base import (
    DEFAULT_LOCK_TIMEOUT,
    BudgetStatus,
    Record,
    SeriesStatus,
    VerifyReport,
    published_head,
    series_statuses,
)


@dataclass(frozen=True)
class CapSet:
    """What ``set_budget`` did: the cap record, the dataset's budget after it, and whether the dataset was new to
    this ledger (no cap and no spend before)."""

    record: Record
    status: BudgetStatus | None
    new_here: bool


def set_budget(
    location: str | Path, dataset: str, epsilon: Fraction, delta: Fraction, *, allow_raise: bool = False,
    unit: str | None = None, neighbours: str | None = None, lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    per_period: bool = False,
) -> CapSet:
    """Set ``dataset``'s cap (lowering always; raising with ``allow_raise``), pinning ``unit`` and ``neighbours``
    when given; ``per_period``: a cap that renews per declared period (the ledger's cap rules:
    dpcli.ledger.base.cap_fields; never mixed with a lifetime cap)."""
    book = open_ledger(location, lock_timeout=lock_timeout)
    new_here = book.status(dataset) is None
    record = book.set_cap(dataset, Cap(epsilon, delta, per_period), allow_raise, unit, neighbours)
    return CapSet(record, book.status(dataset), new_here)


def budget_statuses(location: str | Path, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> dict[str, BudgetStatus]:
    """Every dataset's cap and spends, from the verified chain."""
    return open_ledger(location, lock_timeout=lock_timeout).verify().datasets


def ledger_series(location: str | Path, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> list[SeriesStatus]:
    """Every series the ledger charged and how far it has gone (issue 26), from the verified chain."""
    return series_statuses(open_ledger(location, lock_timeout=lock_timeout).records())


def ledger_records(location: str | Path, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> list[Record]:
    """Every record of the ledger, verified first."""
    return open_ledger(location, lock_timeout=lock_timeout).records()


def verify_ledger(
    location: str | Path, against: Sequence[str | Path] = (), lock_timeout: float = DEFAULT_LOCK_TIMEOUT
) -> VerifyReport:
    """Verify the hash chain, and that each head published with a release (a ``.meta.json`` or a head hash in
    ``against``) is in it: LedgerError when the ledger was replaced with an older copy or rewritten."""
    heads = [published_head(item) for item in against]  # a mistyped path is exit 2 "cannot read", never a rollback
    book = open_ledger(location, lock_timeout=lock_timeout)
    report = book.verify()
    for head in heads:
        if not book.contains_head(head):
            raise LedgerError(
                f"ledger {book.name} does not contain head {head[:16]}… published with a release: "
                "it was replaced with an older copy or rewritten"
            )
    return report
