"""The ledger interface and the backend-independent logic: chain hashing, verification and budget arithmetic."""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict, TypeVar

from dpcli.core.accounting import (
    Budget,
    Cap,
    format_decimal,
    format_exact,
    parse_exact,
    pure_to_rho,
    round_up_to,
    zcdp_to_epsilon,
)
from dpcli.errors import BudgetRefused, InternalError, LedgerError, ReleaseIdPaid, ReleaseIdTaken, UsageError

GENESIS = "0" * 64
# Seconds a command waits for the ledger's lock before exit 5 (the CLI's --lock-timeout default), and the most it
# may be set to (as --input-timeout's: a finite wait, within PostgreSQL's lock_timeout range of 2^31 - 1 ms).
DEFAULT_LOCK_TIMEOUT = 30.0
MAX_LOCK_TIMEOUT = 1_000_000.0  # seconds (11.6 days): longer is a mistake, and inf or nan would mean no deadline
RECORD_TYPES = ("cap", "spend", "released", "pieces")

# Every spend is charged rounded UP to a multiple of 10^-18 (pure epsilon and rho alike), so the sum of any number
# of spends has a denominator dividing 10^18 (squares: 2 * 10^36) however long the exact shares of a spec were:
# limits on each number never bound their sums (denominators multiply), and a 4,300-digit sum would break every
# later command. 10^-18 overcharges a spec's smallest rho (10^-12) by at most one part in a million.
CHARGE_GRID = 10**18
# A cap and its delta stay exact, with at most this many digits in numerator and denominator (1/3, 0.1 and 1e-99
# are fine; 1e-100 is not): every number the ledger holds then parses, prints and converts to float quickly.
MAX_DIGITS = 100
_LIMIT: int = 10**MAX_DIGITS  # typed: int ** int is Any to mypy (a negative power is a float)
# Longest number text read from a ledger record: more than any value within MAX_DIGITS needs, and short enough that
# a hostile record (an epsilon of 5,000 digits) is refused before anything parses it.
MAX_NUMBER_TEXT = 256
HEX_HEAD = re.compile(r"[0-9a-f]{64}")


def charge(x: Fraction) -> Fraction:
    """What the ledger charges for a spend of ``x`` (epsilon or rho): ``x`` rounded up onto the 10^-18 grid."""
    return round_up_to(x, CHARGE_GRID) if x > 0 else Fraction(0)


def within_limits(x: Fraction) -> bool:
    """Numerator and denominator have at most MAX_DIGITS digits (compared as integers: str() of a huge int raises)."""
    return abs(x.numerator) < _LIMIT and x.denominator < _LIMIT


T = TypeVar("T")

# The fields a command hands the ledger for a new record (before its seq, link, time and MAC): one shape per record
# type, as written since dpcli 0.2. A record read back is a dict[str, Any] until _check_shape has checked its types.
CapFields = TypedDict(  # functional form: ``raise`` is a keyword
    "CapFields",
    {
        "type": Literal["cap"], "dataset": str, "epsilon": str, "delta": str, "raise": NotRequired[bool],
        "unit": NotRequired[str], "neighbours": NotRequired[str], "per": NotRequired[Literal["period"]],
    },
)


class PurchaseFields(TypedDict):
    """What a spend record names of its purchase (``Purchase.fields``). ``meaning`` and ``spec_name`` since issue 25
    (a record of a release id without ``meaning`` is older: its ``release_key`` is 0.3's byte key)."""

    command: NotRequired[str]
    release_id: str
    release_key: str
    spec_sha256: str
    meaning: NotRequired[str]
    spec_name: NotRequired[str]
    unit: str
    neighbours: str
    statistics: list[str]
    series: NotRequired[SeriesFacts]


class SeriesFacts(TypedDict):
    """A series' charge names its horizon and design (issue 26)."""

    periods: int
    design: str


class SpendFields(TypedDict):
    type: Literal["spend"]
    dataset: str
    epsilon: str
    rho: NotRequired[str]
    delta: NotRequired[str]
    period: NotRequired[str]  # the declared period a renewing cap charges (issue 26); only on such a dataset


class PaidSpendFields(SpendFields, PurchaseFields):
    """A spend that names what it paid for (every command's; a bare spend is the library's and the tests')."""


class RandomizedFields(TypedDict):
    column: str
    epsilon: str
    keys_sha256: str


class DeliveryFields(TypedDict):
    """What a ``released`` record names of its delivery (``Delivery.fields``); a series' period (issue 26): the
    period and the pieces its frozen table was made from."""

    release_id: str
    table_sha256: str
    output_sha256: NotRequired[str]
    randomized: NotRequired[list[RandomizedFields]]
    series_period: NotRequired[int]
    pieces: NotRequired[list[str]]


class ReleasedFields(DeliveryFields):
    type: Literal["released"]
    release_key: str


class PieceFields(TypedDict):
    """One noisy piece of a series, as its ``pieces`` record names it: its id and the sha256 of its stored bytes."""

    id: str
    sha256: str


class PiecesFields(TypedDict):
    """A series' ``pieces`` record (issue 26): the pieces one run drew and stored, chained to the series' charge."""

    type: Literal["pieces"]
    dataset: str
    series_key: str  # the charge's release key
    charge: int  # the seq of the spend record that paid for the series
    pieces: list[PieceFields]


NewFields = CapFields | SpendFields | PaidSpendFields | ReleasedFields | PiecesFields


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
    """A dataset's cap and what its releases spent, in exact arithmetic.

    Pure releases add epsilons; zCDP (Gaussian) releases add rhos. ``spent`` is the epsilon all of it amounts to at
    the cap's delta: the pure sum when nothing was spent in zCDP, else the smaller of two sound compositions,
    (a) pure sum + convert(sum of rho) and (b) convert(sum of rho + sum of epsilon^2/2), since epsilon-DP implies
    (epsilon^2/2)-zCDP. Conversions are rigorous upper bounds (dpcli.core.accounting.zcdp_to_epsilon).
    """

    dataset: str
    cap: Fraction | None
    pure: Fraction = Fraction(0)  # sum of pure epsilon spends
    rho: Fraction = Fraction(0)  # sum of zCDP spends
    pure_squares: Fraction = Fraction(0)  # sum of epsilon^2 / 2 over pure spends
    releases: int = 0
    cap_delta: Fraction = Fraction(0)
    # The privacy unit and neighbour relation pinned at the dataset's first use (a cap that declares them, or the
    # first spend): epsilons add up only within one of them. None: not pinned yet (or only 0.1 records, which lack it).
    unit: str | None = None
    neighbours: str | None = None
    # The delta spent outright by partition selections (open keys): it comes off the cap's delta, and zCDP spends
    # are converted at what is left (the selections are delta-approximate pure DP, which composes with zCDP so)
    delta_spent: Fraction = Fraction(0)
    cap_record: int | None = None  # the seq of the record that set the cap in force
    # A renewing cap (``budget set --per period``, issue 26): ``cap`` and ``cap_delta`` bound each declared period's
    # spends, ``periods`` holds each period's own status (by key, in the order first charged). The dataset's status
    # has ``period`` None: its sums are over every period, its ``spent`` the sum of the periods' (what a person present
    # in all of them has spent) and its ``remaining`` None (each period has its own: ``for_period``).
    per_period: bool = False
    period: str | None = None
    periods: dict[str, BudgetStatus] = field(default_factory=dict, compare=False)

    @property
    def spent(self) -> Fraction:
        if self.per_period and self.period is None:
            return sum((p.spent for p in self.periods.values()), Fraction(0))
        return epsilon_equivalent(self.pure, self.rho, self.pure_squares, self.cap_delta - self.delta_spent)

    @property
    def remaining(self) -> Fraction | None:
        if self.cap is None or (self.per_period and self.period is None):
            return None
        return self.cap - self.spent

    @property
    def delta_remaining(self) -> Fraction:
        return self.cap_delta - self.delta_spent

    def after(self, epsilon: Fraction, rho: Fraction, delta: Fraction = Fraction(0)) -> BudgetStatus:
        return replace(
            self, pure=self.pure + epsilon, rho=self.rho + rho, pure_squares=self.pure_squares + pure_to_rho(epsilon),
            releases=self.releases + 1, delta_spent=self.delta_spent + delta,
        )

    def for_period(self, key: str) -> BudgetStatus:
        """A renewing cap's status in the declared period ``key``: what its spends spent of the cap (a period not
        charged yet: all of it)."""
        seen = self.periods.get(key)
        if seen is not None:
            return seen
        return BudgetStatus(
            self.dataset, self.cap, cap_delta=self.cap_delta, unit=self.unit, neighbours=self.neighbours,
            cap_record=self.cap_record, per_period=True, period=key,
        )


INFINITE = Fraction(10**30)  # stands for "not expressible at this delta" (a zCDP spend against a delta=0 cap)


def epsilon_equivalent(pure: Fraction, rho: Fraction, pure_squares: Fraction, delta: Fraction) -> Fraction:
    if rho == 0:
        return pure
    if delta <= 0:
        return INFINITE
    return min(pure + zcdp_to_epsilon(rho, delta), zcdp_to_epsilon(rho + pure_squares, delta))


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
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def new_record(records: list[Record], fields: NewFields, key: bytes | None) -> Record:
    """The record that follows the verified ``records``: ``fields`` with its seq, link, time and (keyed) MAC."""
    link = records[-1].hash if records else GENESIS
    full: dict[str, Any] = {"seq": len(records), "prev": link, "time": now(), **fields}
    if key is not None:
        full["mac"] = "hmac-sha256"
    return Record(full, record_hash(full, key))


def check_lock_timeout(seconds: float) -> float:
    """A usable lock timeout: UsageError (exit 2) for inf, nan, negatives and huge values (inf waited forever)."""
    if not isinstance(seconds, int | float) or not math.isfinite(seconds) or not 0 <= seconds <= MAX_LOCK_TIMEOUT:
        raise UsageError(
            f"must be between 0 and {MAX_LOCK_TIMEOUT:.0f} seconds", argument="lock_timeout", option="--lock-timeout"
        )
    return float(seconds)


def lock_timed_out(ledger_name: str, seconds: float, why: str) -> LedgerError:
    return LedgerError(
        f"could not lock ledger {ledger_name} within {seconds:g} s ({why})", hint="try again or raise --lock-timeout"
    )


def verify_chain(records: Iterable[Record], key: bytes | None, where: str) -> str:
    """Check sequence numbers, links and hashes. Returns the head hash; raises LedgerError (exit 5)."""
    prev = GENESIS
    for expected_seq, rec in enumerate(records):
        f = rec.fields
        if type(f.get("seq")) is not int or f.get("seq") != expected_seq:  # not bool, not 1.0
            raise LedgerError(
                f"ledger {where}: record {expected_seq} is out of sequence (records deleted, inserted or swapped)"
            )
        if f.get("prev") != prev:
            raise LedgerError(
                f"ledger {where}: record {expected_seq} does not link to the one before it (chain broken)"
            )
        keyed = f.get("mac") == "hmac-sha256"
        if key is not None and not keyed:
            raise LedgerError(f"ledger {where}: record {expected_seq} is not authenticated with the ledger key")
        if key is None and keyed:
            raise LedgerError(f"ledger {where} is authenticated with a key: set DPCLI_LEDGER_KEY to use it")
        try:
            # compare_digest raises on non-ASCII text, and a lone surrogate (a JSON "\\ud800") cannot be hashed
            altered = not HEX_HEAD.fullmatch(rec.hash) or not hmac.compare_digest(record_hash(f, key), rec.hash)
        except UnicodeEncodeError:
            altered = True
        if altered:
            raise LedgerError(f"ledger {where}: record {expected_seq} has been altered (hash mismatch)")
        if f.get("type") not in RECORD_TYPES:
            raise LedgerError(f"ledger {where}: record {expected_seq} has an unknown type")
        _check_shape(f, expected_seq, where)
        prev = rec.hash
    return prev


# The fields each record type needs, and the JSON type of every field dpcli reads (others, such as a 0.1 record's
# input_sha256, are hashed and otherwise ignored). A record that hashes correctly but breaks these (a forged chain
# without a key, or a bug) is refused with exit 5 here, before any code trusts its types.
_REQUIRED = {
    "cap": ("dataset", "epsilon"), "spend": ("dataset", "epsilon"), "released": ("release_key",),
    "pieces": ("dataset", "series_key", "charge", "pieces"),
}
_TYPES: dict[str, type] = {
    "prev": str, "time": str, "dataset": str, "epsilon": str, "delta": str, "rho": str, "raise": bool, "unit": str,
    "neighbours": str, "release_id": str, "release_key": str, "spec_sha256": str, "table_sha256": str, "mac": str,
    "meaning": str, "spec_name": str, "per": str, "period": str, "series_key": str,
}


def _check_shape(f: dict[str, Any], seq: int, where: str) -> None:
    for name in _REQUIRED[f["type"]]:
        if name not in f:
            raise LedgerError(f"ledger {where}: record {seq} lacks its {name}")
    for name, kind in _TYPES.items():
        if name in f and type(f[name]) is not kind:
            raise LedgerError(f"ledger {where}: record {seq} has a malformed {name}")
    for name in ("epsilon", "delta", "rho"):
        if name in f:
            _number(f[name], name, seq, where, charged=f["type"] == "spend")
    if "per" in f and f["per"] != "period":
        raise LedgerError(f"ledger {where}: record {seq} has a malformed per")
    stats = f.get("statistics")
    if stats is not None and not (isinstance(stats, list) and all(isinstance(x, str) for x in stats)):
        raise LedgerError(f"ledger {where}: record {seq} has a malformed statistics list")
    facts = f.get("series") if f["type"] == "spend" else None
    if facts is not None and not (isinstance(facts, dict) and type(facts.get("periods")) is int
                                  and isinstance(facts.get("design"), str)):
        raise LedgerError(f"ledger {where}: record {seq} has malformed series facts")
    if f["type"] == "pieces":
        pieces = f["pieces"]
        if type(f["charge"]) is not int or not (isinstance(pieces, list) and pieces and all(
            isinstance(p, dict) and isinstance(p.get("id"), str) and isinstance(p.get("sha256"), str)
            and HEX_HEAD.fullmatch(p["sha256"]) for p in pieces
        )):
            raise LedgerError(f"ledger {where}: record {seq} has a malformed pieces list")
    period_pieces = f.get("pieces") if f["type"] == "released" else None
    if period_pieces is not None and not (
        isinstance(period_pieces, list) and all(isinstance(x, str) for x in period_pieces)
    ):
        raise LedgerError(f"ledger {where}: record {seq} has a malformed pieces list")


def head_mac(key: bytes, seq: int, head: str) -> str:
    """The HMAC that authenticates a head (the last record's seq and hash) under the ledger key. Domain-separated
    from record hashes, so no record's MAC can pass for a head's."""
    return hmac.new(key, b"dpcli-ledger-head\0" + canonical({"seq": seq, "hash": head}), hashlib.sha256).hexdigest()


def _number(value: Any, key: str, seq: int, where: str, charged: bool = False) -> Fraction:
    """A number of a record: exact text, not negative, within MAX_DIGITS. ``charged``: a spend's amount, read as
    charged (onto the grid; a no-op for records written since the grid, conservative for older ones whose exact
    shares were longer)."""
    if not isinstance(value, str) or len(value) > MAX_NUMBER_TEXT:  # before parsing: 5,000 digits never reach int()
        raise LedgerError(f"ledger {where}: record {seq} has an unreadable {key}")
    try:
        x = parse_exact(value)
    except ValueError:
        raise LedgerError(f"ledger {where}: record {seq} has an unreadable {key}") from None
    if x < 0:
        raise LedgerError(f"ledger {where}: record {seq} has a negative {key}")
    if charged:
        x = charge(x)
    if not within_limits(x):
        raise LedgerError(f"ledger {where}: record {seq} has a {key} beyond dpcli's limits ({MAX_DIGITS} digits)")
    return x


def _exact_field(rec: Record, key: str, where: str, charged: bool = False) -> Fraction:
    return _number(rec.get(key, "0"), key, rec.seq, where, charged)


def budgets(records: Iterable[Record], where: str) -> dict[str, BudgetStatus]:
    caps: dict[str, tuple[Fraction, Fraction]] = {}
    pure: dict[str, Fraction] = {}
    rho: dict[str, Fraction] = {}
    squares: dict[str, Fraction] = {}
    releases: dict[str, int] = {}
    deltas: dict[str, Fraction] = {}
    pins: dict[str, tuple[str, str]] = {}
    cap_records: dict[str, int] = {}
    renewing: dict[str, bool] = {}
    # a renewing cap's spends, per dataset and declared period: [pure, rho, squares, delta, releases]
    period_sums: dict[str, dict[str, list[Any]]] = {}
    for rec in records:
        t = rec.type
        if t not in ("cap", "spend"):
            continue
        ds = str(rec.get("dataset"))
        if ds not in pins and rec.get("unit") is not None and rec.get("neighbours") is not None:
            pins[ds] = (str(rec.get("unit")), str(rec.get("neighbours")))
        eps = _exact_field(rec, "epsilon", where, charged=t == "spend")
        if t == "cap":
            caps[ds] = (eps, _exact_field(rec, "delta", where))
            cap_records[ds] = rec.seq
            renewing[ds] = rec.get("per") == "period"
        else:
            zero = Fraction(0)
            spend_rho, spend_delta = _exact_field(rec, "rho", where, charged=True), _exact_field(rec, "delta", where)
            pure[ds] = pure.get(ds, zero) + eps
            squares[ds] = squares.get(ds, zero) + pure_to_rho(eps)
            rho[ds] = rho.get(ds, zero) + spend_rho
            deltas[ds] = deltas.get(ds, zero) + spend_delta
            releases[ds] = releases.get(ds, 0) + 1
            if rec.get("period") is not None:
                sums = period_sums.setdefault(ds, {}).setdefault(str(rec.get("period")), [zero, zero, zero, zero, 0])
                for i, x in enumerate((eps, spend_rho, pure_to_rho(eps), spend_delta, 1)):
                    sums[i] += x
    out = {}
    for n in sorted(set(caps) | set(pure)):
        cap, delta = caps.get(n, (None, Fraction(0)))
        zero = Fraction(0)
        unit, neighbours = pins.get(n, (None, None))
        per_period = renewing.get(n, False)
        periods = {
            key: BudgetStatus(n, cap, p, r, q, count, delta, unit, neighbours, d, cap_records.get(n), True, key)
            for key, (p, r, q, d, count) in period_sums.get(n, {}).items()
        } if per_period else {}
        out[n] = BudgetStatus(
            n, cap, pure.get(n, zero), rho.get(n, zero), squares.get(n, zero), releases.get(n, 0), delta, unit,
            neighbours, deltas.get(n, zero), cap_records.get(n), per_period, None, periods,
        )
    return out


# What every output about a renewing cap says (budget set/show, plan, the sidecar, the report): the cap bounds one
# declared period, so it is no bound on a person's loss over many periods.
RENEWING_NOTE = (
    "the cap renews per declared period (a release's id, a series' period), never by the clock: a person present in "
    "k periods has k·ε (and k·δ) spent on them, and a fixed attribute seen in every snapshot (a birth year, a "
    "diagnosis) is protected only at k·ε"
)

# A declared period's key (a release's id, a series' period): public text, as a release id is (dpcli.run.paid).
PERIOD_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+@-]{0,127}")


def period_status(
    status: BudgetStatus | None, dataset: str, period: str | None, ledger_name: str,
) -> BudgetStatus | None:
    """The status a spend is checked against: a renewing cap's declared ``period`` (UsageError, exit 2, when the
    spend names none); a lifetime cap's whole dataset (``period`` is then not used)."""
    if status is None or not status.per_period:
        return status
    if period is None:
        raise UsageError(
            f"dataset '{dataset}' has a cap that renews per declared period in ledger {ledger_name}: every spend on it "
            "names the period it is charged to (a release's is its release id; a series' is its period), and this "
            "one names none",
            hint="give --release-id (the period's key, e.g. the snapshot's date)",
        )
    if not PERIOD_KEY.fullmatch(period):
        raise UsageError(f"period key '{period[:60]}' is not valid: 1 to 128 letters, digits and . _ : + @ -")
    return status.for_period(period)


def eps_text(x: Fraction) -> str:
    """ε for messages: exact when short, else a 15-digit decimal."""
    exact = format_exact(x)
    return exact if len(exact) <= 24 else format_decimal(x)


def check_spend(
    status: BudgetStatus | None, dataset: str, epsilon: Fraction, ledger_name: str, rho: Fraction = Fraction(0),
    delta: Fraction = Fraction(0),
) -> None:
    """Raise BudgetRefused unless a spend of pure ``epsilon`` plus zCDP ``rho``, as charged (onto the grid), and the
    ``delta`` of partition selections fits the dataset's cap (exactly)."""
    epsilon, rho = charge(epsilon), charge(rho)
    if status is None or status.cap is None:
        raise BudgetRefused(
            f"no budget cap for dataset '{dataset}' in ledger {ledger_name}",
            hint=f"set one first with `dpcli budget set {dataset} --epsilon E --ledger {ledger_name}`",
            dataset=dataset, ledger=ledger_name, requested=None if rho else format_exact(epsilon),
        )
    facts = BudgetFacts(
        dataset=dataset, ledger=ledger_name, cap=format_exact(status.cap), cap_delta=format_exact(status.cap_delta),
        record=status.cap_record, period=status.period,
    )
    if status.per_period and status.period is None:
        period_status(status, dataset, None, ledger_name)  # raises: a renewing cap is checked in one period
    per = " --per period" if status.per_period else ""
    # a renewing cap: the refusal is this period's, and says so
    where = f"dataset '{dataset}'" + ("" if status.period is None else f" in period '{status.period}'")
    delta_left = max(status.delta_remaining, Fraction(0))
    if delta > 0 and delta > status.delta_remaining:
        raise BudgetRefused(
            f"budget refused for {where}: its partition selections spend δ={eps_text(delta)}, and the "
            f"cap's δ={eps_text(status.cap_delta)} has δ={eps_text(delta_left)} left",
            hint=f"raise the cap's δ, e.g. `dpcli budget set {dataset} --epsilon E --delta 1e-6{per} --raise`",
            requested_delta=format_exact(delta), remaining_delta=format_exact(delta_left), **facts,
        )
    if (rho > 0 or status.rho > 0) and delta > 0 and status.delta_remaining - delta <= 0:
        raise BudgetRefused(
            f"budget refused for {where}: its partition selections' δ={eps_text(delta)} would leave no δ "
            "of the cap for converting the dataset's zCDP spends",
            requested_delta=format_exact(delta), remaining_delta=format_exact(delta_left), **facts,
        )
    if rho > 0 and status.cap_delta <= 0:
        raise BudgetRefused(
            f"budget refused for {where}: this release spends zCDP (ρ={eps_text(rho)}) and the dataset's "
            "cap has δ=0",
            hint=f"set a cap with a δ, e.g. `dpcli budget set {dataset} --epsilon E --delta 1e-6{per} --raise`",
            **facts,
        )
    before, after = status.spent, status.after(epsilon, rho, delta).spent
    if after > status.cap:
        requested = after - before
        remaining = max(status.cap - before, Fraction(0))
        zcdp = f" (ρ={eps_text(rho)} at δ={eps_text(status.cap_delta)})" if rho > 0 else ""
        raise BudgetRefused(
            f"budget refused for {where}: requested ε={eps_text(requested)}{zcdp}, "
            f"remaining ε={eps_text(remaining)}, short by {eps_text(requested - remaining)}",
            requested=format_exact(requested), remaining=format_exact(remaining),
            short_by=format_exact(requested - remaining), **facts,
        )


class BudgetFacts(TypedDict):
    """What every refusal against an existing cap names (BudgetRefused's keyword arguments)."""

    dataset: str
    ledger: str
    cap: str
    cap_delta: str
    record: int | None
    period: str | None  # a renewing cap's period (None: a lifetime cap)


def check_pin(status: BudgetStatus | None, dataset: str, unit: str, neighbours: str, ledger_name: str) -> None:
    """Refuse (exit 2) a cap or spend whose privacy unit or neighbour relation differs from the dataset's pin.

    Epsilons add up only under one relation: a ``replace`` release is not epsilon-DP under add/remove at all, and an
    add/remove epsilon is worth 2 epsilon under replace. dpcli refuses the mismatch rather than converting, so the
    ledger's sums always mean one thing (docs/spec.md, "The ledger pins the neighbour relation").
    """
    if status is None or status.neighbours is None:
        return
    if (status.unit, status.neighbours) != (unit, neighbours):
        # the unit includes a person unit's id field (person:FIELD): ε per person of one id is not ε per person of
        # another (two fields can group the same rows into other persons)
        remedy = (
            f"write the spec with neighbours: {status.neighbours}" if status.unit == unit
            else f"write the spec with the unit {_unit_text(status.unit)}"
        )
        raise UsageError(
            f"dataset '{dataset}' is accounted under unit '{status.unit}' with neighbours '{status.neighbours}' in "
            f"ledger {ledger_name}; this asks for unit '{unit}' with neighbours '{neighbours}'. Budgets add up only "
            "under one relation (a replace release is not add/remove DP; an add/remove ε is 2ε under replace; a "
            f"person told by another id field is another unit): {remedy}, or use a new dataset name"
        )


def _unit_text(unit: str | None) -> str:
    """A pinned unit as a spec says it."""
    if unit is not None and unit.startswith("person:"):
        return f"{{id: {unit[len('person:'):]}, ...}}"
    return str(unit)


def cap_fields(
    records: list[Record], ledger_name: str, dataset: str, cap: Cap, allow_raise: bool,
    unit: str | None = None, neighbours: str | None = None,
) -> CapFields:
    """The fields of a new cap record, checked against the verified ``records``: raising needs ``allow_raise``;
    ``unit`` and ``neighbours`` (both or neither) pin the dataset's relation, or must match its pin."""
    epsilon, delta = cap.epsilon, cap.delta
    for name, value in (("epsilon", epsilon), ("delta", delta)):
        if not within_limits(value):
            raise UsageError(
                f"a cap's {name} may have at most {MAX_DIGITS} digits in its exact numerator and denominator"
            )
    status = budgets(records, ledger_name).get(dataset)
    check_cap_kind(status, dataset, cap.per_period, ledger_name)
    current = status.cap if status is not None else None
    raising = current is not None and epsilon > current
    if current is not None and raising and not allow_raise:  # `current is not None` again: mypy narrows on it
        raise UsageError(
            f"dataset '{dataset}' has a cap of ε={eps_text(current)}; raising it to ε={eps_text(epsilon)} "
            "is recorded as a raise and must be asked for",
            hint="that needs --raise",
        )
    fields: CapFields = {
        "type": "cap", "dataset": dataset, "epsilon": format_exact(epsilon), "delta": format_exact(delta)
    }
    if raising:
        fields["raise"] = True
    if cap.per_period:
        fields["per"] = "period"
    if neighbours is not None:
        unit = unit or "row"
        check_pin(status, dataset, unit, neighbours, ledger_name)
        fields["unit"], fields["neighbours"] = unit, neighbours
    return fields


def check_cap_kind(status: BudgetStatus | None, dataset: str, per_period: bool, ledger_name: str) -> None:
    """Refuse (exit 2) mixing a renewing cap and a lifetime cap on one dataset, either way: the spends under one mean
    something else under the other (a lifetime sum is not a period's, and a period's spends were never bounded over
    the dataset's life), so no conversion is honest. A new dataset name starts the other kind."""
    if status is None or status.per_period == per_period:
        return
    if per_period:
        had = "a lifetime cap" if status.cap is not None else "spends"
        raise UsageError(
            f"dataset '{dataset}' has {had} in ledger {ledger_name} ({status.releases} release(s) charged to its "
            "whole life): a cap that renews per period cannot take it over, since those spends were never charged to "
            "a period; a dataset's cap is one kind for its whole life",
            hint=f"set the renewing cap on a new dataset name (e.g. `dpcli budget set {dataset}-periods --epsilon E "
            "--per period`) and name it in the spec's dataset:",
        )
    raise UsageError(
        f"dataset '{dataset}' has a cap that renews per declared period in ledger {ledger_name} "
        f"({len(status.periods)} period(s) charged): a lifetime cap cannot take it over, since its periods' spends "
        "were never bounded together; a dataset's cap is one kind for its whole life",
        hint=f"change the per-period cap with `dpcli budget set {dataset} --epsilon E --per period`, or set a "
        "lifetime cap on a new dataset name",
    )


def rerun_key(dataset: str, name: str | None, release_id: str) -> str:
    """The name of a release in the ledger and its store: a hash of the dataset, the spec's ``name:`` (none: empty)
    and the release id, public facts only, never the input nor the spec's text. A release id is paid for once per
    dataset and name: a re-run finds the spend by it, whatever was edited in the spec since."""
    return hashlib.sha256(f"rerun\0{dataset}\0{name or ''}\0{release_id}".encode()).hexdigest()[:40]


def release_key(dataset: str, spec_sha256: str, release_id: str) -> str:
    """dpcli 0.3's name of a release (its byte key): a hash of the dataset, the spec's bytes and the release id.
    Spend records written by 0.3 and older hold it and no ``meaning``; a re-run looks it up too (``paid_for``), so
    the first retry after an upgrade is given the paid table."""
    return hashlib.sha256(f"{dataset}\0{spec_sha256}\0{release_id}".encode()).hexdigest()[:40]


@dataclass(frozen=True)
class Purchase:
    """What a spend pays for, as its record names it: public facts only (the release id and key, the spec's hash and
    the hash of its meaning, its name, the pinned unit and relation, the statistics' names, and the command when it
    is not ``release``). ``byte_key`` (not recorded): 0.3's key of the same run, looked up for older records."""

    release_id: str
    release_key: str
    spec_sha256: str
    unit: str
    neighbours: str
    statistics: tuple[str, ...]
    command: str | None = None
    meaning: str | None = None  # dpcli.specs.meaning: the sha256 of the spec's canonical meaning (None: a 0.3 record)
    name: str | None = None  # the spec's `name:`
    byte_key: str | None = None
    # The declared period a renewing cap charges (issue 26): a release's id, or a series' period key. On a dataset
    # whose cap renews per period a spend needs it (else exit 2); under a lifetime cap it is not used nor recorded.
    period: str | None = None
    series: SeriesFacts | None = None  # a series' charge: its horizon and design

    @classmethod
    def of(
        cls, dataset: str, spec_sha256: str, release_id: str, unit: str, neighbours: str, statistics: tuple[str, ...],
        command: str | None = None, *, meaning: str, name: str | None = None, period: str | None = None,
        series: SeriesFacts | None = None,
    ) -> Purchase:
        """The purchase of a run of a spec under a release id: its release key computed here, the one place every
        command that spends gets it from (so two commands can never name one release two ways). ``meaning`` is the
        spec's (dpcli.specs.meaning), ``name`` its ``name:``, ``period`` the declared period a renewing cap charges
        it to (a plain release's is its named release id; a series' is its period's key)."""
        return cls(
            release_id, rerun_key(dataset, name, release_id), spec_sha256, unit, neighbours, statistics, command,
            meaning, name, release_key(dataset, spec_sha256, release_id), period, series,
        )

    def fields(self) -> PurchaseFields:
        out: PurchaseFields = {
            "release_id": self.release_id, "release_key": self.release_key, "spec_sha256": self.spec_sha256,
            "unit": self.unit, "neighbours": self.neighbours, "statistics": list(self.statistics),
        }
        if self.command is not None:
            out["command"] = self.command  # (records are written with sorted keys: the order is not stored)
        if self.meaning is not None:
            out["meaning"] = self.meaning
        if self.name is not None:
            out["spec_name"] = self.name
        if self.series is not None:
            out["series"] = {"periods": self.series["periods"], "design": self.series["design"]}
        return out


@dataclass(frozen=True)
class RandomizedColumn:
    """One column of a randomize run, as its ``released`` record names it (what a frequency release checks)."""

    column: str
    epsilon: Fraction
    keys_sha256: str


@dataclass(frozen=True)
class Delivery:
    """What a ``released`` record says: the release id, the sha256 of the stored result, and for a randomize run
    the published file's sha256 and its columns."""

    release_id: str
    table_sha256: str
    output_sha256: str | None = None
    randomized: tuple[RandomizedColumn, ...] = ()
    period: int | None = None  # a series' period (its frozen table)
    pieces: tuple[str, ...] = ()  # ... and the pieces it was made from

    def fields(self) -> DeliveryFields:
        out: DeliveryFields = {"release_id": self.release_id, "table_sha256": self.table_sha256}
        if self.output_sha256 is not None:
            out["output_sha256"] = self.output_sha256
        if self.period is not None:
            out["series_period"] = self.period
            out["pieces"] = list(self.pieces)
        if self.randomized:
            out["randomized"] = [
                {"column": c.column, "epsilon": format_exact(c.epsilon), "keys_sha256": c.keys_sha256}
                for c in self.randomized
            ]
        return out


def paid_spend(records: list[Record], key: str) -> Record | None:
    """The spend record that paid for the release named ``key`` (see rerun_key and release_key), if any."""
    for rec in records:
        if rec.type == "spend" and rec.get("release_key") == key:
            return rec
    return None


def paid_for(records: list[Record], dataset: str, purchase: Purchase) -> Record | None:
    """The spend that paid for ``purchase``'s release id, whatever spec it paid for (``same_meaning`` tells): the one
    recorded under its key (dataset, name, release id); else, for a spec without a name, one that dpcli 0.3 or older
    recorded for the dataset and release id (it holds no meaning: its key was the spec's bytes), the one under this
    spec's byte key first. A function of the ledger's records and the spec only."""
    older: list[Record] = []
    for rec in records:
        if rec.type != "spend" or rec.get("release_key") is None:
            continue  # a bare spend (the library's) names no release
        if rec.get("release_key") == purchase.release_key:
            return rec
        if (purchase.name is None and rec.get("meaning") is None and rec.get("dataset") == dataset
                and rec.get("release_id") == purchase.release_id):
            older.append(rec)
    same_bytes = [rec for rec in older if rec.get("release_key") == purchase.byte_key]
    return next(iter(same_bytes or older), None)


def same_meaning(spend: Record, purchase: Purchase) -> bool:
    """Whether ``spend`` (``paid_for``'s) paid for what ``purchase`` asks: a spec of the same meaning, or for a 0.3
    record (no meaning), the same spec bytes (its byte key; a purchase made as 0.3 made one has it as its key)."""
    if spend.get("meaning") is not None:
        return purchase.meaning is not None and bool(spend.get("meaning") == purchase.meaning)
    byte_key = purchase.byte_key if purchase.meaning is not None else purchase.release_key
    return bool(spend.get("release_key") == byte_key)


def release_id_taken(ledger_name: str, dataset: str, spend: Record, purchase: Purchase) -> ReleaseIdTaken:
    """The refusal of a run whose release id ``spend`` paid for with a spec of another meaning (nothing spent)."""
    spec = f"spec '{purchase.name}' on " if purchase.name is not None else ""
    paid = str(spend.get("spec_sha256", ""))[:16]
    command = spend.get("command") or "release"
    by = f" (a `dpcli {command}` run)" if command != (purchase.command or "release") else ""
    if spend.get("meaning") is None:
        what = (f"with a spec whose text differs (sha256 {paid}...: a record of dpcli 0.3 or older, which knew a spec "
                "by its bytes, so only that text is given its table)")
    else:
        what = f"with a spec of another meaning (sha256 {paid}...)"
    remedy = "another `name:` in the spec" if purchase.name is not None else (
        "a `name:` in the spec (several specs on one dataset sharing release ids)")
    return ReleaseIdTaken(
        f"ledger {ledger_name}: release id '{purchase.release_id}' of {spec}dataset '{dataset}' was paid for by "
        f"record {spend.seq}{by} {what}; a release id is paid for once: nothing was spent",
        spend.seq,
        hint=f"give {remedy} or use a new --release-id",
    )


def spend_fields(
    records: list[Record], ledger_name: str, dataset: str, cost: Budget, purchase: Purchase | None = None,
) -> SpendFields | PaidSpendFields:
    """The fields of a new spend record, after the checks against the verified ``records``: the release id is not
    paid yet (else ReleaseIdPaid, or ReleaseIdTaken for a spec of another meaning), the unit and relation match the
    dataset's pin, and the spend fits the cap."""
    epsilon, rho, delta = cost.epsilon, cost.rho, cost.selection_delta
    if purchase is not None:
        earlier = paid_for(records, dataset, purchase)
        if earlier is not None and not same_meaning(earlier, purchase):
            raise release_id_taken(ledger_name, dataset, earlier, purchase)
        if earlier is not None:
            raise ReleaseIdPaid(
                f"ledger {ledger_name}: release id '{purchase.release_id}' of this spec was paid for by "
                f"record {earlier.seq}",
                earlier.seq,
            )
    status = budgets(records, ledger_name).get(dataset)
    if purchase is not None:
        check_pin(status, dataset, purchase.unit, purchase.neighbours, ledger_name)
    period = None if purchase is None else purchase.period
    check_spend(period_status(status, dataset, period, ledger_name), dataset, epsilon, ledger_name, rho, delta)
    charged_eps, charged_rho = charge(epsilon), charge(rho)
    if not (within_limits(charged_eps) and within_limits(charged_rho) and within_limits(delta)):
        # never write what could not be read back
        raise UsageError(f"a spend may have at most {MAX_DIGITS} digits in its charged numerator and denominator")
    # the record holds what is charged (on the grid): the exact request is in the spec, named by its hash
    fields: SpendFields = {"type": "spend", "dataset": dataset, "epsilon": format_exact(charged_eps)}
    if charged_rho:
        fields["rho"] = format_exact(charged_rho)
    if delta:
        fields["delta"] = format_exact(delta)  # partition selections' delta, spent outright
    if period is not None and status is not None and status.per_period:
        fields["period"] = period  # the renewing cap's period it is charged to (a lifetime cap has none)
    if purchase is None:
        return fields
    paid: PaidSpendFields = {**purchase.fields(), **fields}
    return paid


def piece_key(series_key: str, piece: str) -> str:
    """A series' piece's name in the store: a hash of the series' key (its charge's release key) and the piece id."""
    return hashlib.sha256(f"piece\0{series_key}\0{piece}".encode()).hexdigest()[:40]


def period_key(series_key: str, period: int) -> str:
    """A series' period's name in the ledger and the store (its frozen table, its ``released`` record)."""
    return hashlib.sha256(f"period\0{series_key}\0{period}".encode()).hexdigest()[:40]


def recorded_pieces(records: Iterable[Record], series_key: str) -> dict[str, str]:
    """The pieces of the series ``series_key`` that ``pieces`` records name: id -> the sha256 of its stored bytes."""
    out: dict[str, str] = {}
    for rec in records:
        if rec.type == "pieces" and rec.get("series_key") == series_key:
            for piece in rec.get("pieces"):
                out.setdefault(str(piece["id"]), str(piece["sha256"]))
    return out


def released_record(records: Iterable[Record], key: str) -> Record | None:
    """The ``released`` record of ``key`` (a release's or a series period's), if any."""
    return next((r for r in records if r.type == "released" and r.get("release_key") == key), None)


@dataclass(frozen=True)
class SeriesStatus:
    """How far a series has gone (``budget show``, ``ledger show``): its charge, horizon and design, the periods
    released (frozen) and the pieces drawn."""

    dataset: str
    name: str | None  # the spec's `name:`
    charge: int  # the spend record's seq
    periods: int
    design: str
    released: tuple[int, ...]
    pieces: int


def series_statuses(records: list[Record]) -> list[SeriesStatus]:
    """Every series the records charged, in charge order, with its released periods and pieces."""
    out = []
    frozen = {str(r.get("release_key")): int(r.get("series_period")) for r in records
              if r.type == "released" and type(r.get("series_period")) is int}
    for rec in records:
        facts = rec.get("series") if rec.type == "spend" else None
        if not isinstance(facts, dict):
            continue
        key = str(rec.get("release_key"))
        periods = int(facts["periods"])
        released = tuple(sorted(t for k, t in frozen.items() if period_key(key, t) == k))
        out.append(SeriesStatus(str(rec.get("dataset")), rec.get("spec_name"), rec.seq, periods,
                                str(facts["design"]), released, len(recorded_pieces(records, key))))
    return out


# A backend's store-and-append under its writers' lock (``Ledger._locked``): the verified records, ``store(key,
# bytes)`` and ``append(fields)`` (once).
Store = Callable[[str, bytes], None]
Append = Callable[[NewFields], Record]


_AGAINST = {"argument": "published head", "option": "--against"}


def published_head(item: str | Path) -> str:
    """The head hash named by a ``ledger verify --against`` argument: a release's ``.meta.json``, or a head hash
    (the 64 hex digits of the metadata, or a prefix of at least 16, as the release summary prints).

    A path that cannot be read is a usage error (exit 2) that says so: reading it as a hash would report a
    rollback of a ledger that is fine."""
    text = str(item)
    try:
        raw = Path(item).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        if re.fullmatch(r"[0-9a-f]{16,64}", text):
            return text
        raise UsageError(f"cannot read {text}: no such file (and it is not a head hash)", **_AGAINST) from None
    except OSError as exc:
        raise UsageError(f"cannot read {text}: {exc.strerror or 'unreadable'}", **_AGAINST) from None
    try:
        head = json.loads(raw)["ledger"]["head"]
    except (ValueError, KeyError, TypeError, IndexError):
        head = None
    if not isinstance(head, str) or not HEX_HEAD.fullmatch(head):
        raise UsageError(f"{text} is not a release's metadata file", **_AGAINST)
    return head


class Ledger(ABC):
    """A ledger backend. Every mutating method verifies the whole chain under an exclusive lock first."""

    name: str

    @abstractmethod
    def records(self) -> list[Record]:
        """All records, verified (raises LedgerError on a broken chain)."""

    # -- writing: the checks and the record's fields are shared; each backend appends under its own lock ----------

    @abstractmethod
    def _write(self, build: Callable[[list[Record]], NewFields], doing: str) -> Record:
        """Under the writers' lock: read and verify the chain, call ``build(records)`` for the new record's fields
        (it raises to refuse; nothing is written then), and append that record durably (``new_record``)."""

    def set_cap(
        self, dataset: str, cap: Cap, allow_raise: bool, unit: str | None = None, neighbours: str | None = None,
    ) -> Record:
        """Append a cap record for ``dataset`` (checked by ``cap_fields``: raising needs ``allow_raise``; ``unit``
        and ``neighbours``, both or neither, pin the dataset's relation)."""
        return self._write(
            lambda records: cap_fields(records, self.name, dataset, cap, allow_raise, unit, neighbours),
            "setting the cap",
        )

    def spend(
        self, dataset: str, cost: Budget, purchase: Purchase | None = None,
        before_append: Callable[[], None] | None = None,
    ) -> Record:
        """Atomically check the cap and append a durable spend record; BudgetRefused when it does not fit.

        ``cost.epsilon`` is the pure-DP part, ``cost.rho`` the zCDP part (stored as ``rho`` when non-zero),
        ``cost.selection_delta`` what partition selections spend outright (stored as ``delta`` when non-zero);
        ``purchase`` what it pays for (a release id already paid for is ReleaseIdPaid, or ReleaseIdTaken when it
        was paid for with a spec of another meaning). ``before_append``
        runs once the lock is held, before anything is written: whatever it raises ends the spend with nothing
        spent (the paid-run protocol raises there a signal that came during the lock wait)."""

        def build(records: list[Record]) -> NewFields:
            if before_append is not None:
                before_append()
            fields = spend_fields(records, self.name, dataset, cost, purchase)
            self.check_store()  # under the lock, once more: nothing is paid for that could not be stored
            return fields

        return self._write(build, "recording the spend")

    def mark_released(self, release_key: str, delivery: Delivery) -> Record:
        """Append the ``released`` record of a spend (its result is stored)."""
        return self._write(
            lambda records: {**delivery.fields(), "type": "released", "release_key": release_key},
            "recording the release",
        )

    # -- a series' pieces and frozen periods (issue 26): stored, then recorded, under the writers' lock --------

    @abstractmethod
    def _locked(self, body: Callable[[list[Record], Store, Append], T]) -> T:
        """``body(records, store, append)`` under the writers' lock: the verified records, a store write and one
        append (``new_record``), with the backend's durability (PostgreSQL: one transaction)."""

    def draw_pieces(
        self, dataset: str, series_key: str, charge: int, wanted: Sequence[str],
        draw: Callable[[list[str]], Mapping[str, bytes]], before_draw: Callable[[], None] | None = None,
    ) -> dict[str, bytes]:
        """The pieces of ``wanted`` that no record names yet, drawn (``draw(missing)``) under the writers' lock,
        each stored, THEN one ``pieces`` record naming their ids and sha256 (a piece stored and not recorded, by a
        run killed between the two, was never used: it is drawn again). A piece already recorded is never drawn
        again: a concurrent run that needs it finds the record under the lock. Returns the pieces drawn here."""

        def body(records: list[Record], store: Store, append: Append) -> dict[str, bytes]:
            known = recorded_pieces(records, series_key)
            missing = [p for p in wanted if p not in known]
            if not missing:
                return {}
            if before_draw is not None:
                before_draw()
            drawn = dict(draw(missing))
            if sorted(drawn) != sorted(missing):
                raise InternalError("a series' draw returned other pieces than it was asked for")
            for piece in missing:
                store(piece_key(series_key, piece), drawn[piece])
            append({"type": "pieces", "dataset": dataset, "series_key": series_key, "charge": charge,
                    "pieces": [{"id": p, "sha256": hashlib.sha256(drawn[p]).hexdigest()} for p in missing]})
            return drawn

        return self._locked(body)

    def load_piece(
        self, series_key: str, piece: str, records: list[Record] | None = None, known: Mapping[str, str] | None = None,
    ) -> bytes:
        """A recorded piece's stored bytes; LedgerError (exit 5) when it is missing or altered: a recorded piece is
        never drawn again (a second draw of the same noisy state would let the two be averaged). ``known``: the
        series' recorded pieces (recorded_pieces), when the caller loads many (else read from the records: a table
        of t periods would read them t times)."""
        if known is None:
            known = recorded_pieces(self.records() if records is None else records, series_key)
        if piece not in known:
            raise InternalError(f"piece {piece} of a series is loaded before it is recorded")
        data = self.load_table(piece_key(series_key, piece))
        if data is None or hashlib.sha256(data).hexdigest() != known[piece]:
            what = "missing from" if data is None else "altered in"
            raise LedgerError(
                f"ledger {self.name}: the series' recorded piece {piece} is {what} the store; a recorded piece is "
                "never drawn again, so the periods that need it cannot be released"
            )
        return data

    def frozen_period(self, key: str, records: list[Record] | None = None) -> tuple[Record, bytes] | None:
        """A series period's frozen table (its ``released`` record and bytes), None when not released; LedgerError
        when it is missing or altered (a published figure is never made again)."""
        done = released_record(self.records() if records is None else records, key)
        if done is None:
            return None
        data = self.load_table(key)
        if data is None or hashlib.sha256(data).hexdigest() != done.get("table_sha256"):
            raise LedgerError(
                f"ledger {self.name}: the frozen table of period {done.get('series_period')} of this series is "
                f"{'missing from' if data is None else 'altered in'} the store (record {done.seq}); a released period "
                "is never made again"
            )
        return done, data

    def freeze_period(self, key: str, table: bytes, delivery: Delivery) -> tuple[Record, bytes]:
        """Store a period's table and its ``released`` record under the lock, unless a concurrent run froze it
        first: then its table is the period's (the one returned)."""
        frozen = self.freeze_period_if(key, table, delivery, lambda _records: True)
        if frozen is None:
            raise InternalError("a period's table was not frozen")
        return frozen

    def freeze_period_if(
        self, key: str, table: bytes, delivery: Delivery, current: Callable[[list[Record]], bool],
    ) -> tuple[Record, bytes] | None:
        """``freeze_period``, when ``current(records)`` holds under the lock: the ledger's records still say what
        ``table`` was made from (a monotone running total's bounds: the periods frozen so far). Else nothing is
        written and None is returned: the caller makes the table again from the records as they are now."""

        def body(records: list[Record], store: Store, append: Append) -> tuple[Record, bytes] | bool | None:
            if released_record(records, key) is not None:
                return None
            if not current(records):
                return False
            store(key, table)
            return append({**delivery.fields(), "type": "released", "release_key": key}), table

        done = self._locked(body)
        if done is False:
            return None
        if isinstance(done, tuple):
            return done
        frozen = self.frozen_period(key)
        if frozen is None:  # recorded under the lock a moment ago
            raise InternalError("a frozen period's record went missing")
        return frozen

    # -- the release store: noisy tables of earlier releases, for idempotent re-runs ---------------------------

    @abstractmethod
    def store_table(self, release_key: str, table: bytes) -> None:
        """Keep a released table (canonical JSON) beside the ledger. Written before the ``released`` record."""

    @abstractmethod
    def load_table(self, release_key: str) -> bytes | None:
        """The stored table of a release, or None when it is not there."""

    @abstractmethod
    def check_store(self) -> None:
        """Raise LedgerError (exit 5, nothing spent) when the release store could not take a table: checked before
        the spend (``check``, and ``spend`` under the lock), since a paid release whose table cannot be stored is
        exit 5 after the spend and its id is never drawn again."""

    def find_release(self, key: str, records: list[Record] | None = None) -> tuple[Record, Record | None, bytes | None]:
        """The release named ``key`` (release_key) if it was paid for: (spend, released record or None, stored table
        or None). Raises LedgerError when the stored table does not hash to what its ``released`` record names: an
        edited store must never be served as the paid-for release."""
        if records is None:
            records = self.records()
        spend = paid_spend(records, key)
        if spend is None:
            raise KeyError(key)
        done = next((r for r in records if r.type == "released" and r.get("release_key") == key), None)
        if done is None:
            return spend, None, None
        table = self.load_table(key)
        if table is not None and hashlib.sha256(table).hexdigest() != done.get("table_sha256"):
            raise LedgerError(
                f"ledger {self.name}: the stored table of the release paid by record {spend.seq} does not match its "
                "record (the release store was edited); it is never drawn again"
            )
        return spend, done, table

    def contains_head(self, head: str) -> bool:
        """Whether a head hash published with a release is in this chain (an older copy would lack later ones).
        ``head`` may be a prefix of at least 16 hex digits (the release summary prints 16)."""
        if len(head) < 16:
            return False
        return any(r.hash.startswith(head) for r in self.records())

    def verify(self) -> VerifyReport:
        recs = self.records()
        head = recs[-1].hash if recs else GENESIS
        return VerifyReport(len(recs), head, self.keyed, budgets(recs, self.name))

    def status(
        self, dataset: str, records: list[Record] | None = None, period: str | None = None,
    ) -> BudgetStatus | None:
        """The dataset's budget; of a renewing cap and a ``period``, that period's (what a release there left)."""
        status = budgets(self.records() if records is None else records, self.name).get(dataset)
        if status is not None and status.per_period and period is not None:
            return status.for_period(period)
        return status

    def check(
        self, dataset: str, cost: Budget, records: list[Record] | None = None, period: str | None = None,
    ) -> None:
        """A read-only pre-check of ``cost`` on verified ``records`` (read when not given) and of the release store;
        ``spend`` repeats both under the lock. ``period``: the declared period a renewing cap charges (Purchase's)."""
        status = period_status(self.status(dataset, records), dataset, period, self.name)
        check_spend(status, dataset, cost.epsilon, self.name, cost.rho, cost.selection_delta)
        self.check_store()

    @property
    @abstractmethod
    def keyed(self) -> bool: ...

    @property
    def own_paths(self) -> tuple[Path, ...]:
        """Every local path this ledger writes (an output must be none of them, nor inside one): none for a server."""
        return ()

    @property
    def own_trees(self) -> tuple[Path, ...]:
        """Local directories this ledger keeps (the release store): an output must not be written inside them."""
        return ()
