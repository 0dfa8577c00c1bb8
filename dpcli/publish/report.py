"""`dpcli report`: a released table as one self-contained HTML page.

Everything here reads what is public already: the released table, its sidecar (public parameters) and the
ledger's budget figures (dpcli.publish.report_data). Nothing reads the input.
The page loads nothing from the network: the plots are matplotlib SVG inlined in the HTML (dpcli.publish.plots),
the style is one inline <style> block, and there is no script. Every string of the table or the sidecar is
HTML-escaped where it lands.
"""

from __future__ import annotations

import html
import math
from fractions import Fraction
from pathlib import Path

from dpcli.core.accounting import format_exact
from dpcli.core.files import atomic_write
from dpcli.errors import UsageError
from dpcli.ledger.base import RENEWING_NOTE, BudgetStatus
from dpcli.publish.plots import MAX_PLOT_POINTS, group_rows, plot_svg, row_label
from dpcli.publish.report_data import (
    MAX_TABLE_ROWS,
    Guarantee,
    ReportData,
    StatisticView,
    exact,
    guarantee,
    load,
    uncertainty,
)
from dpcli.publish.report_inputs import beside, why
from dpcli.publish.summary import write_summary
from dpcli.specs.kinds import Value

# statistics past this many are shown without a plot (a matplotlib figure costs ~50 ms; a 1 MiB spec can hold 30,000)
MAX_PLOTS = 100


# ---------------------------------------------------------------------------------------------------------------
# HTML

_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;
color:#111827;line-height:1.45}
h1{font-size:1.6rem}h2{font-size:1.25rem;margin-top:2rem;border-bottom:1px solid #e5e7eb}
table{border-collapse:collapse;font-size:.9rem;margin:.5rem 0}td,th{border:1px solid #e5e7eb;padding:.2rem .5rem;
text-align:left}th{background:#f9fafb}.num{text-align:right;font-variant-numeric:tabular-nums}
.box{background:#eff6ff;border:1px solid #bfdbfe;border-radius:.5rem;padding:.75rem 1rem}
.warn{background:#fffbeb;border-color:#fde68a}.flagged{background:#fffbeb}.suppressed{color:#6b7280;font-style:italic}
figure.plot{margin:.5rem 0}figure.plot svg{max-width:100%;height:auto}code{background:#f3f4f6;padding:0 .2rem}
"""


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _budget_html(data: ReportData) -> str:
    meta = data.meta or {}
    parts = []
    spent = guarantee(data)
    if spent is not None:
        note = " (a re-issue of a table already paid for: this run spent nothing)" if meta.get("reissued") else ""
        parts.append(f"<p>This release spent <b>{_e(spent.text)}</b>{note}.</p>")
    else:
        parts.append("<p>No sidecar was found, so what this release spent is not shown here "
                     "(give <code>--meta PATH</code>).</p>")
    status = data.status
    if status is None:
        parts.append("<p class='box warn'>What is left of the dataset's budget is <b>not known here</b>: "
                     + ("the ledger was not given (<code>--ledger</code>)." if data.ledger_name is None
                        else "the ledger has no record of this dataset.") + "</p>")
    elif status.per_period:
        parts.append(_renewing_html(status))
    elif status.cap is None:
        parts.append("<p>The ledger has <b>no cap</b> for this dataset; "
                     f"ε spent so far over {status.releases} release(s): {_e(format_exact(status.spent))}.</p>")
    else:
        remaining = status.remaining if status.remaining is not None else Fraction(0)
        parts.append(
            f"<p>The dataset's cap is ε = {_e(format_exact(status.cap))}; {status.releases} release(s) have spent "
            f"ε = {_e(format_exact(status.spent))}, so <b>ε = {_e(format_exact(remaining))} is left</b> "
            "(as the ledger stood when this report was made).</p>"
        )
    return "\n".join(parts)


def _renewing_html(status: BudgetStatus) -> str:
    """A renewing cap (issue 26): what this release's period has left, and what such a cap means."""
    where = (f"in period <b>{_e(status.period)}</b> {status.releases} release(s) have spent "
             f"ε = {_e(format_exact(status.spent))}, so <b>ε = {_e(format_exact(status.remaining or Fraction(0)))} "
             "is left in that period</b> (as the ledger stood when this report was made)"
             if status.period is not None else "the release's period is not known here (no sidecar)")
    return (f"<p>The dataset's cap is ε = {_e(format_exact(status.cap or Fraction(0)))} <b>per declared period</b>; "
            f"{where}.</p>\n<p class='box warn'>Note: {_e(RENEWING_NOTE)}.</p>")


def _bound_html(spent: Guarantee | None) -> str:
    """The ratio bound in words, with the release's guarantee quoted as `release` printed it (``Guarantee.text``)."""
    if spent is None:
        return "the ratio is at most e<sup>ε</sup>; this release's ε is not known here (no sidecar)"
    if spent.frequency:
        return ("the ratio is at most e<sup>ε</sup>, with the ε per record of the randomized file these estimates "
                "are computed from; they spent nothing more")
    said = f"<b class='spent'>{_e(spent.text)}</b>"
    slack = ", except with a probability of at most δ"
    if not spent.rho:
        return f"the ratio is at most e<sup>ε</sup>{slack if spent.selection_delta else ''}; {said} for this release"
    if spent.delta is None or spent.delta <= spent.selection_delta:
        return (f"this release is zero-concentrated DP, {said}: for every δ &gt; 0 the ratio is at most e<sup>ε</sup>"
                f"{slack}, at ε = ρ + 2√(ρ ln(1/δ))")
    return f"the ratio is at most e<sup>ε</sup>{slack}; this release is zero-concentrated DP, {said}"


def _guarantee_html(data: ReportData) -> str:
    meta = data.meta or {}
    unit = meta.get("unit", "row")
    who = "one person (all of their rows)" if unit == "person" else "one row of the input"
    conf = exact(meta.get("confidence"))  # exact decimal text (0.3); validated
    conf = conf if conf is not None and 0 < conf < 1 else Fraction(95, 100)
    pct = f"{float(conf) * 100:g}%"
    return f"""<div class="box" id="guarantee"><h2 style="margin-top:0;border:0">What the guarantee means</h2>
<p>Every number here was computed from the data with random noise added, so that anyone who reads all of them learns
almost nothing about {who}: whether that {'person' if unit == 'person' else 'row'} was in the data or not, every
table this release could have produced is about as likely ({_bound_html(guarantee(data))}). This holds whatever else
the reader knows.</p>
<p><b>What it does not mean.</b> It does not hide facts about groups: a published average is meant to be learned.
It does not make the numbers exact: each comes with its uncertainty, an interval that holds the number computed
without noise from this same data with probability {_e(pct)} (about one interval in
{round(1 / max(1 - float(conf), 1e-6))} misses), or for a quantile without a paid interval a bound on its rank. The
intervals cover the privacy noise only, <b>not sampling error</b>: they say nothing of how far this data is from a
population it was drawn from, nor of errors in the data. And the protection adds up over releases of the same data:
the ledger's cap limits the total, which is why the budget left is shown below.</p></div>"""


def _params_html(data: ReportData) -> str:
    meta = data.meta
    if not meta:
        return ("<p class='box warn'>No sidecar (OUT.meta.json) was found: the public parameters (bounds, bins, "
                "mechanisms, noise scales) are <b>not known here</b>.</p>")
    top = [("dataset", meta.get("dataset")), ("privacy unit", meta.get("unit")), ("neighbours", meta.get("neighbours")),
           ("accounting", meta.get("accounting")), ("ε", meta.get("epsilon")), ("ρ", meta.get("rho")),
           ("δ", meta.get("delta")), ("confidence", meta.get("confidence")),
           ("release id", (meta.get("ledger") or {}).get("release_id")),
           ("ledger record", (meta.get("ledger") or {}).get("record")),
           ("ledger head", (meta.get("ledger") or {}).get("head")), ("spec sha256", meta.get("spec_sha256")),
           ("dpcli version", meta.get("dpcli_version"))]
    if meta.get("release_time") or meta.get("time"):
        top.append(("release time", meta.get("release_time") or meta.get("time")))
    out = ["<table id='parameters'>"]
    out += [f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in top if v is not None]
    out.append("</table>")
    columns = meta.get("columns") or {}
    if columns:
        out.append("<table><tr><th>column</th><th>type</th><th>bounds / categories</th></tr>")
        for name, c in columns.items():
            c = c if isinstance(c, dict) else {}
            domain = c.get("bounds") or c.get("categories") or ""
            if isinstance(domain, list):
                domain = ", ".join(str(x) for x in domain)
            out.append(f"<tr><td>{_e(name)}</td><td>{_e(c.get('type', ''))}</td><td>{_e(domain)}</td></tr>")
        out.append("</table>")
    return "\n".join(out)


def _stat_params(view: StatisticView) -> str:
    sm = view.meta
    if not sm:
        return ""
    bits = [f"mechanism {_e(sm.get('mechanism'))}"]
    if sm.get("epsilon") not in (None, "0") or sm.get("rho") in (None, "0"):
        bits.append(f"ε = {_e(sm.get('epsilon'))}")
    if sm.get("rho") not in (None, "0"):
        bits.append(f"ρ = {_e(sm.get('rho'))}")
    bits += [
        f"{_e(c.get('part'))} noise "
        + (f"variance {_e(c.get('variance'))}" if c.get("scale") is None else f"scale {_e(c.get('scale'))}")
        + f" (sensitivity {_e(c.get('sensitivity'))})"
        for c in sm.get("noise") or [] if isinstance(c, dict)
    ]
    if sm.get("bins"):
        bits.append(_e(bins_text(sm["bins"])))
    if sm.get("by"):
        bits.append("by " + _e(", ".join(str(b) for b in sm["by"])))
    return "<p class='params'>" + "; ".join(bits) + "</p>"


def bins_text(bins: object) -> str:
    """A sidecar's `bins` in words: an even grid by its values, a list of edges as the edges."""
    if isinstance(bins, dict):
        start, stop, step = (exact(bins.get(k)) for k in ("start", "stop", "step"))
        if start is not None and stop is not None and step is not None and step > 0:
            count = int((stop - start) / step)
            return (f"{count} bins of width {format_exact(step)} from {format_exact(start)} to "
                    f"{format_exact(start + count * step)}")
        return "bins " + ", ".join(f"{k} {v}" for k, v in bins.items())
    if isinstance(bins, list):
        return "bin edges " + ", ".join(str(b) for b in bins)
    return f"bins {bins}"


def _rows_html(view: StatisticView) -> str:
    if view.total > MAX_TABLE_ROWS:
        return f"<p>{view.total} rows: see the table file.</p>"
    flag_head = "<th>flag</th>" if view.flag_column else ""
    out = [f"<table><tr><th>cell</th><th class='num'>value</th><th>uncertainty</th>{flag_head}</tr>"]
    for r in view.rows:
        value = "suppressed" if r.flag == "suppressed" else r.value_text
        flag = f"<td>{_e(r.flag)}</td>" if view.flag_column else ""
        out.append(f"<tr class='{_e(r.flag)}'><td>{_e(row_label(r))}</td><td class='num'>{_e(value)}</td>"
                   f"<td>{_e(uncertainty(view, r))}</td>{flag}</tr>")
    out.append("</table>")
    return "\n".join(out)


def _ranked_html(view: StatisticView) -> str:
    """A ranking as a numbered list; with by:, one list per cell of by: (its keys' labels above it)."""
    rows = view.rows[:MAX_TABLE_ROWS]
    more = f"<p>The first {MAX_TABLE_ROWS} of {view.total} rows.</p>" if view.total > MAX_TABLE_ROWS else ""
    if not any(d != view.column for r in rows for d, _ in r.named):
        ordered = sorted(rows, key=lambda r: r.value if r.value is not None else math.inf)
        items = "".join(f"<li>{_e(' × '.join(r.labels) or r.value_text)}</li>" for r in ordered)
        return f"<ol class='ranked'>{items}</ol>{more}"
    lists = []
    for group, members in group_rows(view, rows):
        ordered = sorted((rows[i] for i in members), key=lambda r: r.value if r.value is not None else math.inf)
        keys = "".join(f"<li>{_e(next((x for d, x in r.named if d == view.column), r.value_text))}</li>"
                       for r in ordered)
        lists.append(f"<p>{_e(group)}</p><ol class='ranked'>{keys}</ol>")
    return "".join(lists) + more


def render_html(data: ReportData) -> str:
    """The whole page: one file, nothing loaded from elsewhere."""
    meta = data.meta or {}
    title = f"dpcli release report: {meta.get('dataset', data.source)}"
    sections = []
    plotted = 0
    for n, view in enumerate(data.statistics):
        # top_k: value = rank, which a ranked list says and a bar of ranks would not
        extra = ""
        if view.traits is not None and view.traits.value is Value.RANK:  # a ranked list, not a plot of ranks
            plot = _ranked_html(view)
        elif plotted < MAX_PLOTS:
            plot = plot_svg(view, f"dpcli-{n}")
            plotted += 1
            if view.total > MAX_PLOT_POINTS:
                extra = f"<p>The plot shows the first {MAX_PLOT_POINTS} of {view.total} rows.</p>"
        else:
            plot = f"<p>Not plotted: the page plots the first {MAX_PLOTS} statistics.</p>"
        flags = view.flags
        flag_note = (
            f"<p class='box warn'>{flags} cell(s) flagged or suppressed by the small-cell policy.</p>" if flags else ""
        )
        sections.append(
            f"<section class='statistic' id='stat-{n}' data-statistic='{_e(view.name)}'>"
            f"<h2>{_e(view.name)} <small>({_e(view.kind or 'kind not stated')}"
            f"{', column ' + _e(view.column) if view.column else ''})</small></h2>"
            f"{_stat_params(view)}<figure class='plot' data-statistic='{_e(view.name)}'>{plot}</figure>"
            f"{extra}{flag_note}{_rows_html(view)}</section>"
        )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title><style>{_STYLE}</style></head>
<body>
<h1>{_e(title)}</h1>
<p>{len(data.statistics)} statistic(s) from <code>{_e(data.source)}</code>. Intervals are the table's
<code>ci_low</code> to <code>ci_high</code>: they cover the privacy noise only, not sampling error.</p>
{_guarantee_html(data)}
<h2 id="budget">Budget</h2>
{_budget_html(data)}
<h2>Public parameters</h2>
{_params_html(data)}
{''.join(sections)}
</body></html>
"""


# ---------------------------------------------------------------------------------------------------------------
# Writing


def write_report(path: Path, page: str) -> None:
    atomic_write(path, lambda fh: fh.write(page.encode("utf-8")))


def make_report(
    table: Path, output: Path, *, meta: Path | None = None, ledger: str | Path | None = None,
    lock_timeout: float | None = None,
    summary_md: Path | None = None,
) -> ReportData:
    """`dpcli report`: the page of a released table (and its Markdown summary appended to ``summary_md``).

    The page and the summary are checked before anything is read or written (dpcli.publish.paths: a new name or a
    regular
    file, never the table, its sidecar, the ledger or a file the ledger keeps, nor each other); the table and the
    sidecar are read as regular files (a FIFO is refused, not waited on); the ledger is read, never written."""
    from dpcli.core.locations import is_ledger_url
    from dpcli.ledger import DEFAULT_LOCK_TIMEOUT, open_ledger, resolve_ledger
    from dpcli.publish.paths import Protected, check_targets, open_append

    wait = DEFAULT_LOCK_TIMEOUT if lock_timeout is None else lock_timeout

    sidecar = meta if meta is not None else beside(table)
    keep = Protected().add(table, "the table").add(sidecar, "the sidecar")
    book = None
    if ledger is not None:
        ledger = resolve_ledger(ledger, None)
        book = None if is_ledger_url(ledger) else open_ledger(ledger, lock_timeout=wait)  # a server keeps no file here
        keep.add_ledger(book, ledger)
    check_targets([(output, "report"), (summary_md, "summary")], keep)
    handle = None if summary_md is None else open_append(summary_md, "summary")
    data = load(table, sidecar)
    dataset = (data.meta or {}).get("dataset")
    if ledger is not None and dataset:  # without a sidecar the dataset's name, so its budget, is not known
        book = book or open_ledger(ledger, lock_timeout=wait)
        # a renewing cap: the status of the period the sidecar names (its spend's)
        period = ((data.meta or {}).get("ledger") or {}).get("period")
        data.status = book.status(str(dataset), period=period if isinstance(period, str) else None)
        data.ledger_name = book.name
    page = render_html(data)
    try:
        write_report(output, page)
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {why(exc)}") from None
    if summary_md is not None:
        try:
            write_summary(summary_md, data, handle)
        except OSError as exc:
            raise UsageError(f"cannot append to {summary_md}: {why(exc)}") from None
    return data
