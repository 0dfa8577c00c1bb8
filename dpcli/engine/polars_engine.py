"""Exact aggregates with polars: one streaming scan of the declared columns for all statistics of a release.

How the file becomes records (docs/spec.md, "How lines are read"): the header decides the line end (LF, or CR with
CRLF) for the whole file, and by default one physical line is one record. polars reads the whole file with quoting
off, so no quote can make one line swallow the next. The lines that hold a quote character are found beforehand
(``dpcli.engine.lines``) and read again with quotes honoured within the line; since per-group counts and sums add
up, what the quote-blind scan makes of those lines is subtracted and what they hold is added. Both readings go
through the same polars cell parser and the same expressions below. With ``csv: {quoted_line_breaks: true}``
polars' RFC 4180 reader reads the whole file instead. Bytes that are not UTF-8 become U+FFFD (polars'
``utf8-lossy``), and a cell holding U+FFFD is missing. Nothing a data line holds can raise, print or change the
exit code; polars' warnings are silenced.

How a row becomes numbers (documented in docs/spec.md, "How cells are read"):
- int cells: an optional sign and ASCII digits (polars' integer parser); anything else is missing.
- float cells: decimal or scientific notation; nan, inf and overflowing values are missing. Values are clamped to
  the bounds and rounded to the nearest point of the column's fixed-point grid (precision), then clamped again in
  integer grid units, so every value is an integer within [L', U'] and sums are exact integer sums (128-bit).
- category cells: exactly a declared key, byte for byte (no case folding, trimming or Unicode normalisation: a key
  that differs in any way is undeclared). Undeclared keys and empty cells are missing, except that a column with
  ``other: KEY`` counts undeclared non-empty text under its declared KEY (but not text holding U+FFFD: a cell that
  was not valid UTF-8 is missing, never "other").
- bool cells: true/false/1/0 (ASCII case-insensitive); anything else is missing.
- missing cells take the column's ``impute:`` value when declared; otherwise the row is left out of the statistics
  that use that column (a count with no ``by:`` still counts every row).

One query groups the rows of the whole release by the keys its statistics need (the raw text of category and bool
columns, numeric bin indices) and sums and counts the fixed-point values; each statistic's declared
cells are then summed out of that small result, where category text is decoded to declared keys (undeclared text
drops out there). The CSV is parsed once. Grouping by raw text and decoding afterwards measured ~2x faster on 10M
rows than decoding every row. When the product of the statistics' cell counts is too large for one grouping,
statistics are split into several groupings (evaluated together by ``collect_all``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dpcli.engine.columnar import collect_columnar, columnar_format
from dpcli.engine.csv_header import HeaderLayout, check_header, header_layout
from dpcli.engine.lines import LineRepair, QuotedChunk, quoted_chunks, reading
from dpcli.errors import TOO_MANY_FILES, InputError, InternalError
from dpcli.plan import Plan, StatisticPlan
from dpcli.spec import Column, GridBins, Spec

# Largest product of (cells + 1) grouped in one query. Past it the group-by's hash table (at most one entry per
# distinct combination, bounded by the row count too) could grow large, so statistics are grouped separately.
COMBINED_GROUP_LIMIT = 1 << 22

_BOOL_TEXT = {"true": 1, "false": 0, "1": 1, "0": 0}


@dataclass(frozen=True)
class ExactStatistic:
    """Exact aggregates of one statistic, one entry per declared cell (in declared order)."""

    counts: np.ndarray  # int64: rows per cell (for a mean: rows with a value)
    sums: np.ndarray | None  # object array of Python ints: fixed-point sums (centred for a mean), or None


def _schema(spec: Spec, used: list[str]) -> dict[str, pl.DataType]:
    schema: dict[str, pl.DataType] = {}
    for name in used:
        column = spec.columns[name]
        if column.type == "int":
            schema[name] = pl.Int64()
        elif column.type == "float":
            schema[name] = pl.Float64()
        else:
            schema[name] = pl.String()  # decoded to declared keys after grouping (see _key_index)
    return schema


def _numeric(column: Column) -> pl.Expr:
    """A numeric column on its integer grid (grid units), clamped to the bounds; null when missing."""
    c = pl.col(column.name)
    lo, hi = column.grid_bounds
    p = column.precision
    assert p is not None and column.bounds is not None
    if column.type == "int":
        value = c.clip(lo, hi)
    else:
        finite = pl.when(c.is_finite()).then(c)
        clamped = finite.clip(float(column.bounds[0]), float(column.bounds[1]))
        inv = 1 / p
        scaled = clamped * float(inv) if inv.denominator == 1 else clamped / float(p)
        value = scaled.round().cast(pl.Int64).clip(lo, hi)
    if column.impute is not None:
        imp = Fraction(column.impute) / p
        value = value.fill_null(min(max(round(imp), lo), hi))
    return value


def _key_index(column: Column, raw: pl.Expr) -> pl.Expr:
    """Raw text of a category/bool column -> index of its declared key; null for missing or undeclared."""
    if column.type == "category":
        # an Enum of the declared keys: undeclared text becomes null (1.5x faster than replace_strict)
        value = raw.cast(pl.Enum(list(column.keys)), strict=False).to_physical().cast(pl.Int64)
        if column.other is not None:
            # `other: KEY`: undeclared non-empty text counts under KEY (never as a key of its own)
            # (a cell holding U+FFFD had a decoding problem: it stays missing, it is not some other value)
            undeclared = value.is_null() & raw.is_not_null() & (raw != "") & ~raw.str.contains("\ufffd", literal=True)
            value = pl.when(undeclared).then(pl.lit(column.keys.index(column.other), dtype=pl.Int64)).otherwise(value)
    else:
        value = raw.str.to_lowercase().replace_strict(_BOOL_TEXT, default=None, return_dtype=pl.Int64)
    if column.impute is not None:
        value = value.fill_null(column.keys.index(str(column.impute)))
    return value


def _bin_index(spec: Spec, sp: StatisticPlan, value: pl.Expr) -> pl.Expr:
    """Histogram bin of a numeric value already on the integer grid; null outside the bins."""
    column = spec.columns[sp.statistic.column]  # type: ignore[index]
    p = column.precision
    bins = sp.statistic.bins
    assert p is not None and bins is not None
    n = bins.count
    if isinstance(bins, GridBins):
        # v = k*p is in bin i = floor((v - start) / step) = floor((k*sd - sn) * wd / (sd * wn)), with
        # start/p = sn/sd and step/p = wn/wd: integer arithmetic (128-bit), exact at every bin edge
        start, width = bins.start / p, bins.step / p
        sn, sd, wn, wd = start.numerator, start.denominator, width.numerator, width.denominator
        if sd == 1 and wd == 1:
            idx = (value - sn) // wn
        else:
            idx = ((value.cast(pl.Int128) * sd - sn) * wd // (sd * wn)).cast(pl.Int64)
        return pl.when((idx >= 0) & (idx < n)).then(idx)
    # edges: k (grid units) is in [e_i, e_{i+1}) iff t_i <= k < t_{i+1} with t_i = ceil(e_i/p), strictly increasing
    # (checked by the plan). Values lie in [lo, hi], so clamping every t_i into [lo - 1, hi + 1] changes no bin and
    # keeps them exact Int64s (edges far outside the bounds used to collide as floats in cut(): a DuplicateError
    # reported as an unreadable input). The bin is the last i with t_i <= k: an exact integer binary search.
    lo, hi = column.grid_bounds
    thresholds = pl.Series(
        [min(max(math.ceil(bins.edge(i) / p), lo - 1), hi + 1) for i in range(n + 1)], dtype=pl.Int64
    )
    idx = pl.lit(thresholds).search_sorted(value, side="right").cast(pl.Int64) - 1
    return pl.when(value.is_not_null() & (idx >= 0) & (idx < n)).then(idx)


class _Query:
    """The group-by keys and sums one query needs, shared between statistics (named once each)."""

    def __init__(self) -> None:
        self.keys: dict[str, pl.Expr] = {}
        self.sums: dict[str, pl.Expr] = {}

    def key(self, name: str, expr: pl.Expr) -> str:
        self.keys.setdefault(name, expr.alias(name))
        return name

    def total(self, name: str, expr: pl.Expr) -> str:
        self.sums.setdefault(name, expr.alias(name))
        return name


@dataclass(frozen=True)
class _Recipe:
    """How to read one statistic's cells out of the grouped result."""

    dims: tuple[tuple[str, Column | None, int], ...]  # (key column, column to decode or None for a bin index, size)
    counted: str | None  # per-group count of rows with a value (sum/mean); else rows are counted with len()
    total: str | None  # summed column (sum/mean)


def _recipe(spec: Spec, sp: StatisticPlan, q: _Query, sum_type: pl.DataType) -> _Recipe:
    stat = sp.statistic
    dims: list[tuple[str, Column | None, int]] = []
    for d in stat.by:
        column = spec.columns[d]
        dims.append((q.key(f"raw:{d}", pl.col(d)), column, len(column.keys)))
    counted = total = None
    if stat.kind == "histogram":
        column = spec.columns[stat.column]  # type: ignore[index]
        if column.numeric:
            idx = _bin_index(spec, sp, _numeric(column))
            dims.append((q.key(f"bin:{stat.name}", idx), None, stat.bins.count))  # type: ignore[union-attr]
        else:
            dims.append((q.key(f"raw:{column.name}", pl.col(column.name)), column, len(column.keys)))
    elif stat.kind in ("sum", "mean"):
        column = spec.columns[stat.column]  # type: ignore[index]
        value = _numeric(column)
        offset = sp.component("sum").offset
        # counting values per group (rather than grouping by "has a value") keeps the key short: ~10% faster
        counted = q.total(f"count:{column.name}", value.count().cast(pl.Int64))
        total = q.total(f"sum:{column.name}:{offset}", (value - offset).cast(sum_type).sum())
    return _Recipe(tuple(dims), counted, total)


def _groups(plan: Plan) -> list[list[int]]:
    """Partition statistics so each group's product of (cells + 1) stays under COMBINED_GROUP_LIMIT."""
    groups: list[list[int]] = []
    current: list[int] = []
    product = 1
    for i, sp in enumerate(plan.statistics):
        size = sp.cells + 1
        if current and product * size > COMBINED_GROUP_LIMIT:
            groups.append(current)
            current, product = [], 1
        current.append(i)
        product *= size
    if current:
        groups.append(current)
    return groups


def used_columns(spec: Spec) -> list[str]:
    used: dict[str, None] = {}
    for s in spec.statistics:
        for name in (*s.by, *([s.column] if s.column else [])):
            used.setdefault(name, None)
    return list(used)


def _sum_type(plan: Plan, path: Path) -> pl.DataType:
    """Int64 when no sum can overflow it, else Int128 (measured: Int128 sums cost ~25% of the scan).

    A CSV of B bytes has at most B rows, so |sum| <= B * max|value| bounds every fixed-point sum.
    """
    try:
        size = path.stat().st_size
    except OSError:
        return pl.Int128()
    biggest = 1
    for sp in plan.statistics:
        if sp.statistic.kind in ("sum", "mean"):
            lo, hi = plan.spec.columns[sp.statistic.column].grid_bounds  # type: ignore[index]
            offset = sp.component("sum").offset
            biggest = max(biggest, abs(lo - offset), abs(hi - offset))
    return pl.Int64() if (size + 1) * biggest < 2**63 else pl.Int128()


@dataclass(frozen=True)
class _Reader:
    """How polars reads this file: its columns by position (``c0``, ``c1``, ...; the header's names were read by
    ``header_layout``, quotes and all), used columns typed, everything else text that is never parsed."""

    schema: dict[str, pl.DataType]
    select: list[pl.Expr]  # positional columns -> the spec's names, for the lines the main scan reads
    select_lines: list[pl.Expr]  # the same for the quoted lines read again (already without a leading LF)
    eol: str

    def options(self, quoting: bool) -> dict[str, Any]:
        return {
            "has_header": False,
            "separator": ",",
            "quote_char": '"' if quoting else None,
            "eol_char": self.eol,
            "schema": self.schema,
            "infer_schema": False,  # nothing is inferred from the data
            "ignore_errors": True,  # an unparseable cell becomes null: a value problem, handled by the column's policy
            "raise_if_empty": False,
            "truncate_ragged_lines": True,  # extra fields are ignored...
            "missing_columns": "insert",  # ...missing ones are null, whatever the first data line holds
            "extra_columns": "ignore",
            "encoding": "utf8-lossy",  # a byte that is not UTF-8 becomes U+FFFD: that cell, not the run, is affected
        }


def _reader(spec: Spec, header: list[str], used: list[str], eol: bytes) -> _Reader:
    typed = _schema(spec, used)
    position = {name: i for i, name in enumerate(header)}  # unique: check_header refused duplicates
    schema = {f"c{i}": typed.get(name, pl.String()) for i, name in enumerate(header)}
    select = [pl.col(f"c{position[name]}").alias(name) for name in used]
    select_lines = list(select)
    first = next((k for k, name in enumerate(used) if position[name] == 0), None)
    if eol == b"\r" and first is not None:
        # A CR file's lines end at CR, an LF right after it belonging to that line end (CRLF files): polars,
        # splitting at CR, leaves that LF at the start of the first field, so the first column is read as text, the
        # LF taken off, and a number parsed by polars' string cast, which reads numbers exactly as its CSV parser
        # does once leading blanks are skipped (tests/test_records.py checks the two agree)
        dtype = typed[used[first]]
        schema["c0"] = pl.String()

        def first_column(raw: pl.Expr) -> pl.Expr:
            if dtype == pl.String():
                return raw.alias(used[first])
            return raw.str.strip_chars_start(" \t").cast(dtype, strict=False).alias(used[first])

        select[first] = first_column(pl.col("c0").str.strip_prefix("\n"))
        select_lines[first] = first_column(pl.col("c0"))
    return _Reader(schema, select, select_lines, eol.decode())


class _Queries:
    """The groupings of one release, applicable to any frame of the used columns; results of several frames add up."""

    def __init__(self, plan: Plan, sum_type: pl.DataType):
        self.groups = _groups(plan)
        self.queries: list[_Query] = []
        self.recipes: list[list[_Recipe]] = []
        for group in self.groups:
            q = _Query()
            self.recipes.append([_recipe(plan.spec, plan.statistics[i], q, sum_type) for i in group])
            self.queries.append(q)

    def apply(self, frame: pl.LazyFrame) -> list[pl.LazyFrame]:
        out = []
        for q in self.queries:
            aggs = [pl.len().cast(pl.Int64).alias("n"), *q.sums.values()]
            out.append(frame.group_by(list(q.keys.values())).agg(aggs) if q.keys else frame.select(aggs))
        return out

    def results(self, plus: pl.LazyFrame, minus: pl.LazyFrame) -> list[tuple[pl.DataFrame, pl.DataFrame]]:
        """The groupings of ``plus``, and of ``minus`` with every count and sum negated (taken away when added up by
        ``combine``), computed together."""
        out = pl.collect_all([*self.apply(plus), *self.apply(minus)])
        k = len(self.queries)
        return [
            (a, b.with_columns(-pl.col(c) for c in b.columns if c not in q.keys))
            for q, a, b in zip(self.queries, out[:k], out[k:], strict=True)
        ]

    def combine(self, parts: list[list[pl.DataFrame]]) -> list[pl.DataFrame]:
        """Per grouping, the sum of the per-frame results (counts and sums add up over disjoint rows)."""
        out = []
        for q, frames in zip(self.queries, parts, strict=True):
            if len(frames) == 1:
                out.append(frames[0])
                continue
            both = pl.concat(frames, how="vertical")
            keys = list(q.keys)
            totals = [pl.col(c).sum() for c in both.columns if c not in q.keys]
            out.append(both.group_by(keys).agg(totals) if keys else both.select(totals))
        return out


def aggregate(plan: Plan, path: Path, *, input_format: str | None = None) -> list[ExactStatistic]:
    """Exact per-cell aggregates for every statistic of the plan, in plan order. One scan of the file (and a second
    reading of the lines that hold a quote). ``input_format`` (csv, parquet, arrow): else from the extension."""
    path = Path(path)
    columnar = columnar_format(path, input_format)
    if columnar is not None:
        # Parquet / Arrow IPC (dpcli.engine.columnar): the schema stands for the header; Int128 sums, as a
        # compressed file's row count is not bounded by its size
        queries = _Queries(plan, pl.Int128())
        with reading:
            frames = collect_columnar(path, columnar, plan.spec, used_columns(plan.spec), queries.apply)
        return _marginals(plan, queries, frames)
    if path.is_dir():
        # polars would scan every file in the directory as one dataset
        raise InputError(f"input {path} is a directory, not a CSV file")
    spec = plan.spec
    layout = header_layout(path, spec.quoted_line_breaks)
    check_header(path, layout.names, spec.columns.keys())
    used = used_columns(spec)
    reader = _reader(spec, layout.names, used, layout.eol)
    queries = _Queries(plan, _sum_type(plan, path))
    try:
        with reading:  # no warning, no panic text (polars may name or quote what it read): nothing about the data
            if spec.quoted_line_breaks:
                frames = _rfc_file(path, layout, reader, queries)
            else:
                frames = _line_records(path, layout, reader, queries, used)
    except BaseException as exc:
        if type(exc).__name__ != "PanicException":  # pyo3's, a BaseException: not importable under a stable name
            raise
        raise _panic(exc, path) from None
    return _marginals(plan, queries, frames)


def _marginals(plan: Plan, queries: _Queries, frames: list[pl.DataFrame]) -> list[ExactStatistic]:
    results: list[ExactStatistic | None] = [None] * len(plan.statistics)
    for group, frame, recipe in zip(queries.groups, frames, queries.recipes, strict=True):
        for i, r in zip(group, recipe, strict=True):
            results[i] = _marginal(plan.statistics[i], frame, r)
    return results  # type: ignore[return-value]


def _panic(exc: BaseException, path: Path) -> InputError | InternalError:
    """A Rust panic inside polars, as one line that quotes nothing of its message (it could hold a cell)."""
    if "TooManyOpenFiles" in str(exc):  # `ulimit -n 5`: polars cannot start its threads; the file was never read
        return InternalError(TOO_MANY_FILES)
    return InternalError(f"the CSV reader (polars) failed on input {path} (PanicException); nothing was spent")


def _scan(path: Path, reader: _Reader, quoting: bool = False) -> pl.LazyFrame:
    # skip_rows=1: the header (a line, or with quoting a record), whose names header_layout has read
    return pl.scan_csv(path, skip_rows=1, glob=False, **reader.options(quoting))


def _project(frame: pl.LazyFrame, columns: list[pl.Expr]) -> pl.LazyFrame:
    # a release of plain counts uses no column: selecting none would leave no rows to count
    return frame.select(columns) if columns else frame


def _rfc_file(path: Path, layout: HeaderLayout, reader: _Reader, queries: _Queries) -> list[pl.DataFrame]:
    """``csv.quoted_line_breaks``: polars' RFC 4180 reader over the whole file (the spec vouches for its writer)."""
    frame = _project(_scan(path, reader, quoting=True), reader.select)
    try:
        return pl.collect_all(queries.apply(frame), engine="streaming")
    except pl.exceptions.PolarsError as exc:
        # polars' message may quote a cell: only its class name leaves this function
        raise InputError(
            f"input {path} could not be read as an RFC 4180 CSV, as csv.quoted_line_breaks declares "
            f"({type(exc).__name__})"
        ) from None
    except OSError as exc:
        raise InputError(f"cannot read input {path}: {exc.strerror or 'unreadable'}") from None


def _line_records(
    path: Path, layout: HeaderLayout, reader: _Reader, queries: _Queries, used: list[str]
) -> list[pl.DataFrame]:
    """One line, one record: one quote-blind scan of the whole file, corrected line by line for the lines that hold
    a quote (what the scan made of each is taken back out, what it should be is added: aggregates add up)."""
    index = {name: i for i, name in enumerate(layout.names)}
    repair = LineRepair({index[name] for name in used}, layout.eol)
    parts: list[list[pl.DataFrame]] = [[] for _ in queries.queries]

    def add(plus: pl.LazyFrame, minus: pl.LazyFrame) -> None:
        for part, results in zip(parts, queries.results(plus, minus), strict=True):
            part += results

    try:
        for chunk in quoted_chunks(path, layout.data_start, layout.eol, repair):
            # what the lines are, and (taken away) what the quote-blind scan below makes of them
            now = _quoted_frame(chunk, reader, repair, layout.eol).lazy()
            add(now, _lines(chunk.raw, reader, False, reader.select))
        if layout.eol == b"\r" and _ends_with_crlf(path, layout.data_start):
            # the LF after the file's last CR is part of that line end, but the scan reads it as one more line
            add(_lines(b"", reader, False, reader.select), _lines(b"\n", reader, False, reader.select))
        # the same scan, at the same cost, whatever the lines hold
        main = pl.collect_all(queries.apply(_project(_scan(path, reader), reader.select)), engine="streaming")
    except OSError as exc:
        raise InputError(f"cannot read input {path}: {exc.strerror or 'unreadable'}") from None
    except pl.exceptions.PolarsError as exc:
        # quoting is off and every cell error becomes a null: a data line cannot get here, so this is a bug
        raise InternalError(f"the CSV reader failed on {path} ({type(exc).__name__})") from None
    for part, result in zip(parts, main, strict=True):
        part.append(result)
    return queries.combine(parts)


def _lines(data: bytes, reader: _Reader, quoting: bool, select: list[pl.Expr]) -> pl.LazyFrame:
    """Lines in memory, read as the file is."""
    return _project(pl.scan_csv(data, **reader.options(quoting)), select)


def _ends_with_crlf(path: Path, data_start: int) -> bool:
    """The file ends with CRLF (the byte before the data is the header's CR)."""
    with open(path, "rb") as fh:
        size = fh.seek(0, 2)
        if size <= data_start:
            return False
        fh.seek(size - 2)
        return fh.read(2) == b"\r\n"


def _quoted_frame(chunk: QuotedChunk, reader: _Reader, repair: LineRepair, eol: bytes) -> pl.DataFrame:
    """The used columns of a chunk's quoted lines, exactly one row per line whatever polars makes of the bytes."""
    frame = _read_lines(chunk.data, chunk.lines, reader)
    if frame is not None:
        return frame
    # polars disagreed (it never has, in testing): each line again, repaired by the csv module, which reads a plain
    # line the same way, then one line at a time
    lines: list[bytes] = []
    for piece, repaired in chunk.pieces:
        lines += [piece] if repaired else [repair(line) for line in piece.split(eol)[:-1]]
    frame = _read_lines(b"".join(lines), len(lines), reader)
    if frame is not None:
        return frame
    rows = [_read_lines(line, 1, reader) for line in lines]
    read = [row for row in rows if row is not None]
    if len(read) == len(rows):
        return pl.concat(read, how="vertical")
    # a line polars cannot read even repaired: one record, its used cells missing
    empty = _read_lines(b"", 0, reader)
    assert empty is not None
    return pl.concat([row if row is not None else empty.clear(1) for row in rows], how="vertical")


def _read_lines(data: bytes, lines: int, reader: _Reader) -> pl.DataFrame | None:
    try:
        frame = _lines(data, reader, True, reader.select_lines).collect()
    except Exception:  # noqa: BLE001 - whatever polars makes of one record's bytes, the caller falls back
        return None
    return frame if frame.height == lines else None


def _marginal(sp: StatisticPlan, frame: pl.DataFrame, recipe: _Recipe) -> ExactStatistic:
    """Sum one statistic's declared cells out of the grouped result (small: one row per distinct key tuple)."""
    code: pl.Expr = pl.lit(0, dtype=pl.Int64)
    for key, column, size in recipe.dims:
        index = pl.col(key) if column is None else _key_index(column, pl.col(key))
        code = code * size + index
    part = frame.lazy()
    aggs = [pl.col(recipe.counted or "n").sum().alias("n")]
    if recipe.total is not None:
        aggs.append(pl.col(recipe.total).cast(pl.Int128).sum().alias("s"))
    cells = (
        part.with_columns(code.alias("code")).filter(pl.col("code").is_not_null()).group_by("code").agg(aggs).collect()
    )
    idx = cells["code"].to_numpy().astype(np.int64)
    counts = np.zeros(sp.cells, dtype=np.int64)
    counts[idx] = cells["n"].to_numpy().astype(np.int64)
    sums = None
    if recipe.total is not None:
        sums = np.zeros(sp.cells, dtype=object)
        sums[:] = 0
        for j, s in zip(idx.tolist(), cells["s"].to_list(), strict=True):
            sums[j] = int(s)
    return ExactStatistic(counts, sums)
