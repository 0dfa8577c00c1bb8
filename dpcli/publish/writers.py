"""The table's writers: CSV and JSON (the bytes csv.writer and dpcli 0.2's JSON writer produced, formatted a chunk of
rows at a time with polars), which format a path asks for, and the write itself: atomic to a file, or to standard
output (a reader that stops reading ends it quietly); either way hashed as written.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from dpcli.core.files import atomic_write
from dpcli.errors import UsageError
from dpcli.publish.columns import CHUNK_ROWS, LazyColumn, csv_field
from dpcli.publish.table import Table
from dpcli.specs.v1 import BIN_COLUMNS, FIXED_COLUMNS_AFTER, QUANTILE_COLUMN

# Columns the JSON writer prints as bare text (numbers), by name, as dpcli 0.2 did.
NUMERIC_COLUMNS = frozenset({*FIXED_COLUMNS_AFTER, "rho", *BIN_COLUMNS})


class HashingWriter(io.TextIOBase):
    """Text sink that encodes to UTF-8, hashes and writes to a binary file in one pass.

    Small text is gathered into ~1 MiB blocks first; chunks of a table arrive as bytes (``write_bytes``)."""

    BLOCK = 1 << 20

    def __init__(self, raw: IO[bytes], tolerate_closed_reader: bool = False):
        self.raw: IO[bytes] | None = raw
        self.sha = hashlib.sha256()
        self.tolerate_closed_reader = tolerate_closed_reader
        self.reader_closed = False
        self._parts: list[str] = []
        self._size = 0

    def write(self, s: str) -> int:
        self._parts.append(s)
        self._size += len(s)
        if self._size >= self.BLOCK:
            self.flush()
        return len(s)

    def flush(self) -> None:
        if not self._parts:
            return
        data = "".join(self._parts).encode("utf-8")
        self._parts, self._size = [], 0
        self._emit(data)

    def write_bytes(self, data: bytes | memoryview) -> None:
        self.flush()
        self._emit(data)

    def _emit(self, data: bytes | memoryview) -> None:
        self.sha.update(data)
        if self.raw is not None:
            try:
                self.raw.write(data)
            except BrokenPipeError:
                # `dpcli release ... | head -1`: the reader stopped reading. The release is already paid for;
                # keep hashing (the ledger records the whole table's hash) and finish quietly.
                if not self.tolerate_closed_reader:
                    raise
                self.raw, self.reader_closed = None, True


def _chunks(n: int) -> Iterator[tuple[int, int]]:
    for i in range(0, n, CHUNK_ROWS):
        yield i, min(n, i + CHUNK_ROWS)


def write_csv(table: Table, sink: HashingWriter) -> None:
    """The table as CSV: byte for byte what csv.writer writes (minimal quoting, '\\n' line ends), a chunk at a time."""
    import polars as pl  # when a table is written: `dpcli budget show` never pays for it

    head = io.StringIO()
    csv.writer(head, lineterminator="\n").writerow(table.columns)
    sink.write(head.getvalue())
    for block in table.blocks:
        cells = [table.cell(block, name) for name in table.columns]
        for i, j in _chunks(len(block)):
            frame = {}
            for n, cell in enumerate(cells):
                if isinstance(cell, LazyColumn):
                    frame[f"c{n}"] = cell.csv(i, j)
                else:  # one text for every row, or a column that does not apply (empty)
                    text = "" if cell is None else csv_field(cell)
                    frame[f"c{n}"] = pl.repeat(text, j - i, dtype=pl.String, eager=True)
            buf = io.BytesIO()
            pl.DataFrame(frame).write_csv(buf, include_header=False, quote_style="never", line_terminator="\n")
            sink.write_bytes(buf.getvalue())


def write_json(table: Table, sink: HashingWriter) -> None:
    """A JSON list of objects, as dpcli 0.2 wrote it row by row: numbers as their exact decimal text (valid JSON
    numbers; quantile levels too, since issue 25), a column that does not apply as null, one object per line. Built
    by polars a chunk at a time."""
    import polars as pl  # when a table is written: `dpcli budget show` never pays for it

    cols = table.columns
    keys = [json.dumps(c) for c in cols]
    sink.write("[")
    first = True
    for block in table.blocks:
        cells = [table.cell(block, name) for name in cols]
        for i, j in _chunks(len(block)):
            pieces: list[pl.Expr] = []
            literal = "{"
            for n, (key, name, cell) in enumerate(zip(keys, cols, cells, strict=True)):
                literal += ("" if n == 0 else ", ") + key + ": "
                numeric = (name in NUMERIC_COLUMNS and name not in table.dimensions) or (
                    name == QUANTILE_COLUMN and table.levels_as_numbers  # a level, exact decimal text (issue 25)
                )
                if cell is None:
                    literal += "null"
                elif not isinstance(cell, LazyColumn):
                    literal += cell if numeric else json.dumps(cell, ensure_ascii=False)
                else:
                    series = cell.number_json(i, j) if numeric else cell.json(i, j)
                    pieces += [pl.lit(literal), pl.lit(series.cast(pl.String))]
                    literal = ""
            pieces.append(pl.lit(literal + "}"))
            # one String column written raw by polars straight to bytes (no Python str of the chunk), each row
            # followed by the separator; the last one's is dropped
            buf = io.BytesIO()
            pl.select(pl.concat_str(pieces)).write_csv(
                buf, include_header=False, quote_style="never", line_terminator=",\n  "
            )
            sink.write_bytes(b"\n  " if first else b",\n  ")
            sink.write_bytes(buf.getbuffer()[: -len(b",\n  ")])
            first = False
    sink.write("\n]\n" if not first else "]\n")


# Extensions of table formats dpcli does not write: such an output is refused (exit 2) rather than filled with CSV
# under a name that promises something else. Any other extension (.txt, .out, a date) is a CSV.
FOREIGN_FORMATS = frozenset({
    ".parquet", ".pq", ".xlsx", ".xls", ".xlsm", ".ods", ".feather", ".arrow", ".ipc", ".avro", ".orc", ".tsv",
    ".tab", ".ndjson", ".jsonl", ".h5", ".hdf5", ".sqlite", ".db", ".pickle", ".pkl", ".gz", ".bz2", ".xz", ".zst",
    ".zip",
})


def output_format(path: Path | None, explicit: str | None) -> str:
    """csv or json: --format, else json for a .json path, else csv (standard output, no extension, .csv, others).

    A path whose extension names another table format (or a compression) is a UsageError, --format or not: checked
    before anything is read or spent."""

    suffix = "" if path is None or str(path) == "-" else path.suffix.lower()
    if suffix in FOREIGN_FORMATS:
        wanted = f"--format {explicit}" if explicit else "CSV or JSON"
        raise UsageError(
            f"output {path}: dpcli does not write {suffix[1:]} files; name a .csv or .json file ({wanted}), or - "
            "for standard output"
        )
    if explicit:
        return explicit
    return "json" if suffix == ".json" else "csv"


def write_table(table: Table, path: Path | None, fmt: str) -> str:
    """Write atomically (temp file in the target directory, fsync, rename) or to stdout. Returns the sha256."""
    write = write_json if fmt == "json" else write_csv
    if path is None or str(path) == "-":
        sink = HashingWriter(sys.stdout.buffer, tolerate_closed_reader=True)
        write(table, sink)
        sink.flush()
        if sink.raw is not None:
            try:
                sys.stdout.buffer.flush()
            except BrokenPipeError:
                sink.reader_closed = True
        if sink.reader_closed:
            _detach_stdout()
        return sink.sha.hexdigest()
    holder: dict[str, str] = {}

    def body(fh: IO[bytes]) -> None:
        sink = HashingWriter(fh)
        write(table, sink)
        sink.flush()
        holder["sha"] = sink.sha.hexdigest()

    atomic_write(path, body)
    return holder["sha"]


def _detach_stdout() -> None:
    """Point stdout at /dev/null so later flushes (and the interpreter's exit) do not raise on a closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
