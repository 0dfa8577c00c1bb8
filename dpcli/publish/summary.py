"""`--summary-md`: a release's short Markdown summary (escaped), appended once per release.

Every string of the table or the sidecar is escaped in the summary (every ASCII punctuation mark that opens
something by a backslash, as CommonMark defines, so no HTML, image, link or math).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from pathlib import Path
from typing import BinaryIO

from dpcli.core.accounting import format_exact
from dpcli.ledger.base import RENEWING_NOTE
from dpcli.publish.report_data import ReportData, StatisticView, exact, guarantee, rank_bound, uncertainty
from dpcli.specs.kinds import Value

# Any ASCII punctuation mark may be backslash-escaped in CommonMark (and GitHub's Markdown), and then stands for
# itself. These are the ones that open something: an HTML tag or entity (< &), an image or link ([ !), emphasis or
# code (* _ ~ `), math ($), a table cell (|), a heading (#). Escaped, no text of a table or sidecar opens anything;
# numbers (digits . - :) stay as they are.
# An underscore inside a word (n_by_sex) opens nothing (CommonMark's flanking rules) and is left as it is.
_MD_SPECIAL = re.compile(r"([\\`*\[\]<>!|~$&{}#]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z]))")
_MD_SPACE = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]+")


def _md(text: object) -> str:
    """Text from the table or the sidecar as literal Markdown on one line of a table cell."""
    return _MD_SPECIAL.sub(r"\\\1", _MD_SPACE.sub(" ", str(text)))


def summary_heading(data: ReportData) -> str:
    """The summary's first line: the dataset, and the release id and ledger record that paid for it when the sidecar
    gives them (the line that makes a summary written once per release: ``write_summary``)."""
    meta = data.meta or {}
    rid = (meta.get("ledger") or {}).get("release_id") or meta.get("release_id")
    series = meta.get("series")
    if rid and isinstance(series, dict) and isinstance(series.get("period"), int):
        rid = f"{rid} period {series['period']}"  # a series' periods share its charge's record: each its own line
    record = (meta.get("ledger") or {}).get("record")
    paid = f", ledger record {_md(record)}" if rid and isinstance(record, int) else ""
    return f"### dpcli release: {_md(meta.get('dataset', data.source))}" + (f" ({_md(rid)}{paid})" if rid else "")


def _once_key(data: ReportData) -> str | None:
    """The heading that identifies the release (its release id and ledger record), or None when the sidecar does
    not give both (the summary is then appended on every run: nothing tells two runs apart)."""
    ledger = (data.meta or {}).get("ledger") or {}
    return summary_heading(data) if ledger.get("release_id") and isinstance(ledger.get("record"), int) else None


def _summary_cells(view: StatisticView) -> tuple[str, str]:
    """(value, uncertainty) of a statistic's summary line: its number and interval (or rank bound) when it is one
    number; for several cells, the range of the released values and the widest interval's half-width (or the
    widest rank bound), or a ranked statistic's first keys. Released numbers and declared labels only."""
    if view.total == 1 and view.rows:
        r = view.rows[0]
        return ("suppressed" if r.flag == "suppressed" else r.value_text), uncertainty(view, r)
    if view.traits is not None and view.traits.value is Value.RANK:
        ordered = sorted(view.rows, key=lambda r: r.value if r.value is not None else math.inf)[:5]
        keys = ", ".join(f"{r.value_text}. {' × '.join(r.labels)}" for r in ordered)
        return keys + (", …" if view.total > len(ordered) else ""), "none: ranks of noisy counts"
    if view.lowest is None or view.highest is None:
        return "", ""
    value = f"{view.lowest[1]} to {view.highest[1]}"
    if view.widest is not None:
        return value, f"±{view.widest:f} at most"
    bounds = [exact(rank_bound(view, r) or "") for r in view.rows if r.quantile]
    known = [b for b in bounds if b is not None]
    return value, (f"rank ±{format_exact(max(known))} rows at most (95%)" if known else "")


def render_markdown(data: ReportData) -> str:
    """A short summary for a CI log ($GITHUB_STEP_SUMMARY): what was released, what it cost, what is left."""
    meta = data.meta or {}
    lines = [summary_heading(data), ""]
    spent_by = guarantee(data)
    spent = spent_by.text if spent_by is not None else "not known (no sidecar)"
    if meta.get("reissued"):
        spent += " (re-issued: nothing spent by this run)"
    status = data.status
    if status is None or status.cap is None:
        left = "not known (no ledger given)" if data.ledger_name is None else "no cap in the ledger"
    else:
        left = f"ε {format_exact(status.remaining or Fraction(0))} of {format_exact(status.cap)}"
        if status.per_period:  # a renewing cap: the period's (the sidecar names it), and what that means
            left = (f"{left} in period '{status.period}'" if status.period is not None
                    else f"ε {format_exact(status.cap)} per period; this release's period is not known (no sidecar)")
            left += f" (a cap per declared period: {RENEWING_NOTE})"
    lines += [f"- spent: {_md(spent)}", f"- left: {_md(left)}", "", "| statistic | kind | cells | value | interval |",
              "|---|---|---:|---:|---|"]
    for view in data.statistics:
        value, spread = _summary_cells(view)
        if view.flags:
            spread += f" ({view.flags} flagged/suppressed)"
        lines.append(f"| {_md(view.name)} | {_md(view.kind)} | {view.total} | {_md(value)} | {_md(spread.strip())} |")
    lines += ["", "Several cells: the range of the released values, and the largest distance from a value to its "
              "interval's end. Intervals cover the privacy noise only, not sampling error."]
    return "\n".join(lines) + "\n\n"


def append_summary(path: Path, text: str, handle: BinaryIO | None = None) -> None:
    """Append (GitHub's $GITHUB_STEP_SUMMARY collects what each step appends), through ``handle`` when the file was
    opened before (dpcli.publish.paths.open_append), else to the file created now; never blocking, never through a
    link."""
    from dpcli.publish.paths import append

    append(path, "summary", handle, text.encode("utf-8"))


def write_summary(path: Path, data: ReportData, handle: BinaryIO | None = None) -> bool:
    """The release's Markdown summary appended to ``path``, once per release: when the file already holds this
    release's heading (its release id and ledger record: a re-run, a re-issue or `dpcli report` again), nothing is
    appended. False when nothing was. The file is public output; deciding on it reads nothing of the input."""
    from dpcli.publish.paths import holds_line

    key = _once_key(data)
    if key is not None and holds_line(path, handle, key):
        if handle is not None:
            handle.close()
        return False
    append_summary(path, render_markdown(data), handle)
    return True
