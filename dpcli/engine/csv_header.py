"""Structural checks on a CSV's header, before any budget is spent.

Structural problems (unreadable, not UTF-8, empty, duplicate or missing declared columns) are about the file as a
whole and may fail the run with exit 3. Only the header decides them: no byte of a data line is looked at here (one
person's bytes must never change the exit code). Messages name columns from the spec and paths, never a cell's
value. A header name that is not declared is named only as a did-you-mean for a declared column the header lacks (a
name the file's schema gives, close to a declared one); the hints that name a ``csv:`` delimiter or encoding are
derived from the header line's own bytes (docs/spec.md, "CSV dialects").

The header also decides the file's line ends (docs/spec.md, "How lines are read"), from its own first line-break
byte: LF makes every line end at LF (a CR at the end of a field is dropped, so a CRLF there reads as LF); CR makes
every line end at CR, an LF right after a CR belonging to that line end (CRLF and CR-only files alike). By default
the header is the first physical line (quotes honoured within it); with ``csv: {quoted_line_breaks: true}`` it is
the first RFC 4180 record, which may hold quoted line breaks.
"""

from __future__ import annotations

import csv
import io
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from dpcli.core.suggest import did_you_mean
from dpcli.errors import InputError
from dpcli.specs.v1 import ENCODINGS

MAX_HEADER_BYTES = 1 << 20
MAX_NAME_CHARS = 128 << 10  # the csv module's default field limit, checked here (the engine lifts that limit)
_BOM = b"\xef\xbb\xbf"
# the delimiters a header is tried with when it lacks declared columns, as the spec spells each one in csv: {...}
_DELIMITER_SPELLINGS = {",": "','", ";": "';'", "\t": "tab", "|": "'|'"}


@dataclass(frozen=True)
class HeaderLayout:
    """What the header decides for the whole file."""

    names: list[str]
    eol: bytes  # b"\n" (the header line ends with LF) or b"\r" (with CR: CRLF and CR-only files)
    data_start: int  # byte offset of the first data line (after the header's line end)


def read_header(path: Path, quoted_line_breaks: bool = False, delimiter: str = ",") -> list[str]:
    """The header's column names. Raises InputError (exit 3) on a structural problem.

    ``quoted_line_breaks`` is the spec's ``csv.quoted_line_breaks``: without it the header is the first physical
    line, as the engine reads it.
    """
    return header_layout(Path(path), quoted_line_breaks, delimiter).names


def header_layout(path: Path, quoted_line_breaks: bool = False, delimiter: str = ",") -> HeaderLayout:
    """The header's names, the file's line end and where the data starts. InputError (exit 3) on a problem."""
    return head_layout(path, read_head(path), quoted_line_breaks=quoted_line_breaks, delimiter=delimiter)


def head_layout(
    name: Path | str,
    head: bytes,
    *,
    quoted_line_breaks: bool = False,
    delimiter: str = ",",
    names: tuple[str, ...] | None = None,
    line_end: str | None = None,
) -> HeaderLayout:
    """The layout decided by the first bytes of a CSV's (UTF-8) text: ``head`` is at least its first
    MAX_HEADER_BYTES + 8 bytes, or all of it. ``names`` given: the file has no header line, these are its fields
    (the data starts at the first byte, after a BOM) and ``line_end`` ("lf" default, or "cr") its line end. With a
    header line, a declared ``line_end`` must agree with the header's."""
    bom = len(_BOM) if head.startswith(_BOM) else 0
    if names is not None:
        return HeaderLayout(list(names), b"\r" if line_end == "cr" else b"\n", bom)
    if not head.strip():
        raise InputError(f"input {name} is empty: a CSV needs at least a header line")
    if quoted_line_breaks:
        layout = _record_header(name, head, bom, delimiter)
    else:
        layout = _line_header(name, head, bom, delimiter)
    if line_end is not None and layout.eol != (b"\r" if line_end == "cr" else b"\n"):
        found = "CR" if layout.eol == b"\r" else "LF"
        raise InputError(f"input {name}: its header line ends with {found}, but csv.line_end declares {line_end}")
    return layout


def check_regular_file(path: Path, kind: str = "CSV") -> None:
    """InputError (exit 3) unless ``path`` is an existing regular file: a directory would be read as a dataset of
    its files by polars, and a FIFO or device is spooled by the caller (reading it here would consume the data)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"input {path} does not exist") from None
    except OSError as exc:
        raise InputError(f"cannot read input {path}: {exc.strerror or 'unreadable'}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"input {path} is a directory, not a {kind} file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"input {path} is not a regular file", hint="pass it on standard input with --input -")


def read_head(path: Path) -> bytes:
    """The first MAX_HEADER_BYTES + 8 bytes of a regular file (InputError, exit 3, for anything else)."""
    check_regular_file(path)
    try:
        with open(path, "rb") as fh:
            # a few bytes past the limit (and a BOM) tell a CR line end from a CRLF one, and a header over the limit
            return fh.read(MAX_HEADER_BYTES + 8)
    except OSError as exc:
        raise InputError(f"cannot read input {path}: {exc.strerror or 'unreadable'}") from None


def _too_long(path: Path | str) -> InputError:
    return InputError(f"input {path} has no readable header line: it is over {MAX_HEADER_BYTES // 1024} KiB")


def _line_header(path: Path | str, head: bytes, bom: int, delimiter: str) -> HeaderLayout:
    """The first physical line: it ends at the first CR or LF (an LF right after that CR is left to the data, where
    it belongs to the line end like every LF right after a CR)."""
    ends = [i for i in (head.find(b"\r", bom), head.find(b"\n", bom)) if i >= 0]
    end = min(ends) if ends else len(head)
    if end - bom > MAX_HEADER_BYTES:
        raise _too_long(path)
    if not ends:
        eol, data_start = b"\n", len(head)  # a header without a line end: the file has no data
    else:
        # CR or CRLF is told by the header's own first line-break byte, never by the byte after it (in a CR file
        # that is the first record's): in a CR file an LF right after a CR belongs to the line end, so CRLF reads
        # the same (docs/spec.md, "How lines are read")
        eol, data_start = (b"\n" if head[end] == 0x0A else b"\r"), end + 1
    try:
        text = head[bom:end].decode("utf-8")
    except UnicodeDecodeError:
        raise not_utf8(path, head) from None
    if "\x00" in text:
        raise _nul_bytes(path, head[bom:end])
    try:
        # strict=False: a quote still open at the end of the line closes there, as for data lines
        row = next(csv.reader([text], strict=False, delimiter=delimiter), [])
    except csv.Error:
        raise InputError(f"input {path} has no readable header line") from None
    return HeaderLayout(_names(path, row), eol, data_start)


def _record_header(path: Path | str, head: bytes, bom: int, delimiter: str) -> HeaderLayout:
    """The first RFC 4180 record (quoted line breaks allowed), for ``csv.quoted_line_breaks``."""
    text = head[bom:].decode("utf-8", "surrogateescape")  # invalid bytes are checked below, in the header only
    consumed: list[str] = []

    def lines() -> Iterator[str]:
        for line in io.StringIO(text, newline=""):  # keeps each line's own end: \n, \r\n or \r
            consumed.append(line)
            yield line

    try:
        row = next(csv.reader(lines(), delimiter=delimiter), [])
    except csv.Error:
        raise InputError(f"input {path} has no readable header line") from None
    record = "".join(consumed)
    size = len(record.encode("utf-8", "surrogateescape"))
    last = consumed[-1] if consumed else ""
    if size > MAX_HEADER_BYTES:  # also when the record runs past what was read
        raise _too_long(path)
    if any("\udc80" <= ch <= "\udcff" for ch in record):
        raise not_utf8(path, head)
    if "\x00" in record:
        raise _nul_bytes(path, record.encode("utf-8", "surrogateescape"))
    eol = b"\r" if last.endswith("\r") and not last.endswith("\r\n") else b"\n"
    return HeaderLayout(_names(path, row), eol, bom + size)


def not_utf8(path: Path | str, head: bytes) -> InputError:
    """A header that is not UTF-8, with the spec's remedy: ``csv: {encoding: ...}``; a UTF-16 byte-order mark at
    the file's start names UTF-16 (the file's first bytes decide, as they decide its byte order when declared)."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return InputError(
            f"input {path} is not UTF-8 text: it starts with a UTF-16 byte-order mark: "
            "declare csv: {encoding: utf-16}"
        )
    return InputError(
        f"input {path} is not UTF-8 text: declare its encoding, csv: {{encoding: ...}} (one of: {', '.join(ENCODINGS)})"
    )


def _nul_bytes(path: Path | str, line: bytes) -> InputError:
    """NUL bytes in the header line: UTF-16 without a byte-order mark when every other byte of the line is NUL (an
    ASCII header in UTF-16), otherwise not a text CSV."""
    message = f"input {path} has NUL bytes in its header: it is not a text CSV"
    for offset, codec in ((1, "utf-16-le"), (0, "utf-16-be")):
        if len(line) >= 2 and not any(line[offset::2]):
            return InputError(f"{message}, or UTF-16 without a byte-order mark: declare csv: {{encoding: {codec}}}")
    return InputError(message)


def _names(path: Path | str, row: list[str]) -> list[str]:
    if not row or all(not name for name in row):
        raise InputError(f"input {path} has an empty header line")
    if any(len(name) > MAX_NAME_CHARS for name in row):
        raise InputError(f"input {path} has no readable header line: a name is over {MAX_NAME_CHARS // 1024} KiB")
    return row


def check_header(path: Path, header: list[str], required: Iterable[str], delimiter: str = ",") -> None:
    """Every declared column is present exactly once. ``delimiter`` is the one the header was read with: when the
    header holds more declared columns split at another, the message names that one."""
    required = list(required)
    counts: dict[str, int] = {}
    for name in header:
        counts[name] = counts.get(name, 0) + 1
    dupes = sorted(n for n in required if counts.get(n, 0) > 1)
    if dupes:
        raise InputError(f"input {path}: declared column(s) appear more than once in the header: {', '.join(dupes)}")
    other_dupes = [n for n, c in counts.items() if c > 1]
    if other_dupes:
        raise InputError(f"input {path}: the header has {len(other_dupes)} duplicate column name(s)")
    missing = [n for n in required if n not in counts]
    if missing:
        raise _missing(path, header, required, missing, delimiter)


def _missing(path: Path, header: list[str], required: list[str], missing: list[str], delimiter: str) -> InputError:
    """Declared columns the header lacks, with a hint: the delimiter that splits the header into more of them, or
    else, per missing column, the header's undeclared names close to it, when the header holds at least one declared
    name as it is (evidence that the line is a header: a record's fields are never quoted)."""
    message = f"input {path}: declared column(s) missing from the header"
    other = other_delimiter(header, required, delimiter)
    if other is not None:
        spelled, held = other
        them = "them" if held == len(required) else f"{held} of the {len(required)} declared columns"
        return InputError(
            f"{message}: {', '.join(missing)}; split at {spelled} the header holds {them}: "
            f"declare csv: {{delimiter: {spelled}}}"
        )
    if not set(header) & set(required):
        # not one declared name: the line may be a record of a file without a header line, not a header, and its
        # fields a person's values: no field of it is quoted back (claim 7)
        return InputError(f"{message}: {', '.join(missing)}")
    return InputError(f"{message}: {with_close_names(missing, header, required)}")


def with_close_names(missing: list[str], fields: Iterable[str], declared: Iterable[str]) -> str:
    """The missing declared names, each followed by the fields' undeclared names close to it (a header's or a
    schema's names, never a cell): ``hours_per_week (did you mean 'hours-per-week'?), sex``."""
    known = set(declared)
    undeclared = [name for name in fields if name not in known]
    return ", ".join(f"{name} ({hint})" if (hint := did_you_mean(name, undeclared)) else name for name in missing)


def other_delimiter(header: list[str], required: list[str], delimiter: str) -> tuple[str, int] | None:
    """The delimiter (as csv: spells it) that splits the header line into the most declared columns, and how many,
    when that is more than ``delimiter`` gives. Only the header's names are read: they are the line, rejoined."""
    line = delimiter.join(header)
    held = sum(name in set(header) for name in required)
    best: tuple[str, int] | None = None
    for other, spelled in _DELIMITER_SPELLINGS.items():
        if other == delimiter or other not in line:
            continue
        fields = set(next(csv.reader([line], strict=False, delimiter=other), []))
        count = sum(name in fields for name in required)
        if count > (held if best is None else best[1]):
            best = (spelled, count)
    return best
