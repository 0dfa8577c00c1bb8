"""The report's plots: a statistic's released values and intervals as a matplotlib figure, inlined as SVG.

matplotlib is imported here only, when a figure is drawn: the other commands do not pay for it. Text is drawn as
paths (no font is fetched) and never parsed as mathtext or TeX (``text.parse_math`` off, matplotlib's default style,
whatever a matplotlibrc says).
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dpcli.core.accounting import format_exact
from dpcli.publish.report_data import Row, StatisticView, exact, number, rank_bound

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# a plot with more points than this shows the first ones and says how many it left out
MAX_PLOT_POINTS = 60
# a label in a plot is cut to this many characters (the table below the plot shows it whole)
MAX_PLOT_LABEL = 60


def row_label(row: Row) -> str:
    text = " × ".join(row.labels) or "all rows"  # a histogram's bin is its column's label, '[lo..hi)'
    if row.span:  # a series period's table: the period's own value, or the running total to date
        text = f"{text} · {'total to period' if row.span == 'to_date' else 'period'} {row.period}"
    return f"{text} · q={row.quantile}" if row.quantile else text


_SVG_ID = re.compile(r'(\bid="|href="#|url\(#)')


# Text is never markup: a declared key "$10K-$50K" is two dollar signs, not mathtext, and `$\\frac{$` no parse error
# (matplotlib's documented switch, rcParams["text.parse_math"], and the Text property parse_math, given to every
# text artist below too). usetex off: a matplotlibrc asking for TeX must not hand the labels to LaTeX.


def plot_svg(view: StatisticView, prefix: str) -> str:
    return figure_svg(lambda figure: _draw(view, figure), prefix)


def figure_svg(draw: Callable[[type[Figure]], str], prefix: str) -> str:
    """The SVG text ``draw`` makes with matplotlib's Figure class, under the page's fixed settings (below), its ids
    prefixed with ``prefix``."""
    import warnings

    import matplotlib
    import matplotlib.style
    from matplotlib.figure import Figure  # not pyplot: no backend, no global figure list to leak into a caller's

    # matplotlib's default style, whatever a matplotlibrc says; then text as paths (no font to fetch) and a fixed
    # salt: the hashed ids of clip paths and markers are the same on every run (reproducible pages). Contexts: a
    # library caller's own matplotlib settings are left as they were. A glyph missing from the font (a key in a
    # script DejaVu Sans lacks) is drawn as a box, without a warning on stderr.
    with (
        matplotlib.style.context("default"),
        matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "dpcli", "font.size": 9,
                               "text.parse_math": False, "text.usetex": False}),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        svg = draw(Figure)
    # every figure numbers its elements from 1 (figure_1, patch_1, glyphs): one prefix per figure keeps the ids of
    # one page unique, and each figure's references (href="#id", url(#id)) pointing into itself
    return _SVG_ID.sub(lambda m: f"{m.group(1)}{prefix}-", svg)


def _short(text: str) -> str:
    return text if len(text) <= MAX_PLOT_LABEL else text[: MAX_PLOT_LABEL - 1] + "…"


def bin_edges(view: StatisticView, rows: Sequence[Row]) -> list[tuple[float, float]] | None:
    """Each row's bin as numbers (low, high): the table's `bin_low`/`bin_high` (contract 0.3), else the sidecar's
    bins (edges, or a grid) by the row's place, where that bin's label is the row's label in the histogram's column
    (a table of contract 0.2). None when some row's bin is not known: a histogram over categories, or unknown bins."""
    out: list[tuple[float, float]] = []
    for r in rows:
        low, high = number(r.bin_low), number(r.bin_high)
        if low is None or high is None:
            break
        out.append((low, high))
    else:
        return out if out else None
    edges = _sidecar_edges((view.meta or {}).get("bins"))
    if edges is None:
        return None
    count, edge = edges
    out = []
    for i, r in enumerate(rows):
        lo, hi = edge(i % count), edge(i % count + 1)
        label = dict(r.named).get(view.column)
        if label != f"[{format_exact(lo)}..{format_exact(hi)})":  # the label the table writes (dpcli.plan.bins)
            return None
        out.append((float(lo), float(hi)))
    return out


def _sidecar_edges(bins: object) -> tuple[int, Any] | None:
    """A sidecar's `bins` as (how many, bin i's low edge), or None."""
    if isinstance(bins, list) and len(bins) > 1:
        edges = [exact(b) for b in bins]
        if any(e is None for e in edges):
            return None
        return len(edges) - 1, lambda i: edges[i]
    if isinstance(bins, dict):
        start, stop, step = (exact(bins.get(k)) for k in ("start", "stop", "step"))
        if start is None or stop is None or step is None or step <= 0 or stop <= start:
            return None
        return int((stop - start) / step), lambda i: start + i * step
    return None


def group_rows(view: StatisticView, rows: Sequence[Row]) -> list[tuple[str, list[int]]]:
    """A histogram's rows by the labels of its other dimensions (a `by:`), in the table's order."""
    out: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        key = " × ".join(x for d, x in r.named if d != view.column) or "count"
        out.setdefault(key, []).append(i)
    return list(out.items())


def _draw_bins(view: StatisticView, rows: Sequence[Row], edges: list[tuple[float, float]], figure: type[Figure]) -> Any:
    """A histogram as bars spanning their bins on the column's numeric axis, one panel per `by:` group, each bin's
    interval drawn at its middle."""
    groups = group_rows(view, rows)
    fig = figure(figsize=(7.5, 0.6 + (1.9 if len(groups) <= 4 else 1.0) * len(groups)))
    axes = fig.subplots(len(groups), 1, sharex=True, squeeze=False)[:, 0]
    few = sorted({e for pair in edges for e in pair}) if len(edges) <= 16 else None
    for ax, (group, members) in zip(axes, groups, strict=True):
        for i in members:
            r, (lo, hi) = rows[i], edges[i]
            colour = "#b45309" if r.flag == "flagged" else "#2563eb"
            mid = (lo + hi) / 2
            if r.value is None:
                if r.flag == "suppressed":
                    ax.annotate("suppressed", (mid, 0), xytext=(0, 4), textcoords="offset points", ha="center",
                                rotation=90, fontsize=7, color="#6b7280", style="italic", parse_math=False,
                                usetex=False)
                continue
            ax.bar(lo, r.value, width=hi - lo, align="edge", color=colour, alpha=0.55, edgecolor="white", lw=0.8)
            if r.ci_low is not None and r.ci_high is not None:
                ax.errorbar([mid], [r.value], yerr=[[r.value - r.ci_low], [r.ci_high - r.value]], fmt="none",
                            ecolor="#111827", capsize=3, lw=1)
        ax.set_ylabel(_short(group), parse_math=False, usetex=False)
        ax.grid(axis="y", color="#e5e7eb")
        ax.set_axisbelow(True)
        ax.axhline(0, color="#6b7280", lw=0.6)
        if few is not None:
            ax.set_xticks(few, [f"{e:g}" for e in few], parse_math=False, usetex=False)
    axes[0].set_title("the released count of each bin, with its interval", fontsize=9, parse_math=False,
                      usetex=False)
    axes[-1].set_xlabel(_short(view.column or view.name), parse_math=False, usetex=False)
    return fig


def _draw(view: StatisticView, figure: type[Figure]) -> str:
    rows = view.rows[:MAX_PLOT_POINTS]
    edges = bin_edges(view, rows) if view.traits is not None and view.traits.has_bins else None
    if edges is not None:
        return svg_text(_draw_bins(view, rows, edges, figure))
    labels = [_short(row_label(r)) for r in rows]
    shown = [r.value if r.value is not None else math.nan for r in rows]
    lows = [r.value - r.ci_low if r.value is not None and r.ci_low is not None else 0.0 for r in rows]
    highs = [r.ci_high - r.value if r.value is not None and r.ci_high is not None else 0.0 for r in rows]
    fig = figure(figsize=(7.5, max(1.6, 0.32 * len(rows) + 1.0)))
    ax = fig.subplots()
    y = list(range(len(rows)))[::-1]  # first row on top, as in the table
    colours = ["#b45309" if r.flag == "flagged" else "#2563eb" for r in rows]
    bars = view.traits is not None and view.traits.has_bins  # a histogram's bins: bars, other values: points
    if bars:
        ax.barh(y, [0 if math.isnan(v) else v for v in shown], color=colours, alpha=0.55, height=0.7)
    ax.errorbar(shown, y, xerr=[lows, highs], fmt="none", ecolor="#111827", capsize=3, lw=1)
    if not bars:
        ax.scatter(shown, y, c=colours, zorder=3, s=18)
    for yy, r in zip(y, rows, strict=True):
        if r.flag == "suppressed":
            ax.annotate("suppressed", (0, yy), xycoords=("axes fraction", "data"), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=8, color="#6b7280", style="italic",
                        parse_math=False, usetex=False)
        elif r.value is not None and r.quantile and r.ci_low is None and (bound := rank_bound(view, r)):
            ax.annotate(f"rank ±{bound} rows (95%)", (r.value, yy), xytext=(6, 0), textcoords="offset points",
                        va="center", fontsize=8, color="#374151", parse_math=False, usetex=False)
    ax.set_yticks(y, labels, parse_math=False, usetex=False)
    intervals = any(r.ci_low is not None and r.ci_high is not None for r in rows)
    said = ("value and its interval" if intervals else
            "value and its rank bound (no value interval was paid for)" if any(r.quantile for r in rows)
            else "value")
    ax.set_xlabel(_short(f"{view.name} ({view.kind or 'value'}{', ' + view.column if view.column else ''})")
                  + f": {said}", parse_math=False, usetex=False)
    ax.grid(axis="x", color="#e5e7eb")
    ax.margins(y=0.5 / max(1, len(rows)))
    ax.set_axisbelow(True)
    return svg_text(fig)


def svg_text(fig: Figure) -> str:
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]  # the XML prolog and doctype do not belong inside HTML
