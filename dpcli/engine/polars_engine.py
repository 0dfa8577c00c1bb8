"""The polars engine: the input read once, in chunks of whole lines, for all statistics of a release.

How the input is read (``dpcli.engine.source``): about 16 MB of whole lines at a time, from a file mapped one window
at a time, or through a decompressor (.gz, .zst) and a decoder (a declared encoding other than UTF-8). Each chunk is
parsed and grouped by polars (``LineAggregator``, two chunks at a time), and since per-group counts and sums add up,
the chunks' cell totals are summed (``dpcli.engine.cells``): memory is bounded by the chunks in flight, never by the
input. A Spark executor runs the same ``LineAggregator`` on its share of the lines (``dpcli.engine.spark_engine``),
so both engines apply one set of rules. Parquet and Arrow IPC files go through ``dpcli.engine.columnar``.

How the file becomes records (docs/spec.md, "How lines are read"): the header decides the line end (LF, or CR with
CRLF) for the whole file, and by default one physical line is one record. polars reads each chunk with quoting
off, so no quote can make one line swallow the next. The lines that hold a quote character are found in the chunk
(``dpcli.engine.lines``) and read again with quotes honoured within the line; since per-group counts and sums add
up, what the quote-blind read makes of those lines is subtracted and what they hold is added. Both readings go
through the same polars cell parser and the same expressions (``dpcli.engine.cells``). With
``csv: {quoted_line_breaks: true}`` polars' streaming RFC 4180 reader reads the whole file instead. Bytes that are
not UTF-8 become U+FFFD (polars' ``utf8-lossy``), and a cell holding U+FFFD is missing. Nothing a data line holds
can raise, print or change the exit code; polars' warnings are silenced.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import polars as pl

from dpcli.engine.cells import (
    CellTotals,
    ExactStatistic,
    Queries,
    column_types,
    largest_term,
    split_periods,
    used_columns,
)
from dpcli.engine.columnar import (
    check_streaming,
    collect_columnar,
    is_columnar,
    parse_number,
    person_rows,
    person_rows_columnar,
    scan_columnar,
)
from dpcli.engine.csv_header import check_header
from dpcli.engine.inputs import DEFAULT_MAX_INPUT_BYTES
from dpcli.engine.lines import LineRepair, QuotedChunk, quoted_chunks, reading
from dpcli.engine.periods import PERIOD_FIELD, check_period_field, period_field_of
from dpcli.engine.persons import ID_COLUMN, SECRET_BYTES, PersonRows, check_id_field, swap_rows
from dpcli.engine.source import CsvLayout, CsvSource, OnBytes
from dpcli.engine.source import input_format as input_format_of
from dpcli.errors import TOO_MANY_FILES, InputError, InternalError, ResourceError
from dpcli.plan.model import Plan
from dpcli.specs.model import Column, Spec

PIPELINE = 2  # chunks polars works on at once (see LineAggregator.add_all)
T = TypeVar("T")
_BOM = b"\xef\xbb\xbf"
# what polars sniffs at the start of a buffer (see read_lines)
_SNIFFED = (_BOM, b"\x1f\x8b", b"\x28\xb5\x2f\xfd", b"\x78\x01", b"\x78\x5e", b"\x78\x9c", b"\x78\xda")

__all__ = [
    "CsvLayout", "ExactStatistic", "LineAggregator", "aggregate", "aggregate_periods", "check_fields", "check_input",
]


@dataclass(frozen=True)
class LineReader:
    """How polars reads this file: its columns by position (``c0``, ``c1``, ...; the header's names were read by
    ``header_layout``, quotes and all), used columns typed, everything else text that is never parsed."""

    schema: dict[str, pl.DataType]
    select: list[pl.Expr]  # positional columns -> the spec's names, for the lines the main scan reads
    select_lines: list[pl.Expr]  # the same for the quoted lines read again (already without a leading LF)
    eol: str
    delimiter: str = ","

    def options(self, quoting: bool) -> dict[str, Any]:
        return {
            "has_header": False,
            "separator": self.delimiter,
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


def line_reader(
    columns: Mapping[str, Column], header: list[str], used: list[str], eol: bytes, delimiter: str = ",",
    id_field: str | None = None, period_field: str | None = None,
) -> LineReader:
    """A reader of lines as ``used`` columns of ``columns`` (a spec's, by name). ``id_field``: a person-level
    release's id field, read as text under the name ``persons.ID_COLUMN``; ``period_field``: a series' period field,
    read as text under the name ``periods.PERIOD_FIELD``."""
    typed = column_types(columns, used)
    fields = [(name, name, typed[name]) for name in used]  # (field in the file, name in the frame, type)
    if id_field is not None:
        fields.append((id_field, ID_COLUMN, pl.String()))
    if period_field is not None:
        fields.append((period_field, PERIOD_FIELD, pl.String()))
    position = {name: i for i, name in enumerate(header)}  # unique: check_header refused duplicates
    schema: dict[str, pl.DataType] = {f"c{i}": pl.String() for i in range(len(header))}
    for field, _, dtype in fields:
        schema[f"c{position[field]}"] = dtype
    select = [pl.col(f"c{position[field]}").alias(name) for field, name, _ in fields]
    select_lines = list(select)
    first = next((k for k, (field, _, _) in enumerate(fields) if position[field] == 0), None)
    if eol == b"\r" and first is not None:
        # A CR file's lines end at CR, an LF right after it belonging to that line end (CRLF files): polars,
        # splitting at CR, leaves that LF at the start of the first field, so the first column is read as text, the
        # LF taken off, and a number parsed by polars' string cast, which reads numbers exactly as its CSV parser
        # does once leading blanks are skipped (tests/engine/test_records.py checks the two agree)
        _, name, dtype = fields[first]
        schema["c0"] = pl.String()

        def first_column(raw: pl.Expr) -> pl.Expr:
            if dtype == pl.String():
                return raw.alias(name)
            return parse_number(raw, dtype).alias(name)

        select[first] = first_column(pl.col("c0").str.strip_prefix("\n"))
        select_lines[first] = first_column(pl.col("c0"))
    return LineReader(schema, select, select_lines, eol.decode(), delimiter)


class LineAggregator:
    """Exact aggregates of CSV lines given chunk by chunk: ``add(data)`` any number of times, then ``finish()``.

    ``data`` is whole lines of the file's UTF-8 text (no header line), each ended by ``layout.eol`` (the input's
    last line may lack it), in file order across calls (only the input's last two bytes matter across chunks).
    Every cell and line rule of the engine is applied here: the polars engine and Spark's executors both call it.

    A person-level release reads rows instead (``rows(data)``, the typed rows of the used columns and the id text,
    for ``dpcli.engine.persons.PersonRows``); its lines are read exactly as for the totals.
    """

    def __init__(self, plan: Plan, layout: CsvLayout, by_period: bool = False):
        spec = plan.spec
        self.plan = plan
        self.by_period = by_period  # a series' rows grouped by their period (dpcli.engine.cells.Queries)
        self.used = used_columns(spec)
        self.eol = layout.eol
        position = {name: i for i, name in enumerate(layout.names)}
        id_field, period_field = spec.id_column, period_field_of(spec)
        self.reader = line_reader(spec.columns, list(layout.names), self.used, layout.eol, layout.delimiter, id_field,
                                  period_field)
        fields = [*self.used, *([] if id_field is None else [id_field]), *([] if period_field is None else
                                                                           [period_field])]
        self.repair = LineRepair({position[name] for name in fields}, layout.eol, layout.delimiter)
        self.biggest = largest_term(plan)
        self._queries: dict[bool, Queries] = {}
        self.totals = CellTotals(plan, self._queries_for(False))
        self.tail = layout.eol if layout.header else b""  # the input's last two bytes so far

    def _queries_for(self, wide: bool) -> Queries:
        """Int64 sums where no sum over the chunk can overflow them, else Int128 (measured: Int128 sums cost ~25%
        of the scan). A chunk of B bytes has at most B + 1 lines, so |sum| <= (B + 1) * the largest term."""
        if wide not in self._queries:
            self._queries[wide] = Queries(self.plan, pl.Int128() if wide else pl.Int64(), self.by_period)
        return self._queries[wide]

    def add(self, data: bytes) -> None:
        job = self._job(data)
        if job is not None:
            self.totals.add(self._collect(*job))

    def add_all(self, chunks: Iterable[bytes], workers: int = PIPELINE) -> None:
        """``add`` every chunk, polars working on up to ``workers`` chunks at once while the next is read (measured
        on 10M rows, 16 MB chunks: 1.26 s with one chunk in flight, 1.20 s with two, 1.36 s without overlap)."""
        jobs = (partial(self._collect, *job) for job in map(self._job, chunks) if job is not None)
        pipelined(jobs, self.totals.add, workers)

    def rows_all(self, chunks: Iterable[bytes], persons: PersonRows, workers: int = PIPELINE) -> None:
        """A person-level release: the rows of every chunk to ``persons``, pipelined as ``add_all`` is."""
        jobs = (partial(_prepared, persons, *reads) for reads in map(self._reads, chunks) if reads is not None)
        pipelined(jobs, persons.take, workers)
        tail = self.tail_rows()
        if tail is not None:
            persons.remove_missing(tail)

    def rows(self, data: bytes) -> pl.DataFrame:
        """The typed rows of a chunk of whole lines (as ``add`` takes them): the used columns, and the id text as
        ``persons.ID_COLUMN`` in a person-level release. Lines holding quotes are read as the totals read them:
        what the quote-blind read made of them is taken out of its rows (a multiset difference: identical rows are
        interchangeable) and their quoted reading added."""
        main, plus, minus = self._reads(data) or (read_lines(b"", self.reader, False, self.reader.select), [], [])
        try:
            frames = pl.collect_all([main, *plus, *minus])
            return swap_rows(frames[0], frames[1 : 1 + len(plus)], frames[1 + len(plus) :])
        except pl.exceptions.PolarsError as exc:
            raise InternalError(f"the CSV reader failed ({type(exc).__name__})") from None
        except ValueError:  # the quote-blind read of a line is the same wherever it is read: a bug
            raise InternalError("the CSV reader read a line two ways") from None

    def tail_rows(self) -> pl.DataFrame | None:
        """After the last chunk: the row to take back, if the read made one too many (see ``finish``)."""
        if self.eol == b"\r" and self.tail == b"\r\n":
            return read_lines(b"\n", self.reader, False, self.reader.select).collect()
        return None

    def _reads(self, data: bytes) -> tuple[pl.LazyFrame, list[pl.LazyFrame], list[pl.LazyFrame]] | None:
        """The reads of one chunk: its quote-blind read, plus what its quoted lines are and minus what the
        quote-blind read made of them."""
        if not data:
            return None
        reader = self.reader
        main = read_lines(data, reader, False, reader.select)
        plus: list[pl.LazyFrame] = []
        minus: list[pl.LazyFrame] = []
        if b'"' in data:
            for chunk in quoted_chunks(data, 0, self.eol, self.repair):
                plus.append(_quoted_frame(chunk, reader, self.repair, self.eol).lazy())
                minus.append(read_lines(chunk.raw, reader, False, reader.select))
        self.tail = (self.tail + data[-2:])[-2:]
        return main, plus, minus

    def _job(self, data: bytes) -> tuple[Queries, list[pl.LazyFrame], list[pl.LazyFrame]] | None:
        """The queries of one chunk (its reads, see ``_reads``)."""
        reads = self._reads(data)
        if reads is None:
            return None
        main, plus, minus = reads
        return self._queries_for((len(data) + 2) * self.biggest >= 2**63), [main, *plus], minus

    @staticmethod
    def _collect(queries: Queries, plus: list[pl.LazyFrame], minus: list[pl.LazyFrame]) -> list[list[pl.DataFrame]]:
        try:
            return queries.collect(plus, minus)
        except pl.exceptions.PolarsError as exc:
            # quoting is off and every cell error becomes a null: a data line cannot get here, so this is a bug
            raise InternalError(f"the CSV reader failed ({type(exc).__name__})") from None

    def finish(self) -> list[ExactStatistic]:
        """The per-cell totals of every statistic, in plan order."""
        if self.eol == b"\r" and self.tail == b"\r\n":
            # the LF after the input's last CR is part of that line end, but the read above made it one more line
            reader = self.reader
            self.totals.add(self._collect(self._queries_for(False), [read_lines(b"", reader, False, reader.select)],
                                          [read_lines(b"\n", reader, False, reader.select)]))
        return self.totals.result()


def pipelined(jobs: Iterable[Callable[[], T]], take: Callable[[T], None], workers: int = PIPELINE) -> None:
    """Run ``jobs`` on up to ``workers`` threads while the next is made, ``take``-ing their results in order."""
    with ThreadPoolExecutor(workers, thread_name_prefix="dpcli-chunk") as pool:
        pending: deque[Future[T]] = deque()
        for job in jobs:
            pending.append(pool.submit(job))
            while len(pending) >= workers:
                take(pending.popleft().result())
        while pending:
            take(pending.popleft().result())


def _prepared(
    persons: PersonRows, main: pl.LazyFrame, plus: list[pl.LazyFrame], minus: list[pl.LazyFrame]
) -> tuple[pl.DataFrame, list[pl.DataFrame] | None]:
    try:
        return persons.prepare(main, plus, minus)
    except pl.exceptions.PolarsError as exc:
        # quoting is off and every cell error becomes a null: a data line cannot get here, so this is a bug
        raise InternalError(f"the CSV reader failed ({type(exc).__name__})") from None
    except ValueError:  # the quote-blind read of a line is the same wherever it is read: a bug
        raise InternalError("the CSV reader read a line two ways") from None


def aggregate(
    plan: Plan,
    path: Path,
    *,
    input_format: str | None = None,
    on_bytes: OnBytes | None = None,
    secret: bytes | None = None,
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
) -> list[ExactStatistic]:
    """Exact per-cell aggregates for every statistic of the plan, in plan order: the input read once, in chunks.

    ``input_format``: csv, csv.gz, csv.zst, parquet or arrow (None: the spec's ``input_format:``, else from the
    extension). ``on_bytes(read, total)`` hears the progress of the reading in bytes of the file. ``secret``: a
    person-level release's 32-byte secret (``dpcli.engine.persons``); None draws a fresh one. ``max_input_bytes``:
    the cap on a compressed input's decompressed size, and on a Parquet file's used columns decompressed
    (InputError, exit 3, past it: the engine reads before the spend)."""
    return _aggregate(plan, path, input_format, on_bytes, secret, max_input_bytes, by_period=False)


def aggregate_periods(
    plan: Plan,
    path: Path,
    *,
    input_format: str | None = None,
    on_bytes: OnBytes | None = None,
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
) -> dict[int, list[ExactStatistic]]:
    """A series' exact aggregates of each of the plan's periods (``plan.periods``), from one read of the input: as
    ``aggregate`` of the plan restricted to that period's rows, for every period at once (the rows grouped by their
    own period field). Memory: the plan's cells times its periods (and the grouped chunks in flight). Not under a
    person unit: a person's rows are bounded over the whole scan, not per period."""
    if plan.spec.privacy.person is not None or plan.periods is None:
        raise InternalError("a series' periods are aggregated together for a row unit and chosen periods")
    grouped = _aggregate(plan, path, input_format, on_bytes, None, max_input_bytes, by_period=True)
    return split_periods(grouped, tuple(sorted(plan.periods)))


def _aggregate(
    plan: Plan, path: Path, input_format: str | None, on_bytes: OnBytes | None, secret: bytes | None,
    max_input_bytes: int, by_period: bool,
) -> list[ExactStatistic]:
    path = Path(path)
    spec = plan.spec
    fmt = input_format_of(path, input_format, spec.input_format)
    persons = None
    if spec.privacy.person is not None:
        persons = PersonRows(plan, secrets.token_bytes(SECRET_BYTES) if secret is None else secret)
    if is_columnar(fmt):
        if persons is not None:
            with reading:
                person_rows_columnar(path, fmt, spec, persons, max_input_bytes)
            if on_bytes is not None:
                size = path.stat().st_size
                on_bytes(size, size)
            return persons.finish()
        # typed columns (dpcli.engine.columnar): the schema stands for the header; Int128 sums, as a compressed
        # file's row count is not bounded by its size
        queries = Queries(plan, pl.Int128(), by_period)
        with reading:
            grouped = collect_columnar(
                path, fmt, spec, used_columns(spec), queries.apply, max_input_bytes
            )
        if on_bytes is not None:
            size = path.stat().st_size
            on_bytes(size, size)
        totals = CellTotals(plan, queries)
        totals.add([[frame] for frame in grouped])
        return totals.result()
    try:
        with reading, CsvSource(path, spec, fmt, on_bytes, max_input_bytes) as source:
            # no warning, no panic text (polars may name or quote what it read): nothing about the data
            check_fields(path, source.header.names, spec, source.delimiter)
            if spec.quoted_line_breaks:
                return _rfc_file(path, source, plan, persons, by_period)
            aggregator = LineAggregator(plan, source.layout, by_period)
            if persons is not None:
                aggregator.rows_all(source.chunks(), persons)
                return persons.finish()
            aggregator.add_all(source.chunks())
            return aggregator.finish()
    except OSError as exc:
        raise InputError(f"cannot read input {path}: {exc.strerror or 'unreadable'}") from None
    except BaseException as exc:
        if type(exc).__name__ != "PanicException":  # pyo3's, a BaseException: not importable under a stable name
            raise
        raise _panic(exc, path) from None


def check_input(spec: Spec, path: Path, input_format: str | None = None) -> list[str]:
    """The structural checks of the input, before anything is spent (``dpcli plan --input``): it can be read as
    declared, and names every declared column (and a person-level release's id field). Returns the fields' names."""
    path = Path(path)
    fmt = input_format_of(path, input_format, spec.input_format)
    if is_columnar(fmt):
        names = scan_columnar(path, fmt, spec.columns.keys()).collect_schema().names()
        check_id_field(path, names, spec, "schema")
        check_period_field(path, names, spec, "schema")
        return names
    with CsvSource(path, spec, fmt) as source:
        check_fields(path, source.header.names, spec, source.delimiter)
        return list(source.header.names)


def check_fields(path: Path, header: list[str], spec: Spec, delimiter: str = ",") -> None:
    """The header (read with ``delimiter``) names every declared column once, and a person-level release's id field
    (exit 3 otherwise)."""
    check_header(path, header, spec.columns.keys(), delimiter)
    check_id_field(path, header, spec, "header")
    check_period_field(path, header, spec, "header")


def _panic(exc: BaseException, path: Path) -> InternalError | ResourceError:
    """A Rust panic inside polars, as one line that quotes nothing of its message (it could hold a cell)."""
    if "TooManyOpenFiles" in str(exc):  # `ulimit -n 5`: polars cannot start its threads; the file was never read
        return ResourceError(TOO_MANY_FILES)
    return InternalError(f"the CSV reader (polars) failed on input {path} (PanicException); nothing was spent")


def _project(frame: pl.LazyFrame, columns: list[pl.Expr]) -> pl.LazyFrame:
    # a release of plain counts uses no column: selecting none would leave no rows to count
    return frame.select(columns) if columns else frame


def _rfc_file(
    path: Path, source: CsvSource, plan: Plan, persons: PersonRows | None, by_period: bool = False,
) -> list[ExactStatistic]:
    """``csv.quoted_line_breaks``: polars' RFC 4180 reader over the whole file (the spec vouches for its writer),
    on its streaming engine. A record may span any number of lines, so the file cannot be cut into chunks of lines:
    only a plain UTF-8 file is read this way."""
    if not source.plain:
        raise InputError(
            f"input {path}: csv.quoted_line_breaks reads only an uncompressed UTF-8 CSV ({source.fmt}, "
            f"{plan.spec.csv.encoding} given): nothing was spent",
            hint="decompress or re-encode the file first",
        )
    layout = source.header
    spec = plan.spec
    used = used_columns(spec)
    reader = line_reader(spec.columns, layout.names, used, layout.eol, source.delimiter, spec.id_column,
                         period_field_of(spec))
    queries = Queries(plan, pl.Int128(), by_period)
    skip = 1 if spec.csv.header else 0
    frame = _project(
        pl.scan_csv(path, skip_rows=skip, glob=False, **reader.options(quoting=True)), reader.select
    )
    # A release of plain counts reads no column: polars would then count records with its FAST COUNT, which runs on
    # the in-memory engine; without projection pushdown it counts them in the stream like any other query
    flags = pl.QueryOptFlags(projection_pushdown=False) if not used and spec.series is None else pl.QueryOptFlags()
    planned = queries.apply(frame)
    if persons is None:
        check_streaming(planned, flags)  # bounded memory, or exit 1 before anything is read
    try:
        if persons is not None:
            person_rows(frame, persons)  # the rows in batches from the streaming engine (checked there)
        else:
            grouped = pl.collect_all(planned, engine="streaming", optimizations=flags)
    except pl.exceptions.PolarsError as exc:
        # polars' message may quote a cell: only its class name leaves this function
        raise InputError(
            f"input {path} could not be read as an RFC 4180 CSV, as csv.quoted_line_breaks declares "
            f"({type(exc).__name__})"
        ) from None
    if source.on_bytes is not None:
        source.on_bytes(source.total, source.total)
    if persons is not None:
        return persons.finish()
    totals = CellTotals(plan, queries)
    totals.add([[frame] for frame in grouped])
    return totals.result()


def read_lines(data: bytes, reader: LineReader, quoting: bool, select: list[pl.Expr]) -> pl.LazyFrame:
    """Lines in memory, read as the file is."""
    if data.startswith(_SNIFFED):
        # polars looks at the first bytes of what it reads: it drops a BOM, and decompresses (or fails on) bytes that
        # start like gzip, zstd or zlib (0x78 then 01/5E/9C/DA: "x^" is plain text). Here they are the first bytes
        # of a data line, a cell's: an empty line goes first and its row is dropped, so they stay that line's
        return _project(pl.scan_csv(reader.eol.encode() + data, **reader.options(quoting)), select).slice(1)
    return _project(pl.scan_csv(data, **reader.options(quoting)), select)


def _quoted_frame(chunk: QuotedChunk, reader: LineReader, repair: LineRepair, eol: bytes) -> pl.DataFrame:
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
    if empty is None:  # no bytes: nothing polars could fail to read
        raise InternalError("the line reader failed on no input")
    return pl.concat([row if row is not None else empty.clear(1) for row in rows], how="vertical")


def _read_lines(data: bytes, lines: int, reader: LineReader) -> pl.DataFrame | None:
    try:
        frame = read_lines(data, reader, True, reader.select_lines).collect()
    except Exception:  # noqa: BLE001 - whatever polars makes of one record's bytes, the caller falls back
        return None
    return frame if frame.height == lines else None
