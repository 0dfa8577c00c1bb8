"""The inputs of `dpcli report`: a released table and its sidecar, read and validated.

The table and the sidecar are trusted for nothing: both are read as regular files of a bounded size, the sidecar
is validated against the shipped JSON Schema (dpcli/publish/schemas/sidecar.schema.json) and numbers are parsed as text,
so a malformed, huge or deeply nested file is exit 2 with a message, never an internal error.
"""

from __future__ import annotations

import csv
import io
import json
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from dpcli.errors import UsageError

# the largest table and sidecar `dpcli report` reads (a CSV table is read as a stream; a JSON one whole)
MAX_TABLE_BYTES = 1 << 30
MAX_JSON_TABLE_BYTES = 256 << 20
MAX_SIDECAR_BYTES = 64 << 20
_MAX_INT_DIGITS = 40  # an integer of the sidecar (a record number, a count of cells) has far fewer digits

_READ_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | os.O_NONBLOCK  # a FIFO in a file's place: not waited on


def _open_regular(path: Path, what: str, limit: int) -> BinaryIO:
    """``path`` opened for reading: a regular file (a FIFO, device or directory is refused, never waited on) of at
    most ``limit`` bytes (exit 2)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {why(exc)}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UsageError(f"{what} {path} is not a regular file (a directory, device, FIFO or socket)")
    if st.st_size > limit:
        os.close(fd)
        raise UsageError(f"{what} {path} is larger than {limit >> 20} MiB: not a dpcli {what.split()[-1]}")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_table(path: Path) -> tuple[list[str], Iterator[dict[str, str]]]:
    """The released table's columns and rows (CSV, or the JSON list of objects for a .json path). A problem is
    exit 2 naming the file and the row number, never a cell's text; so is a table without a statistic or value
    column. A CSV table is read as a stream: the file is closed once its rows are read, or here on a refusal."""
    if path.suffix.lower() == ".json":
        with _open_regular(path, "the table", MAX_JSON_TABLE_BYTES) as fh:
            raw = fh.read()
        doc = _load_json(raw, f"the table {path}")
        if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
            raise UsageError(f"the table {path} is not a JSON list of objects (dpcli release --format json)")
        for n, r in enumerate(doc, start=1):
            if not all(isinstance(v, str | bool | None) for v in r.values()):
                raise UsageError(f"the table {path}: row {n} holds a value that is not a number, text or null")
        columns = list(doc[0]) if doc else []
        check_columns(path, columns)
        return columns, iter([{k: _cell(v) for k, v in r.items()} for r in doc])
    fh = _open_regular(path, "the table", MAX_TABLE_BYTES)
    text = io.TextIOWrapper(fh, encoding="utf-8", newline="")
    reader = csv.reader(text)
    try:
        columns = next(reader, [])
    except (csv.Error, UnicodeDecodeError, OSError) as exc:
        text.close()
        raise UsageError(f"cannot read the table {path}: line 1: {why(exc)}") from None
    try:
        check_columns(path, columns)
    except UsageError:
        text.close()  # the rows' generator, which would close it, is never started
        raise
    return columns, _csv_rows(path, text, reader, columns)


def _cell(value: str | bool | None) -> str:
    """A JSON table's cell as the CSV table would hold it (numbers were kept as their text)."""
    if value is None:
        return ""
    return ("true" if value else "false") if isinstance(value, bool) else value


def _csv_rows(path: Path, text: io.TextIOWrapper, reader: Any, columns: list[str]) -> Iterator[dict[str, str]]:
    with text:
        n = 1
        try:
            for n, record in enumerate(reader, start=2):
                if not record:  # a blank line (csv.DictReader skipped them too)
                    continue
                if len(record) != len(columns):
                    raise UsageError(f"the table {path}: line {n} does not have {len(columns)} fields")
                yield dict(zip(columns, record, strict=True))
        except (csv.Error, UnicodeDecodeError, OSError) as exc:
            raise UsageError(f"cannot read the table {path}: line {n + 1}: {why(exc)}") from None


def why(exc: BaseException) -> str:
    """An OS error's reason, or the exception's class: never its text, which for a decoding error quotes bytes."""
    return getattr(exc, "strerror", None) or type(exc).__name__


def check_columns(path: Path | str, columns: Sequence[str]) -> None:
    missing = [c for c in ("statistic", "value") if c not in columns]
    if missing:
        names = " or ".join(repr(c) for c in missing)
        raise UsageError(f"the table {path} has no {names} column: is it a dpcli table?")


def _int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        raise ValueError("an integer of too many digits")
    return int(text)


def _no_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def _load_json(raw: bytes, what: str, numbers_as_text: bool = True) -> Any:
    """JSON with every number kept as its text (a table: the report parses it exactly) or as a bounded int (a
    sidecar); NaN and Infinity refused. Exit 2 for anything that is not such JSON, however deep or malformed."""
    try:
        return json.loads(
            raw.decode("utf-8"),
            parse_int=str if numbers_as_text else _int,
            parse_float=str if numbers_as_text else float,
            parse_constant=_no_constant,
        )
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        reason = "nested too deeply" if isinstance(exc, RecursionError) else "not JSON"
        raise UsageError(f"{what} is {reason}") from None


_SIDECAR_VALIDATOR: Any = None


def _sidecar_validator() -> Any:
    global _SIDECAR_VALIDATOR  # built once per process, on first use
    if _SIDECAR_VALIDATOR is None:
        import jsonschema

        from dpcli.publish.sidecar import SIDECAR_SCHEMA

        _SIDECAR_VALIDATOR = jsonschema.Draft202012Validator(json.loads(SIDECAR_SCHEMA.read_text(encoding="utf-8")))
    return _SIDECAR_VALIDATOR


def read_sidecar(path: Path) -> dict[str, Any]:
    """A sidecar as dpcli writes it: a regular file of at most MAX_SIDECAR_BYTES, valid against the shipped schema
    (`dpcli schema --sidecar`). Exit 2 otherwise, naming where the document departs from the schema."""
    with _open_regular(path, "the sidecar", MAX_SIDECAR_BYTES) as fh:
        raw = fh.read()
    doc = _load_json(raw, f"the sidecar {path}", numbers_as_text=False)
    check_sidecar(doc, f"the sidecar {path}")
    sidecar: dict[str, Any] = doc  # the schema's top level is an object: check_sidecar refused anything else
    return sidecar


def check_sidecar(doc: Any, what: str) -> None:
    import jsonschema

    try:
        error = jsonschema.exceptions.best_match(_sidecar_validator().iter_errors(doc))
    except RecursionError:
        raise UsageError(f"{what} is nested too deeply") from None
    if error is not None:
        where = error.json_path if len(error.json_path) <= 120 else error.json_path[:120] + "…"
        raise UsageError(
            f"{what} is not a dpcli sidecar (contract 0.3): at {where}, it fails the schema's "
            f"'{error.validator}' rule",
            hint="`dpcli schema --sidecar` prints the schema",
        )


def beside(table_path: Path) -> Path | None:
    """The sidecar next to a table (OUT.csv.meta.json), when there is one."""
    path = table_path.with_name(table_path.name + ".meta.json")
    return path if os.path.lexists(path) else None
