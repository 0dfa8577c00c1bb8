"""The paid-run protocol: the one way a command that spends turns a release id into a charge, noisy state and output.

    release id -> reuse check (the spec, the id and the ledger only: never the input) -> pin and cap check
        -> [the command reads its input: nothing spent yet]
        -> signals held -> CHARGE: the spend, under the ledger's lock (a concurrent run paid first: its result is
           the release, ours is never drawn)
        -> NOISY STATE: drawn once, stored in the release store, the ``released`` record names its hash
        -> signals released -> POST-PROCESSING and writing, re-runnable from the stored state
        a failure after the charge: SpentThenFailed (exit 5) naming the paid record and whether the state is stored

It keeps three things apart, so that no command touches the ledger's spend/store/mark sequence itself:

- **the charge** (``PaidRun.pay``'s spend): a ``Budget`` value and a ``Purchase`` (the public facts its record
  names), checked by the ledger under its lock; before it a signal ends the run with nothing spent;
- **the noisy state** (``Work.draw``): the only code that reads the exact data after the charge, drawn at most once
  per release id, stored before anything is published and never drawn again (fresh noise for a question already
  answered would let averaging cancel it);
- **the post-processing** (``Work.publish`` and ``Work.republish``): what turns the stored state into output. It
  spends nothing and reads no data, so a re-run under the release id (``PaidRun.reissue``), or a run that lost the
  race, repeats it from the stored bytes.

``release`` (tables), ``randomize`` (a randomized file) use it; the frequency release (estimates from a randomize
output) spends nothing, and reports a failure with ``Unpaid`` as a re-issue does.

**A series (issue 26)**: the first period's run is the charge: ``pay`` with the series' whole ``Budget`` and a
``Purchase`` naming the horizon and the design; its ``Work.draw`` draws only what the first period needs. A later
period spends nothing: under the ledger's lock it finds the charge (``paid_spend``), draws the noisy pieces its period
needs that no run drew yet (a tree's new nodes), stores them and appends one record that chains them to the charge and
to the previous piece, the same store-then-record order as ``pay`` (a piece is stored before its record, so it is
never drawn twice; a run that finds it recorded reuses it). That is a second entry of this module beside ``pay``
(``draw_pieces``, given a ``PieceWork``), sharing ``Paid``, the held signals and the failure report; the first
period's ``Work.publish`` enters it too, right after the charge. Each period's table is made from the stored pieces
and frozen (stored, with a ``released`` record naming its pieces): a re-run returns it.

**A renewing cap (issue 26, ``budget set --per period``)**: the charge names the declared period it is charged to
as ``Purchase.period`` (``Purchase.of(..., period=KEY)``): ``check_budget`` and the ledger's ``spend`` then check the
spend against that period's sums, and the spend record holds the key. A release's key is its named release id (a
drawn id names no period: refused, exit 2, before the input is read); a series charging period N of a renewing cap
passes that period's key the same way. Under a lifetime cap the key is neither used nor recorded.

**Synthetic data (issue 27)**: ``pay`` charges selection and measurement as one ``Budget``; ``Work.draw`` makes the
selections and the noisy marginal measurements (small, exact integers) and returns them as the stored state; the long
estimation and sampling stage is ``Work.publish`` (and ``republish``): it reads only the stored measurements, so a
run that failed there (out of memory, killed) is re-run under its release id with no new noise and no spend, and the
large synthetic file is never kept in the store.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypedDict, TypeVar

from dpcli.core import signals
from dpcli.core.accounting import Budget
from dpcli.errors import DpcliError, Interrupted, LedgerError, ReleaseIdPaid, SpentThenFailed, UsageError
from dpcli.ledger import Delivery, Ledger, Purchase, Record
from dpcli.ledger.base import check_pin, paid_for, release_id_taken, same_meaning

__all__ = [
    "RELEASE_ID", "Paid", "PaidRun", "PieceWork", "Unpaid", "Work", "check_release_id", "leaves_nothing",
    "run_release_id", "spent_then_failed", "what_failed",
]

# A release id is public (it is in the ledger, the sidecar and CI logs): a date, a pipeline id, a version tag.
RELEASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+@-]{0,127}")
_WAIT_POLL = 0.1  # seconds between looks at the ledger while another run under the same release id finishes

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


def check_release_id(release_id: str) -> str:
    if not RELEASE_ID.fullmatch(release_id):
        raise UsageError(
            f"release id '{release_id[:60]}' is not valid: 1 to 128 letters, digits and . _ : + @ -, "
            "starting with a letter or digit"
        )
    return release_id


def run_release_id(given: str | None) -> tuple[str, bool]:
    """A run's release id and whether it was named: ``given``, checked (UsageError), else a fresh random one (its
    key, dpcli.ledger.Purchase.of, then names a release no other run asks for)."""
    if given is None:
        return uuid.uuid4().hex, False
    return check_release_id(given), True


@dataclass
class Paid:
    """What a run that failed after its spend must say: which record paid, whether its result is stored (the fact),
    and how to get it written (the hint, which names the CLI's flag)."""

    ledger: str
    record: int
    release_id: str
    named: bool
    stored: bool = False
    period: int | None = None  # a series' period: the series' charge paid for it (``stored``: its frozen table)

    def text(self) -> str:
        if self.period is not None:
            paid = f"the series was paid for by ledger {self.ledger} record {self.record}, with no refund"
            if self.stored:
                return f"{paid}; period {self.period}'s table is stored"
            return (f"{paid}; period {self.period}'s table was not stored (the pieces recorded for it are kept and "
                    "never drawn again)")
        paid = f"the release was paid for by ledger {self.ledger} record {self.record}, with no refund"
        if not self.stored:
            return f"{paid}; its table was not stored, so release id '{self.release_id}' can never be written"
        return f"{paid}; its table is stored under release id '{self.release_id}'"

    def facts(self) -> PaidFacts:
        """The same facts as the error's fields (``--json``)."""
        return {"record": self.record, "release_id": self.release_id, "stored": self.stored}

    def hint(self) -> str | None:
        if self.period is not None:
            return f"re-run with --period {self.period}: nothing is spent, and no recorded piece is drawn again"
        if not self.stored:
            return None
        again = f"--release-id {self.release_id}" + ("" if self.named else " (the id this run drew)")
        return f"re-run with {again} to write it"


class PaidFacts(TypedDict):
    """A paid run's facts as SpentThenFailed's keyword arguments."""

    record: int
    release_id: str
    stored: bool


@dataclass(frozen=True)
class Unpaid:
    """What a run that spends nothing says when its writing fails: a re-issue of a paid release, or estimates from
    a published file."""

    reason: str

    @classmethod
    def reissue(cls, spend: Record) -> Unpaid:
        return cls(f"nothing was spent (ledger record {spend.seq} already paid for this release)")

    def text(self) -> str:
        return self.reason

    def hint(self) -> str | None:
        return None


class Work(Protocol[R_co]):
    """A command's part of a paid run. The protocol calls ``draw`` once, after the charge, with signals held;
    ``publish`` after the state is stored and signals are released; ``republish`` on a re-run (or a lost race) with
    the stored state of the run that paid. ``drop`` lets the exact data go when this run will not draw."""

    waiting_for: str  # progress text: what a run that lost the race waits for ("its table")
    stored_note: str  # progress text once the state is stored ("table stored")

    def draw(self) -> bytes:
        """The noisy state, drawn from the exact data (then let go), as the bytes the release store keeps."""
        ...

    def delivery(self, release_id: str, stored_sha256: str) -> Delivery:
        """The ``released`` record's facts for the state just stored."""
        ...

    def publish(self, spend: Record, paid: Paid) -> R_co:
        """Post-processing and writing of the state this run drew (a failure is reported naming ``paid``)."""
        ...

    def republish(self, spend: Record, stored: bytes) -> R_co:
        """The same from the stored state of the run that paid (``spend``): nothing is spent or drawn."""
        ...

    def unstored(self, released: bool) -> str:
        """Why a paid release id has no stored state (``released``: its record is there, the store lost it)."""
        ...

    def drop(self) -> None:
        """This run will not draw (another run paid for the id): free the exact data."""
        ...


class PieceWork(Protocol[R_co]):
    """A series period's part of a paid run (issue 26), after the series' charge: ``draw_pieces`` draws, stores
    and records the pieces no run drew yet, under the ledger's lock (``hold_from_here`` is called there, before the
    first draw); ``finish`` makes the period's table from the stored pieces, freezes it and writes it."""

    key: str  # the period's name in the ledger (its frozen table's key)
    period: int

    def draw_pieces(self, charge: Record, hold_from_here: Callable[[], None]) -> None:
        ...

    def finish(self, charge: Record, paid: Paid) -> R_co:
        ...


@dataclass
class PaidRun:
    """One run of a command that spends, for one release id (drawn when not given) of one spec. What it returns is
    its ``Work``'s (``pay`` and ``reissue`` are generic in it), so one type serves every command."""

    book: Ledger
    dataset: str
    cost: Budget
    purchase: Purchase
    named: bool
    wait: float  # seconds to wait for a concurrent run's stored state (the lock timeout)
    say: Callable[[str], None]

    @property
    def release_id(self) -> str:
        return self.purchase.release_id

    @property
    def key(self) -> str:
        return self.purchase.release_key

    # -- before the input is read -------------------------------------------------------------------------------

    def earlier_spend(self, records: list[Record]) -> Record | None:
        """The spend that already paid for this named release id (then its stored state is the release), else None;
        ReleaseIdTaken when it paid for a spec of another meaning. A function of the spec, the id and the ledger's
        records only, never of the input."""
        return self.paid_spend(records) if self.named else None

    def paid_spend(self, records: list[Record]) -> Record | None:
        """The spend that paid for this release id, if any (dpcli.ledger.base.paid_for: under its key, or 0.3's byte
        key); ReleaseIdTaken when it paid for a spec of another meaning."""
        spend = paid_for(records, self.dataset, self.purchase)
        if spend is not None and not same_meaning(spend, self.purchase):
            raise release_id_taken(self.book.name, self.dataset, spend, self.purchase)
        return spend

    def paid_earlier(self, records: list[Record]) -> bool:
        return self.earlier_spend(records) is not None

    def check_budget(self, records: list[Record]) -> None:
        """The fast refusal on the verified ``records``: the dataset's pinned unit and relation, the cap, the store
        (the binding checks are repeated under the lock by the spend)."""
        status = self.book.status(self.dataset, records)
        check_pin(status, self.dataset, self.purchase.unit, self.purchase.neighbours, self.book.name)
        self.book.check(self.dataset, self.cost, records, self.purchase.period)

    # -- the charge, the noisy state, the post-processing ------------------------------------------------------

    def pay(self, work: Work[R], before_spend: Callable[[], None] | None = None) -> R:
        """Charge, draw and store the noisy state, then publish it. ``before_spend`` runs under the ledger's lock
        before the spend is written (whatever it raises: nothing spent).

        SIGINT/SIGTERM/SIGHUP wait from the moment the spend is about to be written until the state is stored: a
        paid release id always gets its state, so an interrupted run is recovered with the release id instead of
        burning it. Before that moment (the lock wait) a signal ends the run with nothing spent."""
        book, say = self.book, self.say
        with signals.Held() as hold:

            def before_append() -> None:  # under the ledger's lock, before the spend is written
                if before_spend is not None:
                    before_spend()
                hold.hold_from_here()  # a Ctrl-C until then (the lock wait): nothing spent

            try:
                spend = book.spend(self.dataset, self.cost, self.purchase, before_append=before_append)
            except ReleaseIdPaid:
                # another run under the same id spent first (we raced it): its state is the release, ours is never
                # drawn
                work.drop()
                hold.release()
                say(f"release id '{self.release_id}' was paid for by a concurrent run: waiting for {work.waiting_for}")
                return self.reissue(work)
            paid = Paid(book.name, spend.seq, self.release_id, self.named)
            try:
                say(f"spend recorded: ledger record {spend.seq}")
                stored = work.draw()
                # The state is stored and recorded before anything is written: a paid release id always has it, so
                # if writing fails, a re-run under the id publishes this state (never new noise).
                book.store_table(self.key, stored)
                book.mark_released(self.key, work.delivery(self.release_id, hashlib.sha256(stored).hexdigest()))
                del stored
                paid.stored = True
                say(f"{work.stored_note} and the release recorded as done")
                hold.release()  # a signal that came meanwhile is raised here, and reported below with the paid record
                done = work.publish(spend, paid)
            except BaseException as exc:  # noqa: BLE001 - after the spend every failure must name what was paid
                failure = spent_then_failed(exc, paid, book, self.key)
                # a signal held until now must not replace this report with "nothing was spent"
                with contextlib.suppress(KeyboardInterrupt, Interrupted):
                    hold.release()
                raise failure from None
        return done

    def draw_pieces(self, charge: Record, work: PieceWork[R]) -> R:
        """The protocol's second entry: a series' period after its charge (``charge``, the spend that paid for the
        series, by this run or an earlier one). Spends nothing: under the ledger's lock the pieces the period needs
        that no run drew yet are drawn, stored and recorded, signals held from the first draw until they are; then
        the period's table is made from the stored pieces. A failure is exit 5 naming the charge and whether the
        period's table is stored, as ``pay``'s is."""
        book = self.book
        paid = Paid(book.name, charge.seq, self.release_id, self.named, period=work.period)
        with signals.Held() as hold:
            try:
                work.draw_pieces(charge, hold.hold_from_here)
                hold.release()  # a signal that came meanwhile is raised here, and reported below with the charge
                return work.finish(charge, paid)
            except BaseException as exc:  # noqa: BLE001 - after the charge every failure must name what was paid
                failure = spent_then_failed(exc, paid, book, work.key)
                with contextlib.suppress(KeyboardInterrupt, Interrupted):
                    hold.release()
                raise failure from None

    def reissue(self, work: Work[R]) -> R:
        """Publish again the stored state of the release paid for under this id (same numbers, no new noise, no
        spend). A paid release whose state is missing or altered is exit 5: the id is never drawn again."""
        spend, done, stored = self.stored_state()
        if stored is None:
            raise self.unstored_error(spend, work.unstored(done is not None))
        return work.republish(spend, stored)

    def stored_state(self) -> tuple[Record, Record | None, bytes | None]:
        """The spend, the `released` record and the stored state of this id (paid for): a run that paid and has not
        stored its state yet is waited for, up to the run's ``wait`` seconds. Reads only."""
        deadline = time.monotonic() + self.wait
        while True:
            records = self.book.records()
            paid = self.paid_spend(records)
            # the key it was paid under: this run's, or 0.3's byte key of the same spec text
            key = self.key if paid is None else str(paid.get("release_key"))
            spend, done, stored = self.book.find_release(key, records)
            if done is not None or time.monotonic() >= deadline:
                return spend, done, stored
            time.sleep(_WAIT_POLL)

    def unstored_error(self, spend: Record, what: str) -> LedgerError:
        """Exit 5 for a paid id whose state cannot be had (``what``): it is never drawn again."""
        return LedgerError(
            f"ledger {self.book.name}: release id '{self.release_id}' of this spec was paid for by record "
            f"{spend.seq}, but {what}; a paid release id is never drawn again",
            hint="use a new --release-id",
        )


@contextlib.contextmanager
def leaves_nothing(*paths: Path) -> Iterator[None]:
    """Writing outputs (each by atomic_write): whatever stops the block (disk full, an I/O error, a signal, memory),
    a file among ``paths`` that it renamed into place is removed, so a failed run leaves no new or half-described
    output behind (a table without its sidecar, a file the error says was not written)."""
    before = [_identity(p) for p in paths]
    try:
        yield
    except BaseException:
        for p, was in zip(paths, before, strict=True):
            if _identity(p) != was:  # renamed into place by this run
                with contextlib.suppress(OSError):
                    os.unlink(p)
        raise


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns)


def spent_then_failed(exc: BaseException, paid: Paid, book: Ledger, key: str) -> SpentThenFailed:
    """The report (exit 5) of ``exc``, raised after the spend ``paid``: what failed, which record paid, and whether a
    re-run under the release id can publish the stored state."""
    paid.stored = paid.stored or _recorded(book, key)
    if isinstance(exc, SpentThenFailed):  # an OutputError already names the record
        return SpentThenFailed(exc.fact, hint=exc.hint, **paid.facts())
    message = f"{what_failed(exc)} after the spend: {paid.text()}"
    hints = (exc.hint if isinstance(exc, DpcliError) else None, paid.hint())
    return SpentThenFailed(message, hint="; ".join(h for h in hints if h) or None, **paid.facts())


def _recorded(book: Ledger, key: str) -> bool:
    """Whether the `released` record and the stored state of ``key`` are in the ledger (asked after a failure, which
    may have come between writing them and taking note: the message must say whether --release-id can recover)."""
    try:
        _spend, done, stored = book.find_release(key)
    except Exception:  # noqa: BLE001 - the ledger may be what failed: then say "not stored", the safe claim
        return False
    return done is not None and stored is not None


def what_failed(exc: BaseException) -> str:
    """One line about an exception, without its message (which might quote a value)."""
    if isinstance(exc, (KeyboardInterrupt, Interrupted)):
        return f"interrupted by {signals.signal_name(exc)}"
    if isinstance(exc, MemoryError):
        return "out of memory"
    if isinstance(exc, OSError):
        return f"an I/O error ({exc.strerror or type(exc).__name__})"
    if isinstance(exc, DpcliError):
        return str(exc)
    return f"an internal error ({type(exc).__name__}; a bug in dpcli, please report it)"
