"""The decompressed sizes of an Arrow IPC file's used columns, read from its footer and message headers before any
value is read (docs/spec.md, "Parquet and Arrow IPC inputs").

An Arrow IPC file's sizes are public, as its size is (docs/threat-model.md). The footer lists each record batch's
and dictionary batch's block (offset, metadata length, body length); each batch's Message header lists its buffers
(offset and length in the body), in the pre-order of the schema's fields; with body compression (LZ4_FRAME, ZSTD)
each non-empty buffer starts with its uncompressed length, an int64 (-1: stored uncompressed). The engine refuses
(exit 3, before anything is read or spent) a file whose used columns decompress to more than the input cap, or that
holds a buffer of a used column larger than ``parquet_sizes.MAX_PAGE_BYTES``: polars decompresses a buffer whole.

The footer and headers are flatbuffers. pyarrow is not a run-time dependency and the ``flatbuffers`` runtime would
still need Arrow's schema compiled in, so the few tables needed are read here by hand (``_Table``: root offset,
vtable, fields), with the field numbers of Arrow's File.fbs, Schema.fbs and Message.fbs.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from dpcli.engine.parquet_sizes import ColumnSizes
from dpcli.errors import InputError

_MAGIC = b"ARROW1"
MAX_METADATA_BYTES = 256 << 20  # the footer or one message header (a few KB in practice)
_MAX_DEPTH = 64  # nested fields

# Schema.fbs: the Type union's members, by the number of buffers of their own (children's come after them)
_NULL, _UNION, _RUN_END_ENCODED, _BINARY_VIEW, _UTF8_VIEW, _LIST_VIEW, _LARGE_LIST_VIEW = 1, 14, 22, 23, 24, 25, 26
_STRUCT, _FIXED_SIZE_LIST = 13, 16
_BINARY, _UTF8, _LARGE_BINARY, _LARGE_UTF8 = 4, 5, 19, 20
# Int, FloatingPoint, Bool, Decimal, Date, Time, Timestamp, Interval, List, FixedSizeBinary, Map, Duration, LargeList
_TWO_BUFFERS = {2, 3, 6, 7, 8, 9, 10, 11, 12, 15, 17, 18, 21}
_MESSAGE_RECORD_BATCH, _MESSAGE_DICTIONARY_BATCH = 3, 2  # Message.fbs: the MessageHeader union's members


class _Malformed(Exception):
    pass


class _Unknown(Exception):
    """A field type whose buffers this reader does not lay out (a union): every buffer of the batch is counted."""


class _Table:
    """A flatbuffer table in ``data`` at ``pos``: its vtable says where each field (numbered from 0) is."""

    def __init__(self, data: bytes, pos: int):
        self.data = data
        self.pos = pos
        vtable = pos - _unpack("<i", data, pos)
        self.vtable = vtable
        self.vtable_size = _unpack("<H", data, vtable)

    def _field(self, n: int) -> int:
        entry = 4 + 2 * n
        if entry + 2 > self.vtable_size:
            return 0
        offset = _unpack("<H", self.data, self.vtable + entry)
        return self.pos + offset if offset else 0

    def scalar(self, n: int, fmt: str, default: int = 0) -> int:
        at = self._field(n)
        return _unpack(fmt, self.data, at) if at else default

    def _indirect(self, n: int) -> int:
        at = self._field(n)
        return at + _unpack("<I", self.data, at) if at else 0

    def string(self, n: int) -> bytes:
        at = self._indirect(n)
        if not at:
            return b""
        length = _bounded(_unpack("<I", self.data, at), self.data)
        return self.data[at + 4 : at + 4 + length]

    def table(self, n: int) -> _Table | None:
        at = self._indirect(n)
        return _Table(self.data, at) if at else None

    def tables(self, n: int) -> list[_Table]:
        at = self._indirect(n)
        if not at:
            return []
        count = _unpack("<I", self.data, at)
        elements = [at + 4 + 4 * i for i in range(_bounded(count, self.data))]
        return [_Table(self.data, e + _unpack("<I", self.data, e)) for e in elements]

    def structs(self, n: int, fmt: str) -> list[tuple[int, ...]]:
        at = self._indirect(n)
        if not at:
            return []
        count = _bounded(_unpack("<I", self.data, at), self.data)
        size = struct.calcsize(fmt)
        if at + 4 + count * size > len(self.data):
            raise _Malformed
        return [struct.unpack_from(fmt, self.data, at + 4 + i * size) for i in range(count)]


def _unpack(fmt: str, data: bytes, at: int) -> int:
    if at < 0 or at + struct.calcsize(fmt) > len(data):
        raise _Malformed
    value: int = struct.unpack_from(fmt, data, at)[0]
    return value


def _bounded(count: int, data: bytes) -> int:
    if count > len(data):
        raise _Malformed
    return count


def _root(data: bytes) -> _Table:
    return _Table(data, _unpack("<I", data, 0))


# -- the schema: which buffers of a batch belong to which top-level field ----------------------------------------------


def _layout(field: _Table, depth: int = 0) -> tuple[int, int, list[int]]:
    """(buffers, view fields, dictionary ids) of a field and its children, in the batch's pre-order (Schema.fbs
    Field: 2 type_type, 4 dictionary, 5 children; a dictionary-encoded field's own buffers are its indices')."""
    if depth > _MAX_DEPTH:
        raise _Malformed
    kind = field.scalar(2, "<B")
    encoding = field.table(4)
    dictionaries = [encoding.scalar(0, "<q")] if encoding is not None else []  # DictionaryEncoding.id
    views = 0
    if encoding is not None or kind in _TWO_BUFFERS:
        own = 2
    elif kind in (_BINARY, _UTF8, _LARGE_BINARY, _LARGE_UTF8, _LIST_VIEW, _LARGE_LIST_VIEW):
        own = 3
    elif kind in (_STRUCT, _FIXED_SIZE_LIST):
        own = 1
    elif kind in (_NULL, _RUN_END_ENCODED):
        own = 0
    elif kind in (_BINARY_VIEW, _UTF8_VIEW):
        own, views = 2, 1  # validity, views, then the batch's variadicBufferCounts entry for this field
    else:
        raise _Unknown  # a union (its buffers depend on the format version and mode) or a type added later
    if encoding is not None and kind in (_BINARY_VIEW, _UTF8_VIEW):
        views = 0  # the indices are integers: the views are in the dictionary's batch
    for child in field.tables(5):
        buffers, child_views, child_dictionaries = _layout(child, depth + 1)
        own += buffers
        views += child_views
        dictionaries += child_dictionaries
    return own, views, dictionaries


# -- the file ----------------------------------------------------------------------------------------------------------


def used_column_sizes(path: Path, used: Iterable[str]) -> ColumnSizes:
    """The decompressed sizes of the columns ``used`` (top-level names) of an Arrow IPC file: the sum of their
    buffers' uncompressed lengths over every record batch (and over the dictionary batches of their dictionaries),
    and the largest such buffer. InputError (exit 3) when the footer or a message header cannot be read: about the
    file's structure, never a value."""
    wanted = set(used)
    where = "Footer"  # what could not be read, named in the message (a structure of the format, no value)
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            if size < 18:
                raise _Malformed
            fh.seek(size - 10)
            length, magic = struct.unpack("<i6s", fh.read(10))
            if magic != _MAGIC or not 0 < length <= min(size - 18, MAX_METADATA_BYTES):
                raise _Malformed
            fh.seek(size - 10 - length)
            footer = _root(_exactly(fh, length))
            schema = footer.table(1)
            if schema is None:
                raise _Malformed
            # (buffers, view fields, dictionary ids, used) per top-level field; None: every buffer counts
            layout: list[tuple[int, int, list[int], bool]] | None
            try:  # Schema.fields; Field.name is field 0
                layout = [(*_layout(f), f.string(0).decode("utf-8", "replace") in wanted) for f in schema.tables(1)]
            except _Unknown:
                layout = None
            used_dictionaries = {d for f in layout or [] for d in f[2] if f[3]}
            where = "Message"
            total = largest = 0
            for kind, blocks in ((_MESSAGE_DICTIONARY_BATCH, footer.structs(2, "<qi4xq")),
                                 (_MESSAGE_RECORD_BATCH, footer.structs(3, "<qi4xq"))):
                for offset, meta_length, body_length in blocks:
                    for buffer_size in _used_buffers(fh, size, offset, meta_length, body_length, kind, layout,
                                                     used_dictionaries):
                        total += buffer_size
                        largest = max(largest, buffer_size)
            return ColumnSizes(total, largest)
    except OSError as exc:
        raise InputError(f"cannot read input {path}: {exc.strerror or 'unreadable'}") from None
    except (_Malformed, struct.error, ValueError, OverflowError):
        raise InputError(f"input {path} could not be read as an Arrow IPC file ({where})") from None


def _used_buffers(
    fh: IO[bytes],
    size: int,
    offset: int,
    meta_length: int,
    body_length: int,
    kind: int,
    layout: list[tuple[int, int, list[int], bool]] | None,
    used_dictionaries: set[int],
) -> list[int]:
    """The uncompressed sizes of the used buffers of the batch in the block at ``offset``."""
    if not 8 <= meta_length <= MAX_METADATA_BYTES or offset < 0 or body_length < 0:
        raise _Malformed
    if offset + meta_length + body_length > size:
        raise _Malformed
    fh.seek(offset)
    header = _exactly(fh, meta_length)
    start = 8 if header[:4] == b"\xff\xff\xff\xff" else 4  # the continuation marker (absent before format 0.15)
    message = _root(header[start:])
    if message.scalar(1, "<B") != kind:  # Message.header_type
        raise _Malformed
    batch = message.table(2)
    if batch is None:
        raise _Malformed
    if kind == _MESSAGE_DICTIONARY_BATCH:
        if layout is not None and batch.scalar(0, "<q") not in used_dictionaries:  # DictionaryBatch.id
            return []
        batch = batch.table(1)  # DictionaryBatch.data: one column, the dictionary's values
        if batch is None:
            raise _Malformed
    buffers = batch.structs(2, "<qq")  # RecordBatch.buffers: (offset, length) in the body
    compressed = batch.table(3) is not None  # RecordBatch.compression
    chosen: Iterable[int] = range(len(buffers))
    if kind == _MESSAGE_RECORD_BATCH and layout is not None:
        variadic = [count for (count,) in batch.structs(4, "<q")]  # RecordBatch.variadicBufferCounts
        if any(count < 0 for count in variadic) or sum(variadic) > len(buffers):
            raise _Malformed
        picked: list[int] = []
        at = 0
        for own, views, _, used in layout:
            n = own + sum(variadic[:views])
            variadic = variadic[views:]
            if used:
                picked.extend(range(at, at + n))
            at += n
        if at != len(buffers):
            raise _Malformed
        chosen = picked
    body = offset + meta_length
    sizes = []
    for i in chosen:
        where, length = buffers[i]
        if where < 0 or length < 0 or where + length > body_length:
            raise _Malformed
        if compressed and length:
            if length < 8:
                raise _Malformed
            fh.seek(body + where)
            (uncompressed,) = struct.unpack("<q", _exactly(fh, 8))
            if uncompressed < -1:
                raise _Malformed
            sizes.append(length - 8 if uncompressed == -1 else uncompressed)
        else:
            sizes.append(length)
    return sizes


def _exactly(fh: IO[bytes], n: int) -> bytes:
    data = fh.read(n)
    if len(data) != n:
        raise _Malformed
    return data
