"""``dpcli randomize``: a local-DP copy of chosen category/bool columns (k-ary randomized response), and the check
that a frequency release's input is such a copy.

    randomize spec -> paths (exit 2/3, nothing spent) -> the input's true keys (one read)
        -> ledger spend (durable, under lock) -> randomized response -> stored file + ``released`` record -> output

Like a release: it takes a release id (the same dataset, spec bytes and id write the stored file again and spend
nothing), it is paid before any randomized cell is drawn, and a failure after the spend is SpentThenFailed naming the
paid record: the paid-run protocol (dpcli.run.paid) runs that sequence, this module gives it the randomized file
(``_RandomizeWork``). The ``released`` record holds the output file's sha256 (a hash of published data, so keeping it
leaks nothing) and each column's ε and keys, which is how a ``{kind: frequency, randomized: ...}`` statistic knows
that its input is a randomize output of this ledger (``find_randomized``).
"""

from __future__ import annotations

import csv
import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl

from dpcli.core.accounting import Budget, format_exact
from dpcli.core.files import atomic_write
from dpcli.engine import input_format as format_of
from dpcli.engine.cells import key_index
from dpcli.engine.inputs import (
    DEFAULT_INPUT_TIMEOUT,
    DEFAULT_MAX_INPUT_BYTES,
    InputFile,
    check_input_timeout,
    input_path,
)
from dpcli.engine.lines import RESTORE, SENTINELS, reading
from dpcli.engine.polars_engine import LineReader, line_reader, read_lines
from dpcli.engine.source import CsvSource
from dpcli.errors import InputError, InternalError, OutputError, UsageError
from dpcli.ledger import (
    DEFAULT_LOCK_TIMEOUT,
    BudgetStatus,
    Delivery,
    Ledger,
    Purchase,
    RandomizedColumn,
    Record,
    open_ledger,
    resolve_ledger,
)
from dpcli.mechanisms.randomized_response import randomize_keys
from dpcli.publish.paths import check_release_paths
from dpcli.publish.paths import output_path as checked_output
from dpcli.run.paid import Paid, PaidRun, Unpaid, leaves_nothing, run_release_id
from dpcli.specs.meaning import randomize_meaning
from dpcli.specs.model import Column
from dpcli.specs.randomize import RANDOMIZE_FORMATS, RandomizeSpec, load_randomize_spec

__all__ = ["RANDOMIZE_COMMAND", "Randomized", "find_randomized", "keys_sha256", "randomize"]

RANDOMIZE_COMMAND = "randomize"  # the spend record's ``command``: what a frequency release looks for


@dataclass
class Randomized:
    """What a finished randomize run did."""

    spec: RandomizeSpec
    spend: Record
    status: BudgetStatus | None
    output: Path | None  # None: standard output
    output_sha256: str
    ledger: str
    release_id: str
    rows: int
    reused: bool = False

    @property
    def epsilon_spent(self) -> Fraction:
        return Fraction(0) if self.reused else self.spec.epsilon


def keys_sha256(keys: tuple[str, ...]) -> str:
    """A column's declared keys, in order, as one hash (the ledger names them without listing 10^5 keys)."""
    return hashlib.sha256(json.dumps(list(keys), ensure_ascii=False).encode("utf-8")).hexdigest()


def randomize(
    spec: RandomizeSpec | str | Path,
    *,
    input: str | Path | None = None,  # noqa: A002 - the contract's name
    output: str | Path | None = None,
    ledger: str | Path | Ledger | None = None,
    release_id: str | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    input_timeout: float | None = DEFAULT_INPUT_TIMEOUT,
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
    progress: Callable[[str], None] | None = None,
) -> Randomized:
    """Write a randomized copy of the spec's chosen columns: one row per input row, in input order, the chosen
    columns only. ``input``/``output`` may be ``"-"``; defaults come from the spec. See ``dpcli.run.release.release``
    for
    ``release_id``, ``lock_timeout``, ``input_timeout`` and ``max_input_bytes``, which mean the same here."""
    say = progress or (lambda _msg: None)
    if not isinstance(spec, RandomizeSpec):
        spec = load_randomize_spec(spec)
    release_id, named = run_release_id(release_id)
    input_timeout = check_input_timeout(input_timeout)
    source = input_path(input, spec.input)
    fmt = format_of(source, None, spec.input_format)
    if fmt not in RANDOMIZE_FORMATS:
        raise UsageError(f"randomize reads {', '.join(RANDOMIZE_FORMATS)}, not {fmt}")
    output_path = checked_output(output if output is not None else spec.output)
    location: str | Path | None = None
    if isinstance(ledger, Ledger):
        book = ledger
    else:
        location = resolve_ledger(ledger, spec.ledger)
        book = open_ledger(location, lock_timeout=lock_timeout)
    spec_file = Path(spec.source) if spec.source != "<string>" else None
    check_release_paths(spec_file, source, output_path, book, location)
    say("paths checked")

    records = book.records()
    say("ledger chain verified")
    run = PaidRun(
        book, spec.dataset, Budget(spec.epsilon),
        Purchase.of(spec.dataset, spec.sha256, release_id, spec.unit, spec.neighbours,
                    tuple(c.name for c in spec.columns), RANDOMIZE_COMMAND, meaning=randomize_meaning(spec),
                    name=spec.name, period=release_id if named else None),
        named, lock_timeout, say,
    )
    work = _RandomizeWork(spec, book, release_id, output_path, say)
    if run.paid_earlier(records):
        say(f"release id '{release_id}' of this spec is paid for: writing its stored file, reading no input")
        return run.reissue(work)  # a concurrent run that paid is waited for, as a release waits
    run.check_budget(records)
    say("budget available")

    with InputFile(source, input_timeout, max_input_bytes) as src:
        work.truth = read_keys(spec, src.path, fmt, max_input_bytes)
    work.rows = len(work.truth[0]) if work.truth else 0
    say("input read")
    return run.pay(work)


@dataclass
class _RandomizeWork:
    """A randomize run's part of the paid run (dpcli.run.paid): the randomized file, drawn once from the true keys and
    stored whole (it is the output); written from the store on a re-run under the release id."""

    spec: RandomizeSpec
    book: Ledger
    release_id: str
    output_path: Path | None
    say: Callable[[str], None]
    truth: list[np.ndarray] | None = None
    rows: int = 0
    data: bytes | None = None
    waiting_for: str = "its file"
    stored_note: str = "randomized file stored"

    def draw(self) -> bytes:
        truth, self.truth = self.truth, None
        if truth is None:
            raise InternalError("a randomized file is drawn once, from the input's keys")
        self.data = _randomized_csv(self.spec, truth)
        return self.data

    def delivery(self, release_id: str, stored_sha256: str) -> Delivery:
        spec = self.spec
        return Delivery(
            release_id, stored_sha256, output_sha256=stored_sha256,
            randomized=tuple(RandomizedColumn(c.name, spec.column_epsilon, keys_sha256(c.keys)) for c in spec.columns),
        )

    def publish(self, spend: Record, paid: Paid) -> Randomized:
        data = self.data
        if data is None:
            raise InternalError("a randomized file is written after it is drawn")
        _write(data, self.output_path, paid)
        self.say("output written")
        status = self.book.status(self.spec.dataset, period=spend.get("period"))
        return Randomized(self.spec, spend, status, self.output_path, hashlib.sha256(data).hexdigest(),
                          self.book.name, self.release_id, self.rows)

    def republish(self, spend: Record, stored: bytes) -> Randomized:
        """The stored file written again: no new randomness, no spend."""
        _write(stored, self.output_path, Unpaid.reissue(spend))
        rows = max(stored.count(b"\n") - 1, 0)
        status = self.book.status(self.spec.dataset, period=spend.get("period"))
        return Randomized(self.spec, spend, status, self.output_path,
                          hashlib.sha256(stored).hexdigest(), self.book.name, self.release_id, rows, reused=True)

    def unstored(self, released: bool) -> str:
        return "its randomized file was never stored"

    def drop(self) -> None:
        self.truth = None


def read_keys(
    spec: RandomizeSpec, path: Path, fmt: str = "csv", max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES
) -> list[np.ndarray]:
    """Each chosen column's declared-key index per record (−1: missing, or undeclared with no rule for it), in input
    order. Records are read by the release's line rules (docs/spec.md, "How lines are read": one physical line is one
    record whatever its bytes, quotes honoured within a line, ragged lines, the header's line ends, encodings and
    compression through ``CsvSource``), so a changed record never changes how another is read or how many records
    there are. A cell is read by the engine's key rules (dpcli.engine.cells.key_index: exact declared keys,
    ``other:``, ``impute:``, bool spellings). Errors name the file and declared columns only.

    The engine's aggregating path adds up per-cell totals and reads quoted lines apart from the others (order is
    lost), so each chunk is put together here in order: the engine's quote-blind polars read, with the quoted lines
    (found by a byte search) split again in place. Splitting every line in Python instead made the whole call 3.4x
    slower (bench/bench_randomize.py at 299,000 rows: 7.9 s against 2.3 s, same loaded machine)."""
    with reading, CsvSource(path, spec, fmt, max_input_bytes=max_input_bytes) as source:
        layout = source.layout
        names = list(layout.names)
        positions = _positions(spec, path, names)
        # the engine's quote-blind line reader (one row per line, in order)
        by_name = {c.name: c for c in spec.columns}
        reader = line_reader(by_name, names, list(by_name), layout.eol, layout.delimiter)
        parts = [_chunk_texts(chunk, reader, layout.eol, positions) for chunk in source.chunks()]
    frame = pl.concat(parts) if parts else pl.DataFrame({c.name: pl.Series([], dtype=pl.String) for c in spec.columns})
    return [frame.select(key_index(c, pl.col(c.name)).fill_null(-1)).to_series().to_numpy() for c in spec.columns]


def _chunk_texts(chunk: bytes, reader: LineReader, eol: bytes, positions: list[int]) -> pl.DataFrame:
    """The chosen cells' texts of a chunk of whole lines, one row per line in order: polars reads every line with
    quoting off; a line holding a quote is split again by the csv module (as the engine reads it) in its place."""
    frame = read_lines(chunk, reader, False, reader.select).collect()
    lines = chunk.split(eol)
    if lines[-1] in (b"", b"\n"):  # the chunk's last line end (with a CR file's final LF, part of it)
        lines.pop()
    if frame.height == len(lines) + 1 and eol == b"\r" and chunk.endswith(b"\r\n"):
        frame = frame.head(len(lines))  # polars made the final LF of a CR file a line of its own
    if frame.height != len(lines):
        raise InternalError("the CSV reader read a line two ways")
    quoted = [i for i, line in enumerate(lines) if b'"' in line]
    if not quoted:
        return frame
    texts: list[list[str | None]] = [[] for _ in positions]
    for i in quoted:
        _split_record(lines[i].decode("utf-8", "replace"), eol.decode(), reader.delimiter, positions, texts)
    rows = pl.Series("row", quoted, dtype=pl.UInt32)
    fixed = pl.DataFrame({name: pl.Series(t, dtype=pl.String) for name, t in zip(frame.columns, texts, strict=True)})
    return frame.with_row_index("row").update(fixed.with_columns(rows), on="row", include_nulls=True).drop("row")


def _split_record(line: str, eol: str, sep: str, positions: list[int], texts: list[list[str | None]]) -> None:
    if eol == "\r" and line.startswith("\n"):  # CRLF in a CR file: the LF belongs to the line end before it
        line = line[1:]
    if '"' in line:  # the csv module, as the engine reads a quoted line (CR and LF as data: dpcli.engine.lines)
        fields = [f.translate(RESTORE) for f in next(csv.reader([line.translate(SENTINELS)], strict=False,
                                                                 delimiter=sep), [])]
    else:
        fields = line.split(sep)
    for out, i in zip(texts, positions, strict=True):
        value = fields[i] if i < len(fields) else None
        if value is not None and eol == "\n" and value.endswith("\r"):  # one CR at a field's end is dropped
            value = value[:-1]
        out.append(value)


def _positions(spec: RandomizeSpec, path: Path, fields: list[str]) -> list[int]:
    """Where each chosen column is among the input's fields; InputError (exit 3) when one is not there."""
    missing = [c.name for c in spec.columns if c.name not in fields]
    if missing:
        raise InputError(f"input {_shown(spec, path)} lacks the chosen column(s): {', '.join(missing)}")
    return [fields.index(c.name) for c in spec.columns]


def check_randomize(spec_path: str | Path, input: str | None = None) -> str:  # noqa: A002 - the CLI's name
    """``dpcli check`` of a randomize spec: valid, and its input (``input``, else the spec's; not standard input)
    has every chosen column. Returns the one-line verdict."""
    spec = load_randomize_spec(spec_path)
    source = input_path(input, spec.input)
    checked = ""
    if source is not None:
        with CsvSource(source, spec, format_of(source, None, spec.input_format)) as csv_source:
            _positions(spec, source, list(csv_source.layout.names))
        checked = f"; {source} has every chosen column"
    return (f"dpcli: {spec_path} is valid: randomize {len(spec.columns)} column(s) at ε={format_exact(spec.epsilon)} "
            f"per record{checked}")


def _shown(spec: RandomizeSpec, path: Path) -> str:
    return str(spec.input) if spec.input is not None and str(spec.input) != "-" else str(path)


def _randomized_csv(spec: RandomizeSpec, truth: list[np.ndarray]) -> bytes:
    """The published file: the chosen columns' randomized keys as CSV text (a header of their names)."""
    share = spec.column_epsilon
    columns = {}
    for column, true_index in zip(spec.columns, truth, strict=True):
        keys = pl.Series(column.name, column.keys, dtype=pl.String)
        columns[column.name] = keys.gather(randomize_keys(true_index, len(column.keys), share))
    return pl.DataFrame(columns).write_csv().encode("utf-8")


def _write(data: bytes, output_path: Path | None, paid: Paid | Unpaid) -> None:
    try:
        if output_path is None:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            with leaves_nothing(output_path):  # a failure after the rename: the error says no file was written
                atomic_write(output_path, lambda fh: fh.write(data))
    except OSError as exc:
        where = "standard output" if output_path is None else str(output_path)
        raise OutputError(f"could not write the randomized file to {where}: {exc.strerror or type(exc).__name__}; "
                          f"{paid.text()}", hint=paid.hint()) from None


def find_randomized(
    records: list[Record], ledger_name: str, input_sha256: str, dataset: str, column: Column, epsilon: Fraction
) -> Record:
    """The ``released`` record of the randomize run whose output is the input (by its sha256), after checking that
    it randomized ``column`` with these keys at this ε, for this dataset. Raises InputError (exit 3) otherwise: a
    frequency estimate is post-processing of that output only, so nothing else may pass for it."""
    spends = {r.get("release_key"): r for r in records if r.type == "spend" and r.get("command") == RANDOMIZE_COMMAND}
    for rec in records:
        if rec.type != "released" or rec.get("output_sha256") != input_sha256 or rec.get("release_key") not in spends:
            continue
        spend = spends[rec.get("release_key")]
        if spend.get("dataset") != dataset:
            raise InputError(f"the input is the randomize output of dataset '{spend.get('dataset')}' (ledger "
                             f"{ledger_name} record {rec.seq}), not of '{dataset}'")
        entries = rec.get("randomized")
        entry = next((e for e in entries if isinstance(e, dict) and e.get("column") == column.name), None) \
            if isinstance(entries, list) else None
        if entry is None:
            raise InputError(f"column '{column.name}' is not among the columns randomized by ledger {ledger_name} "
                             f"record {rec.seq}")
        if entry.get("epsilon") != format_exact(epsilon):
            raise InputError(f"column '{column.name}' was randomized at ε={entry.get('epsilon')} (ledger "
                             f"{ledger_name} record {rec.seq}), not at the stated ε={format_exact(epsilon)}")
        if entry.get("keys_sha256") != keys_sha256(column.keys):
            raise InputError(f"column '{column.name}' was randomized over other declared keys (ledger {ledger_name} "
                             f"record {rec.seq}): declare the keys of the randomize spec, in its order")
        return rec
    # never the input's hash in the message: the input may be the raw data, and its hash a fingerprint of it
    raise InputError(
        f"the input is not a randomize output recorded in ledger {ledger_name}: a frequency statistic reads only a "
        "file `dpcli randomize` wrote and recorded, unchanged"
    )
