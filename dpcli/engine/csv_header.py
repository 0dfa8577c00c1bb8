"""Structural checks on a CSV's header, before any budget is spent.

Structural problems (unreadable, not UTF-8, empty, duplicate or missing declared columns) are about the file as a
whole and may fail the run with exit 3. Messages name columns from the spec and paths, never a cell's value; a
header name that is not declared is never echoed either (it could be a value in a headerless file).
"""

from __future__ import annotations

import csv
import io
import os
import stat
from pathlib import Path
from typing import Iterable

from dpcli.errors import InputError

MAX_HEADER_BYTES = 1 << 20


def read_header(path: Path) -> list[str]:
    """The header's column names. Raises InputError (exit 3) on a structural problem."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"input {path} does not exist") from None
    except OSError as exc:
        raise InputError(f"cannot read input {path}: {exc.strerror or 'unreadable'}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"input {path} is a directory, not a CSV file")
    if not stat.S_ISREG(st.st_mode):
        # FIFOs and devices are spooled by the caller; reading them here would consume the data
        raise InputError(f"input {path} is not a regular file (pass it on standard input with --input -)")
    try:
        with open(path, "rb") as fh:
            head = fh.read(MAX_HEADER_BYTES)
    except OSError as exc:
        raise InputError(f"cannot read input {path}: {exc.strerror or 'unreadable'}") from None
    if not head.strip():
        raise InputError(f"input {path} is empty: a CSV needs at least a header line")
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    # the header line ends at the first newline that is not inside quotes; csv handles quoted names
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # a multi-byte character may be cut at the read limit; anything earlier is a real encoding problem
        if exc.start < len(head) - 4:
            raise InputError(f"input {path} is not UTF-8 text") from None
        text = head[: exc.start].decode("utf-8")
    if "\x00" in text.split("\n", 1)[0]:
        raise InputError(f"input {path} has NUL bytes in its header: it is not a text CSV")
    try:
        row = next(csv.reader(io.StringIO(text, newline="")))
    except (StopIteration, csv.Error):
        raise InputError(f"input {path} has no readable header line") from None
    if not row or all(not name for name in row):
        raise InputError(f"input {path} has an empty header line")
    return row


def check_header(path: Path, header: list[str], required: Iterable[str]) -> None:
    """Every declared column is present exactly once."""
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
        raise InputError(f"input {path}: declared column(s) missing from the header: {', '.join(missing)}")
