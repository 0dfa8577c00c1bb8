"""The budget ledger: caps and spends per dataset, as a tamper-evident hash chain.

Records (one JSON object per line in the file backend), each with ``seq``, ``prev`` (hash of the previous record),
``type``, ``time`` and ``hash``:
- ``cap``:      a dataset's cap, ``epsilon`` (exact text); lowering is always allowed, raising needs ``raise``;
                ``per``: ``period`` for a cap that renews per declared period (issue 26);
- ``spend``:    a release's charge, ``epsilon`` (and ``rho``) rounded up onto the 10^-18 grid (exact text),
                ``release_id``, ``release_key``, the spec's hash;
                ``period``, the declared period a renewing cap charged;
- ``released``: the output of a spend was written (``release_id``, ``output_sha256``).

Budget arithmetic is exact (``Fraction``): remaining = cap - sum of charges, never a float. Charges sit on a
fixed decimal grid so their sums stay short; caps are exact within a digit limit (dpcli.ledger.base).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from dpcli.core.locations import as_location, is_ledger_url
from dpcli.errors import LedgerError, UsageError
from dpcli.ledger.base import (
    DEFAULT_LOCK_TIMEOUT,
    BudgetStatus,
    Delivery,
    Ledger,
    Purchase,
    RandomizedColumn,
    Record,
    VerifyReport,
    published_head,
)
from dpcli.ledger.jsonl import JsonlLedger


def ledger_key() -> bytes | None:
    """The optional HMAC key: $DPCLI_LEDGER_KEY, or the contents of the file named by $DPCLI_LEDGER_KEY_FILE.

    Never in a spec. With a key, someone who can edit the ledger but not read the key cannot forge a valid chain.
    """
    # the environment's bytes as they are: a key need not be UTF-8 ($'\xff'), and encoding os.environ's
    # surrogate-escaped text back would fail; a UTF-8 key gives the same bytes either way
    key = os.environb.get(b"DPCLI_LEDGER_KEY")
    if key:
        return key
    raw_file = os.environb.get(b"DPCLI_LEDGER_KEY_FILE")
    if raw_file:
        key_file = raw_file.decode("utf-8", "backslashreplace")  # for messages only
        data = _read_key_file(raw_file, key_file).strip()
        if not data:
            raise LedgerError(f"the ledger key file {key_file} is empty")
        return data
    return None


def _read_key_file(raw_file: bytes, key_file: str) -> bytes:
    """The key file's bytes. Opened without blocking and refused unless a regular file (exit 2): a FIFO named by
    $DPCLI_LEDGER_KEY_FILE would otherwise hang every command that reads the ledger, and a device never end."""
    try:
        fd = os.open(raw_file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise LedgerError(f"cannot read the ledger key file {key_file}: {exc.strerror or 'unreadable'}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(
                f"DPCLI_LEDGER_KEY_FILE names {key_file}, which is not a regular file (a FIFO, a device or a "
                "directory): put the key in a file"
            )
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    except OSError as exc:
        raise LedgerError(f"cannot read the ledger key file {key_file}: {exc.strerror or 'unreadable'}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def resolve_ledger(explicit: str | Path | None, spec_ledger: str | Path | None) -> str | Path:
    """The ledger a command uses: ``explicit`` (the CLI's --ledger), else $DPCLI_LEDGER, else the spec's ``ledger:``.
    A PostgreSQL URL stays text (a Path would fold its //). None of them: UsageError, whose hint names the flag."""
    for candidate in (explicit, os.environ.get("DPCLI_LEDGER") or None, spec_ledger):
        if candidate:
            return as_location(candidate)
    raise UsageError(
        "no ledger: none was given, DPCLI_LEDGER is not set and the spec has no `ledger:`",
        hint="pass --ledger PATH or URL",
    )


def open_ledger(location: str | Path, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> Ledger:
    """The ledger at a path, or in PostgreSQL for a ``postgresql://`` URL."""
    if is_ledger_url(str(location)):
        from dpcli.ledger.postgres import PostgresLedger

        return PostgresLedger(str(location), lock_timeout=lock_timeout, key=ledger_key())
    return JsonlLedger(Path(location), lock_timeout=lock_timeout, key=ledger_key())


__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "BudgetStatus",
    "Delivery",
    "JsonlLedger",
    "Ledger",
    "Purchase",
    "RandomizedColumn",
    "Record",
    "VerifyReport",
    "is_ledger_url",
    "ledger_key",
    "open_ledger",
    "published_head",
    "resolve_ledger",
]
