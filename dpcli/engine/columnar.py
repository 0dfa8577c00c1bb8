"""Parquet and Arrow IPC inputs: typed columns read by the CSV cell rules (docs/spec.md, "Parquet and Arrow IPC
inputs").

One rule makes "the same cell rules as CSV" exact: **a typed value reads as the CSV cell holding its canonical text
would**. Integers are their decimal text, booleans ``true``/``false``, floats the shortest text that reads back as
the same double in Python's ``repr`` layout (``0.1``, ``1e+20``, ``1e-05``, ``-0.0``, ``nan``, ``inf``), decimals
their digits with the column's scale (``12.50``), dates ``YYYY-MM-DD``; every other type (times, timestamps,
durations, binary, lists, structs, all-null columns) has no text and is missing. So an int column read from a float
column is missing (``3.0`` is not an int cell), a bool column from an int column takes ``1``/``0``, and so on, with
no rule of its own to get wrong. Where a direct cast gives the same value as the text would (an integer into an int
or float column, a float into a float column) the cast is used, for speed; the tests compare every source type
against the CSV holding the canonical text.

The columns handed to the engine are what its CSV reader hands it: int -> Int64, float -> Float64, category and
bool -> String (raw text, decoded to declared keys by the engine); null where a value is missing. Everything here is
decided from the file's schema (its footer), never from a value: a structural problem (not a Parquet/IPC file, a
directory, a declared column missing) is exit 3 before anything is read, and no message quotes polars' text (it can
hold a value), only its error class.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Literal, TypeGuard

import polars as pl

from dpcli.engine import arrow_sizes, parquet_sizes
from dpcli.engine.cells import CellTotals, ExactStatistic, Queries, used_columns
from dpcli.engine.csv_header import check_regular_file, with_close_names
from dpcli.engine.inputs import DEFAULT_MAX_INPUT_BYTES
from dpcli.engine.parquet_sizes import MAX_PAGE_BYTES
from dpcli.engine.periods import PERIOD_FIELD, check_period_field, datetime_text, period_field_of
from dpcli.engine.persons import ID_COLUMN, PersonRows, check_id_field
from dpcli.errors import TOO_MANY_FILES, InputError, InternalError, ResourceError
from dpcli.plan.model import Plan
from dpcli.specs.model import DEFAULT_MAX_RECORD_BYTES, Column, Spec

ColumnarFormat = Literal["parquet", "arrow"]
_FORMAT_NAMES = {"parquet": "Parquet", "arrow": "Arrow IPC"}


def is_columnar(fmt: str) -> TypeGuard[ColumnarFormat]:
    """Whether an input format is read by this module (Parquet, Arrow IPC) rather than as lines."""
    return fmt in _FORMAT_NAMES


# -- the file: structure from its footer only ------------------------------------------------------------------------


def scan_columnar(path: Path, fmt: ColumnarFormat, declared: Iterable[str]) -> pl.LazyFrame:
    """A lazy scan of a Parquet or Arrow IPC file whose schema holds every ``declared`` column (InputError, exit 3,
    otherwise). Reads the file's footer, never a value."""
    path = Path(path)
    kind = _FORMAT_NAMES[fmt]
    check_regular_file(path, kind)
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise InputError(f"cannot read input {path}: {exc.strerror or 'unreadable'}") from None
    try:
        if fmt == "parquet":
            frame = pl.scan_parquet(path, glob=False, hive_partitioning=False)
        else:
            frame = pl.scan_ipc(path, glob=False, hive_partitioning=False)
        names = frame.collect_schema().names()
    except BaseException as exc:  # noqa: BLE001 - polars' errors and pyo3 panics; the class name alone leaves here
        raise _failure(exc, path, f"input {path} is not a readable {kind} file") from None
    present = set(names)  # unique: polars refuses a file whose schema repeats a name (not readable, above)
    declared = list(declared)  # iterated twice below
    missing = [n for n in declared if n not in present]
    if missing:
        raise InputError(
            f"input {path}: declared column(s) missing from the schema: {with_close_names(missing, names, declared)}"
        )
    return frame


def _failure(exc: BaseException, path: Path, what: str) -> InputError | InternalError | ResourceError:
    """An error polars raised on a file, as one line that quotes nothing of its message (it could hold a value)."""
    name = type(exc).__name__
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        raise exc
    if name == "PanicException":  # pyo3's, a BaseException: not importable under a stable name
        if "TooManyOpenFiles" in str(exc):
            return ResourceError(TOO_MANY_FILES)
        return InternalError(f"the columnar reader (polars) failed on input {path} (PanicException); nothing was spent")
    if not isinstance(exc, (pl.exceptions.PolarsError, OSError)):
        raise exc
    return InputError(f"{what} ({name})")


# -- cells: the canonical text, then the CSV rules -------------------------------------------------------------------

# polars writes a float's shortest round-trip digits, but in a layout of its own (1e-7, 0.00001, NaN); these turn it
# into Python's repr layout (1e-07, 1e-05, nan), a stable, widely known form a spec's keys can be written in.
_EXPONENT_FIVE = (r"^(-?)0\.0000([1-9])(\d*)$", "${1}${2}.${3}e-05")  # repr writes 10^-5 in exponent form
_ONE_DIGIT_EXPONENT = (r"e([+-])(\d)$", "e${1}0${2}")  # and an exponent with at least two digits


def float_text(value: pl.Expr) -> pl.Expr:
    """The canonical text of a float column: Python's ``repr`` of its value as a double (Float32 and Float16 are
    widened exactly first: one layout, and the text reads back as the very value the file holds)."""
    text = value.cast(pl.Float64()).cast(pl.String())
    text = text.str.replace(*_EXPONENT_FIVE).str.replace(".e-05", "e-05", literal=True)
    text = text.str.replace(*_ONE_DIGIT_EXPONENT)
    return text.str.replace("NaN", "nan", literal=True)


def cell_text(name: str, dtype: pl.DataType, max_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> pl.Expr | None:
    """A column's canonical text (what a CSV cell would hold), or None when its type has none (every cell missing).
    A string longer than ``max_bytes`` (the spec's ``csv.max_record_bytes``) is missing, as a CSV record that long
    is."""
    value = pl.col(name)
    if dtype == pl.String() or isinstance(dtype, (pl.Categorical, pl.Enum)):
        text = value if dtype == pl.String() else value.cast(pl.String())
        return pl.when(text.str.len_bytes() <= max_bytes).then(text)
    if dtype.is_float():
        return float_text(value)
    if dtype.is_integer() or dtype.is_decimal() or dtype in (pl.Boolean(), pl.Date()):
        return value.cast(pl.String())
    # times, timestamps, durations (no one text a spec could name: unit, zone), binary (polars cannot decode it
    # lossily, and a failed decode would end the run on one cell's bytes), nested and all-null columns
    return None


def parse_number(text: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    """Text to Int64/Float64 as the engine's CSV reader parses a cell: leading blanks skipped, anything else that is
    not a number is null (polars' string cast reads numbers as its CSV parser does; tests/engine/test_records.py)."""
    return text.str.strip_chars_start(" \t").cast(dtype, strict=False)


def typed_column(column: Column, dtype: pl.DataType, max_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> pl.Expr:
    """One used column of a typed file as the engine takes it (Int64, Float64 or String), null when missing."""
    name = column.name
    if column.type == "int" and dtype.is_integer():
        return pl.col(name).cast(pl.Int64(), strict=False)  # its text parses to the same value; over 64 bits: null
    if column.type == "float" and (dtype.is_integer() or dtype.is_float()):
        return pl.col(name).cast(pl.Float64())  # exact or correctly rounded, as the parse of its text is
    target: pl.DataType = {"int": pl.Int64(), "float": pl.Float64()}.get(column.type, pl.String())
    text = cell_text(name, dtype, max_bytes)
    if text is None:
        return pl.lit(None, dtype=target).alias(name)
    if column.type in ("int", "float"):
        return parse_number(text, target).alias(name)
    return text.alias(name)


def typed_frame(frame: pl.LazyFrame, spec: Spec, used: list[str], id_field: str | None = None) -> pl.LazyFrame:
    """The ``used`` columns of a typed frame as the engine's expressions take them (see ``typed_column``), and the
    ``id_field``'s canonical text as ``persons.ID_COLUMN`` (a person-level release)."""
    period_field = period_field_of(spec)
    if not used and id_field is None and period_field is None:
        return frame  # a release of plain counts: selecting no column would leave no rows to count
    schema = frame.collect_schema()
    # with_columns, not select: a column without text is a null literal, which a select of literals alone would
    # broadcast to one row, where with_columns gives it the frame's height
    longest = spec.csv.max_record_bytes
    columns = [typed_column(spec.columns[name], schema[name], longest) for name in used]
    if id_field is not None:
        text = cell_text(id_field, schema[id_field], longest)
        columns.append((pl.lit(None, dtype=pl.String()) if text is None else text).alias(ID_COLUMN))
        used = [*used, ID_COLUMN]
    if period_field is not None:
        dtype = schema[period_field]
        if isinstance(dtype, pl.Datetime):  # a timestamp: its instant (naive: UTC), as the period rule reads text
            text = datetime_text(pl.col(period_field), dtype.time_zone)
        else:
            text = cell_text(period_field, dtype, longest)
        columns.append((pl.lit(None, dtype=pl.String()) if text is None else text).alias(PERIOD_FIELD))
        used = [*used, PERIOD_FIELD]
    return frame.with_columns(columns).select(used)


def typed_batch(batch: pl.DataFrame, spec: Spec, used: list[str], id_field: str | None = None) -> pl.DataFrame:
    """``typed_frame`` on a batch in memory (a Spark partition, a chunk): the same rules."""
    return typed_frame(batch.lazy(), spec, used, id_field).collect()


def check_sizes(path: Path, fmt: ColumnarFormat, used: Iterable[str], max_input_bytes: int) -> None:
    """A Parquet or Arrow IPC file's used columns, decompressed, within the input cap and its pages (Parquet) or
    buffers (Arrow IPC) within MAX_PAGE_BYTES, from its footer and page or message headers (public sizes, as the
    file's is), before any value is read: InputError (exit 3) otherwise."""
    reader = parquet_sizes if fmt == "parquet" else arrow_sizes
    sizes = reader.used_column_sizes(path, used)
    if sizes.uncompressed > max_input_bytes:
        raise InputError(
            f"input {path}: its used columns decompress to more than the input cap ({max_input_bytes} bytes): "
            "nothing was spent",
            hint="raise --max-input-bytes",
        )
    if sizes.largest_page > MAX_PAGE_BYTES:
        raise InputError(
            f"input {path} holds a {'page' if fmt == 'parquet' else 'buffer'} over {MAX_PAGE_BYTES >> 20} MiB "
            "uncompressed in a used column: nothing was spent",
            hint=f"write the file with smaller {'pages' if fmt == 'parquet' else 'record batches'} (or drop the long "
            "values)",
        )


# -- bounded memory: the streaming engine or nothing -----------------------------------------------------------------

# polars marks a node of the streaming plan that runs on the in-memory engine with a fill colour its legend names
_FALLBACK_LEGEND = re.compile(r'<FONT COLOR="([^"]+)">[^<]*</FONT> in-memory engine fallback')


def check_streaming(queries: list[pl.LazyFrame], optimizations: pl.QueryOptFlags | None = None) -> None:
    """InternalError unless every query runs on polars' streaming engine throughout (polars would otherwise fall
    back to the in-memory engine for a node it cannot stream, silently, holding the whole input in memory). Read
    from the physical streaming plan, before anything is read; when polars' plan no longer names its fallback
    nodes, this fails closed."""
    for query in queries:
        dot = query.show_graph(
            engine="streaming", plan_stage="physical", raw_output=True, show=False,
            optimizations=optimizations or pl.QueryOptFlags(),
        )
        legend = _FALLBACK_LEGEND.search(dot or "")
        if legend is None:
            raise InternalError("cannot tell whether polars' streaming plan falls back to memory; nothing was spent")
        if f'fillcolor="{legend.group(1)}"' in (dot or ""):
            raise InternalError("a query would fall back to polars' in-memory engine; nothing was spent")


def collect_columnar(
    path: Path,
    fmt: ColumnarFormat,
    spec: Spec,
    used: list[str],
    queries: Callable[[pl.LazyFrame], list[pl.LazyFrame]],
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
) -> list[pl.DataFrame]:
    """The engine's ``queries`` over a Parquet/Arrow IPC file, on the streaming engine (bounded memory)."""
    scan = scan_columnar(path, fmt, spec.columns.keys())
    check_period_field(path, scan.collect_schema().names(), spec, "schema")
    period_field = period_field_of(spec)
    check_sizes(path, fmt, [*used, *([] if period_field is None else [period_field])], max_input_bytes)
    frame = typed_frame(scan, spec, used)
    planned = queries(frame)
    check_streaming(planned)
    try:
        return pl.collect_all(planned, engine="streaming")
    except BaseException as exc:  # noqa: BLE001 - polars' errors and pyo3 panics; the class name alone leaves here
        # a damaged page, or string data that is not UTF-8 (which the format forbids and polars refuses)
        raise _failure(exc, path, f"input {path} could not be read as a {_FORMAT_NAMES[fmt]} file") from None


# rows per batch handed to PersonRows (each batch is cut to K rows per person at once)
PERSON_BATCH_ROWS = 1 << 19


def person_rows(frame: pl.LazyFrame, persons: PersonRows) -> None:
    """The typed rows of ``frame`` (the used columns and ``ID_COLUMN``) to ``persons``, in batches from polars'
    streaming engine: memory is bounded by the batches and the persons' kept rows, not by the input."""
    check_streaming([frame])
    for batch in frame.collect_batches(chunk_size=PERSON_BATCH_ROWS):
        persons.add(batch)


def person_rows_columnar(
    path: Path, fmt: ColumnarFormat, spec: Spec, persons: PersonRows, max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES
) -> None:
    """A person-level release over a Parquet/Arrow IPC file: its rows, typed as every input's, to ``persons``."""
    scan = scan_columnar(path, fmt, spec.columns.keys())
    check_id_field(path, scan.collect_schema().names(), spec, "schema")
    check_sizes(path, fmt, [*used_columns(spec), *([spec.id_column] if spec.id_column else [])], max_input_bytes)
    frame = typed_frame(scan, spec, used_columns(spec), spec.id_column)
    try:
        person_rows(frame, persons)
    except BaseException as exc:  # noqa: BLE001 - polars' errors and pyo3 panics; the class name alone leaves here
        raise _failure(exc, path, f"input {path} could not be read as a {_FORMAT_NAMES[fmt]} file") from None


class FrameAggregator:
    """Exact aggregates of typed rows given batch by batch (a Spark partition's Arrow batches of a Parquet input):
    ``add(frame)`` any number of times, then ``finish()``. Each batch goes through ``typed_frame`` and the same
    queries as every other input (``dpcli.engine.cells``)."""

    def __init__(self, plan: Plan):
        self.spec = plan.spec
        self.used = used_columns(plan.spec)
        self.queries = Queries(plan, pl.Int128())
        self.totals = CellTotals(plan, self.queries)

    def add(self, frame: pl.DataFrame) -> None:
        typed = typed_frame(frame.lazy(), self.spec, self.used)
        self.totals.add([[grouped] for grouped in pl.collect_all(self.queries.apply(typed))])

    def finish(self) -> list[ExactStatistic]:
        return self.totals.result()
