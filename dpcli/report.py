"""`dpcli report` and `--summary-md`: a released table as one self-contained HTML page, and a short Markdown summary.

Everything here reads what is public already: the released table (by column NAME, so a table of contract 0.2 or
0.3 both work), its sidecar (public parameters) and the ledger's budget figures. Nothing reads the input.
The page loads nothing from the network: the plots are matplotlib SVG inlined in the HTML (text drawn as paths, so
no font is fetched), the style is one inline <style> block, and there is no script.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

from dpcli.accounting import format_exact, parse_exact
from dpcli.errors import UsageError
from dpcli.files import atomic_write
from dpcli.ledger.base import BudgetStatus

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# columns with a meaning of their own; every other column of the table is a dimension (a breakdown's label)
KNOWN_COLUMNS = frozenset(
    {"statistic", "kind", "column", "bin_low", "bin_high", "quantile", "value", "ci_low", "ci_high", "epsilon", "rho",
     "flag"}
)
# a table with more rows for one statistic than this is shown by its plot and a note, not a row per cell
MAX_TABLE_ROWS = 200
# kinds whose value is a rank: shown as a ranked list, not a plot
RANKED = frozenset({"top_k", "mode"})
# a plot with more points than this shows the first ones and says how many it left out
MAX_PLOT_POINTS = 60


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


@dataclass
class StatisticView:
    name: str
    kind: str
    column: str
    rows: list[Row] = field(default_factory=list)
    meta: dict | None = None  # the sidecar's entry for this statistic, when there is a sidecar


@dataclass
class ReportData:
    statistics: list[StatisticView]
    meta: dict | None  # the sidecar, None when none was found
    status: BudgetStatus | None  # the dataset's budget in the ledger, None when no ledger was read
    ledger_name: str | None
    source: str  # the table's file name (a label on the page; never a directory of the operator's machine)


# ---------------------------------------------------------------------------------------------------------------
# Reading


def read_table(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """The released table's columns and rows (CSV, or the JSON list of objects for a .json path). A problem is
    exit 2 naming the file and the row number, never a cell's text."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the table {path}: {_why(exc)}") from None
    if path.suffix.lower() == ".json":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            raise UsageError(f"the table {path} is not JSON") from None
        if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
            raise UsageError(f"the table {path} is not a JSON list of objects (dpcli release --format json)")
        columns = list(doc[0]) if doc else []
        rows = [{k: "" if v is None else str(v) for k, v in r.items()} for r in doc]
        return columns, rows
    reader = csv.DictReader(io.StringIO(text, newline=""))
    columns = list(reader.fieldnames or [])
    rows = []
    for n, record in enumerate(reader, start=2):
        if None in record or any(v is None for v in record.values()):
            raise UsageError(f"the table {path}: line {n} does not have {len(columns)} fields")
        rows.append(record)
    return columns, rows


def _why(exc: Exception) -> str:
    """An OS error's reason, or the exception's class: never its text, which for a decoding error quotes bytes."""
    return getattr(exc, "strerror", None) or type(exc).__name__


def _check_columns(path: Path | str, columns: Sequence[str]) -> None:
    missing = [c for c in ("statistic", "value") if c not in columns]
    if missing:
        names = " or ".join(repr(c) for c in missing)
        raise UsageError(f"the table {path} has no {names} column: is it a dpcli table?")


def read_sidecar(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the sidecar {path}: {_why(exc)}") from None
    except json.JSONDecodeError:
        raise UsageError(f"the sidecar {path} is not JSON") from None
    if not isinstance(doc, dict):
        raise UsageError(f"the sidecar {path} is not a JSON object")
    return doc


def _number(text: str) -> float | None:
    if not text:
        return None
    try:
        return float(parse_exact(text))
    except (ValueError, ZeroDivisionError):
        return None


def views(columns: Sequence[str], rows: Iterable[dict[str, str]], meta: dict | None) -> list[StatisticView]:
    """The table's rows grouped by statistic, in the table's order. A statistic's kind and column come from the
    table's `kind`/`column` columns (contract 0.3), else from the sidecar, else are left empty."""
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
        lo, hi = r.get("ci_low", ""), r.get("ci_high", "")
        view.rows.append(
            Row(
                labels=tuple(r[d] for d in dims if r.get(d)),
                value=_number(r.get("value", "")),
                ci_low=_number(lo),
                ci_high=_number(hi),
                value_text=r.get("value", ""),
                ci_text=f"{lo} to {hi}" if lo and hi else "",
                flag=r.get("flag", ""),
                quantile=r.get("quantile", ""),
                bin_low=r.get("bin_low", ""),
                bin_high=r.get("bin_high", ""),
            )
        )
    return list(out.values())


def load(
    table_path: Path, meta_path: Path | None = None, status: BudgetStatus | None = None, ledger_name: str | None = None
) -> ReportData:
    """A report's data from a table file; the sidecar is ``meta_path``, else OUT.meta.json beside the table when
    there is one (none: the page says the public parameters are unknown)."""
    columns, rows = read_table(table_path)
    _check_columns(table_path, columns)
    if meta_path is None:
        beside = table_path.with_name(table_path.name + ".meta.json")
        meta_path = beside if beside.is_file() else None
    meta = None if meta_path is None else read_sidecar(meta_path)
    return ReportData(views(columns, rows, meta), meta, status, ledger_name, table_path.name)


def from_rows(
    columns: Sequence[str], rows: Iterable[Sequence[str | None]], meta: dict | None, status: BudgetStatus | None,
    ledger_name: str | None, source: str,
) -> ReportData:
    """A report's data from a table in memory (``release --report``): rows as the table's tuples."""
    _check_columns(source, columns)
    records = [{c: "" if v is None else v for c, v in zip(columns, r, strict=True)} for r in rows]
    return ReportData(views(columns, records, meta), meta, status, ledger_name, source)


def ledger_status(
    location: str | Path, dataset: str, lock_timeout: float | None = None
) -> tuple[BudgetStatus | None, str]:
    """The dataset's budget in the ledger (verified), waiting at most ``lock_timeout`` seconds for it (default: the
    ledger's); reads only, spends nothing."""
    from dpcli.ledger import DEFAULT_LOCK_TIMEOUT, open_ledger

    book = open_ledger(location, lock_timeout=DEFAULT_LOCK_TIMEOUT if lock_timeout is None else lock_timeout)
    return book.verify().datasets.get(dataset), book.name


# ---------------------------------------------------------------------------------------------------------------
# Plots (matplotlib, imported here only: the other commands do not pay for it)


def _label(row: Row) -> str:
    if row.bin_low or row.bin_high:
        return f"[{row.bin_low}..{row.bin_high})" + ("".join(f" · {x}" for x in row.labels[1:]) if row.labels else "")
    text = " × ".join(row.labels) or "all rows"
    return f"{text} · q={row.quantile}" if row.quantile else text


_SVG_ID = re.compile(r'(\bid="|href="#|url\(#)')


def _svg(view: StatisticView, prefix: str) -> str:
    import matplotlib
    from matplotlib.figure import Figure  # not pyplot: no backend, no global figure list to leak into a caller's

    # text as paths (no font to fetch); a fixed salt: the hashed ids of clip paths and markers are the same on
    # every run (reproducible pages). A context: a library caller's own matplotlib settings are left as they were.
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "dpcli", "font.size": 9}):
        svg = _draw(view, Figure)
    # every figure numbers its elements from 1 (figure_1, patch_1, glyphs): one prefix per figure keeps the ids of
    # one page unique, and each figure's references (href="#id", url(#id)) pointing into itself
    return _SVG_ID.sub(lambda m: f"{m.group(1)}{prefix}-", svg)


def _draw(view: StatisticView, figure: type[Figure]) -> str:
    rows = view.rows[:MAX_PLOT_POINTS]
    labels = [_label(r) for r in rows]
    shown = [r.value if r.value is not None else math.nan for r in rows]
    lows = [r.value - r.ci_low if r.value is not None and r.ci_low is not None else 0.0 for r in rows]
    highs = [r.ci_high - r.value if r.value is not None and r.ci_high is not None else 0.0 for r in rows]
    fig = figure(figsize=(7.5, max(1.6, 0.32 * len(rows) + 1.0)))
    ax = fig.subplots()
    y = list(range(len(rows)))[::-1]  # first row on top, as in the table
    colours = ["#b45309" if r.flag == "flagged" else "#2563eb" for r in rows]
    if view.kind == "histogram":
        ax.barh(y, [0 if math.isnan(v) else v for v in shown], color=colours, alpha=0.55, height=0.7)
    ax.errorbar(shown, y, xerr=[lows, highs], fmt="none", ecolor="#111827", capsize=3, lw=1)
    if view.kind != "histogram":
        ax.scatter(shown, y, c=colours, zorder=3, s=18)
    for yy, r in zip(y, rows, strict=True):
        if r.flag == "suppressed":
            ax.annotate("suppressed", (0, yy), xycoords=("axes fraction", "data"), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=8, color="#6b7280", style="italic")
    ax.set_yticks(y, labels)
    ax.set_xlabel(f"{view.name} ({view.kind or 'value'}{', ' + view.column if view.column else ''}): "
                  "value and its interval")
    ax.grid(axis="x", color="#e5e7eb")
    ax.margins(y=0.5 / max(1, len(rows)))
    ax.set_axisbelow(True)
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]  # the XML prolog and doctype do not belong inside HTML


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
    if meta:
        spent = f"ε = {_e(meta.get('epsilon'))}"
        if meta.get("rho") not in (None, "0"):
            spent += f", ρ = {_e(meta.get('rho'))}"
        if meta.get("delta") not in (None, "0"):
            spent += f", δ = {_e(meta.get('delta'))}"
        note = " (a re-issue of a table already paid for: this run spent nothing)" if meta.get("reissued") else ""
        parts.append(f"<p>This release spent <b>{spent}</b>{note}.</p>")
    else:
        parts.append("<p>No sidecar was found, so what this release spent is not shown here "
                     "(give <code>--meta PATH</code>).</p>")
    status = data.status
    if status is None:
        parts.append("<p class='box warn'>What is left of the dataset's budget is <b>not known here</b>: "
                     + ("the ledger was not given (<code>--ledger</code>)." if data.ledger_name is None
                        else "the ledger has no record of this dataset.") + "</p>")
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


def _guarantee_html(data: ReportData) -> str:
    meta = data.meta or {}
    unit = meta.get("unit", "row")
    who = "one person (all of their rows)" if unit == "person" else "one row of the input"
    eps = meta.get("epsilon", "ε")
    try:  # a number (0.2) or exact decimal text (0.3)
        conf = float(parse_exact(str(meta.get("confidence", "0.95"))))
    except (ValueError, ZeroDivisionError):
        conf = 0.95
    pct = f"{conf * 100:g}%"
    delta = meta.get("delta")
    # (ε, δ): the ratio bound may fail with probability δ (Gaussian noise, open keys); pure ε-DP has no such clause
    slack = "" if delta in (None, "0") else f", except with a probability of at most δ = {_e(delta)}"
    return f"""<div class="box" id="guarantee"><h2 style="margin-top:0;border:0">What the guarantee means</h2>
<p>Every number here was computed from the data with random noise added, so that anyone who reads all of them learns
almost nothing about {who}: whether that {'person' if unit == 'person' else 'row'} was in the data or not, every
table this release could have produced is about as likely (the ratio is at most e<sup>ε</sup>, ε = {_e(eps)} for
this release){slack}. This holds whatever else the reader knows.</p>
<p><b>What it does not mean.</b> It does not hide facts about groups: a published average is meant to be learned.
It does not make the numbers exact: each comes with an interval that holds the true value with probability
{_e(pct)}, and about one interval in {round(1 / max(1 - conf, 1e-6))} misses. And the protection adds up over
releases of the same data: the ledger's cap limits the total, which is why the budget left is shown above.</p></div>"""


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
    bits = [f"mechanism {_e(sm.get('mechanism'))}", f"ε = {_e(sm.get('epsilon'))}"]
    if sm.get("rho") not in (None, "0"):
        bits.append(f"ρ = {_e(sm.get('rho'))}")
    bits += [
        f"{_e(c.get('part'))} noise scale {_e(c.get('scale'))} (sensitivity {_e(c.get('sensitivity'))})"
        for c in sm.get("noise") or [] if isinstance(c, dict)
    ]
    if sm.get("bins"):
        bits.append("bins " + _e(", ".join(str(b) for b in sm["bins"])))
    if sm.get("by"):
        bits.append("by " + _e(", ".join(str(b) for b in sm["by"])))
    return "<p class='params'>" + "; ".join(bits) + "</p>"


def _rows_html(view: StatisticView) -> str:
    if len(view.rows) > MAX_TABLE_ROWS:
        return f"<p>{len(view.rows)} rows: see the table file.</p>"
    out = ["<table><tr><th>cell</th><th class='num'>value</th><th>interval</th><th>flag</th></tr>"]
    for r in view.rows:
        value = "suppressed" if r.flag == "suppressed" else r.value_text
        out.append(f"<tr class='{_e(r.flag)}'><td>{_e(_label(r))}</td><td class='num'>{_e(value)}</td>"
                   f"<td>{_e(r.ci_text)}</td><td>{_e(r.flag)}</td></tr>")
    out.append("</table>")
    return "\n".join(out)


def _ranked_html(view: StatisticView) -> str:
    ordered = sorted(view.rows, key=lambda r: r.value if r.value is not None else math.inf)
    items = "".join(f"<li>{_e(' × '.join(r.labels) or r.value_text)}</li>" for r in ordered)
    return f"<ol class='ranked'>{items}</ol>"


def render_html(data: ReportData) -> str:
    """The whole page: one file, nothing loaded from elsewhere."""
    meta = data.meta or {}
    title = f"dpcli release report: {meta.get('dataset', data.source)}"
    sections = []
    for n, view in enumerate(data.statistics):
        # top_k: value = rank, which a ranked list says and a bar of ranks would not
        plot = _ranked_html(view) if view.kind in RANKED else _svg(view, f"dpcli-{n}")
        extra = ""
        if len(view.rows) > MAX_PLOT_POINTS and view.kind not in RANKED:
            extra = f"<p>The plot shows the first {MAX_PLOT_POINTS} of {len(view.rows)} rows.</p>"
        flags = sum(1 for r in view.rows if r.flag)
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
<code>ci_low</code> to <code>ci_high</code>.</p>
{_guarantee_html(data)}
<h2>Budget</h2>
{_budget_html(data)}
<h2>Public parameters</h2>
{_params_html(data)}
{''.join(sections)}
</body></html>
"""


# ---------------------------------------------------------------------------------------------------------------
# Markdown


def _md(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(data: ReportData) -> str:
    """A short summary for a CI log ($GITHUB_STEP_SUMMARY): what was released, what it cost, what is left."""
    meta = data.meta or {}
    rid = (meta.get("ledger") or {}).get("release_id")
    head = f"### dpcli release: {_md(meta.get('dataset', data.source))}" + (f" ({_md(rid)})" if rid else "")
    lines = [head, ""]
    spent = f"ε {meta.get('epsilon')}" if meta else "not known (no sidecar)"
    if meta.get("reissued"):
        spent += " (re-issued: nothing spent by this run)"
    status = data.status
    if status is None or status.cap is None:
        left = "not known (no ledger given)" if data.ledger_name is None else "no cap in the ledger"
    else:
        left = f"ε {format_exact(status.remaining or Fraction(0))} of {format_exact(status.cap)}"
    lines += [f"- spent: {_md(spent)}", f"- left: {_md(left)}", "", "| statistic | kind | cells | value | interval |",
              "|---|---|---:|---:|---|"]
    for view in data.statistics:
        if len(view.rows) == 1:
            r = view.rows[0]
            value = "suppressed" if r.flag == "suppressed" else r.value_text
            lines.append(f"| {_md(view.name)} | {_md(view.kind)} | 1 | {_md(value)} | {_md(r.ci_text)} |")
        else:
            flags = sum(1 for r in view.rows if r.flag)
            note = f"{flags} flagged/suppressed" if flags else ""
            lines.append(f"| {_md(view.name)} | {_md(view.kind)} | {len(view.rows)} | {note} | |")
    return "\n".join(lines) + "\n\n"


# ---------------------------------------------------------------------------------------------------------------
# Writing


def write_report(path: Path, page: str) -> None:
    atomic_write(path, lambda fh: fh.write(page.encode("utf-8")))


def append_summary(path: Path, text: str) -> None:
    """Append (GitHub's $GITHUB_STEP_SUMMARY collects what each step appends)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)
