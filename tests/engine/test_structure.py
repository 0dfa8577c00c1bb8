"""Structural errors of an input (docs/spec.md, "How lines are read"): an InputError (exit 3) whose message holds no
cell value; the header is the first line; a body that is not UTF-8 makes a cell missing, not a failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpcli.engine import aggregate, check_header, read_header
from dpcli.errors import InputError
from tests.engine.test_aggregate import plan_for, run, write

# ---------------------------------------------------------------------------------------------------------------
# Structural errors: InputError (exit 3), with no cell value in the message

CANARY = "CANARY7731"
SPEC_COLUMNS = "  c: {type: category, categories: [a, b]}\n  x: {type: int, bounds: [0, 100]}\n"
SPEC_STATS = "  - {name: n, kind: count}\n  - {name: s, kind: sum, column: x}\n"
NOT_UTF8 = (
    "is not UTF-8 text: declare its encoding, csv: {encoding: ...} "
    "(one of: utf-8, latin-1, iso-8859-15, cp1252, cp1250, ascii, utf-16, utf-16-le, utf-16-be)"
)


def structural(path: Path) -> str:
    """The InputError of the header checks and of the engine (when it fails too), checked and returned."""
    with pytest.raises(InputError) as info:
        check_header(path, read_header(path), ["c", "x"])
    exc = info.value
    assert exc.exit_code == 3
    message = str(exc)
    assert CANARY not in message
    assert "\n" not in message
    return message


def test_empty_file(tmp_path):
    for name, data in (("empty.csv", b""), ("blank.csv", b"\n\n  \n")):
        path = write(tmp_path, data, name)
        assert structural(path) == f"input {path} is empty: a CSV needs at least a header line"
        with pytest.raises(InputError) as info:
            aggregate(plan_for(SPEC_COLUMNS, SPEC_STATS), path)
        assert info.value.exit_code == 3


def test_header_not_utf8(tmp_path):
    path = write(tmp_path, f"c,x,{CANARY}\xe9\na,1,z\n".encode("latin-1"))
    assert structural(path) == f"input {path} {NOT_UTF8}"


def test_body_not_utf8_is_a_missing_cell_not_a_failure(tmp_path):
    """Only the header decides exit 3: a data cell that is not UTF-8 is missing (docs/spec.md), wherever it is."""
    plan = plan_for(SPEC_COLUMNS, SPEC_STATS + "  - {name: h, kind: histogram, column: c}\n")
    for data, clean in (
        (f"c,x\na{CANARY}\xe9,1\nb,2\n", "c,x\n,1\nb,2\n"),
        (f"c,x\nb,2\na,1{CANARY}\xe9\n", "c,x\nb,2\na,\n"),
        ("c,x\n" + "a,1\n" * 300_000 + "b\xe9,2\n", "c,x\n" + "a,1\n" * 300_000 + ",2\n"),  # past the first MiB
    ):
        path = write(tmp_path, data.encode("latin-1"))
        assert read_header(path) == ["c", "x"]
        expected = aggregate(plan, write(tmp_path, clean, "clean.csv"))
        got = aggregate(plan, path)
        assert [(e.counts.tolist(), e.sums if e.sums is None else e.sums.tolist()) for e in got] == [
            (e.counts.tolist(), e.sums if e.sums is None else e.sums.tolist()) for e in expected
        ]


def test_the_header_is_its_first_line_whatever_follows(tmp_path):
    """Bytes after the header line (not UTF-8, NUL, quotes) never make the header unreadable."""
    path = write(tmp_path, b'c,x\n\xff\x00"' + CANARY.encode() + b"\n")
    assert read_header(path) == ["c", "x"]
    path = write(tmp_path, b'"c,1",x,"c\n\xff\n', "quoted.csv")
    assert read_header(path) == ["c,1", "x", "c"]  # a quote still open at the end of the header line closes there
    # with csv.quoted_line_breaks the header is a record, which here runs on into the bytes that are not UTF-8
    assert structural_rfc(path) == f"input {path} {NOT_UTF8}"
    path = write(tmp_path, b'"c\n1",x\r\n1,2\r\n', "multiline.csv")
    assert read_header(path, quoted_line_breaks=True) == ["c\n1", "x"]


def test_header_size_limits(tmp_path):
    names = "c,x" + ",h" * ((1 << 19) - 2) + "i"
    assert len(names) == 1 << 20
    path = write(tmp_path, names + "\r\na,1\n")  # exactly 1 MiB, then CRLF: read
    assert read_header(path)[:2] == ["c", "x"]
    path = write(tmp_path, names + "h\na,1\n", "over.csv")
    assert structural(path) == f"input {path} has no readable header line: it is over 1024 KiB"
    path = write(tmp_path, "c,x," + "h" * (128 << 10) + "x\na,1\n", "name.csv")
    assert structural(path) == f"input {path} has no readable header line"


def structural_rfc(path: Path) -> str:
    with pytest.raises(InputError) as info:
        read_header(path, quoted_line_breaks=True)
    return str(info.value)


def test_duplicate_header_names(tmp_path):
    path = write(tmp_path, f"c,x,c\na,1,{CANARY}\n")
    assert structural(path) == f"input {path}: declared column(s) appear more than once in the header: c"
    path = write(tmp_path, f"c,x,{CANARY},{CANARY}\na,1,2,3\n", "other.csv")
    assert structural(path) == f"input {path}: the header has 1 duplicate column name(s)"


def test_declared_column_missing(tmp_path):
    path = write(tmp_path, f"c,{CANARY}\na,1\n")
    assert structural(path) == f"input {path}: declared column(s) missing from the header: x"
    with pytest.raises(InputError) as info:
        aggregate(plan_for(SPEC_COLUMNS, SPEC_STATS), path)
    assert info.value.exit_code == 3
    assert CANARY not in str(info.value)


def test_a_directory(tmp_path):
    write(tmp_path, "c,x\na,1\n", "inside.csv")
    assert structural(tmp_path) == f"input {tmp_path} is a directory, not a CSV file"
    with pytest.raises(InputError) as info:
        aggregate(plan_for(SPEC_COLUMNS, SPEC_STATS), tmp_path)
    assert str(info.value) == f"input {tmp_path} is a directory, not a CSV file"
    assert info.value.exit_code == 3


def test_a_missing_file(tmp_path):
    path = tmp_path / "nope.csv"
    assert structural(path) == f"input {path} does not exist"


def test_header_with_bom_is_read(tmp_path):
    path = write(tmp_path, b"\xef\xbb\xbfc,x\na,1\nb,2\n")
    assert read_header(path) == ["c", "x"]
    check_header(path, ["c", "x"], ["c", "x"])
    out = run(SPEC_COLUMNS, SPEC_STATS + "  - {name: h, kind: histogram, column: c}\n", path)
    assert out == {"n": ([2], None), "s": ([2], [3]), "h": ([1, 1], None)}
