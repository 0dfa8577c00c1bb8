"""One record's bytes change only that record's contribution (contract.md, "Records"; threat model, item 3).

By default one physical line is one record. Whatever one line holds (an unbalanced quote, NUL, bytes that are not
UTF-8, a wrong number of fields, a lone CR, a very long line), adding it to a file adds exactly what that line alone
gives: the plain count goes up by one, and no other record's reading changes. It never changes the exit code and
never prints anything. Exact answers go through the engine (and the no-noise table path for the count of finding 3);
the CLI runs check the exit code and stderr.
"""

from __future__ import annotations

import contextlib
import csv
import io
import random
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcli.core.accounting import Cap
from dpcli.engine import aggregate
from dpcli.errors import InputError
from dpcli.ledger import open_ledger
from dpcli.mechanisms.noise import exact_noisy
from dpcli.plan.model import make_plan
from dpcli.publish.table import build_table
from dpcli.specs.load import parse_spec
from tests.helpers import run_dpcli
from tests.spec_builder import spec_text

SPEC = """\
version: 1
dataset: toy
privacy: {epsilon: 1}
columns:
  age:    {type: int, bounds: [0, 100]}
  income: {type: float, bounds: [0, 1000], precision: 0.01}
  sex:    {type: category, categories: [F, M]}
  grp:    {type: category, categories: [a, b, X], other: X}
  flag:   {type: bool}
statistics:
  - {name: n, kind: count}
  - {name: by_sex, kind: count, by: [sex]}
  - {name: ages, kind: histogram, column: age, bins: [0, 18, 65, 101]}
  - {name: mean_income, kind: mean, column: income, by: [sex]}
  - {name: total, kind: sum, column: income}
  - {name: flags, kind: histogram, column: flag, by: [grp]}
"""
HEADER = b"age,income,sex,grp,flag,note"
PLAN = make_plan(parse_spec(SPEC))


def rfc_plan():
    return make_plan(parse_spec(SPEC + "csv: {quoted_line_breaks: true}\n"))


def base_rows(n: int = 40) -> list[bytes]:
    rng = random.Random(n)
    rows = [
        f"{rng.randint(0, 99)},{rng.randint(0, 99999) / 100},{'FM'[i % 2]},{'abz'[i % 3]},"
        f"{'true' if i % 4 else '0'},note {i}".encode()
        for i in range(n)
    ]
    return rows


def csv_file(path: Path, rows: list[bytes], eol: bytes = b"\n", final_eol: bool = True, header: bytes = HEADER) -> Path:
    path.write_bytes(header + eol + eol.join(rows) + (eol if final_eol and rows else b""))
    return path


def exacts(plan, path: Path) -> list[tuple[list[int], list[int] | None]]:
    return [(e.counts.tolist(), None if e.sums is None else [int(s) for s in e.sums]) for e in aggregate(plan, path)]


def added(a: list, b: list) -> list:
    return [
        (
            [x + y for x, y in zip(ca, cb, strict=True)],
            None if sa is None else [x + y for x, y in zip(sa, sb, strict=True)],
        )
        for (ca, sa), (cb, sb) in zip(a, b, strict=True)
    ]


def one_record(contribution: list) -> None:
    """What one record can add under add/remove: the plain count 1, and at most one cell of every other statistic,
    moved by at most what a value within the bounds can move it."""
    assert contribution[0] == ([1], None)
    for (counts, sums), sp in zip(contribution[1:], PLAN.statistics[1:], strict=True):
        assert all(c in (0, 1) for c in counts), (sp.statistic.name, counts)
        assert sum(counts) <= 1, (sp.statistic.name, counts)
        if sums is not None:
            limit = sp.component("sum").sensitivity
            assert all(s == 0 or (c == 1 and abs(s) <= limit) for c, s in zip(counts, sums, strict=True)), (
                sp.statistic.name,
                sums,
            )


def alone(tmp_path: Path, line: bytes, eol: bytes = b"\n", plan=PLAN) -> list:
    return exacts(plan, csv_file(tmp_path / "alone.csv", [line], eol))


# ---------------------------------------------------------------------------------------------------------------
# Finding 3: an unescaped quote in one record's free text swallowed the records after it


def finding_3_rows() -> list[bytes]:
    rows = [
        f"{20 + i % 50},{i % 1000}.5,{'FM'[i % 2]},{'ab'[i % 2]},{'true' if i % 3 else 'false'},note {i}".encode()
        for i in range(1000)
    ]
    rows[500] = rows[500].rsplit(b",", 1)[0] + b',"unterminated free text of one person'
    return rows


def test_finding_3_an_unescaped_quote_in_unused_free_text_leaves_every_other_record_alone(tmp_path: Path) -> None:
    rows = finding_3_rows()
    hostile = csv_file(tmp_path / "hostile.csv", rows)
    clean = csv_file(tmp_path / "clean.csv", [r.replace(b'"', b"") for r in rows])
    exact = aggregate(PLAN, hostile)
    table = build_table(PLAN, exact_noisy(exact))
    count = next(row for row in table.rows() if row[0] == "n")
    assert count[table.columns.index("value")] == "1000"  # was ~501 when the quote swallowed the rest of the file
    assert exacts(PLAN, hostile) == exacts(PLAN, clean)
    assert exact[1].counts.tolist() == [500, 500]


def test_finding_3_through_the_command_exits_0_and_prints_nothing(tmp_path: Path) -> None:
    csv_file(tmp_path / "hostile.csv", finding_3_rows())
    (tmp_path / "spec.yaml").write_text(SPEC)
    open_ledger(tmp_path / "ledger.jsonl").set_cap("toy", Cap(Fraction(100), Fraction(0)), False)
    r = run_dpcli("release", tmp_path / "spec.yaml", "-i", tmp_path / "hostile.csv", "-o", tmp_path / "out.csv",
                  "--ledger", tmp_path / "ledger.jsonl", "--quiet")
    assert r.returncode == 0, r.stderr
    assert r.stderr == b""
    assert r.stdout == b""  # polars used to warn here, naming the bad row's offset


# ---------------------------------------------------------------------------------------------------------------
# Finding 5: one byte that is not UTF-8 in a data cell failed the whole release (exit 3)

POSITIONS = {"first": 0, "middle": 20, "last": 39}
CELLS = {"age": 0, "sex": 2, "grp": 3, "note": 5}  # used int, used category, used category with `other:`, unused


def with_cell(rows: list[bytes], row: int, column: int, value: bytes) -> list[bytes]:
    out = list(rows)
    fields = out[row].split(b",")
    fields[column] = value
    out[row] = b",".join(fields)
    return out


@pytest.mark.parametrize("final_eol", [True, False], ids=["eol", "no_final_eol"])
@pytest.mark.parametrize("column", CELLS)
@pytest.mark.parametrize("where", POSITIONS)
def test_finding_5_a_cell_that_is_not_utf8_is_missing(tmp_path: Path, where: str, column: str, final_eol: bool) -> None:
    rows, i, j = base_rows(), POSITIONS[where], CELLS[column]
    cell = rows[i].split(b",")[j]
    # a stray byte, a Latin-1 letter, a cut sequence, an encoded surrogate
    for bad in (cell + b"\xff", b"\xe9" + cell, cell[:1] + b"\xc3(" + cell[1:], b"\xed\xa0\x80"):
        hostile = csv_file(tmp_path / "hostile.csv", with_cell(rows, i, j, bad), final_eol=final_eol)
        # the cell is missing: for the unused column that changes nothing at all
        clean = csv_file(tmp_path / "clean.csv", with_cell(rows, i, j, cell if column == "note" else b""),
                         final_eol=final_eol)
        assert exacts(PLAN, hostile) == exacts(PLAN, clean), bad


def test_a_cell_that_is_not_utf8_is_not_counted_under_other(tmp_path: Path) -> None:
    """`other: X` counts undeclared *text* under X; a cell with a decoding problem (or U+FFFD itself) is missing."""
    for value in (b"zz\xff", b"\xff", "zz\ufffd".encode()):
        hostile = csv_file(tmp_path / "h.csv", [b"1,1,F," + value + b",true,x"])
        assert exacts(PLAN, hostile)[5] == ([0] * 6, None), value
    assert exacts(PLAN, csv_file(tmp_path / "z.csv", [b"1,1,F,zz,true,x"]))[5] == ([0, 0, 0, 0, 0, 1], None)


@pytest.mark.parametrize("where", ["middle", "last"])
def test_finding_5_through_the_command_exits_0_and_prints_nothing(tmp_path: Path, where: str) -> None:
    rows = with_cell(base_rows(), POSITIONS[where], CELLS["sex"], b"M\xe9")
    csv_file(tmp_path / "hostile.csv", rows, final_eol=where != "last")
    (tmp_path / "spec.yaml").write_text(SPEC)
    open_ledger(tmp_path / "ledger.jsonl").set_cap("toy", Cap(Fraction(100), Fraction(0)), False)
    r = run_dpcli("release", tmp_path / "spec.yaml", "-i", tmp_path / "hostile.csv", "-o", tmp_path / "out.csv",
                  "--ledger", tmp_path / "ledger.jsonl", "--quiet")
    assert (r.returncode, r.stderr, r.stdout) == (0, b"", b"")


# ---------------------------------------------------------------------------------------------------------------
# Every kind of malformed record: adding it adds exactly its own contribution

MALFORMED = {
    "open_quote": b'31,"12.5,F,a,true,note',
    "open_quote_in_unused_text": b'31,12.5,F,a,true,"free text, with a comma',
    "open_quote_in_used_category": b'31,12.5,"F,a,true,x',
    "quote_mid_field": b'3"1,12.5,F,a,true,no"te',
    "quote_after_a_quoted_field": b'31,"12.5"x,"F"",a,true,x',
    "escaped_quotes": b'31,12.5,"F",a,true,"say ""hi"""',
    "escaped_quote_in_a_key": b'31,12.5,"F""",a,true,x',
    "separator_in_quotes": b'31,"12.5",F,"a,b",true,"x,y,z"',
    "a_key_with_a_separator_quoted": b'31,12.5,M,"a",true,","',
    "nul": b"3\x001,12.5,F\x00,a,true,n\x00",
    "nul_in_quotes": b'31,"12\x00.5","F\x00",a,true,"\x00"',
    "invalid_utf8": b"31,12.5,F\xff,\xc3(,true,\xfe\xfe",
    "invalid_utf8_in_quotes": b'31,"12.5\xff","F",a,true,"\xff"',
    "too_many_fields": b"31,12.5,F,a,true,x,1,2,3,4",
    "too_many_fields_quoted": b'31,12.5,F,a,true,x,"1,2","3',
    "too_few_fields": b"31,12.5",
    "one_field": b"31",
    "cr_inside_lf_file": b"31,12\r.5,F\r,a,true\r,x",
    "cr_inside_quotes": b'31,"12.5\r",F,"a\r",true,x',
    "crlf_then_quote": b'31,12.5,F,a,true,"x"\r',
    "very_long_line": b"31,12.5,F,a,true," + b"x" * (3 << 20),
    "very_long_quoted_line": b'31,12.5,F,a,true,"' + b"x," * (1 << 19),
    "very_long_number": b"31," + b"9" * (1 << 20) + b",F,a,true,x",
    "empty_line": b"",
    "spaces": b"   ",
    "only_quotes": b'"""""',
    "only_separators": b",,,,,,,,,,",
    "arbitrary_bytes": bytes(range(256)).replace(b"\n", b""),
    "utf16": "31,12.5,F,a,true,x".encode("utf-16"),
    "bom": b"\xef\xbb\xbf31,12.5,F,a,true,x",
}


@pytest.mark.parametrize("line", MALFORMED.values(), ids=MALFORMED.keys())
def test_one_malformed_record_changes_the_aggregates_by_its_own_contribution_only(tmp_path: Path, line: bytes) -> None:
    rows = base_rows()
    own = alone(tmp_path, line)
    one_record(own)
    without = exacts(PLAN, csv_file(tmp_path / "without.csv", rows))
    for where in (0, 1, 20, len(rows)):
        with_it = csv_file(tmp_path / "with.csv", [*rows[:where], line, *rows[where:]])
        assert exacts(PLAN, with_it) == added(without, own), where
    if line:  # the file's last line, without a line end
        with_it = csv_file(tmp_path / "with.csv", [*rows, line], final_eol=False)
        assert exacts(PLAN, with_it) == added(without, own)


def test_malformed_records_read_as_documented(tmp_path: Path) -> None:
    """The readable fields of a malformed line are read; a quote still open at the end of the line closes there."""
    cases = {
        b'31,"12.5,F,a,true,note': ([0, 0], [0, 0, 0]),  # income holds the rest of the line: the rest is missing
        b'31,12.5,"F,a,true,x': ([0, 0], [0, 0, 0]),  # sex holds 'F,a,true,x'
        b'31,12.5,"F': ([1, 0], [0, 0, 0]),  # closed at the end of the line: sex is F
        b'31,12.5,"F"",a': ([0, 0], [0, 0, 0]),  # sex is 'F",a'
        b'31,12.5,"F"x,"a",1': ([0, 0], [1, 0, 0]),  # the csv module's reading: sex is 'Fx'
        b'31,12.5,F,"a,b",1': ([1, 0], [0, 0, 1]),  # grp 'a,b' is undeclared: other
        b'31,12.5,M,"a",1': ([0, 1], [1, 0, 0]),
        b"31,12.5,F\r,a\r,1\r": ([1, 0], [1, 0, 0]),  # one CR at the end of a field is dropped (CRLF reads as LF)
        b"31,12.5,F\r\r,a,1": ([0, 0], [1, 0, 0]),  # only one
        b'31,12.5,"F\r","a"\r,1': ([1, 0], [1, 0, 0]),  # also in quotes
    }
    for line, (by_sex, flags_true) in cases.items():
        got = alone(tmp_path, line)
        assert got[1][0] == by_sex, line
        assert got[5][0][1::2] == flags_true, line  # flag true, by grp a, b, X


def test_a_lone_cr_in_an_lf_file_and_a_lone_lf_in_a_cr_file_are_data(tmp_path: Path) -> None:
    lf = csv_file(tmp_path / "lf.csv", [b"31,12.5,F\rM,a,true,x", b"32,1,M,a\nb,1,x"], b"\n")
    assert exacts(PLAN, lf)[0] == ([3], None)  # the LF inside the second row ends a line in an LF file
    assert exacts(PLAN, lf)[1] == ([0, 1], None)
    cr = csv_file(tmp_path / "cr.csv", [b"31,12.5,F\nM,a,true,x", b"32,1,M,a,true,x"], b"\r")
    assert exacts(PLAN, cr)[0] == ([2], None)
    assert exacts(PLAN, cr)[1] == ([0, 1], None)  # 'F\nM' is one (undeclared) cell


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_line_ends_lf_crlf_and_cr_give_identical_aggregates(tmp_path: Path, eol: bytes) -> None:
    rows = [*base_rows(60), b'31,"12.5",M,"a,b",true,"x"', b'32,"1,F,a,1,x', b"", b'1,2,"M""",b,0,"y""z"']
    reference = exacts(PLAN, csv_file(tmp_path / "lf.csv", rows, b"\n"))
    assert reference[0] == ([64], None)
    assert exacts(PLAN, csv_file(tmp_path / "other.csv", rows, eol)) == reference
    assert exacts(PLAN, csv_file(tmp_path / "other.csv", rows, eol, final_eol=False)) == reference


def test_the_header_decides_the_line_end_for_the_whole_file(tmp_path: Path) -> None:
    """The header's own first line-break byte decides: LF, or CR (CRLF and CR-only files alike, an LF right after a
    CR belonging to that line end). No data byte can switch it: in a CR-only file the byte after the header's CR is
    the first record's."""
    path = tmp_path / "mixed.csv"
    cases = [
        (b"\n31,1,F,a,1,x\r32,2,M,a,1,x\n", [1], [1, 0]),  # LF: a lone CR is data
        (b"\r31,1,F,a,1,x\n32,2,M,a,1,x\r33,3,M,a,1,x\r", [2], [1, 1]),  # CR: an LF is data
        (b"\r\n31,1,F,a,1,x\n32,2,M,a,1,x\r\n", [1], [1, 0]),  # CRLF: a lone LF is data
        (b"\r\n31,1,F,a,1,x\r32,2,M,a,1,x\r\n", [2], [1, 1]),  # CRLF: a lone CR ends a line
        (b"\r\n31,1,F,a,1,x\r\n32,2,M,a,1,x\r", [2], [1, 1]),  # a CR file whose first record starts with LF
        (b"\r\n\n31,1,F,a,1,x\r\n\r\n", [2], [1, 0]),  # the second LF is data (age "\\n31" is missing); an empty line
        (b"\r\n", [0], [0, 0]),  # the header only
    ]
    for data, n, by_sex in cases:
        path.write_bytes(HEADER + data)
        got = exacts(PLAN, path)
        assert (got[0][0], got[1][0]) == (n, by_sex), data


# ---------------------------------------------------------------------------------------------------------------
# Random lines: a file's aggregates are the sum of its lines' aggregates (no line changes another's reading)

LINE_PIECES = [b'"', b'"', b'""', b",", b",", b"\r", b"\n", b"\x00", b"\xff", b"\xc3\xa9", b" ", b"F", b"M", b"a", b"z",
               b"true", b"0", b"7", b"-1", b"12.5", b"1e3", b"nan"]


@st.composite
def lines(draw: st.DrawFn, eol: bytes) -> bytes:
    if draw(st.booleans()):
        pieces = draw(st.lists(st.sampled_from(LINE_PIECES), max_size=14))
        return b"".join(pieces).replace(eol, b"")
    # a line of well-formed (and sometimes broken) quoted fields
    fields = []
    for content in draw(st.lists(st.lists(st.sampled_from(LINE_PIECES), max_size=3), min_size=1, max_size=7)):
        text = b"".join(content).replace(eol, b"")
        fields.append(b'"' + text.replace(b'"', b'""') + b'"' if draw(st.booleans()) else text.replace(b'"', b""))
    return b",".join(fields)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), eol=st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_random_files_are_the_sum_of_their_lines(tmp_path: Path, data: st.DataObject, eol: bytes) -> None:
    sep = eol[:1]  # the byte that ends a line: LF, or CR (a CRLF file reads as a CR file)
    rows = data.draw(st.lists(lines(sep), min_size=1, max_size=8))
    whole = exacts(PLAN, csv_file(tmp_path / "whole.csv", rows, eol))
    total = None
    for row in rows:
        own = exacts(PLAN, csv_file(tmp_path / "one.csv", [row], eol))
        one_record(own)
        total = own if total is None else added(total, own)
    assert whole == total


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), eol=st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_the_quoted_lines_are_the_same_however_the_file_is_cut(tmp_path: Path, data: st.DataObject, eol: bytes) -> None:
    """Quoted lines found one by one (few quotes) or by array search (many), in stretches of any size: the same
    lines, read the same way."""
    from dpcli.engine.csv_header import header_layout
    from dpcli.engine.lines import LineRepair, quoted_chunks

    rows = data.draw(st.lists(lines(eol[:1]), min_size=1, max_size=12))
    path = csv_file(tmp_path / "cut.csv", rows, eol, final_eol=data.draw(st.booleans()))
    layout = header_layout(path)
    repair = LineRepair({0, 2, 3}, layout.eol)
    seen = []
    for chunk_bytes in (1, 7, 1 << 20):
        for sparse in (1, 10**9):
            chunks = list(quoted_chunks(path.read_bytes(), layout.data_start, layout.eol, repair, chunk_bytes, sparse))
            # in any order (runs of plain lines come before the repaired lines of the same stretch)
            raw = sorted(b"".join(c.raw for c in chunks).split(layout.eol))
            fixed = sorted(b"".join(c.data for c in chunks).split(layout.eol))
            seen.append((raw, fixed, sum(c.lines for c in chunks)))
    assert all(s == seen[0] for s in seen)
    assert seen[0][2] == sum(b'"' in r for r in rows)


FIVE = parse_spec(spec_text(
    {"s": "{type: category, categories: [F]}", "i": "{type: int, bounds: [0, 9]}",
     "f": "{type: float, bounds: [0, 9]}", "t": "{type: bool}", "j": "{type: int, bounds: [0, 9]}"},
    ["{name: a, kind: count, by: [s, t]}", "{name: b, kind: sum, column: i}", "{name: c, kind: sum, column: f}",
     "{name: d, kind: sum, column: j}"],
    privacy="epsilon: 1", dataset="t",
))


@pytest.mark.parametrize("first", ["s", "i", "f"])  # the first column's type matters in a CR file
@settings(max_examples=150, deadline=None)
@given(data=st.data(), eol=st.sampled_from([b"\n", b"\r"]))
def test_a_line_reads_the_same_whichever_way_it_goes(first: str, data: st.DataObject, eol: bytes) -> None:
    """A line without quotes (the main scan), a plain line (polars' RFC 4180 parser on it) and any line repaired by
    the csv module give the same cells, for text, int and float columns (empty text and null are both missing)."""
    import polars as pl

    from dpcli.engine.lines import LineRepair, classify, plain_lines
    from dpcli.engine.polars_engine import line_reader

    header = [first] + [c for c in ["s", "i", "f", "t", "j"] if c != first]
    reader = line_reader(FIVE.columns, header, header, eol)
    line = data.draw(lines(eol))
    view = np.frombuffer(line + eol, dtype=np.uint8)
    quoted_lines, bad = classify(view, np.array([len(line)]), eol[0])
    quoted = [len(quoted_lines) == 1]

    def read(data: bytes, quoting: bool, select: list) -> list:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows = pl.scan_csv(data, **reader.options(quoting)).select(select).collect().rows()
        return [tuple(None if v == "" else "FFFD" if isinstance(v, str) and "\ufffd" in v else "NaN" if v != v else v
                      for v in r) for r in rows]

    repaired = read(LineRepair(set(range(5)), eol)(line), True, reader.select_lines)
    assert len(repaired) == 1
    if quoted[0] and not bad[0]:
        assert read(plain_lines(line + eol, eol[0]), True, reader.select_lines) == repaired, line
    if b'"' not in line:
        assert read(line + eol, False, reader.select) == repaired, line


NUMBER_TEXT = st.one_of(
    st.sampled_from(["", " 7", "\t7", "7 ", "+3", "-0", "007", "1_0", "0x1", "nan", "inf", "1e309", "1e-400", "3.",
                     ".5", "1E1", "99999999999999999999", "-9223372036854775808", "١", "1,5", "\x00", "\n7", "\n\n7"]),
    st.text(alphabet="0123456789+-.eE \tnaif_x\n", max_size=8),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cells=st.lists(NUMBER_TEXT, min_size=1, max_size=20), kind=st.sampled_from(["int", "float"]))
def test_a_number_in_the_first_column_of_a_cr_file_reads_as_in_any_other(
    tmp_path: Path, cells: list, kind: str
) -> None:
    """There the first column is read as text and cast (its line-end LF taken off): the same numbers either way."""
    bounds = "[-1000, 1000]" if kind == "int" else "[-1000, 1000], precision: 0.001"
    column = f"{{type: {kind}, bounds: {bounds}}}"
    plan = make_plan(parse_spec(spec_text(
        {"a": column, "b": column}, ["{name: a, kind: sum, column: a}", "{name: b, kind: sum, column: b}"],
        privacy="epsilon: 1", dataset="t",
    )))
    for eol in (b"\r", b"\r\n"):
        rows = [c.encode().replace(b"\r", b"") for c in cells]
        first = exacts(plan, csv_file(tmp_path / "n.csv", [r + b",x" for r in rows], eol, header=b"a,b"))[0]
        # the same text in the second column, read by polars' CSV parser (in a CR file, an LF that starts a line
        # belongs to the line end before; after a CRLF, that LF is the line end's and a second one is data)
        moved = [b"x," + (r[1:] if eol == b"\r" and r.startswith(b"\n") else r) for r in rows]
        assert first == exacts(plan, csv_file(tmp_path / "m.csv", moved, eol, header=b"a,b"))[1], eol


def test_a_release_of_plain_counts_reads_no_column_and_counts_every_line(tmp_path: Path) -> None:
    plan = make_plan(parse_spec(SPEC.split("statistics:")[0] + "statistics:\n  - {name: n, kind: count}\n"))
    rows = base_rows() + list(MALFORMED.values())
    for eol in (b"\n", b"\r\n", b"\r"):
        clean = [r.replace(b"\r", b"").replace(b"\n", b"") for r in rows]
        assert exacts(plan, csv_file(tmp_path / "c.csv", clean, eol)) == [([len(rows)], None)], eol


def test_aggregations_in_threads_agree(tmp_path: Path) -> None:
    """`dpcli audit` aggregates in threads: the process-wide settings the reader changes are shared safely."""
    from concurrent.futures import ThreadPoolExecutor

    paths = [csv_file(tmp_path / f"{i}.csv", [*base_rows(30 + i), list(MALFORMED.values())[i]]) for i in range(12)]
    alone_results = [exacts(PLAN, p) for p in paths]
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(lambda p: exacts(PLAN, p), paths)) == alone_results
    # and restored once the last one is done
    assert csv.field_size_limit() == 131072
    assert warnings.filters[:1] != [("ignore", None, Warning, None, 0)]


# ---------------------------------------------------------------------------------------------------------------
# Nothing printed, whatever the data


def test_no_output_on_stderr_from_the_reader(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    rows = base_rows() + list(MALFORMED.values())[:20]
    for eol in (b"\n", b"\r"):
        path = csv_file(tmp_path / "all.csv", [r.replace(eol, b"") for r in rows], eol)
        aggregate(PLAN, path)
        # a broken writer voids what quoted_line_breaks declares: exit 3 is allowed there
        with contextlib.suppress(InputError):
            aggregate(rfc_plan(), path)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


# ---------------------------------------------------------------------------------------------------------------
# csv: {quoted_line_breaks: true}: polars' RFC 4180 reader, for files from a correct writer


def test_quoted_line_breaks_from_a_correct_writer_are_one_record(tmp_path: Path) -> None:
    records = [
        ["31", "12.5", "F", "a", "true", "one line"],
        ["32", "7", "M", "b", "false", "two\nlines, with a comma"],
        ["33", "1.25", "F", "zz", "1", 'a "quoted"\r\nword'],
        ["34", "", "M", "a", "0", ""],
        ["35", "2", "F\nM", "a", "1", "x"],  # a line break inside a used cell: undeclared
    ]
    for terminator in ("\r\n", "\n"):
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator=terminator)
        writer.writerow(HEADER.decode().split(","))
        writer.writerows(records)
        path = tmp_path / "rfc.csv"
        path.write_text(buffer.getvalue(), newline="")
        got = exacts(rfc_plan(), path)
        assert got[0] == ([5], None)
        assert got[1] == ([2, 2], None)
        assert got[2] == ([0, 5, 0], None)
        cents = [1250, 700, 125, 200]
        assert got[4] == ([4], [sum(cents)])
        # flag by grp: (a, true) 31, 35; (b, false) 32; (X, true) 33; (a, false) 34
        assert got[5] == ([1, 2, 1, 0, 0, 1], None)
        # read line by line (the default), the same file has more records, none swallowing another
        assert exacts(PLAN, path)[0][0][0] > 5


def test_quoted_line_breaks_header_may_hold_a_quoted_line_break(tmp_path: Path) -> None:
    path = tmp_path / "h.csv"
    path.write_bytes(b'"free\ntext",age,income,sex,grp,flag,note\r\n"x\ny",31,1,F,a,1,z\r\n')
    assert exacts(rfc_plan(), path)[1] == ([1, 0], None)
