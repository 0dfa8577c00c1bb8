"""A series' row -> its period (issue 26): a polars expression over the row's own period field, written once for
every engine that reads text or typed columns.

The field's text is read as docs/spec.md "Series" states: with a start and a length, an ISO 8601 date
(``2027-01-05``: midnight UTC) or date-time (``2027-01-05T06:30``, ``...:15``, ``...:15.25``; ``T`` or a space), with
``Z`` or a ``±HH:MM`` offset, or none (read as UTC); its instant on the UTC timeline falls in period
``floor((instant - start) / every) + 1``. Without them the field holds the period's index, a whole number. A field
that is missing or unparseable, an instant before the start or a period after T: no period (the row counts in none),
never an error and never a message, since both would depend on the data.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from dpcli.core.suggest import did_you_mean
from dpcli.errors import InputError, InternalError
from dpcli.plan.model import Plan
from dpcli.specs.model import Series, Spec

__all__ = [
    "PERIOD_FIELD", "check_period_field", "datetime_text", "in_periods", "period_field_of", "period_index",
    "period_rows",
]

# the period field's text in the engine's frames: a name no declared column can take (a spec name is an identifier)
PERIOD_FIELD = "\0period"
_INSTANT = (
    r"^(\d{4}-\d{2}-\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|[+-]\d{2}:\d{2})?)?$"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = 1_000_000


def _microseconds(text: pl.Expr) -> pl.Expr:
    """An ISO 8601 date or date-time's instant, microseconds since 1970-01-01 UTC (Int64), null when the text is
    not one (a calendar-invalid date included: to_date with strict=False)."""
    parts = text.str.extract_groups(_INSTANT)
    day = parts.struct.field("1").str.to_date("%Y-%m-%d", strict=False)
    hour = parts.struct.field("2").cast(pl.Int64, strict=False).fill_null(0)
    minute = parts.struct.field("3").cast(pl.Int64, strict=False).fill_null(0)
    second = parts.struct.field("4").cast(pl.Int64, strict=False).fill_null(0)
    fraction = parts.struct.field("5").fill_null("").str.slice(0, 6).str.pad_end(6, "0").cast(pl.Int64, strict=False)
    zone = parts.struct.field("6")
    sign = pl.when(zone.str.starts_with("-")).then(-1).otherwise(1)
    zone_h = zone.str.slice(1, 2).cast(pl.Int64, strict=False).fill_null(0)
    zone_m = zone.str.slice(4, 2).cast(pl.Int64, strict=False).fill_null(0)
    offset = pl.when(zone.is_null() | (zone == "Z")).then(0).otherwise(sign * (zone_h * 3600 + zone_m * 60))
    valid = (hour < 24) & (minute < 60) & (second < 60) & (zone_h < 24) & (zone_m < 60)
    days = day.cast(pl.Int64)  # days since 1970-01-01
    seconds = days * 86400 + hour * 3600 + minute * 60 + second - offset
    return pl.when(valid).then(seconds * _US + fraction)


def period_index(series: Series, text: pl.Expr) -> pl.Expr:
    """The period (1..T, Int64) of each row from its period field's text, null when it has none."""
    rule = series.period
    raw = text.str.strip_chars(" \t")
    if rule.indexed or rule.every is None:
        index = raw.cast(pl.Int64, strict=False)
    else:
        start = (rule.start_time() - _EPOCH) // timedelta(microseconds=1)
        every = rule.every * _US
        index = (_microseconds(raw) - start) // every + 1  # floor division: an instant before the start is <= 0
    return pl.when((index >= 1) & (index <= series.periods)).then(index)


def in_periods(series: Series, periods: Iterable[int]) -> pl.Expr:
    """The rows of ``periods``: a filter over the frame's ``PERIOD_FIELD``."""
    return period_index(series, pl.col(PERIOD_FIELD)).is_in(sorted(set(periods)))


def datetime_text(value: pl.Expr, zone: str | None) -> pl.Expr:
    """A typed file's timestamp as the text the period rule reads: converted to UTC when it has a zone (naive: it is
    read as UTC, as a naive text is)."""
    if zone is not None:
        value = value.dt.convert_time_zone("UTC").dt.replace_time_zone(None)
    return value.dt.strftime("%Y-%m-%dT%H:%M:%S.%6f")


def period_field_of(spec: Spec) -> str | None:
    """The input field a series reads each row's period from (None: not a series)."""
    return None if spec.series is None else spec.series.period.column


def period_rows(plan: Plan) -> pl.Expr | None:
    """The filter of a series' aggregation: the rows of the plan's periods (None: not a series). A series' plan
    without periods is a bug: it would aggregate every period's rows at one period's budget."""
    series = plan.spec.series
    if series is None:
        return None
    if plan.periods is None:
        raise InternalError("a series' exact aggregates are of chosen periods: the plan names none")
    return in_periods(series, plan.periods)


def check_period_field(path: Path, fields: Iterable[str], spec: Spec, where: str) -> None:
    """A series' period field is among the input's fields (``where``: header or schema): exit 3 before anything is
    spent otherwise (the header is structure, as the declared columns' check reads it)."""
    field = period_field_of(spec)
    names = list(fields)
    if field is not None and field not in names:
        hint = did_you_mean(field, [name for name in names if name not in spec.columns])
        raise InputError(f"input {path}: the series' period field {field} (series.period.column) is missing from the "
                         f"{where}" + (f" ({hint})" if hint else ""))
