"""What a ledger location names: a PostgreSQL URL (kept as text) or a local path.

At the bottom of the layering so that the spec's loader and the ledger (dpcli/ledger/) read a location the same way.
"""

from __future__ import annotations

from pathlib import Path

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_ledger_url(location: object) -> bool:
    """Whether ``location`` is a PostgreSQL URL. A Path never is: ``Path`` folds the URL's ``//``."""
    return isinstance(location, str) and location.startswith(POSTGRES_SCHEMES)


def as_location(location: str | Path) -> str | Path:
    """A PostgreSQL URL stays text; anything else is a Path."""
    return location if is_ledger_url(location) else Path(location)
