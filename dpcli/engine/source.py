"""A CSV input as UTF-8 text in chunks of whole lines: from a regular file, a .gz or .zst file, in any declared
encoding, with its header layout decided first.

The engine never holds the file: it asks ``CsvSource.chunks()`` for about CHUNK_BYTES of whole lines at a time and
adds up what each chunk holds, so memory is bounded by a chunk (or the longest line, if longer), never by the
input. Where the bytes come from:
- a plain UTF-8 file is mapped one window at a time (``mmap``, closed after each chunk: a mapping of the whole file
  would count every page it touched in the process's resident memory, 3 GB for a 3 GB file, measured);
- a .gz or .zst file, or a file in another encoding, is read through a decompressor and/or a decoder to UTF-8
  (bytes not valid in the declared encoding become U+FFFD, so that cell is missing). A single-byte encoding is
  decoded as a stream; UTF-16 is cut into records on its raw bytes first and each record decoded on its own
  (``utf16_lines``), so that no record's bytes can shift how a later one is decoded.
``on_bytes(read, total)`` hears how many bytes of the file (compressed bytes, for a compressed file) have been read.

Two public limits bound what one record can cost (docs/spec.md, "Limits"): a compressed input's decompressed size
is capped (``max_input_bytes``: past it the run ends with exit 3 before anything is spent), and a record longer
than the spec's ``csv.max_record_bytes`` is read as an empty record (all its cells missing) without ever being held
whole.

Nothing here looks at a data line's content to decide anything: the header (or the spec, for a file without one)
decides the layout, and chunks are cut at the line end that decided.
"""

from __future__ import annotations

import codecs
import gzip
import mmap
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol, cast

import numpy as np

from dpcli.engine.csv_header import MAX_HEADER_BYTES, HeaderLayout, head_layout, read_head
from dpcli.engine.inputs import DEFAULT_MAX_INPUT_BYTES
from dpcli.errors import InputError, InternalError
from dpcli.specs.model import DEFAULT_MAX_RECORD_BYTES, CsvDialect

# measured on 10M rows, two chunks in flight: 16 and 32 MB take the same time (1.20 s), 16 MB peaks lower (272 MB)
CHUNK_BYTES = 16 << 20
_HEAD_BYTES = MAX_HEADER_BYTES + 8
_PROGRESS_STEP = 8 << 20  # on_bytes is called about this often (and once at the end)
UTF16 = ("utf-16", "utf-16-le", "utf-16-be")
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")

# The first bytes of each format: a CSV input that starts like this is almost surely not text (refused, exit 3,
# rather than read as lines of garbage whose cells would all be missing)
MAGIC = {
    b"\x1f\x8b": "gzip-compressed (csv.gz)",
    b"\x28\xb5\x2f\xfd": "zstd-compressed (csv.zst)",
    b"PAR1": "a Parquet file (parquet)",
    b"ARROW1": "an Arrow IPC file (arrow)",
}
EXTENSIONS = {
    ".csv.gz": "csv.gz", ".gz": "csv.gz", ".csv.zst": "csv.zst", ".zst": "csv.zst",
    ".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow", ".ipc": "arrow", ".feather": "arrow",
}

# An input named *.tsv or *.tab (before any .gz or .zst) is tab-separated unless the spec's csv.delimiter says otherwise
TAB_NAMES = (".tsv", ".tab")

OnBytes = Callable[[int, int | None], None]


def input_format(name: str | Path | None, explicit: str | None = None, declared: str | None = None) -> str:
    """The input's format: ``explicit`` (the CLI's --input-format), else the spec's ``input_format:``, else from the
    input's name (csv for standard input or an unknown extension)."""
    if explicit is not None:
        return explicit
    if declared is not None:
        return declared
    if name is None:
        return "csv"
    lower = str(name).lower()
    return next((fmt for ext, fmt in EXTENSIONS.items() if lower.endswith(ext)), "csv")


def input_delimiter(name: str | Path | None, declared: str | None = None) -> str:
    """The input's field separator: the spec's ``csv.delimiter`` (``declared``), else a tab for an input named
    ``*.tsv`` or ``*.tab`` (``.tsv.gz``, ``.tab.zst``, ...), else a comma (standard input included)."""
    if declared is not None:
        return declared
    if name is None:
        return ","
    lower = str(name).lower().rstrip("/")
    for compressed in (".gz", ".zst", ".bz2"):
        lower = lower.removesuffix(compressed)
    return "\t" if lower.endswith(TAB_NAMES) else ","


class _Reader(Protocol):
    def read(self, n: int = ..., /) -> bytes: ...


@dataclass(frozen=True)
class CsvLayout:
    """What a chunk's reader needs to know of the file: its fields, line end and separator (picklable: a Spark
    executor gets one)."""

    names: tuple[str, ...]
    eol: bytes  # b"\n" or b"\r"
    delimiter: str = ","
    header: bool = True  # a header line (ended by eol) comes before the data


class _CountingFile:
    """The raw file under a decompressor: counts the (compressed) bytes read, for progress."""

    def __init__(self, fh: IO[bytes], total: int, on_bytes: OnBytes | None):
        self.fh = fh
        self.total = total
        self.read_bytes = 0
        self.on_bytes = on_bytes
        self.reported = 0

    def read(self, n: int = -1, /) -> bytes:
        data = self.fh.read(n)
        self.read_bytes += len(data)
        if self.on_bytes is not None and (self.read_bytes - self.reported >= _PROGRESS_STEP or not data):
            self.reported = self.read_bytes
            self.on_bytes(self.read_bytes, self.total)
        return data

    def readable(self) -> bool:
        return True


class _Transcoded:
    """A byte stream in a single-byte ``encoding``, read as UTF-8 (bytes it does not define become U+FFFD)."""

    def __init__(self, raw: _Reader, encoding: str):
        self.raw = raw
        self.decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
        self.done = False

    def read(self, n: int = -1, /) -> bytes:
        while not self.done:
            block = self.raw.read(n)
            text = self.decoder.decode(block, final=not block)
            self.done = not block
            if text:
                return text.encode("utf-8", "surrogatepass")
        return b""


class _Capped:
    """A decompressed stream, ended with exit 3 once it passes ``max_bytes`` (its decompressed size is public, as a
    file's size is: docs/threat-model.md)."""

    def __init__(self, raw: _Reader, max_bytes: int, path: Path):
        self.raw = raw
        self.max_bytes = max_bytes
        self.path = path
        self.read_bytes = 0

    def read(self, n: int = -1, /) -> bytes:
        data = self.raw.read(n)
        self.read_bytes += len(data)
        if self.read_bytes > self.max_bytes:
            raise InputError(
                f"input {self.path} decompresses to more than the input cap ({self.max_bytes} bytes): "
                "nothing was spent",
                hint="raise --max-input-bytes",
            )
        return data


def utf16_codec(encoding: str, head: bytes) -> str:
    """The byte order a UTF-16 file is read in: the declared one, or for ``utf-16`` its BOM's (little-endian
    without a BOM). Decided by the file's first two bytes, never by a data line."""
    if encoding != "utf-16":
        return encoding
    return "utf-16-be" if head.startswith(b"\xfe\xff") else "utf-16-le"


def utf16_lines(data: bytes, codec: str, eol: bytes) -> bytes:
    """Records of UTF-16 text as UTF-8 lines ended by ``eol``.

    A UTF-16 record ends at the first two bytes that are the line end's code unit (``0A 00`` for LF in
    little-endian), **found at any byte offset**, and its bytes are decoded on their own from its first byte (an
    odd last byte, or a lone surrogate, becomes U+FFFD). So a record with an odd number of bytes cannot shift the
    code-unit alignment of the records after it: each starts where the one before ended. Pairs of bytes that look
    like a line end across two code units split a record of an honest file there (docs/spec.md, "CSV dialects"
    names which characters do)."""
    term = eol.decode("ascii").encode(codec)
    text = eol.decode("ascii")
    # the two bytes at every odd offset, as one number: a line end there puts a record off the even offsets
    pairs = max(0, (len(data) - 1) // 2)
    at_odd = np.frombuffer(data, dtype="<u2", offset=1, count=pairs) if pairs else np.zeros(0, dtype="<u2")
    if not np.any(at_odd == int.from_bytes(term, "little")):
        # every line end lies at an even offset, so every record but the last has whole code units and starts at
        # an even offset: decoded in one go, the records read as each on its own (a lone surrogate next to a line end
        # is U+FFFD either way, the line end stays a line end, and an odd last byte is U+FFFD at the very end)
        return data.decode(codec, "replace").encode("utf-8")
    view = np.frombuffer(data, dtype=np.uint8)
    # the line ends: every occurrence of the two bytes (they cannot overlap: 0A 00 and 00 0A do not self-overlap)
    ends = np.flatnonzero((view[:-1] == term[0]) & (view[1:] == term[1]))
    starts = np.concatenate(([0], ends + 2))
    stops = np.append(ends, len(data))
    odd = np.flatnonzero((stops - starts) & 1).tolist()
    out: list[str] = []
    run = 0  # the first record of the run of whole-code-unit records not yet decoded
    for i in odd:
        if i > run:
            out.append(data[starts[run] : starts[i]].decode(codec, "replace"))
        out.append(data[starts[i] : stops[i]].decode(codec, "replace"))
        if i < len(stops) - 1:
            out.append(text)
        run = i + 1
    if run < len(stops):
        out.append(data[starts[run] :].decode(codec, "replace"))
    return "".join(out).encode("utf-8")


def long_records(buf: bytes | bytearray | mmap.mmap, term: bytes, max_record: int, start: int = 0,
                 end: int | None = None) -> list[tuple[int, int]]:
    """The records of ``buf[start:end]`` (each ended by ``term``, the last maybe not) longer than ``max_record``
    bytes, as (first byte, line end) spans. A few memchr-speed searches per ``max_record / 2`` bytes: a longer record
    holds a whole such block without a line end, and only then is it measured."""
    k = len(term)
    n = len(buf) if end is None else end
    step = max(max_record // 2, 1)
    spans: list[tuple[int, int]] = []
    x = start
    while x < n:
        if buf.find(term, x, min(x + step + k - 1, n)) >= 0:
            x += step
            continue
        a = buf.rfind(term, start, x + k - 1)
        a = start if a < 0 else a + k
        b = buf.find(term, x, n)
        b = n if b < 0 else b
        if b - a > max_record:
            spans.append((a, b))
        x = max(b + k, x + step)
    return spans


def drop_long_records(data: bytes, term: bytes, max_record: int) -> bytes:
    """``data`` (whole records) with each record longer than ``max_record`` bytes made empty (its line end kept; a
    last record without one becomes an empty record with one)."""
    spans = long_records(data, term, max_record)
    if not spans:
        return data
    pieces = []
    pos = 0
    for a, b in spans:
        pieces.append(data[pos:a])
        if b == len(data):
            pieces.append(term)
        pos = b
    pieces.append(data[pos:])
    return b"".join(pieces)


class CsvSpec(Protocol):
    """What a CSV input's reader needs of a spec: a release's ``Spec`` and a ``RandomizeSpec`` both have it."""

    @property
    def csv(self) -> CsvDialect: ...

    @property
    def quoted_line_breaks(self) -> bool: ...

    @property
    def field_names(self) -> tuple[str, ...] | None: ...


class CsvSource:
    """``with CsvSource(path, spec, fmt) as src: src.layout; for chunk in src.chunks(): ...``"""

    def __init__(
        self,
        path: Path,
        spec: CsvSpec,
        fmt: str = "csv",
        on_bytes: OnBytes | None = None,
        max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
    ):
        self.path = Path(path)
        self.spec = spec
        self.fmt = fmt
        self.on_bytes = on_bytes
        self.max_input_bytes = max_input_bytes
        self.max_record_bytes = spec.csv.max_record_bytes
        self.delimiter = input_delimiter(self.path, spec.csv.delimiter)
        self._fh: IO[bytes] | None = None
        self._stream: _Reader | None = None
        self._head = b""
        self._utf16: str | None = None  # a UTF-16 file's codec (its byte order); its lines are cut on raw bytes
        self.total = 0

    @property
    def plain(self) -> bool:
        """A UTF-8 file read in place (mapped), not through a decompressor or decoder."""
        return self.fmt == "csv" and self.spec.csv.encoding == "utf-8"

    def __enter__(self) -> CsvSource:
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def _open(self) -> None:
        first = read_head(self.path)  # exit 3 for a missing, unreadable, special or directory input
        self.total = os.stat(self.path).st_size
        if self.on_bytes is not None:
            self.on_bytes(0, self.total)  # reading starts (a progress display appears before the first chunk)
        if self.fmt == "csv":
            for magic, what in MAGIC.items():
                if first.startswith(magic):
                    raise InputError(
                        f"input {self.path} looks {what}, not CSV text",
                        hint="name the format with --input-format (or the spec's input_format:)",
                    )
        try:
            self._fh = open(self.path, "rb")  # noqa: SIM115 - closed by close(), after the chunks are read
        except OSError as exc:
            raise InputError(f"cannot read input {self.path}: {exc.strerror or 'unreadable'}") from None
        dialect = self.spec.csv
        if self.plain:
            self._head = first
        else:
            counted = cast(IO[bytes], _CountingFile(self._fh, self.total, self.on_bytes))  # read() is all they call
            stream: _Reader = counted
            if self.fmt == "csv.gz":
                stream = _Capped(gzip.GzipFile(fileobj=counted, mode="rb"), self.max_input_bytes, self.path)
            elif self.fmt == "csv.zst":
                import zstandard  # the .zst reader: imported only for .zst inputs

                decompressed = zstandard.ZstdDecompressor().stream_reader(counted, read_across_frames=True)
                stream = _Capped(decompressed, self.max_input_bytes, self.path)
            if dialect.encoding in UTF16:
                self._stream = stream
                self._head = self._read_decoded(2 * _HEAD_BYTES)
                self._utf16 = codec = utf16_codec(dialect.encoding, self._head)
                self.header = self._utf16_header(codec)
                return
            if dialect.encoding != "utf-8":
                stream = _Transcoded(stream, dialect.encoding)
            self._stream = stream
            self._head = self._read_decoded(_HEAD_BYTES)
        self.header = head_layout(
            self.path,
            self._head,
            quoted_line_breaks=self.spec.quoted_line_breaks,
            delimiter=self.delimiter,
            names=self.spec.field_names,
            line_end=dialect.line_end,
        )

    def _utf16_header(self, codec: str) -> HeaderLayout:
        """The layout of a UTF-16 file, from its raw first bytes: the header is the first record (it ends at the
        first LF or CR code unit found at any offset, as every record does), decoded on its own; ``data_start`` is a
        raw offset."""
        head = self._head
        dialect = self.spec.csv
        bom = 2 if head.startswith(_UTF16_BOMS) else 0
        if self.spec.field_names is not None:
            layout = head_layout(self.path, b"", names=self.spec.field_names, line_end=dialect.line_end)
            return HeaderLayout(layout.names, layout.eol, bom)
        found = [(i, eol) for eol in (b"\n", b"\r") if (i := head.find(eol.decode().encode(codec), bom)) >= 0]
        end, eol = min(found) if found else (len(head), b"")
        text = head[bom:end].decode(codec, "replace").encode("utf-8")
        layout = head_layout(self.path, text + eol, delimiter=self.delimiter, line_end=dialect.line_end)
        return HeaderLayout(layout.names, layout.eol, end + 2 if found else len(head))

    @property
    def layout(self) -> CsvLayout:
        return CsvLayout(tuple(self.header.names), self.header.eol, self.delimiter, self.spec.csv.header)

    def _read_decoded(self, n: int) -> bytes:
        """Up to ``n`` bytes of the decoded stream (fewer only at its end)."""
        if self._stream is None:
            raise InternalError("a compressed or transcoded input is read once it is open")
        parts: list[bytes] = []
        got = 0
        while got < n:
            try:
                block = self._stream.read(min(n - got, CHUNK_BYTES))
            except InputError:
                raise
            except Exception as exc:  # noqa: BLE001 - OSError, EOFError, zlib.error, zstandard's ZstdError (no stable
                # import path): a corrupt or truncated compressed file, about the file as a whole, never one cell
                raise InputError(
                    f"input {self.path} is not a valid {self.fmt} file ({type(exc).__name__}): nothing was spent"
                ) from None
            if not block:
                break
            parts.append(block)
            got += len(block)
        return b"".join(parts)

    def chunks(self, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
        """The data lines (after the header) as UTF-8, about ``chunk_bytes`` at a time, each chunk ending at a line
        end (the last may end without one); a record longer than ``max_record_bytes`` is an empty line."""
        eol = self.header.eol
        start = self.header.data_start
        limit = self.max_record_bytes
        if self.plain:
            if self._fh is None:
                raise InternalError("an input's chunks are read once it is open")
            yield from _mapped_chunks(self._fh, start, self.total, eol, chunk_bytes, self.on_bytes, limit)
            return
        codec = self._utf16
        term = eol if codec is None else eol.decode("ascii").encode(codec)
        for data in self._streamed(self._head[start:], term, chunk_bytes):
            yield data if codec is None else utf16_lines(data, codec, eol)

    def _streamed(self, first: bytes, term: bytes, chunk_bytes: int) -> Iterator[bytes]:
        """Whole records of the decoded stream (raw bytes, each ended by ``term``), a record longer than
        ``max_record_bytes`` made empty: its bytes are dropped as they are read, never held whole."""
        limit = self.max_record_bytes
        pending = bytearray(first)
        done = False
        while not done:
            block = self._read_decoded(chunk_bytes)
            done = not block
            pending += block
            last = pending.rfind(term)
            open_at = 0 if last < 0 else last + len(term)  # the record not ended yet
            if len(pending) - open_at > limit:
                if open_at:
                    yield drop_long_records(bytes(pending[:open_at]), term, limit)
                after = self._skip_record(pending[open_at:], term)
                done = after is None
                pending = bytearray(term) + (after or b"")  # the long record as an empty one, then what follows
                continue
            cut = len(pending) if done else open_at
            if cut and (len(pending) >= chunk_bytes or done):
                yield drop_long_records(bytes(pending[:cut]), term, limit)
                del pending[:cut]
        if pending:
            yield drop_long_records(bytes(pending), term, limit)

    def _skip_record(self, seen: bytearray, term: bytes) -> bytes | None:
        """Read past the end of a record too long to read, holding at most a block of it: what follows its line end,
        or None when the stream ends first."""
        carry = bytes(seen[-(len(term) - 1) :]) if len(term) > 1 else b""
        while True:
            block = self._read_decoded(CHUNK_BYTES)
            if not block:
                return None
            data = carry + block
            at = data.find(term)
            if at >= 0:
                return data[at + len(term) :]
            carry = data[-(len(term) - 1) :] if len(term) > 1 else b""


def _mapped_chunks(
    fh: IO[bytes],
    start: int,
    size: int,
    eol: bytes,
    chunk_bytes: int,
    on_bytes: OnBytes | None,
    max_record: int = DEFAULT_MAX_RECORD_BYTES,
) -> Iterator[bytes]:
    """Whole lines of a regular file from ``start``, one mapped window at a time (each window unmapped before the
    next is mapped, so resident memory stays at about two chunks); a line longer than ``max_record`` bytes is an
    empty line, found and passed over a window at a time, never copied."""
    pos = start
    granularity = mmap.ALLOCATIONGRANULARITY
    while pos < size:
        length = chunk_bytes
        data = b""
        while True:
            end = min(pos + length, size)
            base = pos - pos % granularity
            with mmap.mmap(fh.fileno(), end - base, offset=base, access=mmap.ACCESS_READ) as window:
                if end == size:
                    cut = end
                else:
                    k = window.rfind(eol, pos - base)
                    cut = base + k + 1 if k >= 0 else -1
                if cut > pos:
                    data = drop_long_records(window[pos - base : cut - base], eol, max_record)
            if cut > pos or end - pos > max_record:
                break
            length *= 2  # a line longer than the window (and not over the limit): a wider one
        if cut <= pos:
            # a line longer than the limit: an empty line, and reading goes on after its line end
            data = eol
            cut = _line_end_after(fh, end, size, eol, chunk_bytes)
        yield data
        del data
        pos = cut
        if on_bytes is not None:
            on_bytes(pos, size)
    if on_bytes is not None and start >= size:
        on_bytes(size, size)


def _line_end_after(fh: IO[bytes], pos: int, size: int, eol: bytes, window_bytes: int) -> int:
    """Just after the first line end at or after ``pos`` (the file's size if none), searched one mapped window at a
    time."""
    granularity = mmap.ALLOCATIONGRANULARITY
    while pos < size:
        end = min(pos + window_bytes, size)
        base = pos - pos % granularity
        with mmap.mmap(fh.fileno(), end - base, offset=base, access=mmap.ACCESS_READ) as window:
            k = window.find(eol, pos - base)
        if k >= 0:
            return base + k + 1
        pos = end
    return size
