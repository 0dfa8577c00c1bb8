"""`dpcli report` and `--summary-md`: a released table as one self-contained HTML page, and a short Markdown summary.

Everything here reads what is public already: the released table (by column NAME, so a table of contract 0.2 or
0.3 both work), its sidecar (public parameters) and the ledger's budget figures. Nothing reads the input.
The page loads nothing from the network: the plots are matplotlib SVG inlined in the HTML (text drawn as paths, so
no font is fetched), the style is one inline <style> block, and there is no script.

The table and the sidecar are trusted for nothing: both are read as regular files of a bounded size, the sidecar
is validated against the shipped JSON Schema (dpcli/publish/schemas/sidecar.schema.json) and numbers are parsed as text,
so a malformed, huge or deeply nested file is exit 2 with a message, never an internal error. Every string they
hold is escaped where it lands: HTML-escaped in the page, never parsed as mathtext or TeX by matplotlib
(``text.parse_math`` off, matplotlib's default style, whatever a matplotlibrc says), and escaped in the Markdown
summary (every ASCII punctuation mark by a backslash, as CommonMark defines, so no HTML, image, link or math).
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import os
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from dpcli.core.accounting import format_exact, parse_exact
from dpcli.core.files import atomic_write
from dpcli.errors import UsageError
from dpcli.ledger.base import BudgetStatus
from dpcli.plan.budget import NOTHING_SPENT, cost_text
from dpcli.specs.kinds import KINDS, Kind, Value
from dpcli.specs.v1 import OUTPUT_COLUMNS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# columns with a meaning of their own; every other column of the table is a dimension (a breakdown's label)
KNOWN_COLUMNS = frozenset(OUTPUT_COLUMNS)
# a table with more rows for one statistic than this is shown by its plot and a note, not a row per cell; the report
# keeps no more rows than this per statistic (the others are counted), so its memory is bounded by the statistics
MAX_TABLE_ROWS = 200
# a plot with more points than this shows the first ones and says how many it left out
MAX_PLOT_POINTS = 60
# statistics past this many are shown without a plot (a matplotlib figure costs ~50 ms; a 1 MiB spec can hold 30,000)
MAX_PLOTS = 100
# a label in a plot is cut to this many characters (the table below the plot shows it whole)
MAX_PLOT_LABEL = 60
# the largest table and sidecar `dpcli report` reads (a CSV table is read as a stream; a JSON one whole)
MAX_TABLE_BYTES = 1 << 30
MAX_JSON_TABLE_BYTES = 256 << 20
MAX_SIDECAR_BYTES = 64 << 20
MAX_NUMBER = 1e300  # a cell's number beyond this is refused (exit 2): plotting it could overflow
_MAX_DECIMAL = Decimal(MAX_NUMBER)
_MAX_INT_DIGITS = 40  # an integer of the sidecar (a record number, a count of cells) has far fewer digits

_READ_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | os.O_NONBLOCK  # a FIFO in a file's place: not waited on


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


@dataclass
class ReportData:
    statistics: list[StatisticView]
    meta: dict[str, Any] | None  # the sidecar, None when none was found
    status: BudgetStatus | None  # the dataset's budget in the ledger, None when no ledger was read
    ledger_name: str | None
    source: str  # the table's file name (a label on the page; never a directory of the operator's machine)


# ---------------------------------------------------------------------------------------------------------------
# Reading


def _open_regular(path: Path, what: str, limit: int) -> BinaryIO:
    """``path`` opened for reading: a regular file (a FIFO, device or directory is refused, never waited on) of at
    most ``limit`` bytes (exit 2)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {_why(exc)}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UsageError(f"{what} {path} is not a regular file (a directory, device, FIFO or socket)")
    if st.st_size > limit:
        os.close(fd)
        raise UsageError(f"{what} {path} is larger than {limit >> 20} MiB: not a dpcli {what.split()[-1]}")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_table(path: Path) -> tuple[list[str], Iterator[dict[str, str]]]:
    """The released table's columns and rows (CSV, or the JSON list of objects for a .json path). A problem is
    exit 2 naming the file and the row number, never a cell's text; so is a table without a statistic or value
    column. A CSV table is read as a stream: the file is closed once its rows are read, or here on a refusal."""
    if path.suffix.lower() == ".json":
        with _open_regular(path, "the table", MAX_JSON_TABLE_BYTES) as fh:
            raw = fh.read()
        doc = _load_json(raw, f"the table {path}")
        if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
            raise UsageError(f"the table {path} is not a JSON list of objects (dpcli release --format json)")
        for n, r in enumerate(doc, start=1):
            if not all(isinstance(v, str | bool | None) for v in r.values()):
                raise UsageError(f"the table {path}: row {n} holds a value that is not a number, text or null")
        columns = list(doc[0]) if doc else []
        _check_columns(path, columns)
        return columns, iter([{k: _cell(v) for k, v in r.items()} for r in doc])
    fh = _open_regular(path, "the table", MAX_TABLE_BYTES)
    text = io.TextIOWrapper(fh, encoding="utf-8", newline="")
    reader = csv.reader(text)
    try:
        columns = next(reader, [])
    except (csv.Error, UnicodeDecodeError, OSError) as exc:
        text.close()
        raise UsageError(f"cannot read the table {path}: line 1: {_why(exc)}") from None
    try:
        _check_columns(path, columns)
    except UsageError:
        text.close()  # the rows' generator, which would close it, is never started
        raise
    return columns, _csv_rows(path, text, reader, columns)


def _cell(value: str | bool | None) -> str:
    """A JSON table's cell as the CSV table would hold it (numbers were kept as their text)."""
    if value is None:
        return ""
    return ("true" if value else "false") if isinstance(value, bool) else value


def _csv_rows(path: Path, text: io.TextIOWrapper, reader: Any, columns: list[str]) -> Iterator[dict[str, str]]:
    with text:
        n = 1
        try:
            for n, record in enumerate(reader, start=2):
                if not record:  # a blank line (csv.DictReader skipped them too)
                    continue
                if len(record) != len(columns):
                    raise UsageError(f"the table {path}: line {n} does not have {len(columns)} fields")
                yield dict(zip(columns, record, strict=True))
        except (csv.Error, UnicodeDecodeError, OSError) as exc:
            raise UsageError(f"cannot read the table {path}: line {n + 1}: {_why(exc)}") from None


def _why(exc: BaseException) -> str:
    """An OS error's reason, or the exception's class: never its text, which for a decoding error quotes bytes."""
    return getattr(exc, "strerror", None) or type(exc).__name__


def _check_columns(path: Path | str, columns: Sequence[str]) -> None:
    missing = [c for c in ("statistic", "value") if c not in columns]
    if missing:
        names = " or ".join(repr(c) for c in missing)
        raise UsageError(f"the table {path} has no {names} column: is it a dpcli table?")


def _int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        raise ValueError("an integer of too many digits")
    return int(text)


def _no_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def _load_json(raw: bytes, what: str, numbers_as_text: bool = True) -> Any:
    """JSON with every number kept as its text (a table: the report parses it exactly) or as a bounded int (a
    sidecar); NaN and Infinity refused. Exit 2 for anything that is not such JSON, however deep or malformed."""
    try:
        return json.loads(
            raw.decode("utf-8"),
            parse_int=str if numbers_as_text else _int,
            parse_float=str if numbers_as_text else float,
            parse_constant=_no_constant,
        )
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        reason = "nested too deeply" if isinstance(exc, RecursionError) else "not JSON"
        raise UsageError(f"{what} is {reason}") from None


_SIDECAR_VALIDATOR: Any = None


def _sidecar_validator() -> Any:
    global _SIDECAR_VALIDATOR  # built once per process, on first use
    if _SIDECAR_VALIDATOR is None:
        import jsonschema

        from dpcli.publish.sidecar import SIDECAR_SCHEMA

        _SIDECAR_VALIDATOR = jsonschema.Draft202012Validator(json.loads(SIDECAR_SCHEMA.read_text(encoding="utf-8")))
    return _SIDECAR_VALIDATOR


def read_sidecar(path: Path) -> dict[str, Any]:
    """A sidecar as dpcli writes it: a regular file of at most MAX_SIDECAR_BYTES, valid against the shipped schema
    (`dpcli schema --sidecar`). Exit 2 otherwise, naming where the document departs from the schema."""
    with _open_regular(path, "the sidecar", MAX_SIDECAR_BYTES) as fh:
        raw = fh.read()
    doc = _load_json(raw, f"the sidecar {path}", numbers_as_text=False)
    check_sidecar(doc, f"the sidecar {path}")
    sidecar: dict[str, Any] = doc  # the schema's top level is an object: check_sidecar refused anything else
    return sidecar


def check_sidecar(doc: Any, what: str) -> None:
    import jsonschema

    try:
        error = jsonschema.exceptions.best_match(_sidecar_validator().iter_errors(doc))
    except RecursionError:
        raise UsageError(f"{what} is nested too deeply") from None
    if error is not None:
        where = error.json_path if len(error.json_path) <= 120 else error.json_path[:120] + "…"
        raise UsageError(
            f"{what} is not a dpcli sidecar (contract 0.3): at {where}, it fails the schema's "
            f"'{error.validator}' rule",
            hint="`dpcli schema --sidecar` prints the schema",
        )


def _number(text: str) -> float | None:
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
                value=_number(r.get("value", "")),
                ci_low=_number(lo),
                ci_high=_number(hi),
                value_text=r.get("value", ""),
                ci_text=f"{lo} to {hi}" if lo and hi else "",
                flag=flag,
                quantile=r.get("quantile", ""),
                bin_low=r.get("bin_low", ""),
                bin_high=r.get("bin_high", ""),
                named=tuple((d, r[d]) for d in dims if r.get(d)),
            )
        )
    return list(out.values())


def _small_cells(meta: dict[str, Any] | None) -> bool:
    """Whether a statistic's sidecar entry declares a small-cell policy (its `flag` column means something)."""
    post = (meta or {}).get("postprocess")
    return isinstance(post, dict) and post.get("small_cells") is not None


def _decimal(text: str) -> Decimal | None:
    """A cell's number, exactly, for every row (``_number`` reads the rows the page shows): None for an empty or
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


def beside(table_path: Path) -> Path | None:
    """The sidecar next to a table (OUT.csv.meta.json), when there is one."""
    path = table_path.with_name(table_path.name + ".meta.json")
    return path if os.path.lexists(path) else None


def from_rows(
    columns: Sequence[str], rows: Iterable[Sequence[str | None]], meta: dict[str, Any] | None,
    status: BudgetStatus | None, ledger_name: str | None, source: str,
) -> ReportData:
    """A report's data from a table in memory (``release --report``): rows as the table's tuples."""
    _check_columns(source, columns)
    records = ({c: "" if v is None else v for c, v in zip(columns, r, strict=True)} for r in rows)
    return ReportData(views(columns, records, meta), meta, status, ledger_name, source)


# ---------------------------------------------------------------------------------------------------------------
# Plots (matplotlib, imported here only: the other commands do not pay for it)


def _label(row: Row) -> str:
    text = " × ".join(row.labels) or "all rows"  # a histogram's bin is its column's label, '[lo..hi)'
    return f"{text} · q={row.quantile}" if row.quantile else text


def rank_bound(view: StatisticView, row: Row) -> str | None:
    """A quantile level's rank bound at 95% from the plan (the sidecar's `noise[].rank_error95` of the part
    `q=LEVEL`), in rows; None when the sidecar does not give one."""
    level = _exact(row.quantile)
    if level is None:
        return None
    for part in (view.meta or {}).get("noise") or []:
        name = str(part.get("part", "")) if isinstance(part, dict) else ""
        if name.startswith("q=") and _exact(name[2:]) == level and part.get("rank_error95") is not None:
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


_SVG_ID = re.compile(r'(\bid="|href="#|url\(#)')


# Text is never markup: a declared key "$10K-$50K" is two dollar signs, not mathtext, and `$\\frac{$` no parse error
# (matplotlib's documented switch, rcParams["text.parse_math"], and the Text property parse_math, given to every
# text artist below too). usetex off: a matplotlibrc asking for TeX must not hand the labels to LaTeX.


def _svg(view: StatisticView, prefix: str) -> str:
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
        svg = _draw(view, Figure)
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
        low, high = _number(r.bin_low), _number(r.bin_high)
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
        edges = [_exact(b) for b in bins]
        if any(e is None for e in edges):
            return None
        return len(edges) - 1, lambda i: edges[i]
    if isinstance(bins, dict):
        start, stop, step = (_exact(bins.get(k)) for k in ("start", "stop", "step"))
        if start is None or stop is None or step is None or step <= 0 or stop <= start:
            return None
        return int((stop - start) / step), lambda i: start + i * step
    return None


def _groups(view: StatisticView, rows: Sequence[Row]) -> list[tuple[str, list[int]]]:
    """A histogram's rows by the labels of its other dimensions (a `by:`), in the table's order."""
    out: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        key = " × ".join(x for d, x in r.named if d != view.column) or "count"
        out.setdefault(key, []).append(i)
    return list(out.items())


def _draw_bins(view: StatisticView, rows: Sequence[Row], edges: list[tuple[float, float]], figure: type[Figure]) -> Any:
    """A histogram as bars spanning their bins on the column's numeric axis, one panel per `by:` group, each bin's
    interval drawn at its middle."""
    groups = _groups(view, rows)
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
        return _svg_text(_draw_bins(view, rows, edges, figure))
    labels = [_short(_label(r)) for r in rows]
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
    return _svg_text(fig)


def _svg_text(fig: Figure) -> str:
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


def _exact(value: object) -> Fraction | None:
    """A sidecar's exact number (validated text), or None."""
    try:
        return parse_exact(value) if isinstance(value, str) else None
    except (ValueError, ZeroDivisionError):
        return None


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
    epsilon, rho = _exact(meta.get("epsilon")) or Fraction(0), _exact(meta.get("rho")) or Fraction(0)
    delta = _exact(meta.get("delta"))
    if delta is None and rho and data.status is not None and data.status.cap_delta:
        delta = data.status.cap_delta
    selections = [(s.get("selection") or {}).get("delta") for s in meta.get("statistics") or []]
    selection_delta = sum((_exact(d) or Fraction(0) for d in selections), Fraction(0))
    return Guarantee(epsilon, rho, delta, selection_delta)


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
    conf = _exact(meta.get("confidence"))  # exact decimal text (0.3); validated
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
        start, stop, step = (_exact(bins.get(k)) for k in ("start", "stop", "step"))
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
        out.append(f"<tr class='{_e(r.flag)}'><td>{_e(_label(r))}</td><td class='num'>{_e(value)}</td>"
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
    for group, members in _groups(view, rows):
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
            plot = _svg(view, f"dpcli-{n}")
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
# Markdown


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
    bounds = [_exact(rank_bound(view, r) or "") for r in view.rows if r.quantile]
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


# ---------------------------------------------------------------------------------------------------------------
# Writing


def write_report(path: Path, page: str) -> None:
    atomic_write(path, lambda fh: fh.write(page.encode("utf-8")))


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
        data.status, data.ledger_name = book.verify().datasets.get(str(dataset)), book.name
    page = render_html(data)
    try:
        write_report(output, page)
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {_why(exc)}") from None
    if summary_md is not None:
        try:
            write_summary(summary_md, data, handle)
        except OSError as exc:
            raise UsageError(f"cannot append to {summary_md}: {_why(exc)}") from None
    return data
