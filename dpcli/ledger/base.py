"""The ledger interface and the backend-independent logic: chain hashing, verification and budget arithmetic."""

from __future__ import annotations

import hashlib
import hmac
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any, Iterable

from dpcli.accounting import format_decimal, format_exact, parse_exact
from dpcli.errors import BudgetRefused, LedgerError

GENESIS = "0" * 64
RECORD_TYPES = ("cap", "spend", "released")


@dataclass(frozen=True)
class Record:
    """One ledger record as stored: the fields that are hashed, plus its hash."""

    fields: dict[str, Any]
    hash: str

    @property
    def seq(self) -> int:
        return int(self.fields["seq"])

    @property
    def type(self) -> str:
        return str(self.fields["type"])

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)

    def as_dict(self) -> dict[str, Any]:
        return {**self.fields, "hash": self.hash}


@dataclass(frozen=True)
class BudgetStatus:
    dataset: str
    cap: Fraction | None
    spent: Fraction
    releases: int

    @property
    def remaining(self) -> Fraction | None:
        return None if self.cap is None else self.cap - self.spent


@dataclass(frozen=True)
class VerifyReport:
    records: int
    head: str
    keyed: bool
    datasets: dict[str, BudgetStatus] = field(default_factory=dict)


def canonical(fields: dict[str, Any]) -> bytes:
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def record_hash(fields: dict[str, Any], key: bytes | None) -> str:
    data = canonical(fields)
    if key is not None:
        return hmac.new(key, data, hashlib.sha256).hexdigest()
    return hashlib.sha256(data).hexdigest()


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def verify_chain(records: Iterable[Record], key: bytes | None, where: str) -> str:
    """Check sequence numbers, links and hashes. Returns the head hash; raises LedgerError (exit 5)."""
    prev = GENESIS
    for expected_seq, rec in enumerate(records):
        f = rec.fields
        if f.get("seq") != expected_seq:
            raise LedgerError(f"ledger {where}: record {expected_seq} is out of sequence (records deleted, inserted or swapped)")
        if f.get("prev") != prev:
            raise LedgerError(f"ledger {where}: record {expected_seq} does not link to the one before it (chain broken)")
        keyed = f.get("mac") == "hmac-sha256"
        if key is not None and not keyed:
            raise LedgerError(f"ledger {where}: record {expected_seq} is not authenticated with the ledger key")
        if key is None and keyed:
            raise LedgerError(f"ledger {where} is authenticated with a key: set DPCLI_LEDGER_KEY to use it")
        if not hmac.compare_digest(record_hash(f, key), rec.hash):
            raise LedgerError(f"ledger {where}: record {expected_seq} has been altered (hash mismatch)")
        if f.get("type") not in RECORD_TYPES:
            raise LedgerError(f"ledger {where}: record {expected_seq} has an unknown type")
        prev = rec.hash
    return prev


def budgets(records: Iterable[Record], where: str) -> dict[str, BudgetStatus]:
    caps: dict[str, Fraction] = {}
    spent: dict[str, Fraction] = {}
    releases: dict[str, int] = {}
    for rec in records:
        t = rec.type
        if t not in ("cap", "spend"):
            continue
        ds = str(rec.get("dataset"))
        try:
            eps = parse_exact(str(rec.get("epsilon")))
        except ValueError:
            raise LedgerError(f"ledger {where}: record {rec.seq} has an unreadable epsilon") from None
        if t == "cap":
            caps[ds] = eps
        else:
            spent[ds] = spent.get(ds, Fraction(0)) + eps
            releases[ds] = releases.get(ds, 0) + 1
    names = sorted(set(caps) | set(spent))
    return {n: BudgetStatus(n, caps.get(n), spent.get(n, Fraction(0)), releases.get(n, 0)) for n in names}


def eps_text(x: Fraction) -> str:
    """ε for messages: exact when short, else a 15-digit decimal."""
    exact = format_exact(x)
    return exact if len(exact) <= 24 else format_decimal(x)


def check_spend(status: BudgetStatus | None, dataset: str, epsilon: Fraction, ledger_name: str) -> None:
    """Raise BudgetRefused unless ``epsilon`` fits the dataset's remaining budget (exact comparison)."""
    if status is None or status.cap is None:
        raise BudgetRefused(
            f"no budget cap for dataset '{dataset}' in ledger {ledger_name}: "
            f"set one first with `dpcli budget set {dataset} --epsilon E --ledger {ledger_name}`"
        )
    remaining = status.remaining
    assert remaining is not None
    if epsilon > remaining:
        raise BudgetRefused(
            f"budget refused for dataset '{dataset}': requested ε={eps_text(epsilon)}, "
            f"remaining ε={eps_text(max(remaining, Fraction(0)))}, short by {eps_text(epsilon - max(remaining, Fraction(0)))}"
        )


class Ledger(ABC):
    """A ledger backend. Every mutating method verifies the whole chain under an exclusive lock first."""

    name: str

    @abstractmethod
    def records(self) -> list[Record]:
        """All records, verified (raises LedgerError on a broken chain)."""

    @abstractmethod
    def set_cap(self, dataset: str, epsilon: Fraction, delta: Fraction, allow_raise: bool) -> Record: ...

    @abstractmethod
    def spend(self, dataset: str, epsilon: Fraction, details: dict[str, Any]) -> Record:
        """Atomically check the cap and append a durable spend record; BudgetRefused when it does not fit."""

    @abstractmethod
    def mark_released(self, release_id: str, details: dict[str, Any]) -> Record:
        """Append the ``released`` record of a spend (its output was written)."""

    # -- the release store: noisy tables of earlier releases, for idempotent re-runs ---------------------------

    @abstractmethod
    def store_table(self, release_id: str, table: bytes) -> None:
        """Keep a released table (canonical JSON) beside the ledger. Written before the ``released`` record."""

    @abstractmethod
    def load_table(self, release_id: str) -> bytes | None:
        """The stored table of a release, or None when it is not there."""

    def find_release(self, dataset: str, spec_sha256: str, input_sha256: str) -> tuple[Record, Record, bytes] | None:
        """An earlier, completed release of byte-identical spec and input: (spend, released, table).

        The stored table must hash to the ``table_sha256`` its ``released`` record names (else LedgerError): a
        store that was edited must not be served as if it were the paid-for release.
        """
        import hashlib

        records = self.records()
        released = {r.get("release_id"): r for r in records if r.type == "released"}
        for rec in reversed(records):
            if (
                rec.type == "spend"
                and rec.get("dataset") == dataset
                and rec.get("spec_sha256") == spec_sha256
                and rec.get("input_sha256") == input_sha256
                and rec.get("release_id") in released
            ):
                done = released[rec.get("release_id")]
                table = self.load_table(str(rec.get("release_id")))
                if table is None or done.get("table_sha256") is None:
                    continue
                if hashlib.sha256(table).hexdigest() != done.get("table_sha256"):
                    raise LedgerError(
                        f"ledger {self.name}: the stored output of release {rec.seq} does not match its record (edited)"
                    )
                return rec, done, table
        return None

    def contains_head(self, head: str) -> bool:
        """Whether a head hash published with a release is in this chain (an older copy would lack later ones)."""
        return any(r.hash == head for r in self.records())

    def verify(self) -> VerifyReport:
        recs = self.records()
        head = recs[-1].hash if recs else GENESIS
        return VerifyReport(len(recs), head, self.keyed, budgets(recs, self.name))

    def status(self, dataset: str) -> BudgetStatus | None:
        return budgets(self.records(), self.name).get(dataset)

    def check(self, dataset: str, epsilon: Fraction) -> None:
        """A read-only pre-check (the binding check is repeated under the lock by ``spend``)."""
        check_spend(self.status(dataset), dataset, epsilon, self.name)

    @property
    @abstractmethod
    def keyed(self) -> bool: ...
