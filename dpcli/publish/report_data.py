"""The report's data: a released table's rows grouped by statistic, and what its numbers and its sidecar say.

Everything here reads what is public already: the released table (by column NAME, so a table of contract 0.2 or
0.3 both work), its sidecar (public parameters) and the ledger's budget figures. Nothing reads the input.
The page (dpcli.publish.report) and the Markdown summary (dpcli.publish.summary) both show these views.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from pathlib import Path
from typing import Any

from dpcli.core.accounting import parse_exact
from dpcli.errors import UsageError
from dpcli.ledger.base import BudgetStatus
from dpcli.plan.budget import NOTHING_SPENT, cost_text
from dpcli.publish.report_inputs import beside, check_columns, read_sidecar, read_table
from dpcli.specs.kinds import KINDS, Kind, Value
from dpcli.specs.v1 import OUTPUT_COLUMNS, PERIOD_COLUMN, SPAN_COLUMN

# columns with a meaning of their own; every other column of the table is a dimension (a breakdown's label)
KNOWN_COLUMNS = frozenset(OUTPUT_COLUMNS)
# a table with more rows for one statistic than this is shown by its plot and a note, not a row per cell; the report
# keeps no more rows than this per statistic (the others are counted), so its memory is bounded by the statistics
MAX_TABLE_ROWS = 200
MAX_NUMBER = 1e300  # a cell's number beyond this is refused (exit 2): plotting it could overflow
_MAX_DECIMAL = Decimal(MAX_NUMBER)


@dataclass(frozen=True)
class Row:
    labels: tuple[str, ...]  # the dimensions' values that apply to this row (empty ones left out)
    value: float | None  # None: suppressed, or a value that is not a number
    ci_low: float | None
    ci_high: float | None
    value_text: str
    ci_text: str
    flag: str  # "", "flagged" or "suppressed"
    quantile: str = ""
    bin_low: str = ""
    bin_high: str = ""
    named: tuple[tuple[str, str], ...] = ()  # (dimension, label) of the labels above
    period: str = ""  # a series period's table: the period of the row (its `period` column)
    span: str = ""  # ... and what its value spans: "period" (the period's own) or "to_date" (the running total)


@dataclass
class StatisticView:
    name: str
    kind: str
    column: str
    rows: list[Row] = field(default_factory=list)  # the first MAX_TABLE_ROWS + 1 rows
    meta: dict[str, Any] | None = None  # the sidecar's entry for this statistic, when there is a sidecar
    total: int = 0  # the statistic's rows in the table
    flags: int = 0  # of which flagged or suppressed
    flag_column: bool = False  # a small-cell policy applies (the sidecar says so; without one: the table has `flag`)
    lowest: tuple[Decimal, str] | None = None  # the smallest released value of all its rows, and its text
    highest: tuple[Decimal, str] | None = None
    widest: Decimal | None = None  # the largest distance from a value to an end of its interval, over all rows

    @property
    def traits(self) -> Kind | None:
        """The traits of the kind the table names (dpcli/specs/kinds.py); None for a kind it does not know or states
        not."""
        return KINDS.get(self.kind)


@dataclass(frozen=True)
class Point:
    """One released number of a series' time plot: period t's value and its interval (None: not stated)."""

    period: int
    value: float
    ci_low: float | None
    ci_high: float | None


@dataclass
class SeriesView:
    """A series period's table in its series (issue 26): the sidecar's facts and, per linear statistic and cell, the
    released values of the periods 1..t that were released (dpcli.publish.report_series says where they come from)."""

    periods: int  # T, the horizon
    design: str
    period: int  # t, the period of the table reported
    charge_record: int | None  # the ledger record of the series' one charge
    charge: str  # what that charge was (cost_text)
    rule: dict[str, Any]  # the sidecar's period_rule (column, start, every_seconds)
    unit: str  # the privacy unit
    released: tuple[int, ...] | None  # the periods the ledger has released (frozen); None: no ledger read
    source: str  # where the earlier periods' values were read, in words
    # statistic -> cell -> span ("period" or "to_date") -> its points, in period order
    points: dict[str, dict[str, dict[str, list[Point]]]] = field(default_factory=dict)


@dataclass
class ReportData:
    statistics: list[StatisticView]
    meta: dict[str, Any] | None  # the sidecar, None when none was found
    status: BudgetStatus | None  # the dataset's budget in the ledger, None when no ledger was read
    ledger_name: str | None
    source: str  # the table's file name (a label on the page; never a directory of the operator's machine)
    series: SeriesView | None = None  # a series period's table: its series (dpcli.publish.report_series)


def number(text: str) -> float | None:
    """A cell's number: None for an empty or non-numeric cell; exit 2 for one no float can hold (1e400)."""
    if not text:
        return None
    try:
        value = float(parse_exact(text))
    except (ValueError, ZeroDivisionError):
        return None
    except OverflowError:
        value = math.inf
    if abs(value) > MAX_NUMBER:  # no release makes one (spec numbers are below 1e40); a plot of it would fail
        raise UsageError(f"the table holds a number beyond ±{MAX_NUMBER:g}: not a dpcli table")
    return value


def views(columns: Sequence[str], rows: Iterable[dict[str, str]], meta: dict[str, Any] | None) -> list[StatisticView]:
    """The table's rows grouped by statistic, in the table's order. A statistic's kind and column come from the
    table's `kind`/`column` columns (contract 0.3), else from the sidecar, else are left empty. Each statistic keeps
    its first MAX_TABLE_ROWS + 1 rows (what the page shows) and counts the rest."""
    stat_meta = {s.get("name"): s for s in (meta or {}).get("statistics", []) if isinstance(s, dict)}
    dims = [c for c in columns if c not in KNOWN_COLUMNS]
    out: dict[str, StatisticView] = {}
    for r in rows:
        name = r.get("statistic", "")
        view = out.get(name)
        if view is None:
            sm = stat_meta.get(name)
            kind = r.get("kind") or (sm or {}).get("kind") or ""
            column = r.get("column") or (sm or {}).get("column") or ""
            view = out[name] = StatisticView(name, str(kind), str(column or ""), meta=sm)
            view.flag_column = _small_cells(sm) if meta else "flag" in columns
        view.total += 1
        flag = r.get("flag", "")
        view.flags += bool(flag)
        lo, hi = r.get("ci_low", ""), r.get("ci_high", "")
        _extend(view, r.get("value", ""), lo, hi)
        if len(view.rows) > MAX_TABLE_ROWS:
            continue
        view.rows.append(
            Row(
                labels=tuple(r[d] for d in dims if r.get(d)),
                value=number(r.get("value", "")),
                ci_low=number(lo),
                ci_high=number(hi),
                value_text=r.get("value", ""),
                ci_text=f"{lo} to {hi}" if lo and hi else "",
                flag=flag,
                quantile=r.get("quantile", ""),
                bin_low=r.get("bin_low", ""),
                bin_high=r.get("bin_high", ""),
                named=tuple((d, r[d]) for d in dims if r.get(d)),
                period=r.get(PERIOD_COLUMN, ""),
                span=r.get(SPAN_COLUMN, ""),
            )
        )
    return list(out.values())


def _small_cells(meta: dict[str, Any] | None) -> bool:
    """Whether a statistic's sidecar entry declares a small-cell policy (its `flag` column means something)."""
    post = (meta or {}).get("postprocess")
    return isinstance(post, dict) and post.get("small_cells") is not None


def _decimal(text: str) -> Decimal | None:
    """A cell's number, exactly, for every row (``number`` reads the rows the page shows): None for an empty or
    non-numeric cell, exit 2 for one beyond ±MAX_NUMBER, as there."""
    try:
        value = Decimal(text) if text else None
    except InvalidOperation:
        return None
    if value is None or not value.is_finite():
        return None
    if value.copy_abs() > _MAX_DECIMAL:
        raise UsageError(f"the table holds a number beyond ±{MAX_NUMBER:g}: not a dpcli table")
    return value


def _extend(view: StatisticView, value_text: str, low_text: str, high_text: str) -> None:
    """The statistic's range of released values and its widest interval, over every row (the Markdown summary's
    line for a statistic of several cells): arithmetic on the released numbers only."""
    value = _decimal(value_text)
    if value is None:
        return
    if view.lowest is None or value < view.lowest[0]:
        view.lowest = (value, value_text)
    if view.highest is None or value > view.highest[0]:
        view.highest = (value, value_text)
    low, high = _decimal(low_text), _decimal(high_text)
    if low is not None and high is not None:
        width = max(value - low, high - value)
        view.widest = width if view.widest is None else max(view.widest, width)


def load(
    table_path: Path, meta_path: Path | None = None, status: BudgetStatus | None = None, ledger_name: str | None = None
) -> ReportData:
    """A report's data from a table file; the sidecar is ``meta_path``, else OUT.meta.json beside the table when
    there is one (none: the page says the public parameters are unknown)."""
    if meta_path is None:
        meta_path = beside(table_path)
    meta = None if meta_path is None else read_sidecar(meta_path)
    columns, rows = read_table(table_path)
    return ReportData(views(columns, rows, meta), meta, status, ledger_name, table_path.name)


def from_rows(
    columns: Sequence[str], rows: Iterable[Sequence[str | None]], meta: dict[str, Any] | None,
    status: BudgetStatus | None, ledger_name: str | None, source: str,
) -> ReportData:
    """A report's data from a table in memory (``release --report``): rows as the table's tuples."""
    check_columns(source, columns)
    records = ({c: "" if v is None else v for c, v in zip(columns, r, strict=True)} for r in rows)
    return ReportData(views(columns, records, meta), meta, status, ledger_name, source)


def exact(value: object) -> Fraction | None:
    """A sidecar's exact number (validated text), or None."""
    try:
        return parse_exact(value) if isinstance(value, str) else None
    except (ValueError, ZeroDivisionError):
        return None


def rank_bound(view: StatisticView, row: Row) -> str | None:
    """A quantile level's rank bound at 95% from the plan (the sidecar's `noise[].rank_error95` of the part
    `q=LEVEL`), in rows; None when the sidecar does not give one."""
    level = exact(row.quantile)
    if level is None:
        return None
    for part in (view.meta or {}).get("noise") or []:
        name = str(part.get("part", "")) if isinstance(part, dict) else ""
        if name.startswith("q=") and exact(name[2:]) == level and part.get("rank_error95") is not None:
            return str(part["rank_error95"])
    return None


def uncertainty(view: StatisticView, row: Row) -> str:
    """What the page and the summary say of a released number's uncertainty: its interval; for a quantile without
    a paid interval, its rank bound; for a rank (top_k), that it has none."""
    if row.flag == "suppressed":
        return ""
    if row.ci_text:
        return row.ci_text
    if view.traits is not None and view.traits.value is Value.RANK:
        return "none: a rank of noisy counts"
    bound = rank_bound(view, row) if row.quantile else None
    if bound is not None:
        return f"rank ±{bound} rows (95%); no value interval was paid for"
    return "not stated in the table"


@dataclass(frozen=True)
class Guarantee:
    """What the release charged, from its sidecar: the numbers `release` printed (dpcli.plan.budget.cost_text)."""

    epsilon: Fraction
    rho: Fraction
    delta: Fraction | None  # the release's whole delta (the spec's; else the cap's, for a zCDP release)
    selection_delta: Fraction
    frequency: bool = False  # estimates from a randomized file: nothing spent

    @property
    def text(self) -> str:
        if self.frequency:
            return NOTHING_SPENT
        return cost_text(self.epsilon, self.rho, self.delta, self.selection_delta)


def guarantee(data: ReportData) -> Guarantee | None:
    """The release's guarantee from its sidecar (None without one). A zCDP release whose spec named no delta is
    stated at the cap's delta, when the ledger was read."""
    meta = data.meta
    if not meta:
        return None
    if "dpcli_release" in meta:  # the sidecar of frequency estimates (schema: frequency)
        return Guarantee(Fraction(0), Fraction(0), None, Fraction(0), frequency=True)
    epsilon, rho = exact(meta.get("epsilon")) or Fraction(0), exact(meta.get("rho")) or Fraction(0)
    delta = exact(meta.get("delta"))
    if delta is None and rho and data.status is not None and data.status.cap_delta:
        delta = data.status.cap_delta
    selections = [(s.get("selection") or {}).get("delta") for s in meta.get("statistics") or []]
    selection_delta = sum((exact(d) or Fraction(0) for d in selections), Fraction(0))
    return Guarantee(epsilon, rho, delta, selection_delta)


def series_unit_text(unit: str) -> str:
    """What a series protects, honestly (the page and the summary)."""
    if unit == "person":
        return ("Unit person: each period is charged against its own period's cap, so a person present in k periods "
                "has k times the budget (k·ε).")
    return ("Unit row: the series protects one row (one visit, one admission), not a person: a patient with 50 "
            "visits spends 50 times the budget on themselves. For person data, declare a person unit "
            "(privacy.unit) so that all of a person's rows count as one.")
