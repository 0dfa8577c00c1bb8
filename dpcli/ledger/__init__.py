"""The budget ledger: caps and spends per dataset, as a tamper-evident hash chain.

Records (one JSON object per line in the file backend), each with ``seq``, ``prev`` (hash of the previous record),
``type``, ``time`` and ``hash``:
- ``cap``:      a dataset's cap, ``epsilon`` (exact text); lowering is always allowed, raising needs ``raise``;
- ``spend``:    a release's charge, ``epsilon`` (exact text), ``release_id``, spec and input hashes;
- ``released``: the output of a spend was written (``release_id``, ``output_sha256``).

Budget arithmetic is exact (``Fraction``): remaining = cap - sum of spends, never a float.
"""

from __future__ import annotations

import os
from pathlib import Path

from dpcli.ledger.base import BudgetStatus, Ledger, Record, VerifyReport
from dpcli.ledger.jsonl import JsonlLedger

DEFAULT_LOCK_TIMEOUT = 30.0


def open_ledger(location: str | Path, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> Ledger:
    """The ledger at a path. (A PostgreSQL backend for ``postgresql://`` URLs is planned in issue 3.)"""
    key = os.environ.get("DPCLI_LEDGER_KEY") or None
    return JsonlLedger(Path(location), lock_timeout=lock_timeout, key=key.encode() if key else None)


__all__ = ["BudgetStatus", "Ledger", "Record", "VerifyReport", "JsonlLedger", "open_ledger", "DEFAULT_LOCK_TIMEOUT"]
