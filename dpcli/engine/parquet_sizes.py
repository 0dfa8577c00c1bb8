"""The decompressed sizes of a Parquet file's used columns, read from its footer and page headers before any value
is read (docs/spec.md, "Parquet and Arrow IPC inputs").

A Parquet file's uncompressed sizes are public, as its size is (docs/threat-model.md): the footer states each column
chunk's ``total_uncompressed_size`` and each page header its ``uncompressed_page_size``. The engine refuses (exit 3,
before anything is read or spent) a file whose used columns decompress to more than the input cap, or that holds a
page of a used column larger than ``MAX_PAGE_BYTES``: polars decompresses a page whole, so the largest page bounds
what one value can cost in memory.

Only the Thrift compact protocol's framing is decoded here (``_Compact``), generically: a struct is a dict from
field id to value, and byte strings are skipped unread where they are not needed (a page header's statistics can
hold a long value).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from dpcli.errors import InputError

# the largest uncompressed page of a used column read (public, docs/spec.md): writers cut pages at about 1 MiB
# (pyarrow, polars, Spark), so only a single value of tens of MB makes a larger one
MAX_PAGE_BYTES = 64 << 20
MAX_FOOTER_BYTES = 256 << 20
_MAX_DEPTH = 64  # nested structs in a footer (FileMetaData nests about 6 deep)

# Thrift compact types
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)


class _Malformed(Exception):
    pass


class _Compact:
    """A Thrift compact-protocol reader over a file positioned at a value (reads only what it decodes)."""

    def __init__(self, fh: IO[bytes], keep_binary: bool):
        self.fh = fh
        self.keep_binary = keep_binary  # False: byte strings are skipped (seek), never read

    def _byte(self) -> int:
        b = self.fh.read(1)
        if not b:
            raise _Malformed
        return b[0]

    def _varint(self) -> int:
        shift = result = 0
        while True:
            b = self._byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise _Malformed

    def _zigzag(self) -> int:
        n = self._varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, kind: int, depth: int = 0) -> Any:
        if depth > _MAX_DEPTH:
            raise _Malformed
        if kind in (_TRUE, _FALSE):
            return kind == _TRUE
        if kind == _BYTE:
            return self._byte()
        if kind in (_I16, _I32, _I64):
            return self._zigzag()
        if kind == _DOUBLE:
            return struct.unpack("<d", self._exactly(8))[0]
        if kind == _BINARY:
            n = self._varint()
            if self.keep_binary:
                return self._exactly(n)
            self.fh.seek(n, 1)
            return None
        if kind in (_LIST, _SET):
            head = self._byte()
            size, elem = head >> 4, head & 0x0F
            if size == 15:
                size = self._varint()
            if elem in (_TRUE, _FALSE):  # a boolean in a list is one byte
                return [self._byte() == 1 for _ in range(size)]
            return [self.value(elem, depth + 1) for _ in range(size)]
        if kind == _MAP:
            size = self._varint()
            if not size:
                return {}
            types = self._byte()
            return {self.value(types >> 4, depth + 1): self.value(types & 0x0F, depth + 1) for _ in range(size)}
        if kind == _STRUCT:
            return self.struct(depth + 1)
        raise _Malformed

    def struct(self, depth: int = 0) -> dict[int, Any]:
        fields: dict[int, Any] = {}
        last = 0
        while True:
            head = self._byte()
            if head == 0:
                return fields
            delta, kind = head >> 4, head & 0x0F
            last = last + delta if delta else self._zigzag()
            fields[last] = self.value(kind, depth)

    def _exactly(self, n: int) -> bytes:
        data = self.fh.read(n)
        if len(data) != n:
            raise _Malformed
        return data


@dataclass(frozen=True)
class ColumnSizes:
    uncompressed: int  # the used columns' total_uncompressed_size, summed over row groups
    largest_page: int  # the largest uncompressed page (data or dictionary) of a used column


def used_column_sizes(path: Path, used: Iterable[str]) -> ColumnSizes:
    """The decompressed sizes of the columns ``used`` (top-level names) of a Parquet file. InputError (exit 3) when
    the footer or a page header cannot be read: about the file's structure, never a value."""
    wanted = set(used)
    where = "FileMetaData"  # what could not be read, named in the message (a structure of the format, no value)
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            if size < 12:
                raise _Malformed
            fh.seek(size - 8)
            length, magic = struct.unpack("<I4s", fh.read(8))
            if magic != b"PAR1" or length > min(size - 12, MAX_FOOTER_BYTES):
                raise _Malformed
            fh.seek(size - 8 - length)
            where = "FileMetaData"
            meta = _Compact(fh, keep_binary=True).struct()
            where = "PageHeader"
            total = largest = 0
            for group in meta.get(4, []):  # FileMetaData.row_groups
                for chunk in group.get(1, []):  # RowGroup.columns
                    info = chunk.get(3, {})  # ColumnChunk.meta_data
                    names = info.get(3, [])  # ColumnMetaData.path_in_schema
                    if not names or names[0].decode("utf-8", "replace") not in wanted:
                        continue
                    total += info.get(6, 0)  # total_uncompressed_size
                    start = info.get(11) or info.get(9, 0)  # dictionary_page_offset, else data_page_offset
                    largest = max(largest, _largest_page(fh, start, start + info.get(7, 0)))
            return ColumnSizes(total, largest)
    except OSError as exc:
        raise InputError(f"cannot read input {path}: {exc.strerror or 'unreadable'}") from None
    except (_Malformed, AttributeError, TypeError, struct.error, ValueError, OverflowError):
        raise InputError(f"input {path} could not be read as a Parquet file ({where})") from None


def _largest_page(fh: IO[bytes], start: int, end: int) -> int:
    """The largest uncompressed_page_size of the pages in [start, end) of the file (page header, then its data)."""
    largest = 0
    pos = start
    reader = _Compact(fh, keep_binary=False)
    while pos < end:
        fh.seek(pos)
        header = reader.struct()
        uncompressed, compressed = header.get(2, 0), header.get(3, 0)  # PageHeader sizes
        if compressed < 0 or uncompressed < 0:
            raise _Malformed
        largest = max(largest, uncompressed)
        pos = fh.tell() + compressed
    return largest
