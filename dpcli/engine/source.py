"""A CSV input as UTF-8 text in chunks of whole lines: from a regular file, a .gz or .zst file, in any declared
encoding, with its header layout decided first.

The engine never holds the file: it asks ``CsvSource.chunks()`` for about CHUNK_BYTES of whole lines at a time and
adds up what each chunk holds, so memory is bounded by a chunk (or the longest line, if longer), never by the
input. Where the bytes come from:
- a plain UTF-8 file is mapped one window at a time (``mmap``, closed after each chunk: a mapping of the whole file
  would count every page it touched in the process's resident memory, 3 GB for a 3 GB file, measured);
- a .gz or .zst file, or a file in another encoding, is read through a decompressor and/or an incremental decoder
  to UTF-8 (bytes not valid in the declared encoding become U+FFFD, so that cell is missing).
``on_bytes(read, total)`` hears how many bytes of the file (compressed bytes, for a compressed file) have been read.

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

from dpcli.engine.csv_header import MAX_HEADER_BYTES, head_layout, read_head
from dpcli.errors import InputError
from dpcli.spec import Spec

# measured on 10M rows, two chunks in flight: 16 and 32 MB take the same time (1.20 s), 16 MB peaks lower (272 MB)
CHUNK_BYTES = 16 << 20
_HEAD_BYTES = MAX_HEADER_BYTES + 8
_PROGRESS_STEP = 8 << 20  # on_bytes is called about this often (and once at the end)

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
    """A byte stream in ``encoding``, read as UTF-8 (invalid bytes become U+FFFD)."""

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


class CsvSource:
    """``with CsvSource(path, spec, fmt) as src: src.layout; for chunk in src.chunks(): ...``"""

    def __init__(self, path: Path, spec: Spec, fmt: str = "csv", on_bytes: OnBytes | None = None):
        self.path = Path(path)
        self.spec = spec
        self.fmt = fmt
        self.on_bytes = on_bytes
        self._fh: IO[bytes] | None = None
        self._stream: _Reader | None = None
        self._head = b""
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
        if self.plain:
            self._head = first
        else:
            counted = cast(IO[bytes], _CountingFile(self._fh, self.total, self.on_bytes))  # read() is all they call
            stream: _Reader = counted
            if self.fmt == "csv.gz":
                stream = gzip.GzipFile(fileobj=counted, mode="rb")
            elif self.fmt == "csv.zst":
                import zstandard  # the .zst reader: imported only for .zst inputs

                stream = zstandard.ZstdDecompressor().stream_reader(counted, read_across_frames=True)
            if self.spec.csv.encoding != "utf-8":
                stream = _Transcoded(stream, self.spec.csv.encoding)
            self._stream = stream
            self._head = self._read_decoded(_HEAD_BYTES)
        dialect = self.spec.csv
        self.header = head_layout(
            self.path,
            self._head,
            quoted_line_breaks=self.spec.quoted_line_breaks,
            delimiter=dialect.delimiter,
            names=self.spec.field_names,
            line_end=dialect.line_end,
        )

    @property
    def layout(self) -> CsvLayout:
        return CsvLayout(tuple(self.header.names), self.header.eol, self.spec.csv.delimiter, self.spec.csv.header)

    def _read_decoded(self, n: int) -> bytes:
        """Up to ``n`` bytes of the decoded stream (fewer only at its end)."""
        assert self._stream is not None
        parts: list[bytes] = []
        got = 0
        while got < n:
            try:
                block = self._stream.read(min(n - got, CHUNK_BYTES))
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
        """The data lines (after the header), about ``chunk_bytes`` at a time, each chunk ending at a line end
        (the last may end without one)."""
        eol = self.header.eol
        start = self.header.data_start
        if self.plain:
            yield from _mapped_chunks(self._fh, start, self.total, eol, chunk_bytes, self.on_bytes)
            return
        pending = bytearray(self._head[start:])
        while True:
            block = self._read_decoded(chunk_bytes)
            pending += block
            cut = pending.rfind(eol) + 1 if block else len(pending)
            if cut and (len(pending) >= chunk_bytes or not block):
                yield bytes(pending[:cut])
                del pending[:cut]
            if not block:
                break
        if pending:
            yield bytes(pending)


def _mapped_chunks(
    fh: IO[bytes] | None, start: int, size: int, eol: bytes, chunk_bytes: int, on_bytes: OnBytes | None
) -> Iterator[bytes]:
    """Whole lines of a regular file from ``start``, one mapped window at a time (each window unmapped before the
    next is mapped, so resident memory stays at about two chunks)."""
    assert fh is not None
    pos = start
    granularity = mmap.ALLOCATIONGRANULARITY
    while pos < size:
        length = chunk_bytes
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
                    data = window[pos - base : cut - base]
            if cut > pos:
                break
            length *= 2  # a line longer than the window: a wider one
        yield data
        del data
        pos = cut
        if on_bytes is not None:
            on_bytes(pos, size)
    if on_bytes is not None and start >= size:
        on_bytes(size, size)
