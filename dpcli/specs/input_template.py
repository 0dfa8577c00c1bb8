"""A series' per-period input template (issue 26): ``input: data/admissions-{date}.csv`` or ``input: data/{period}.csv``
names one file per period, which the run of a period opens itself (dpcli.run.series_input).

- ``{period}``: the period's index, 1..T, in decimal (``data/7.csv``).
- ``{date}``: the period's first instant on the UTC timeline, ``YYYY-MM-DD`` when periods are whole days starting at
  midnight UTC, else ``YYYY-MM-DDTHH`` (whole hours starting on the hour). Any other period rule (an index field,
  minutes, a start off the hour) would give two periods one name or a name no period starts at: refused, use
  ``{period}``.

The template is relative to the spec's directory, as ``input:`` is. Text with neither placeholder is a plain path;
``-`` (standard input) and a URL are never templates. Pure: names only, nothing here opens a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from dpcli.errors import InternalError

__all__ = ["DATE", "PERIOD", "InputTemplate", "date_refusal", "is_template"]

DATE = "{date}"
PERIOD = "{period}"
_DAY = 86400
_HOUR = 3600


def is_template(text: str) -> bool:
    """``input:`` text that names one file per period (it holds ``{date}`` or ``{period}``)."""
    return DATE in text or PERIOD in text


def date_refusal(start: datetime | None, every: int | None) -> str | None:
    """Why ``{date}`` cannot name this rule's periods (None: it can)."""
    if start is None or every is None:
        return "the period field holds an index (no start): {date} names no period; use {period}"
    if every % _HOUR or start.minute or start.second or start.microsecond:
        return ("{date} names a period by its first hour (YYYY-MM-DDTHH, UTC): periods that are not whole hours "
                "starting on the hour would share or lack a name; use {period}")
    return None


def _date_text(start: datetime, every: int, period: int) -> str:
    first = start + timedelta(seconds=(period - 1) * every)
    whole_days = every % _DAY == 0 and start.hour == 0
    return first.strftime("%Y-%m-%d" if whole_days else "%Y-%m-%dT%H")


@dataclass(frozen=True)
class InputTemplate:
    """``input:`` naming one file per period: ``text`` as written, relative to ``base`` (the spec's directory)."""

    base: Path
    text: str

    def file(self, period: int, start: datetime | None, every: int | None) -> Path:
        """Period ``period``'s file (``start``, ``every``: the series' period rule, in UTC and seconds)."""
        name = self.text.replace(PERIOD, str(period))
        if DATE in name:
            if start is None or every is None or date_refusal(start, every) is not None:
                raise InternalError("{date} of a period rule it cannot name")  # the spec's rules refuse it first
            name = name.replace(DATE, _date_text(start, every, period))
        return self.base / name
