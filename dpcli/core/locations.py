"""What a location names: a URL (kept as text: a PostgreSQL ledger, a Spark engine's input) or a local path.

At the bottom of the layering so that the spec's loader, the release and the ledger (dpcli/ledger/) read a location
the same way.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TypeGuard

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(location: object) -> TypeGuard[str]:
    """Whether ``location`` is text of the form ``scheme://...`` (hdfs://, s3a://, file://, postgresql://). A Path
    never is: ``Path`` folds the URL's ``//``."""
    return isinstance(location, str) and _URL.match(location) is not None


def is_ledger_url(location: object) -> bool:
    """Whether ``location`` is a PostgreSQL URL. A Path never is: ``Path`` folds the URL's ``//``."""
    return isinstance(location, str) and location.startswith(POSTGRES_SCHEMES)


def as_location(location: str | Path) -> str | Path:
    """A PostgreSQL URL stays text; anything else is a Path."""
    return location if is_ledger_url(location) else Path(location)
