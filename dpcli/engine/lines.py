"""One physical line is one record: the lines that hold a quote character, found and prepared for polars.

polars reads the file with quoting off (a quote cannot open a field that swallows the next lines), so a line with a
quote character must be read again with quotes honoured *within that line*. This module finds those lines (a
memchr-speed ``mmap.find``; a file without any quote costs one such search) and hands them over chunk by chunk:

- a *plain* line (every quoted field well formed: it opens at the start of a field, holds no line-break byte, pairs
  its inner quotes as ``""`` and closes just before a separator or the line's end) reads the same under polars'
  RFC 4180 parser as on its own, so its bytes are passed through unchanged;
- any other line is split into fields by Python's csv module on that line alone (a quote still open at the end of
  the line closes there; bytes that are not UTF-8 become U+FFFD first), then written back as a plain line of the
  used fields, which polars then parses like every other cell.

Each chunk also carries its lines as they are in the file, so that the engine can take back out what the
quote-blind scan made of them.

In a file whose header ends with CR, a line ends at CR and an LF right after it belongs to that line end (CRLF
files): that LF is taken off the start of each line here, as the engine takes it off the first field of the others.

The result is the same for every line whichever way it goes (tests/engine/test_records.py checks it on random lines), so
whether a line is plain depends only on its own bytes and never changes another line's reading. Memory is bounded
by one chunk (or the longest quoted line, if longer), never by the file.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import mmap
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from dpcli.errors import TOO_MANY_FILES, ResourceError

CHUNK_BYTES = 8 << 20  # lines with quotes are classified and parsed this many bytes at a time
SPARSE = 256  # at most one quote per this many bytes: quoted lines are found one by one (measured faster)

QUOTE, COMMA, CR, LF = 0x22, 0x2C, 0x0D, 0x0A
# Line-break bytes stand in for themselves inside the csv module (which treats a bare CR or LF in an unquoted field
# as a record end) as lone surrogates: text decoded with errors="replace" never holds one.
SENTINELS = str.maketrans({"\r": "\udc0d", "\n": "\udc0a"})
RESTORE = str.maketrans({"\udc0d": "\r", "\udc0a": "\n"})  # noqa: F601 - ruff false positive: distinct surrogates


@dataclass(frozen=True)
class QuotedChunk:
    """The lines of one stretch of the file that hold a quote: as the main scan read them, and as they should be."""

    raw: bytes  # the lines as in the file, each ended by the file's line end (what the quote-blind scan read)
    data: bytes  # the lines as polars should read them (RFC 4180 quoting), each ended by the file's line end
    lines: int  # how many lines each holds (polars must return exactly this many rows from ``data``)
    pieces: list[tuple[bytes, bool]]  # ``data`` again, for a fallback: (plain lines as in the file, False) or
    # (a repaired line, True)


class LineRepair:
    """Splits one line into fields with the csv module and writes the used ones back as a plain line."""

    def __init__(self, used: set[int], eol: bytes, delimiter: str = ","):
        self.used = used
        self.delimiter = delimiter
        self.sep = ord(delimiter)
        self.width = max(used) + 1 if used else 0
        self.eol = eol
        self.strip_cr = eol == b"\n"  # polars drops one CR at the end of every field of an LF file: so do we
        self.lead_lf = eol == b"\r"  # in a CR file, an LF right after the line end before is part of it

    def __call__(self, line: bytes) -> bytes:
        """``line`` as in the file (without its own line end)."""
        if self.lead_lf and line.startswith(b"\n"):
            line = line[1:]
        text = line.decode("utf-8", "replace").translate(SENTINELS)
        fields = next(csv.reader([text], strict=False, delimiter=self.delimiter), [])
        out = []
        for i, value in enumerate(fields[: self.width]):
            if i not in self.used:
                out.append("")
                continue
            value = value.translate(RESTORE)
            if self.strip_cr and value.endswith("\r"):
                value = value[:-1]
            out.append('"' + value.replace('"', '""') + '"')
        return self.delimiter.join(out).encode("utf-8") + self.eol


class _Reading:
    """While any aggregation runs (the audit runs several in threads): no warning is shown (polars warns about
    malformed rows, naming where they are), the csv module takes fields of any size (a long field is still one
    record's), and file descriptor 2 points at /dev/null (a Rust panic in polars prints its message, which could
    quote a cell, and a backtrace straight to fd 2, before Python sees the PanicException). All are process-wide
    settings, so they are set by the first reader in and restored by the last out."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0

    def __enter__(self) -> None:
        with self.lock:
            if self.depth == 0:
                self.stderr = _silence_fd(2)
                self.warnings = warnings.catch_warnings()
                self.warnings.__enter__()
                warnings.simplefilter("ignore")
                self.limit = csv.field_size_limit(sys.maxsize)
            self.depth += 1

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0:
                csv.field_size_limit(self.limit)
                self.warnings.__exit__(None, None, None)
                _restore_fd(2, self.stderr)


def _silence_fd(fd: int) -> int | None:
    """Point ``fd`` at /dev/null; returns a copy of what it was (None when there is no such fd to keep).

    Out of descriptors (a tight ``ulimit -n``) is exit 1 here: polars could not start its threads either, and its
    panic could not be kept off the terminal."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stderr.flush()
    try:
        saved = os.dup(fd)
        try:
            null = os.open(os.devnull, os.O_WRONLY)
        except OSError:
            os.close(saved)
            raise
    except OSError as exc:
        if exc.errno == errno.EBADF:
            return None  # no stderr at all: nothing to protect
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            raise ResourceError(TOO_MANY_FILES) from None
        raise
    os.dup2(null, fd)
    os.close(null)
    return saved


def _restore_fd(fd: int, saved: int | None) -> None:
    if saved is not None:
        os.dup2(saved, fd)
        os.close(saved)


reading = _Reading()


def quoted_chunks(
    buf: bytes | mmap.mmap,
    data_start: int,
    eol: bytes,
    repair: LineRepair,
    chunk_bytes: int = CHUNK_BYTES,
    sparse: int = SPARSE,
) -> Iterator[QuotedChunk]:
    """Every line of ``buf`` from ``data_start`` on that holds a quote character, about ``chunk_bytes`` of them at a
    time (scattered quoted lines are gathered from several stretches, so polars is called about once per
    ``chunk_bytes``). ``buf`` holds whole lines: the engine's chunk of the input, or a whole file mapped."""
    e = eol[0]
    size = len(buf)
    pos = data_start  # always the start of a line
    gathered: list[QuotedChunk] = []
    while pos < size:
        q = buf.find(b'"', pos)
        if q < 0:
            break
        start = buf.rfind(eol, pos, q) + 1 or pos
        end = buf.find(eol, max(start + chunk_bytes - 1, q))
        end = size if end < 0 else end + 1
        view = np.frombuffer(buf, dtype=np.uint8, count=end - start, offset=start)
        if np.count_nonzero(view == QUOTE) <= (end - start) // sparse:
            # few quotes: their lines, found one by one, are gathered and classified on their own (the same result
            # as classifying the whole stretch, without a pass over every line end)
            lines = _gather(buf, start, end, eol)
            gathered.append(_chunk(lines, np.frombuffer(lines, dtype=np.uint8), 0, e, repair))
        else:
            gathered.append(_chunk(buf, view, start, e, repair))
        del view  # an mmap cannot close while a view of it is alive
        if sum(len(c.raw) for c in gathered) >= chunk_bytes:
            yield _merge(gathered)
            gathered = []
        pos = end
    if gathered:
        yield _merge(gathered)


def _gather(mm: bytes | mmap.mmap, start: int, end: int, eol: bytes) -> bytes:
    """The lines in [start, end) that hold a quote, each ended by ``eol``."""
    out = []
    pos = start
    while True:
        q = mm.find(b'"', pos, end)
        if q < 0:
            break
        a = mm.rfind(eol, pos, q) + 1 or pos
        b = mm.find(eol, q, end)
        b = end if b < 0 else b
        out.append(mm[a:b])
        pos = b + 1
    return eol.join(out) + eol


def _merge(chunks: list[QuotedChunk]) -> QuotedChunk:
    if len(chunks) == 1:
        return chunks[0]
    return QuotedChunk(
        b"".join(c.raw for c in chunks),
        b"".join(c.data for c in chunks),
        sum(c.lines for c in chunks),
        [p for c in chunks for p in c.pieces],
    )


def _chunk(mm: mmap.mmap | bytes, view: np.ndarray, offset: int, e: int, repair: LineRepair) -> QuotedChunk:
    n = len(view)
    ends = np.flatnonzero(view == e)
    if view[-1] != e:
        ends = np.append(ends, n)  # the file's last line, without a line end
    lines, bad = classify(view, ends, e, repair.sep)
    starts = np.where(lines > 0, ends[np.maximum(lines - 1, 0)] + 1, 0)
    stops = ends[lines]

    # runs of consecutive plain lines go to polars as one slice each; every other quoted line is repaired
    plain = ~bad
    follows = np.zeros(len(lines), dtype=bool)  # this plain line directly follows a plain line
    follows[1:] = plain[1:] & plain[:-1] & (lines[1:] == lines[:-1] + 1)
    run_first = np.flatnonzero(plain & ~follows)
    run_last = np.flatnonzero(plain & ~np.r_[follows[1:], False])
    eol = bytes([e])
    raw: list[bytes] = []
    data: list[bytes] = []
    pieces: list[tuple[bytes, bool]] = []
    for a, b in zip((starts[run_first] + offset).tolist(), (stops[run_last] + offset).tolist(), strict=True):
        run = mm[a:b] + eol
        raw.append(run)
        data.append(plain_lines(run, e))
        pieces.append((run, False))
    for a, b in zip((starts[bad] + offset).tolist(), (stops[bad] + offset).tolist(), strict=True):
        line = mm[a:b]
        repaired = repair(line)
        raw.append(line + eol)
        data.append(repaired)
        pieces.append((repaired, True))
    return QuotedChunk(b"".join(raw), b"".join(data), len(lines), pieces)


def plain_lines(run: bytes, e: int) -> bytes:
    """Plain lines as polars reads them: in a CR file, without the LF that starts a line after a CRLF (a plain
    line holds no CR but its line end, so every CRLF in ``run`` is one)."""
    if e != CR:
        return run
    return run[1:].replace(b"\r\n", b"\r") if run.startswith(b"\n") else run.replace(b"\r\n", b"\r")


def classify(view: np.ndarray, ends: np.ndarray, e: int, sep: int = COMMA) -> tuple[np.ndarray, np.ndarray]:
    """The lines of ``view`` that hold a quote (line i ends at ``ends[i]``, the line end excluded; the last may end
    at ``len(view)``), in order, and for each whether it is not plain.

    Counting a line's quotes from its start, an even-numbered one opens a field (or is the second of a ``""``)
    and an odd-numbered one closes it (or is the first of a ``""``), which gives the whole grammar:
    - an opening quote is at the line's start, or follows a separator or a quote;
    - a closing quote is followed by a separator, a quote, the line's end, or (LF files) a CR and the line's end;
    - a line has an even number of quotes, and no CR (LF files) or LF (CR files) lies between a pair.
    In a CR file a line's text starts after an LF that directly follows the previous line end.
    Only the quoted lines are looked at, so sparse quotes cost little.
    """
    n = len(view)
    q = np.flatnonzero(view == QUOTE)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    every = np.searchsorted(q, starts)  # index in q of each line's first quote (a search per line, not per quote)
    every_count = np.diff(np.append(every, len(q)))
    lines = np.flatnonzero(every_count)
    at, counts = every[lines], every_count[lines]
    bad = (counts & 1).astype(bool)
    if not len(q):
        return lines, bad
    # a quote's number within its line is odd or even as its index in q is, flipped where the line's first is odd
    index_parity = np.tile(np.array([0, 1], dtype=np.int8), len(q) // 2 + 1)[: len(q)]  # (np.resize is slow)
    opening = (index_parity ^ np.repeat((at & 1).astype(np.int8), counts)) == 0
    # the neighbours of every quote, as bytes (the chunk starts at a line start: nothing before q == 0, and the
    # file's last line may end at n)
    before = np.take(view, q - 1, mode="clip")
    if q[0] == 0:
        before[0] = e
    after = np.take(view, q + 1, mode="clip")
    if q[-1] == n - 1:
        after[-1] = e
    at_start = before == e
    if e == CR:  # an LF right after a CR is part of that line end: the line's text starts after it
        lf = np.flatnonzero(before == LF)
        at_start[lf] = (q[lf] == 1) | (np.take(view, q[lf] - 2, mode="clip") == CR)
    ok_open = (before == sep) | (before == QUOTE) | at_start
    ok_close = (after == sep) | (after == QUOTE) | (after == e)
    if e == LF:
        cr = np.flatnonzero(after == CR)  # a closing quote, then CR, then the line end
        ok_close[cr] = (q[cr] + 2 >= n) | (np.take(view, q[cr] + 2, mode="clip") == LF)
    wrong = np.flatnonzero(np.where(opening, ~ok_open, ~ok_close))
    if len(wrong):
        bad[np.searchsorted(lines, np.searchsorted(ends, q[wrong]))] = True
    other = np.flatnonzero(view == (CR if e == LF else LF))
    if len(other):
        oline = np.searchsorted(ends, other)
        j = np.minimum(np.searchsorted(lines, oline), len(lines) - 1)
        mine = lines[j] == oline  # in a quoted line
        inside = ((np.searchsorted(q, other) - at[j]) & 1) == 1
        bad[j[mine & inside]] = True
    return lines, bad
