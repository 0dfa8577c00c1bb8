"""A series period's report (issue 26): the series' facts and each linear statistic as a time plot.

Where the earlier periods' values come from: the ledger's FROZEN period tables (``Ledger.frozen_period``), read
through the ledger the report is given (``--ledger``), for the periods 1..t - 1 its chain records as released
(``released`` records of the series' charge); period t's from the table reported. A frozen table is exactly what
its period published (a period's table is never revised), its bytes checked against the hash its record names (an
altered one is exit 5). Nothing else is read: never a piece (a piece drawn but not yet frozen was never published),
never a period after t, never the input. Without a ledger the plot shows period t alone and says how to draw more.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from dpcli.ledger.base import Record, period_key, series_statuses
from dpcli.plan.budget import cost_text
from dpcli.publish.plots import figure_svg, svg_text
from dpcli.publish.report_data import Point, ReportData, SeriesView, StatisticView, exact, views
from dpcli.publish.store import decode_table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from dpcli.ledger import Ledger

# the time plot shows at most the last this many periods (a year of days); the report reads no more frozen tables
MAX_SERIES_PERIODS = 366
# ... and at most this many cells of a statistic (a histogram's first bins), one line and band each
MAX_SERIES_CELLS = 6
SPANS = ("period", "to_date")
_COLOURS = ("#2563eb", "#b45309", "#059669", "#7c3aed", "#dc2626", "#0891b2")


def _whole(value: object) -> int | None:
    return value if type(value) is int else None


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def series_view(data: ReportData, book: Ledger | None) -> SeriesView | None:
    """The series of a period's table (None: the sidecar names no series): its facts from the sidecar, how far it
    has gone and the earlier periods' released values from the ledger's frozen tables when a ledger is given."""
    meta = data.meta or {}
    facts = meta.get("series")
    if not isinstance(facts, dict):
        return None
    periods, t = _whole(facts.get("periods")), _whole(facts.get("period"))
    if periods is None or t is None:
        return None
    charge = _mapping(facts.get("charge"))
    record = _whole(charge.get("record"))
    epsilon, rho = exact(charge.get("epsilon")) or Fraction(0), exact(charge.get("rho")) or Fraction(0)
    rule = _mapping(facts.get("period_rule"))
    view = SeriesView(
        periods=periods, design=str(facts.get("design", "")), period=t, charge_record=record,
        charge=cost_text(epsilon, rho, exact(meta.get("delta")), Fraction(0)), rule=dict(rule),
        unit=str(meta.get("unit", "row")), released=None,
        source="no ledger was given: the plot shows this period alone (give --ledger to draw the periods "
               "released before it, from the ledger's frozen tables)",
    )
    first = max(1, t - MAX_SERIES_PERIODS + 1)
    _add(view, data.statistics, t)
    if book is None or record is None:
        return view
    records = book.records()
    status = next((s for s in series_statuses(records)
                   if s.charge == record and s.dataset == str(meta.get("dataset"))), None)
    charged = next((r for r in records if r.seq == record), None)
    if status is None or charged is None:
        view.source = (f"the ledger {book.name} has no series charged by record {record} for this dataset: the plot "
                       "shows this period alone")
        return view
    view.released = status.released
    earlier = [s for s in status.released if first <= s < t]
    for s in earlier:
        _add(view, _frozen(book, charged, s, records, meta), s)
    shown = f"periods {first}..{t}" if first > 1 else f"periods 1..{t}"
    view.source = (f"{shown}: each period's values as it published them, read from the frozen tables in the ledger "
                   f"{book.name} (periods released after period {t}, and periods not released, are not shown)")
    for cells in view.points.values():
        for spans in cells.values():
            for points in spans.values():
                points.sort(key=lambda p: p.period)
    return view


def _frozen(book: Ledger, charge: Record, t: int, records: list[Record], meta: dict[str, Any]) -> list[StatisticView]:
    """Period t's frozen table (its bytes checked against its ``released`` record) as the report's views."""
    found = book.frozen_period(period_key(str(charge.get("release_key")), t), records)
    if found is None:
        return []
    table = decode_table(found[1])
    columns = table.columns
    rows = ({c: "" if v is None else v for c, v in zip(columns, r, strict=True)} for r in table.rows())
    return views(columns, rows, meta)


def cell_label(labels: Sequence[str]) -> str:
    return " × ".join(labels) or "all rows"


def _add(view: SeriesView, statistics: list[StatisticView], t: int) -> None:
    """Period t's released values of each linear statistic (its own, and its running total to date)."""
    for stat in statistics:
        if stat.traits is None or not stat.traits.linear:
            continue
        cells = view.points.setdefault(stat.name, {})
        for row in stat.rows:
            if row.value is None or row.period != str(t):
                continue
            span = row.span or "period"
            if span not in SPANS:
                continue
            label = cell_label(row.labels)
            if label not in cells and len(cells) >= MAX_SERIES_CELLS:
                continue  # the plot draws the first cells only (the page says so)
            cells.setdefault(label, {}).setdefault(span, []).append(Point(t, row.value, row.ci_low, row.ci_high))
    for name in [n for n, c in view.points.items() if not c]:
        del view.points[name]


def every_text(seconds: object) -> str:
    """A period's length in words (the sidecar's ``every_seconds``)."""
    if type(seconds) is not int or seconds <= 0:
        return ""
    for unit, size in (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds} seconds"


def axis_text(view: SeriesView) -> str:
    start, every = view.rule.get("start"), every_text(view.rule.get("every_seconds"))
    if start and every:
        return f"period (period 1 starts {start}; each is {every})"
    return "period"


def time_plot_svg(view: SeriesView, statistic: str, prefix: str) -> str:
    """A linear statistic's time plot: its released values per period (top) and its running totals to date (below,
    when released), each cell a line with its interval as a band."""
    return figure_svg(lambda figure: _draw(view, statistic, figure), prefix)


def _draw(view: SeriesView, statistic: str, figure: type[Figure]) -> str:
    cells = view.points.get(statistic, {})
    spans = [s for s in SPANS if any(s in c for c in cells.values())]
    fig = figure(figsize=(7.5, 0.8 + 2.2 * len(spans)))
    axes = fig.subplots(len(spans), 1, sharex=True, squeeze=False)[:, 0]
    for ax, span in zip(axes, spans, strict=True):
        for colour, (cell, by_span) in zip(_COLOURS, list(cells.items())[:MAX_SERIES_CELLS], strict=False):
            points = by_span.get(span, [])
            if not points:
                continue
            xs = [p.period for p in points]
            ax.plot(xs, [p.value for p in points], color=colour, lw=1.2, marker="o" if len(xs) <= 60 else None,
                    ms=3, label=cell[:40])
            banded = [p for p in points if p.ci_low is not None and p.ci_high is not None]
            if banded:
                ax.fill_between([p.period for p in banded], [p.ci_low or 0.0 for p in banded],
                                [p.ci_high or 0.0 for p in banded], color=colour, alpha=0.15, lw=0)
        ax.set_ylabel("each period" if span == "period" else "total to date", parse_math=False, usetex=False)
        ax.grid(color="#e5e7eb")
        ax.set_axisbelow(True)
        if len(cells) > 1:
            ax.legend(fontsize=7, loc="best")
    axes[0].set_title(f"{statistic[:60]}: released values over the periods, with their intervals (bands)",
                      fontsize=9, parse_math=False, usetex=False)
    axes[-1].set_xlabel(axis_text(view), parse_math=False, usetex=False)
    axes[-1].xaxis.get_major_locator().set_params(integer=True)
    return svg_text(fig)
