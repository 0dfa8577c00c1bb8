"""Exact aggregates with Spark: the same numbers as the polars engine, computed where the data lives.

``aggregate(plan, path, master=...)`` returns exactly what :func:`dpcli.engine.aggregate` returns for the same
file (per statistic, per declared cell: int64 counts and fixed-point sums as Python ints). Only the small per-cell
table comes back to the driver; noise, ledger and output stay in dpcli.

How the file becomes records: the contract's rules (docs/spec.md, "How lines are read"), not Spark's CSV reader's
(Hadoop splits on CR, LF and CRLF whatever the header says, and quotes differ). Spark reads the files as lines,
split at the line end the header chose (``lineSep``), each line's bytes as they are (``cast("binary")``: invalid
UTF-8 reaches the cell rules untouched). Each file's header is dropped by position (the first record of the split
that starts at byte 0, never by content). In each partition the lines, joined again with the line end, go to the
polars engine's per-chunk aggregator, so every cell rule is the same code; the partition emits its nonzero cells,
Spark adds them up per (statistic, cell), and the driver rebuilds the arrays. Two details of CR files: a record
after a CRLF starts with the LF, which the aggregator strips as the polars engine does; and a file ending in CRLF
gives Spark one last record that is just that LF, which is not a line: its contribution (an empty line's) is taken
back out on the driver, once per such file, as the polars engine does.

Open-key statistics: the partitions' totals carry the key text, added up per (statistic, cell, key). A person-level
release (``privacy.unit: {id: ...}``) needs all of a person's rows in one place: the partitions turn their lines into
typed rows (``LineAggregator.rows``: the id text and the used columns), Spark repartitions them by the id, and each
partition bounds its persons with ``persons.PersonRows`` (the polars engine's rules, the same secret) and emits its
cells' totals, added up as above. The driver holds cell totals only, never a row.

Nothing Spark or Java says reaches the terminal (a Java message can quote a data value): the JVM is started with
its standard output and error on /dev/null, its log level is ERROR, and every Spark or Py4J exception becomes a
dpcli error naming its class only.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dpcli.core.locations import is_url
from dpcli.engine.cells import ExactStatistic, used_columns
from dpcli.engine.columnar import FrameAggregator, typed_frame
from dpcli.engine.csv_header import MAX_HEADER_BYTES, HeaderLayout, check_header, head_layout
from dpcli.engine.inputs import DEFAULT_MAX_INPUT_BYTES
from dpcli.engine.persons import (
    ID_COLUMN,
    SECRET_BYTES,
    PersonRows,
    check_id_field,
    exact_from_frames,
    hash_probe,
)
from dpcli.engine.polars_engine import LineAggregator
from dpcli.engine.source import CsvLayout, input_delimiter
from dpcli.errors import DpcliError, InputError, InternalError, Interrupted, UsageError
from dpcli.plan.model import Plan
from dpcli.specs.kinds import KINDS
from dpcli.specs.model import DEFAULT_MAX_RECORD_BYTES, Spec

DEFAULT_MASTER = "local[*]"
# by its extra, never by name from a package index (where a stranger could own the name: README.md, Install)
INSTALL_HINT = "install dpcli with its spark extra (from a clone: pip install '.[spark]'; README.md, Install)"
# Codecs Hadoop reads in pure Java (Spark's text reader picks them by file extension, as here). zstd, lz4 and
# snappy need Hadoop's native libraries, which pyspark's jars do not ship: refused before anything is spent.
_JAVA_CODECS = {"GzipCodec", "BZip2Codec"}
_BUFFER_BYTES = 4 << 20  # lines are handed to the aggregator this many bytes at a time
_LIMB = 1 << 64  # a sum travels as hi * 2^64 + lo, both DECIMAL(38,0): Spark adds them exactly, whatever the size

_session_lock = threading.Lock()


# every cell and line rule of the polars engine, applied to each partition's lines (one implementation of them)
_line_aggregator = LineAggregator
# single-byte encodings keep CR and LF as the bytes Hadoop splits lines at; the UTF-16 family does not
_BOM = b"\xef\xbb\xbf"
_SPLITTABLE_ENCODINGS = ("utf-8", "latin-1", "iso-8859-15", "cp1252", "cp1250", "ascii")


# ---------------------------------------------------------------------------------------------------------------
# the session


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


@contextlib.contextmanager
def _quiet_fds() -> Iterator[None]:
    """Standard output and error on /dev/null while the JVM starts: it inherits them for its whole life, so no
    banner, log line or Java message (which could quote a value) ever reaches the terminal."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def session(master: str | None = None, conf: dict[str, str] | None = None) -> Any:
    """The process's SparkSession (created once; later calls return it whatever ``master`` says).

    ``master``: a Spark master URL, else $SPARK_MASTER, else ``local[*]``. ``conf``: more Spark settings (tests).
    UsageError (exit 2) without pyspark or without Java.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise UsageError(f"the Spark engine needs pyspark: {INSTALL_HINT}") from None
    with _session_lock:
        active = SparkSession.getActiveSession()
        if active is not None:
            return active
        master = master or os.environ.get("SPARK_MASTER") or DEFAULT_MASTER
        previous_sigint = signal.getsignal(signal.SIGINT)
        if _java() is None:
            raise UsageError("the Spark engine needs Java 17 or later: no `java` on PATH or in $JAVA_HOME")
        if master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no lookup of this host's public address
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers import dpcli from this venv
        builder = (
            SparkSession.builder.master(master)
            .appName("dpcli")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.ansi.enabled", "true")  # a decimal sum that overflowed would fail, never wrap
        )
        for key, value in (conf or {}).items():
            builder = builder.config(key, value)
        try:
            with _quiet_fds(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                spark = builder.getOrCreate()
        except Exception as exc:  # noqa: BLE001 - any failure to start is reported by class name only
            _reraise_interruption(exc)
            raise UsageError(
                f"the Spark engine could not start a Spark session on master {master} ({type(exc).__name__}): "
                "it needs Java 17 or later, and a reachable master"
            ) from None
        spark.sparkContext.setLogLevel("ERROR")
        # pyspark's SparkContext sets a SIGINT handler of its own, over dpcli's (and over a SIGINT the parent set to
        # be ignored, a script's `cmd &`): each disposition back as dpcli had it
        if previous_sigint is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, previous_sigint)
        return spark


# ---------------------------------------------------------------------------------------------------------------
# the input: files, formats and headers, through Hadoop's FileSystem (local paths, file:, hdfs://, s3a://)


@dataclass(frozen=True)
class _Input:
    files: list[str]  # Hadoop URIs of the CSV files, in listing order
    layout: HeaderLayout
    delimiter: str  # the spec's, else from the input's name (dpcli.engine.source.input_delimiter)
    crlf_ends: int  # how many CR files end with CRLF (each gives Spark a last record that is not a line)


def _uri(path: str | Path) -> str:
    text = str(path)
    if is_url(text) or text.startswith("file:"):
        return text
    # not Path.as_uri(): Hadoop's Path(String) does not decode %-escapes, so a space must stay a space
    return "file://" + str(Path(text).absolute())


class _Hadoop:
    """Hadoop's FileSystem and codecs through the JVM gateway: bounded reads of a file's head (and tail)."""

    def __init__(self, spark: Any):
        self.jvm = spark.sparkContext._jvm
        self.conf = spark.sparkContext._jsc.hadoopConfiguration()
        self.codecs = self.jvm.org.apache.hadoop.io.compress.CompressionCodecFactory(self.conf)

    def path(self, uri: str) -> Any:
        return self.jvm.org.apache.hadoop.fs.Path(uri)

    def files(self, uri: str, shown: str) -> list[Any]:
        """The files of ``uri``: itself, or a directory's data files (names starting with _ or . are not data, as
        for Spark)."""
        path = self.path(uri)
        fs = path.getFileSystem(self.conf)
        if not fs.exists(path):
            raise InputError(f"input {shown} does not exist")
        status = fs.getFileStatus(path)
        if not status.isDirectory():
            return [status.getPath()]
        parts = []
        for child in fs.listStatus(path):
            name = child.getPath().getName()
            if name.startswith(("_", ".")):
                continue
            if child.isDirectory():
                raise InputError(f"input {shown} holds a subdirectory: the Spark engine reads one level of parts")
            parts.append(child.getPath())
        if not parts:
            raise InputError(f"input {shown} is a directory without data files")
        return sorted(parts, key=lambda p: p.toString())

    def codec(self, path: Any) -> str | None:
        codec = self.codecs.getCodec(path)
        return None if codec is None else codec.getClass().getSimpleName()

    def _open(self, path: Any) -> Any:
        stream = path.getFileSystem(self.conf).open(path)
        codec = self.codecs.getCodec(path)
        return stream if codec is None else codec.createInputStream(stream)

    def head(self, path: Any) -> bytes:
        stream = self._open(path)
        try:
            return bytes(stream.readNBytes(MAX_HEADER_BYTES + 8))
        finally:
            stream.close()

    def ends_with_crlf(self, path: Any) -> bool:
        """The file's (decompressed) content ends with CR LF. A plain file is read at its end; a compressed one is
        decompressed in the JVM (skipped through twice, nothing crosses to Python but the last two bytes)."""
        fs = path.getFileSystem(self.conf)
        if self.codecs.getCodec(path) is None:
            size = fs.getFileStatus(path).getLen()
            if size < 2:
                return False
            stream = fs.open(path)
            try:
                stream.seek(size - 2)
                return bytes(stream.readNBytes(2)) == b"\r\n"
            finally:
                stream.close()
        stream = self._open(path)
        try:
            length = self._skip(stream, 1 << 62)  # to the end: the decompressed length
        finally:
            stream.close()
        if length < 2:
            return False
        stream = self._open(path)
        try:
            self._skip(stream, length - 2)
            return bytes(stream.readNBytes(2)) == b"\r\n"
        finally:
            stream.close()

    def decompressed_size(self, path: Any, limit: int) -> int:
        """A compressed file's decompressed length, or ``limit`` + 1 when it is longer: decompressed in the JVM up
        to that point (nothing crosses to Python), before the job reads it."""
        stream = self._open(path)
        try:
            return self._skip(stream, limit + 1)
        finally:
            stream.close()

    @staticmethod
    def _skip(stream: Any, n: int) -> int:
        """Skip ``n`` bytes of ``stream`` or to its end; how many were skipped."""
        done = 0
        while done < n:
            # at most 2^30 a call: Hadoop's DecompressorStream.skip casts its argument to int
            step = stream.skip(min(n - done, 1 << 30))
            if step <= 0:
                if stream.read() < 0:
                    break
                step = 1
            done += step
        return done


def input_format_of(path: str, input_format: str | None) -> str:
    """``csv`` (plain or compressed, the codec told by the name as Hadoop tells it), from ``input_format`` or the
    name. UsageError (exit 2) for a format this engine does not read."""
    name = path.rstrip("/").lower()
    fmt = (input_format or ("parquet" if name.endswith((".parquet", ".pq")) else "csv")).lower()
    if fmt == "parquet":
        return fmt
    if fmt.startswith("csv.") and not name.endswith(fmt[3:]):
        # Hadoop picks the codec by the file name: a declared compression the name does not carry would be read raw
        raise UsageError(f"input {path}: the Spark engine reads {fmt} from files named *{fmt[3:]}")
    if fmt not in ("csv", "csv.gz", "csv.bz2", "csv.zst"):  # .zst is refused by its codec below, with the reason
        raise UsageError(f"input {path}: the Spark engine reads CSV files (.csv, .csv.gz, .csv.bz2), not {fmt}")
    return fmt


def _layout(hadoop: _Hadoop, path: Any, shown: str, spec: Spec, delimiter: str) -> HeaderLayout:
    """The layout the file's first bytes (or, without a header line, the spec) decide, as the polars engine's."""
    head = hadoop.head(path)
    dialect = spec.csv
    if dialect.encoding != "utf-8":
        head = head.decode(dialect.encoding, "replace").encode("utf-8")
    return head_layout(
        Path(shown), head, delimiter=delimiter, names=spec.field_names, line_end=dialect.line_end
    )


def resolve_input(
    spark: Any, plan: Plan, path: str | Path, input_format: str | None = None,
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
) -> _Input:
    """The files and their common header, checked before anything is spent (InputError, exit 3; UsageError, exit 2
    for what the engine cannot read). The compressed files' decompressed sizes, added up, must be within
    ``max_input_bytes``, as the polars engine caps a compressed input's (exit 3 past it, before the job runs)."""
    shown = str(path)
    input_format_of(shown, input_format)
    if plan.spec.csv.encoding not in _SPLITTABLE_ENCODINGS:
        raise UsageError(
            f"the Spark engine splits lines at single bytes, which {plan.spec.csv.encoding} text does not use for its "
            "line ends; re-encode the file (e.g. to utf-8) or use the polars engine"
        )
    if plan.spec.quoted_line_breaks:
        raise UsageError(
            "csv.quoted_line_breaks is not supported by the Spark engine (records there span lines, which Spark "
            "splits across workers); use the polars engine"
        )
    hadoop = _Hadoop(spark)
    delimiter = input_delimiter(shown, plan.spec.csv.delimiter)
    files = hadoop.files(_uri(path), shown)
    layouts = []
    for f in files:
        codec = hadoop.codec(f)
        if codec is not None and codec not in _JAVA_CODECS:
            raise UsageError(
                f"input {shown}: {f.getName()} needs Hadoop's native {codec} library, which the Spark engine does "
                "not use: decompress it, or compress with gzip or bzip2"
            )
        part = shown if len(files) == 1 else f"{shown}/{f.getName()}"
        layouts.append(_layout(hadoop, f, part, plan.spec, delimiter))
    layout = layouts[0]
    if any(other.names != layout.names or other.eol != layout.eol for other in layouts[1:]):
        raise InputError(f"input {shown}: its parts do not all have the same header line and line end")
    check_header(Path(shown), layout.names, plan.spec.columns.keys(), delimiter)
    check_id_field(Path(shown), layout.names, plan.spec, "header")
    decompressed = 0
    for f in files:
        if hadoop.codec(f) is not None:
            decompressed += hadoop.decompressed_size(f, max_input_bytes - decompressed)
            if decompressed > max_input_bytes:
                raise InputError(
                    f"input {shown} decompresses to more than the input cap ({max_input_bytes} bytes): nothing was "
                    "spent",
                    hint="raise --max-input-bytes",
                )
    crlf_ends = sum(hadoop.ends_with_crlf(f) for f in files) if layout.eol == b"\r" else 0
    return _Input([f.toString() for f in files], layout, delimiter, crlf_ends)


# ---------------------------------------------------------------------------------------------------------------
# the job


def _cell_schema() -> Any:
    from pyspark.sql.types import DecimalType, IntegerType, LongType, StringType, StructField, StructType

    return StructType(
        [
            StructField("stat", IntegerType(), False),
            StructField("cell", LongType(), False),
            StructField("key", StringType(), True),  # an open-key statistic's key text; null for declared cells
            StructField("n", LongType(), False),
            StructField("hi", DecimalType(38, 0), False),
            StructField("lo", DecimalType(38, 0), False),
        ]
    )


def statistic_frames(stats: list[ExactStatistic]) -> list[pl.DataFrame]:
    """An aggregator's result as per-statistic cell frames (code [, key], n [, s]): the nonzero declared cells, or
    an open-key statistic's observed entries."""
    frames = []
    for e in stats:
        if e.keys is not None:
            columns: dict[str, Any] = {
                "code": pl.Series([code for code, _ in e.keys], dtype=pl.Int64),
                "key": pl.Series([key for _, key in e.keys], dtype=pl.String),
                "n": pl.Series(e.counts, dtype=pl.Int64),
            }
            picked = np.arange(len(e.keys))
        else:
            nonzero = e.counts != 0 if e.sums is None else (e.counts != 0) | (e.sums != 0)
            if e.squares is not None:
                nonzero |= e.squares != 0
            picked = np.flatnonzero(nonzero)
            columns = {"code": pl.Series(picked, dtype=pl.Int64), "n": pl.Series(e.counts[picked], dtype=pl.Int64)}
        if e.sums is not None:
            columns["s"] = pl.Series([int(s) for s in e.sums[picked]], dtype=pl.Int128)
        if e.squares is not None:  # variance/std
            columns["s2"] = pl.Series([int(s) for s in e.squares[picked]], dtype=pl.Int128)
        frames.append(pl.DataFrame(columns))
    return frames


def cell_table(frames: list[pl.DataFrame], times: int = 1) -> Any:
    """Per statistic (in plan order) its cell frame (code [, key], n [, s]) as one Arrow table in the job's cell
    schema, every count and sum multiplied by ``times``; a sum travels as two DECIMAL(38,0) limbs (hi * 2^64 +
    lo) that Spark adds exactly, whatever the size."""
    import pyarrow as pa

    limb = pl.lit(_LIMB, dtype=pl.Int128())
    parts = []
    for i, frame in enumerate(frames):
        # a variance's sums of squares travel as rows of their own, under statistic number len(frames) + i, count 0
        summed = [(i, "s", pl.col("n"))] + ([(len(frames) + i, "s2", pl.lit(0))] if "s2" in frame.columns else [])
        for stat, name, n in summed:
            total = pl.col(name).cast(pl.Int128()) if name in frame.columns else pl.lit(0, dtype=pl.Int128())
            total = total * times
            parts.append(
                frame.lazy().select(
                    pl.lit(stat, dtype=pl.Int32()).alias("stat"),
                    pl.col("code").cast(pl.Int64()).alias("cell"),
                    (pl.col("key") if "key" in frame.columns else pl.lit(None, dtype=pl.String())).alias("key"),
                    (n.cast(pl.Int64()) * times).alias("n"),
                    total.floordiv(limb).cast(pl.Decimal(38, 0)).alias("hi"),
                    (total % limb).cast(pl.Decimal(38, 0)).alias("lo"),
                )
            )
    dec = pa.decimal128(38, 0)
    schema = pa.schema(
        [("stat", pa.int32()), ("cell", pa.int64()), ("key", pa.string()), ("n", pa.int64()), ("hi", dec),
         ("lo", dec)]
    )
    if not parts:
        return schema.empty_table()
    return pl.concat(pl.collect_all(parts)).to_arrow().cast(schema)


def cell_rows(stats: list[ExactStatistic]) -> Any:
    """The nonzero cells (and open-key entries) of ``stats`` as Arrow batches in the job's cell schema."""
    return cell_table(statistic_frames(stats)).to_batches()


def _line_chunks(
    batches: Iterator[Any], layout: CsvLayout, encoding: str, max_record: int = DEFAULT_MAX_RECORD_BYTES
) -> Iterator[bytes]:
    """A partition's lines (Spark's Arrow batches of value, path, start), each file's header dropped by position,
    joined again with the line end and decoded to UTF-8: chunks of whole lines of about ``_BUFFER_BYTES``. A line
    longer than ``max_record`` bytes is an empty line, as the polars engine reads it (docs/spec.md, "How lines are
    read"; Hadoop's reader has held it whole by then)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    buffered: list[bytes] = []
    size = 0
    split: tuple[str, int] | None = None  # the split of the previous row (file, start)
    for batch in batches:
        if batch.num_rows == 0:
            continue
        values, paths, starts = batch.column(0), batch.column(1), batch.column(2)
        start_arr = starts.to_numpy(zero_copy_only=False)
        path_arr = paths.to_numpy(zero_copy_only=False)
        # a row opens a split when its (file, start) differs from the previous row's; the split that starts at
        # byte 0 of its file opens with the header line
        opens = np.zeros(batch.num_rows, dtype=bool)
        opens[0] = split != (path_arr[0], int(start_arr[0]))
        opens[1:] = (start_arr[1:] != start_arr[:-1]) | (path_arr[1:] != path_arr[:-1])
        split = (path_arr[-1], int(start_arr[-1]))
        first = opens & (start_arr == 0)  # each file's first line
        if first.any() and layout.header:
            values = pc.filter(values, pa.array(~first))
        elif first.any():
            # no header line: the first line is a record, without the BOM a file may start with (as the polars
            # engine reads it)
            bom = pc.and_(pa.array(first), pc.starts_with(values, pattern=_BOM))
            # the first occurrence is at the start where bom holds (binary_slice fails on shorter values)
            stripped = pc.replace_substring(values, pattern=_BOM, replacement=b"", max_replacements=1)
            values = pc.if_else(bom, stripped, values)
        if len(values) == 0:
            continue
        too_long = pc.greater(pc.binary_length(values), max_record)
        if pc.any(too_long).as_py():
            values = pc.if_else(too_long, pa.scalar(b"", values.type), values)
        lines = pc.binary_join_element_wise(values, pa.scalar(b"", pa.binary()), layout.eol)
        joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(lines)], pa.int32()), lines), b"")
        data = joined[0].as_py()
        if encoding != "utf-8":
            data = data.decode(encoding, "replace").encode("utf-8")
        buffered.append(data)
        size += len(data)
        if size >= _BUFFER_BYTES:
            yield b"".join(buffered)
            buffered, size = [], 0
    if buffered:
        yield b"".join(buffered)


def partition_cells(plan: Plan, layout: CsvLayout) -> Any:
    """The function each partition runs (``mapInArrow``): its lines, header dropped, through the aggregator."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        aggregator = _line_aggregator(plan, layout)
        for data in _line_chunks(batches, layout, plan.spec.csv.encoding, plan.spec.csv.max_record_bytes):
            aggregator.add(data)
        yield from cell_rows(aggregator.finish())

    return run


def partition_rows(plan: Plan, layout: CsvLayout, schema: Any) -> Any:
    """The function each partition runs for a person-level release (``mapInArrow``): its lines, header dropped, as
    typed rows (the person's id and the used columns, ``LineAggregator.rows``) in the Arrow ``schema``."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        aggregator = _line_aggregator(plan, layout)
        for data in _line_chunks(batches, layout, plan.spec.csv.encoding, plan.spec.csv.max_record_bytes):
            yield from _arrow_rows(aggregator.rows(data), schema)

    return run


def _arrow_rows(frame: pl.DataFrame, schema: Any) -> list[Any]:
    batches: list[Any] = frame.to_arrow().cast(schema).to_batches()  # pyarrow RecordBatches (pyarrow is untyped)
    return batches


def _frame(arrow: Any) -> pl.DataFrame:
    """An Arrow record batch or table as a polars frame (``from_arrow`` makes a Series only of a single array)."""
    frame = pl.from_arrow(arrow)
    if not isinstance(frame, pl.DataFrame):
        raise InternalError("an Arrow record batch or table read as a polars Series")
    return frame


def _rows_schema(empty: pl.DataFrame) -> tuple[Any, Any]:
    """The Arrow schema (polars' ``large_string`` as ``string``, the type Spark's strings travel as by default) and
    the Spark schema of the typed rows, from an empty frame of them made on the driver by the partitions' code."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    fields = [
        pa.field(f.name, pa.string() if pa.types.is_large_string(f.type) else f.type)
        for f in empty.to_arrow().schema
    ]
    schema = pa.schema(fields)
    return schema, from_arrow_schema(schema)


def expected_polars() -> tuple[str, tuple[int, ...]]:
    """What every executor's polars must match (run on the driver only): its version and its ``hash_probe``."""
    return pl.__version__, hash_probe()


# An executor's refusal reaches the driver inside Spark's exception text, next to whatever else that text holds: it
# is recognised by a token this process drew, which no data value can hold, so no cell can forge a refusal
_MARK = secrets.token_hex(16)


def partition_persons(plan: Plan, secret: bytes, expected: tuple[str, tuple[int, ...]], mark: str) -> Any:
    """The function each partition runs after the rows were repartitioned by person (``mapInArrow``): every row of a
    person is in this partition, so ``persons.PersonRows`` bounds each person's contribution here, by the same rules
    as the polars engine, and the partition emits its cells' totals. The keyed hash that picks the rows is polars'
    seeded hash, stable only within one polars version: an executor running another version, or whose hash of
    ``hash_probe``'s rows differs from the driver's, refuses before it reads a row."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import polars

        # refusals the driver recognises by its ``mark`` (a version is not data)
        version, probe = expected
        if polars.__version__ != version:
            raise RuntimeError(f"{mark}:version:{polars.__version__}:")
        if hash_probe() != probe:
            raise RuntimeError(f"{mark}:hash:")
        people = PersonRows(plan, secret)
        for batch in batches:
            if batch.num_rows:
                people.add(_frame(batch).drop(_SPREAD))
        yield from cell_table(people.cell_frames()).to_batches()

    return run


_SPREAD = "__dpcli_spread"


def by_person(rows: Any, columns: list[str]) -> Any:
    """The typed rows repartitioned so that all rows of one person are in one partition: by a hash of the id.
    A row whose id is missing is a person of its own or is dropped, so it may go anywhere: it is spread by a hash
    of its whole row rather than piling every such row into the partition of the null id. (Which rows count as
    missing here only balances the partitions; persons.PersonRows decides what a missing id is.)"""
    from pyspark.sql import functions as F

    ident = F.col(ID_COLUMN)
    missing = ident.isNull() | (ident == "") | ident.contains("\ufffd")
    spread = F.when(missing, F.xxhash64(*(F.col(c) for c in columns))).otherwise(F.xxhash64(ident))
    return rows.withColumn(_SPREAD, spread).repartition(F.col(_SPREAD))


def _empty_line_frames(plan: Plan, layout: CsvLayout, secret: bytes | None) -> list[pl.DataFrame]:
    """What the record Spark makes of the LF after a CR file's last CR adds (an empty line's contribution: under a
    person unit, a row without an id, which is a person of its own or dropped, so its part adds up on its own)."""
    aggregator = _line_aggregator(plan, layout)
    if secret is None:
        aggregator.add(b"\n" + layout.eol)
        return statistic_frames(aggregator.finish())
    people = PersonRows(plan, secret)
    people.add(aggregator.rows(b"\n" + layout.eol))
    return people.cell_frames()


def _person_level(plan: Plan) -> bool:
    return plan.spec.privacy.unit == "person"


def aggregate(
    plan: Plan,
    path: str | Path,
    *,
    master: str | None = None,
    input_format: str | None = None,
    secret: bytes | None = None,
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
) -> list[ExactStatistic]:
    """Exact per-cell aggregates for every statistic of the plan, in plan order, computed by Spark: the same as
    :func:`dpcli.engine.aggregate` on the same data. ``path``: a local path or a URL Hadoop reads (``file:``,
    ``hdfs://``, ``s3a://``), a CSV file (``.csv``, ``.csv.gz``, ``.csv.bz2``) or a directory of CSV parts with the
    same header. ``master``: see :func:`session`. ``secret``: the release's key of the rows' choice under a person
    unit (32 bytes; None: a fresh one). ``max_input_bytes``: the cap on a compressed input's decompressed size (all its
    compressed parts together), checked before the job reads a line."""
    spark = session(master)
    shown = str(path)
    if not _person_level(plan):
        secret = None  # the row-level path: nothing is chosen, nothing is keyed
    else:
        secret = secrets.token_bytes(SECRET_BYTES) if secret is None else secret
        PersonRows(plan, secret)  # a secret of the wrong length fails here, as on the polars engine, not in a job
    fmt = input_format_of(shown, input_format)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if fmt == "parquet":
                parquet = True
                cells = _parquet(spark, plan, path, secret)
            else:
                parquet = False
                cells = _csv(spark, plan, path, input_format, secret, max_input_bytes)
            table = sum_cells(cells)
    except DpcliError:
        raise
    except Exception as exc:  # noqa: BLE001 - Spark, Py4J and Java errors alike: their text may quote a value
        _reraise_interruption(exc)
        raise _failure(exc, shown, parquet) from None
    return exact_statistics(plan, table)


def _reraise_interruption(exc: BaseException) -> None:
    """A signal that came during a Spark call, raised again: pyspark's and Py4J's clean-up (closing a result socket,
    joining the thread that served it) can fail while the interruption unwinds, and what reached this driver was
    then their error (a TypeError, a Py4JError), the interruption only in its context: an internal error, exit 1,
    where the contract says 128 + n and nothing spent."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, (KeyboardInterrupt, Interrupted)):
            raise cause from None
        cause = cause.__cause__ or cause.__context__


# Java exceptions of a compressed stream that ends early or does not decode (a truncated or corrupt .gz or .bz2): about
# the file as a whole, never a cell (a compressor writes any bytes as a valid stream)
_CORRUPT_STREAM = ("java.io.EOFException", "java.util.zip.ZipException")


def _failure(exc: BaseException, shown: str, parquet: bool) -> DpcliError:
    """A failed Spark job as a dpcli error that quotes nothing of the exception's text (only a class name, or the
    polars version an executor reported)."""
    name = _class_name(exc)
    corrupt = next((c for c in _java_classes(exc) if c in _CORRUPT_STREAM), None)
    if corrupt is not None and not parquet:
        # as the polars engine says it (dpcli/engine/source.py): exit 3. Hadoop tells the codec by the file's name
        # (a directory's parts each by their own): the format named is the path's when it has a codec's suffix
        label = next((f"csv{ext}" for ext in (".gz", ".bz2") if shown.lower().endswith(ext)), "compressed CSV")
        return InputError(f"input {shown} is not a valid {label} file ({corrupt}): nothing was spent")
    mismatch = re.search(re.escape(_MARK) + r":version:([0-9A-Za-z.+-]{1,40}):", str(exc))
    if mismatch is not None:
        return UsageError(
            f"the Spark engine's executors run polars {mismatch.group(1)}, this machine {expected_polars()[0]}: a "
            "person-level release picks each person's rows by polars' seeded hash, which is the same only within "
            "one polars version; install the same polars on the workers; nothing was spent"
        )
    if f"{_MARK}:hash:" in str(exc):
        return UsageError(
            "the Spark engine's executors hash rows differently from this machine (the same polars, "
            f"{expected_polars()[0]}, on another platform?): a person-level release picks each person's rows by that "
            "hash, so every machine must compute the same; nothing was spent"
        )
    if name.endswith("UnsupportedFileSystemException"):
        return UsageError(
            f"input {shown}: Spark has no file system for this URL's scheme (s3a:// needs the hadoop-aws jars "
            "on Spark's classpath)"
        )
    if parquet and name.endswith("AnalysisException"):
        return InputError(f"input {shown} could not be read as Parquet by Spark ({name})")
    return InternalError(f"the Spark engine failed on input {shown} ({name}); nothing was spent")


def _csv(
    spark: Any, plan: Plan, path: str | Path, input_format: str | None, secret: bytes | None, max_input_bytes: int
) -> Any:
    """The job's cell rows for CSV input (a Spark DataFrame, not yet added up)."""
    from pyspark.sql import functions as F

    source = resolve_input(spark, plan, path, input_format, max_input_bytes)
    layout = CsvLayout(tuple(source.layout.names), source.layout.eol, source.delimiter, plan.spec.csv.header)
    lines = (
        spark.read.option("lineSep", layout.eol.decode())
        .text(source.files)
        .select(
            F.col("value").cast("binary").alias("value"),
            F.col("_metadata.file_path").alias("path"),
            F.col("_metadata.file_block_start").alias("start"),
        )
    )
    if secret is None:
        cells = lines.mapInArrow(partition_cells(plan, layout), _cell_schema())
    else:
        arrow_schema, spark_schema = _rows_schema(_line_aggregator(plan, layout).rows(b""))
        rows = lines.mapInArrow(partition_rows(plan, layout, arrow_schema), spark_schema)
        cells = by_person(rows, spark_schema.names).mapInArrow(
            partition_persons(plan, secret, expected_polars(), _MARK), _cell_schema()
        )
    if source.crlf_ends:
        # each such file's last record (just the LF of its final CRLF) is not a line: its part is taken back out
        correction = cell_table(_empty_line_frames(plan, layout, secret), times=-source.crlf_ends)
        cells = cells.unionByName(spark.createDataFrame(correction, schema=_cell_schema()))
    return cells


def sum_cells(cells: Any) -> Any:
    """The partitions' cell rows added up per (statistic, cell, key) by Spark, collected as an Arrow table (one row
    per nonzero cell or observed open key: no row of the input ever reaches the driver)."""
    from pyspark.sql import functions as F

    return cells.groupBy("stat", "cell", "key").agg(
        F.sum("n").alias("n"), F.sum("hi").alias("hi"), F.sum("lo").alias("lo")
    ).toArrow()


def exact_statistics(plan: Plan, table: Any) -> list[ExactStatistic]:
    """Every statistic's exact aggregates from the summed cell table (``persons.exact_from_frames``: per-cell arrays
    for declared cells, the observed entries of an open-key statistic)."""
    limb = pl.lit(_LIMB, dtype=pl.Int128())
    cells = _frame(table).with_columns(
        (pl.col("hi").cast(pl.Int128()) * limb + pl.col("lo").cast(pl.Int128())).alias("s")
    )
    frames = []
    count = len(plan.statistics)
    for i, sp in enumerate(plan.statistics):
        names = ["code", *(["key"] if sp.selection is not None else []), "n"]
        if KINDS[sp.statistic.kind].sums_column:
            names.append("s")
        frame = cells.filter(pl.col("stat") == i).rename({"cell": "code"}).select(names)
        if KINDS[sp.statistic.kind].sums_squares:  # the rows of statistic count + i hold its sums of squares
            squares = cells.filter(pl.col("stat") == count + i).rename({"cell": "code", "s": "s2"})
            frame = pl.concat(
                [frame.with_columns(pl.lit(0, dtype=pl.Int128()).alias("s2")),
                 squares.select("code", "n", pl.lit(0, dtype=pl.Int128()).alias("s"), "s2")],
                how="vertical_relaxed",
            )
        frames.append(frame)
    return exact_from_frames(plan, [frames])


def partition_frames(plan: Plan) -> Any:
    """The function each partition of a Parquet input runs (``mapInArrow``): its Arrow batches as polars frames,
    through the same typed-column rules and queries as the polars engine's Parquet reading."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        aggregator = FrameAggregator(plan)
        for batch in batches:
            if batch.num_rows:
                aggregator.add(_frame(batch))
        yield from cell_rows(aggregator.finish())

    return run


def partition_typed_rows(plan: Plan, schema: Any) -> Any:
    """The function each partition of a Parquet input runs for a person-level release: its Arrow batches as typed
    rows (the id and the used columns, by the polars engine's typed-column rules), in the Arrow ``schema``."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        spec = plan.spec
        used = used_columns(spec)
        for batch in batches:
            if batch.num_rows:
                frame = _frame(batch).lazy()
                yield from _arrow_rows(typed_frame(frame, spec, used, spec.id_column).collect(), schema)

    return run


def _parquet(spark: Any, plan: Plan, path: str | Path, secret: bytes | None) -> Any:
    """The job's cell rows for a Parquet file or a directory of Parquet parts: its schema must hold every declared
    column (exit 3 before anything is read); the used columns go to the partitions as Arrow batches."""
    shown = str(path)
    frame = spark.read.parquet(_uri(path))
    missing = [name for name in plan.spec.columns if name not in frame.columns]
    if missing:
        raise InputError(f"input {shown}: declared column(s) missing from the schema: {', '.join(missing)}")
    check_id_field(Path(shown), frame.columns, plan.spec, "schema")
    used = used_columns(plan.spec)
    if secret is None:
        # a release of plain counts reads no column, but Arrow batches need one: the first, never looked at
        picked = frame.select(*(used or frame.columns[:1]))
        return picked.mapInArrow(partition_frames(plan), _cell_schema())
    picked = frame.select(*dict.fromkeys([plan.spec.id_column, *used]))
    empty = _frame(picked.limit(0).toArrow()).lazy()
    arrow_schema, spark_schema = _rows_schema(typed_frame(empty, plan.spec, used, plan.spec.id_column).collect())
    rows = picked.mapInArrow(partition_typed_rows(plan, arrow_schema), spark_schema)
    return by_person(rows, spark_schema.names).mapInArrow(
        partition_persons(plan, secret, expected_polars(), _MARK), _cell_schema()
    )


def _java_classes(exc: BaseException, depth: int = 16) -> list[str]:
    """The Java classes of an exception and its causes (names only, never a message), outermost first."""
    names: list[str] = []
    java = getattr(exc, "java_exception", None)
    with contextlib.suppress(Exception):
        while java is not None and len(names) < depth:
            names.append(str(java.getClass().getName()))
            java = java.getCause()
    return names


def _class_name(exc: BaseException) -> str:
    """The failing class: for a Java exception, the Java class's name (never its message)."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        with contextlib.suppress(Exception):
            return str(java.getClass().getName())
    return type(exc).__name__
