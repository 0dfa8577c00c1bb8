"""Compressed inputs, CSV dialects and the chunked reader (docs/spec.md, "Input formats" and "CSV dialects").

Every exact answer goes through the engine's no-noise path (``dpcli.engine.aggregate``): the same records written
another way (gzip, zstd, another delimiter, another encoding, no header line) must give exactly the same per-cell
counts and fixed-point sums as the plain UTF-8 CSV, and cutting the input into chunks anywhere between lines must
change nothing. The CLI runs check exit codes and that nothing is spent when an input is refused.
"""

from __future__ import annotations

import csv
import gzip
import io
import random
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcli.engine import aggregate, check_input
from dpcli.engine.cells import ExactStatistic
from dpcli.engine.polars_engine import LineAggregator
from dpcli.engine.source import CsvSource, _mapped_chunks
from dpcli.errors import InputError
from dpcli.plan.model import make_plan
from dpcli.specs.load import parse_spec
from tests.helpers import run_dpcli, run_in_process
from tests.spec_builder import spec_text

ADULT = Path(__file__).parents[1] / "data" / "adult.csv"

SPEC = spec_text(
    {"age": "{type: int, bounds: [17, 90]}", "sex": "{type: category, categories: [Male, Female]}",
     "race": "{type: category, categories: [White, Black, Asian-Pac-Islander, Other], other: Other}",
     "hours_per_week": "{type: float, bounds: [0, 99], precision: 0.5}",
     "capital_gain": "{type: int, bounds: [0, 100000]}"},
    ["{name: n, kind: count}", "{name: by_sex, kind: count, by: [sex]}",
     "{name: ages, kind: histogram, column: age, bins: {start: 17, stop: 92, step: 5}}",
     "{name: hours, kind: mean, column: hours_per_week, by: [sex, race]}",
     "{name: gains, kind: sum, column: capital_gain, by: [race]}"],
    privacy="epsilon: 1", dataset="adult",
)
# lines a careless or hostile writer leaves behind: each is one record whatever it holds
HOSTILE = [
    "nan,Male,White,inf,1e400",
    ",,,,",
    '40,"Female,x",Black,"12,5",7',
    '33,"Male,White,40,0',  # a quote left open: closes at the line end
    "9223372036854775808,Female,Asian-Pac-Islander,-inf,-1",
    "200,Female,Martian,99.75,999999999",
    "\ufffd,Male,White,40,0",
    "ümlaut,Müller,Zürich,1,2",
]


def plan_of(extra: str = ""):
    return make_plan(parse_spec(SPEC + extra))


def records() -> tuple[list[str], list[list[str]]]:
    """The Adult extract's rows (the spec's columns and a few others), then the hostile lines as fields."""
    with ADULT.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:2001]
    keep = ["age", "workclass", "sex", "race", "hours_per_week", "capital_gain"]
    index = [header.index(k) for k in keep]
    out = [[row[i] for i in index] for row in body]
    for line in HOSTILE:
        fields = next(csv.reader([line]))
        out.append([fields[0], "x", *fields[1:]])
    return keep, out


def write_csv(path: Path, header: list[str] | None, rows: list[list[str]], *, delimiter: str = ",",
              encoding: str = "utf-8", eol: str = "\n") -> bytes:
    buf = io.StringIO()
    writer = csv.writer(buf, delimiter=delimiter, lineterminator=eol)
    if header is not None:
        writer.writerow(header)
    writer.writerows(rows)
    data = buf.getvalue().encode(encoding, "replace")
    path.write_bytes(data)
    return data


def same(a: list[ExactStatistic], b: list[ExactStatistic]) -> bool:
    return all(
        np.array_equal(x.counts, y.counts) and (x.sums is None) == (y.sums is None)
        and (x.sums is None or list(x.sums) == list(y.sums))
        for x, y in zip(a, b, strict=True)
    )


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[ExactStatistic]]:
    path = tmp_path_factory.mktemp("plain") / "adult.csv"
    header, rows = records()
    write_csv(path, header, rows)
    return path, aggregate(plan_of(), path)


def test_the_fixture_counts_what_it_should(plain: tuple[Path, list[ExactStatistic]]) -> None:
    _, exact = plain
    assert exact[0].counts.tolist() == [2000 + len(HOSTILE)]
    assert exact[1].counts.sum() > 1900  # Male/Female for nearly every Adult row


@pytest.mark.parametrize("members", [1, 3])
def test_gzip_gives_the_same_aggregates(tmp_path: Path, plain: tuple[Path, list[ExactStatistic]], members: int) -> None:
    path, exact = plain
    data = path.read_bytes()
    cuts = sorted(random.Random(members).sample(range(1, len(data)), members - 1))
    parts = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    gz = tmp_path / "adult.csv.gz"
    gz.write_bytes(b"".join(gzip.compress(p) for p in parts))  # members cut anywhere, even inside a line
    assert same(aggregate(plan_of(), gz), exact)


@pytest.mark.parametrize("frames", [1, 4])
def test_zstd_gives_the_same_aggregates(tmp_path: Path, plain: tuple[Path, list[ExactStatistic]], frames: int) -> None:
    path, exact = plain
    data = path.read_bytes()
    step = len(data) // frames + 1
    zst = tmp_path / "adult.csv.zst"
    packer = zstandard.ZstdCompressor()
    zst.write_bytes(b"".join(packer.compress(data[i : i + step]) for i in range(0, len(data), step)))
    assert same(aggregate(plan_of(), zst), exact)


def test_the_format_comes_from_the_option_the_spec_or_the_extension(
    tmp_path: Path, plain: tuple[Path, list[ExactStatistic]]
) -> None:
    path, exact = plain
    odd = tmp_path / "adult.data"
    odd.write_bytes(gzip.compress(path.read_bytes()))
    assert same(aggregate(plan_of(), odd, input_format="csv.gz"), exact)
    assert same(aggregate(plan_of("input_format: csv.gz\n"), odd), exact)
    with pytest.raises(InputError, match=r"looks gzip-compressed \(csv.gz\), not CSV text"):
        aggregate(plan_of(), odd)


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        # mtime=0: gzip's header holds a time, and the ids must be the same in every pytest-xdist worker
        ("t.csv", gzip.compress(b"age\n1\n", mtime=0), "looks gzip-compressed"),
        ("t.csv", zstandard.ZstdCompressor().compress(b"age\n1\n"), "looks zstd-compressed"),
        ("t.csv", b"PAR1\x00\x00", "looks a Parquet file"),
        ("t.csv.gz", gzip.compress(b"age,sex\n" + b"1,Male\n" * 50000, mtime=0)[:-20], "is not a valid csv.gz file"),
        ("t.csv.gz", b"\x1f\x8bnot really gzip at all", "is not a valid csv.gz file"),
        ("t.csv.zst", b"\x28\xb5\x2f\xfd garbage", "is not a valid csv.zst file"),
    ],
    ids=["gzip-as-csv", "zstd-as-csv", "parquet-as-csv", "truncated-gzip", "not-gzip", "not-zstd"],
)
def test_refused_inputs_are_exit_3_and_spend_nothing(tmp_path: Path, name: str, data: bytes, message: str) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.replace("columns:", "columns:", 1))
    (tmp_path / name).write_bytes(data)
    ledger = tmp_path / "l.jsonl"
    assert run_in_process("budget", "set", "adult", "--epsilon", "5", "--ledger", ledger).returncode == 0
    before = ledger.read_bytes()
    done = run_in_process("release", spec, "--input", tmp_path / name, "--ledger", ledger, "-o", tmp_path / "o.csv")
    assert done.returncode == 3, done.stderr
    assert message in done.stderr.decode()
    assert ledger.read_bytes() == before
    assert not (tmp_path / "o.csv").exists()


def test_gzip_on_standard_input_with_input_format(tmp_path: Path, plain: tuple[Path, list[ExactStatistic]]) -> None:
    path, _ = plain
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    ledger = tmp_path / "l.jsonl"
    assert run_in_process("budget", "set", "adult", "--epsilon", "5", "--ledger", ledger).returncode == 0
    done = run_dpcli("release", spec, "--input", "-", "--input-format", "csv.gz", "--ledger", ledger, "-o", "-",
                     "--quiet", stdin=gzip.compress(path.read_bytes()))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"statistic,")


@pytest.mark.parametrize("delimiter", [";", "\t", "|"])
def test_delimiters(tmp_path: Path, plain: tuple[Path, list[ExactStatistic]], delimiter: str) -> None:
    _, exact = plain
    header, rows = records()
    # the comma file's fields, separated otherwise (quoted where they hold the delimiter)
    path = tmp_path / "d.csv"
    write_csv(path, header, rows, delimiter=delimiter)
    word = {"\t": "tab"}.get(delimiter, delimiter)
    assert same(aggregate(plan_of(f'csv: {{delimiter: "{word}"}}\n'), path), exact)


def test_a_tab_is_also_spelled_as_an_escape(tmp_path: Path, plain: tuple[Path, list[ExactStatistic]]) -> None:
    _, exact = plain
    header, rows = records()
    path = tmp_path / "d.tsv"
    write_csv(path, header, rows, delimiter="\t")
    assert same(aggregate(plan_of('csv: {delimiter: "\\t"}\n'), path), exact)


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252", "iso-8859-15", "utf-16", "utf-16-le"])
def test_declared_encodings_read_like_utf8(tmp_path: Path, encoding: str) -> None:
    """Keys outside ASCII (Zürich, Malmö) match after decoding; the same records in UTF-8 are the reference."""
    columns = {"city": "{type: category, categories: [Zürich, Malmö, Kraków]}", "age": "{type: int, bounds: [0, 99]}"}
    statistics = ["{name: c, kind: count, by: [city]}", "{name: a, kind: sum, column: age, by: [city]}"]
    spec = spec_text(columns, statistics, privacy="epsilon: 1", dataset="e")
    rows = [["Zürich", "31"], ["Malmö", "40"], ["Zürich", "x"], ["Malmo", "50"], ["Malmö", "22"], ["", "1"]]
    ref = tmp_path / "u.csv"
    write_csv(ref, ["city", "age"], rows)
    other = tmp_path / "e.csv"
    write_csv(other, ["city", "age"], [r for r in rows if encoding != "latin-1" or "ó" not in r[0]], encoding=encoding)
    got = aggregate(make_plan(parse_spec(spec + f"csv: {{encoding: {encoding}}}\n")), other)
    want = aggregate(make_plan(parse_spec(spec)), ref)
    assert same(got, want)
    assert got[0].counts.tolist() == [2, 2, 0]
    # read as UTF-8 (undeclared), the Latin-1 bytes of ü and ö are not UTF-8: those cells are missing
    if encoding == "latin-1":
        assert aggregate(make_plan(parse_spec(spec)), other)[0].counts.tolist() == [0, 0, 0]


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-16"])
@pytest.mark.parametrize("compressed", [False, True])
def test_a_utf16_record_with_an_odd_byte_count_leaves_every_later_record_alone(
    tmp_path: Path, encoding: str, compressed: bool
) -> None:
    """Issue 23 (1): 50 records and one record of one byte counted 1 (the stream was decoded before it was cut into
    lines, so every record after the odd one was read a byte off and merged). Each record now ends at its own line
    end's code unit and is decoded on its own: 51 records, the 50 read as before, the odd one's cell missing."""
    codec = {"utf-16": "utf-16-le"}.get(encoding, encoding)
    spec = spec_text(
        {"age": "{type: int, bounds: [0, 99]}"}, ["{name: n, kind: count}", "{name: a, kind: sum, column: age}"],
        privacy="epsilon: 1", dataset="e", csv=f"encoding: {encoding}",
    )
    head = ("\ufeff" if encoding == "utf-16" else "") + "age\n"
    honest = [f"{i}\n".encode(codec) for i in range(50)]
    for odd in (b"1", b"7\x00\x00", b"\x00\xd8", b"\x0a"):
        data = head.encode(codec) + b"".join(honest[:25]) + odd + "\n".encode(codec) + b"".join(honest[25:])
        path = tmp_path / ("o.csv.gz" if compressed else "o.csv")
        path.write_bytes(gzip.compress(data) if compressed else data)
        got = aggregate(make_plan(parse_spec(spec)), path)
        assert got[0].counts.tolist() == [51], odd
        assert got[1].sums is not None, odd
        assert int(got[1].sums.sum()) == sum(range(50)), odd


UTF16_BYTES = st.lists(
    st.sampled_from([b"\x00", b"\n", b"\r", b"a", b"\xd8", b"\xdc", b"\xff", b"\x0a\x00", b"\x00\x0a"])
)


@given(parts=UTF16_BYTES, codec=st.sampled_from(["utf-16-le", "utf-16-be"]), eol=st.sampled_from([b"\n", b"\r"]))
@settings(max_examples=200, deadline=None)
def test_utf16_records_are_decoded_each_on_its_own(parts: list[bytes], codec: str, eol: bytes) -> None:
    """The definition of a UTF-16 record (docs/spec.md, "CSV dialects"): the bytes up to the line end's code unit
    found at any offset, decoded from their own first byte. The fast path (records of whole code units decoded in
    one go) must agree with it."""
    from dpcli.engine.source import utf16_lines

    data = b"".join(parts)
    term = eol.decode().encode(codec)
    want = eol.join(r.decode(codec, "replace").encode("utf-8") for r in data.split(term))
    assert utf16_lines(data, codec, eol) == want


def test_bytes_invalid_in_the_declared_encoding_are_missing_cells(tmp_path: Path) -> None:
    spec = spec_text(
        {"k": "{type: category, categories: [a, b], other: b}"}, ["{name: c, kind: count, by: [k]}"],
        privacy="epsilon: 1", dataset="e", csv="encoding: ascii",
    )
    path = tmp_path / "a.csv"
    path.write_bytes(b"k\na\n\xe9\nzz\nb\n")
    # \xe9 is not ASCII: U+FFFD, missing (never `other`); zz is undeclared text, counted under b
    assert aggregate(make_plan(parse_spec(spec)), path)[0].counts.tolist() == [1, 2]


@pytest.mark.parametrize("form", ["false", "names", "names_bom", "cr"])
def test_files_without_a_header_line(tmp_path: Path, plain: tuple[Path, list[ExactStatistic]], form: str) -> None:
    _, exact = plain
    header, rows = records()
    path = tmp_path / "h.csv"
    if form == "false":
        # the fields are the declared columns, in declaration order
        order = ["age", "sex", "race", "hours_per_week", "capital_gain"]
        pick = [header.index(c) for c in order]
        write_csv(path, None, [[r[i] if i < len(r) else "" for i in pick] for r in rows])
        extra = "csv: {header: false}\n"
    else:
        write_csv(path, None, rows, eol="\r" if form == "cr" else "\n")
        extra = f"csv: {{header: [{', '.join(header)}]{', line_end: cr' if form == 'cr' else ''}}}\n"
        if form == "names_bom":
            path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert same(aggregate(plan_of(extra), path), exact)


def test_a_header_list_must_name_every_declared_column() -> None:
    from dpcli.specs.load import parse_errors

    errors = parse_errors(SPEC + "csv: {header: [age, sex]}\n")
    assert [str(e) for e in errors] == [
        "csv.header: declared column(s) not among the fields it names: race, hours_per_week, capital_gain"
    ]


def test_a_declared_line_end_must_agree_with_the_header(tmp_path: Path) -> None:
    path = tmp_path / "lf.csv"
    write_csv(path, ["age", "sex", "race", "hours_per_week", "capital_gain"], [["30", "Male", "White", "1", "2"]])
    with pytest.raises(InputError, match=r"its header line ends with LF, but csv\.line_end declares cr"):
        check_input(plan_of("csv: {line_end: cr}\n").spec, path)
    assert check_input(plan_of("csv: {line_end: lf}\n").spec, path)[:2] == ["age", "sex"]


def test_quoted_line_breaks_need_a_plain_utf8_file(tmp_path: Path, plain: tuple[Path, list[ExactStatistic]]) -> None:
    path, _ = plain
    gz = tmp_path / "a.csv.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    with pytest.raises(InputError, match=r"csv\.quoted_line_breaks reads only an uncompressed UTF-8 CSV"):
        aggregate(plan_of("csv: {quoted_line_breaks: true}\n"), gz)


# ----------------------------------------------------------------------------------------------- chunks


LINE = st.lists(st.sampled_from(["30", "Male", "Female", "White", '"', ",", "x", "", "\r", "1e3", "\ufffd", "Other",
                                 '"a,b"', "40.5", "\n"]), max_size=8).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(LINE, max_size=30), eol=st.sampled_from(["\n", "\r", "\r\n"]), data=st.data())
def test_cutting_the_input_into_chunks_anywhere_between_lines_changes_nothing(
    tmp_path: Path, lines: list[str], eol: str, data: st.DataObject
) -> None:
    """The aggregator's totals over any cuts at line ends equal its totals over the whole (and the mapped reader's
    windows, however small, hand over the same bytes)."""
    text = "age,sex,race,hours_per_week,capital_gain" + eol + eol.join(lines) + data.draw(st.sampled_from(["", eol]))
    path = tmp_path / "c.csv"
    path.write_bytes(text.encode())
    plan = plan_of()
    whole = aggregate(plan, path)
    with CsvSource(path, plan.spec) as source:
        layout, start = source.layout, source.header.data_start
        body = path.read_bytes()[start:]
        e = layout.eol
        ends = [i + 1 for i in range(len(body)) if body[i : i + 1] == e]
        cuts = sorted(set(data.draw(st.lists(st.sampled_from(ends), max_size=5)) if ends else []))
        pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
        agg = LineAggregator(plan, layout)
        for piece in pieces:
            agg.add(piece)
        assert same(agg.finish(), whole)
        size = len(path.read_bytes())
        for chunk_bytes in (1, 5, 64):
            with path.open("rb") as fh:
                mapped = list(_mapped_chunks(fh, start, size, e, chunk_bytes, None))
            assert b"".join(mapped) == body
            assert all(c.endswith(e) for c in mapped[:-1])


def test_a_data_line_starting_with_a_bom_at_a_chunk_start_keeps_it(tmp_path: Path) -> None:
    """polars drops a BOM at the start of what it reads: a chunk can start with a data line that holds one."""
    plan = plan_of()
    layout_path = tmp_path / "b.csv"
    layout_path.write_bytes(b"age,sex,race,hours_per_week,capital_gain\n30,Male,White,1,2\n\xef\xbb\xbf31,Male,White,1,2\n")
    whole = aggregate(plan, layout_path)
    assert whole[2].counts.sum() == 1  # the BOM makes 31 not a number
    with CsvSource(layout_path, plan.spec) as source:
        agg = LineAggregator(plan, source.layout)
    agg.add(b"30,Male,White,1,2\n")
    agg.add(b"\xef\xbb\xbf31,Male,White,1,2\n")
    assert same(agg.finish(), whole)


@pytest.mark.parametrize(
    "start", [b"\x1f\x8b", b"\x28\xb5\x2f\xfd", b"\x78\x01", b"x^", b"\x78\x9c", b"\x78\xda"], ids=repr
)
def test_a_data_line_starting_like_compressed_bytes_is_one_record(tmp_path: Path, start: bytes) -> None:
    """polars decompresses (or fails on) a buffer that starts like gzip, zstd or zlib ("x^" is plain text): a data line
    starting so at a chunk start once made the run exit 3 (gzip, zstd) or swallowed the chunk's other lines (zlib).
    It is one record like any other: the aggregates equal those of the same line starting with other bytes."""
    plan = plan_of()
    header, rest = b"age,sex,race,hours_per_week,capital_gain\n", b"30,Male,White,1,2\n31,Female,Black,3,4\n"
    first = b"5,Male,White,1,2\n"
    paths = []
    for name, prefix in (("odd", start), ("plain", b"zz")):
        paths.append(tmp_path / f"{name}.csv")
        paths[-1].write_bytes(header + prefix + first + rest)
    odd, plain = (aggregate(plan, path) for path in paths)
    assert same(odd, plain)
    with CsvSource(paths[0], plan.spec) as source:
        agg = LineAggregator(plan, source.layout)
    for line in (start + first, *rest.splitlines(keepends=True)):
        agg.add(line)  # each line a chunk of its own: every one at a chunk start
    assert same(agg.finish(), plain)


def record(seen: list[tuple[int, int | None]], read: int, total: int | None) -> None:
    seen.append((read, total))


def test_progress_reports_bytes_of_the_file_up_to_its_size(tmp_path: Path, plain: tuple[Path, list[ExactStatistic]],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import dpcli.engine.source as source

    monkeypatch.setattr(source, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(source, "_PROGRESS_STEP", 4096)
    path, exact = plain
    gz = tmp_path / "a.csv.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    for p in (path, gz):
        seen: list[tuple[int, int | None]] = []
        with CsvSource(p, plan_of().spec, "csv.gz" if p == gz else "csv", partial(record, seen)) as src:
            agg = LineAggregator(plan_of(), src.layout)
            for chunk in src.chunks(4096):
                agg.add(chunk)
        assert same(agg.finish(), exact)
        size = p.stat().st_size
        assert len(seen) > 2
        assert all(t == size for _, t in seen)
        assert [r for r, _ in seen] == sorted(r for r, _ in seen)
        assert seen[-1][0] == size


def test_check_reads_the_input_as_declared(tmp_path: Path, plain: tuple[Path, list[ExactStatistic]]) -> None:
    """`dpcli check --input` reads the header through the same source as a release: compressed, in a dialect."""
    path, _ = plain
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    gz = tmp_path / "adult.csv.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    done = run_in_process("check", spec, "--input", gz)
    assert done.returncode == 0, done.stderr
    assert f"{gz} has every declared column" in done.stderr.decode()
    wrong = run_in_process("check", spec, "--input", path, "--input-format", "csv.zst")
    assert wrong.returncode == 3
    assert wrong.stderr.decode() == (
        f"dpcli: error: input {path} is not a valid csv.zst file (ZstdError): nothing was spent\n"
    )
    bad = run_in_process("check", spec, "--input", path, "--input-format", "xlsx")
    assert bad.returncode == 2


# Issue 23 (5): one record set a compressed input's memory and time (a 400 MB line in a .gz: 4.2 GB, 31 s). A record
# longer than csv.max_record_bytes is an empty record (all its cells missing), never held whole; a compressed input's
# decompressed size is capped by --max-input-bytes, checked while it is read, before the spend.
LONG_SPEC = """\
version: 1
dataset: long
privacy: {epsilon: 1}
csv: {max_record_bytes: 1024%s}
columns:
  age: {type: int, bounds: [0, 99]}
  sex: {type: category, categories: [a, b]}
statistics:
  - {name: n, kind: count}
  - {name: by_sex, kind: count, by: [sex]}
  - {name: ages, kind: sum, column: age}
"""


def _encoded(records: list[bytes], eol: bytes, final: bool, fmt: str, encoding: str) -> bytes:
    body = eol.join([b"age,sex", *records]) + (eol if final else b"")
    if encoding != "utf-8":
        body = body.decode().encode(encoding)
    if fmt == "csv.gz":
        return gzip.compress(body, mtime=0)
    if fmt == "csv.zst":
        return zstandard.ZstdCompressor().compress(body)
    return body


@given(
    records=st.lists(
        st.one_of(
            st.sampled_from([b"1,a", b"2,b", b"", b'3,"a', b"x"]),
            st.tuples(st.sampled_from([b"4,a", b'5,"b']), st.integers(900, 2600)).map(lambda t: t[0] + b"y" * t[1]),
        ),
        max_size=12,
    ),
    eol=st.sampled_from([b"\n", b"\r"]),
    final=st.booleans(),
    fmt=st.sampled_from(["csv", "csv.gz", "csv.zst"]),
    encoding=st.sampled_from(["utf-8", "utf-16-le"]),
    chunk_bytes=st.sampled_from([7, 600, 1500, 5000]),
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_record_over_max_record_bytes_is_an_empty_record(
    tmp_path: Path, records: list[bytes], eol: bytes, final: bool, fmt: str, encoding: str, chunk_bytes: int
) -> None:
    """Every record over the limit (its bytes in the file, decompressed) reads as an empty line, wherever the chunks
    are cut, terminated or not; every other record as it is."""
    spec = parse_spec(LONG_SPEC % ("" if encoding == "utf-8" else f", encoding: {encoding}"))
    path = tmp_path / f"r.{fmt}"
    path.write_bytes(_encoded(records, eol, final, fmt, encoding))
    width = 2 if encoding != "utf-8" else 1  # the limit counts bytes in the file (UTF-16: two a character)
    kept = [r if len(r) * width <= spec.csv.max_record_bytes else b"" for r in records]
    want = b"".join(r + eol for r in kept)
    if records and not final and kept[-1] == records[-1]:
        want = want[: -len(eol)]  # the last record keeps its lack of a line end (an empty one gets one)
    with CsvSource(path, spec, fmt) as source:
        got = b"".join(source.chunks(chunk_bytes))
    assert got == want


def test_a_long_record_counts_once_with_its_cells_missing(tmp_path: Path) -> None:
    short = [b"1,a", b"2,b", b"3,a"]
    for fmt in ("csv", "csv.gz"):
        path = tmp_path / f"l.{fmt}"
        path.write_bytes(_encoded([short[0], b"50,b," + b"z" * 5000, *short[1:], b'60,"a' + b"z" * 3000], b"\n",
                                  False, fmt, "utf-8"))
        exact = aggregate(make_plan(parse_spec(LONG_SPEC % "")), path)
        assert exact[0].counts.tolist() == [5]
        assert exact[1].counts.tolist() == [2, 1]
        assert exact[2].sums is not None
        assert exact[2].sums.tolist() == [6]


@pytest.mark.parametrize("fmt", ["csv.gz", "csv.zst"])
def test_a_compressed_input_past_the_input_cap_is_exit_3_before_the_spend(tmp_path: Path, fmt: str) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text((LONG_SPEC % "").replace("csv: {max_record_bytes: 1024}\n", ""))
    data = tmp_path / f"d.{fmt}"
    data.write_bytes(_encoded([b"1,a"] * 400_000, b"\n", True, fmt, "utf-8"))  # 1.6 MB of text, a few KB packed
    ledger = tmp_path / "l.jsonl"
    assert run_in_process("budget", "set", "long", "--epsilon", "5", "--ledger", ledger).returncode == 0
    before = ledger.read_bytes()
    out = tmp_path / "o.csv"
    done = run_in_process("release", spec, "--input", data, "--ledger", ledger, "-o", out, "--max-input-bytes", "1M")
    assert done.returncode == 3, done.stderr
    assert "decompresses to more than the input cap (1048576 bytes): nothing was spent" in done.stderr.decode()
    assert ledger.read_bytes() == before
    assert not out.exists()
    done = run_in_process("release", spec, "--input", data, "--ledger", ledger, "-o", out, "--max-input-bytes", "2M")
    assert done.returncode == 0, done.stderr
