"""Which ledgers a command names (its explicit ledger, $DPCLI_LEDGER, the spec's ``ledger:``), and whether a
dataset's budget may be split between two of them: each ledger keeps its own cap, so spends split between two
ledgers are each checked against a whole budget (README "The ledger")."""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from dpcli.core.locations import is_ledger_url
from dpcli.errors import DpcliError
from dpcli.ledger import open_ledger, resolve_ledger
from dpcli.ledger.base import DEFAULT_LOCK_TIMEOUT
from dpcli.specs.load import load_spec


class LedgerSource(StrEnum):
    """Where a command found a ledger's location, in resolve_ledger's order."""

    EXPLICIT = "explicit"  # the command's own argument (the CLI's --ledger)
    ENVIRONMENT = "environment"  # $DPCLI_LEDGER
    SPEC = "spec"  # the spec's ledger:


@dataclass(frozen=True)
class OtherLedger:
    """The ledger used (the first named) and another, different ledger named too, each with where it came from."""

    used: str
    used_from: LedgerSource
    other: str
    other_from: LedgerSource


def location_identity(location: str | Path) -> str:
    """What makes two locations one ledger: a URL's text, a path's real path (links and ``..`` resolved)."""
    return str(location) if is_ledger_url(location) else os.path.realpath(location)


def other_ledger(explicit: str | None, spec_ledger: str | Path | None) -> OtherLedger | None:
    """The ledger used and another ledger named, or None when every ledger the command, $DPCLI_LEDGER and the spec
    name is the same one. The first named is the one used (resolve_ledger)."""
    named = [
        (str(loc), source)
        for loc, source in (
            (explicit, LedgerSource.EXPLICIT),
            (os.environ.get("DPCLI_LEDGER"), LedgerSource.ENVIRONMENT),
            (spec_ledger, LedgerSource.SPEC),
        )
        if loc
    ]
    if not named:
        return None
    (used, used_from), *rest = named
    other = next(((loc, src) for loc, src in rest if location_identity(loc) != location_identity(used)), None)
    return None if other is None else OtherLedger(used, used_from, *other)


def cap_elsewhere(
    spec: str | Path, explicit: str | None, lock_timeout: float = DEFAULT_LOCK_TIMEOUT
) -> tuple[str, OtherLedger] | None:
    """After a release of ``spec`` was refused for its budget: its dataset and another ledger named, when the ledger
    used has no cap and no spend of the dataset (its cap may be in the other). The spec and the ledger are read
    again; when either cannot be read now (both read fine a moment ago), None, so that the refusal alone is said."""
    try:
        loaded = load_spec(spec)
        book = open_ledger(resolve_ledger(explicit, loaded.ledger), lock_timeout=lock_timeout)
        if book.status(loaded.dataset) is not None:
            return None
    except DpcliError:
        return None
    pair = other_ledger(explicit, loaded.ledger)
    return None if pair is None else (loaded.dataset, pair)
