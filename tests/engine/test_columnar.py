"""Parquet and Arrow IPC inputs (docs/spec.md, "Parquet and Arrow IPC inputs"), through the no-noise path.

The claim checked: a typed value reads as the CSV cell holding its canonical text would. For every source type,
a column of hostile values is written to Parquet and to Arrow IPC with polars, and to a CSV whose cells are the
canonical text computed here in plain Python (``repr`` for floats, ``str`` for integers, ...): the exact aggregates
of the three files must be identical, under int, float, category (with and without ``other:``) and bool
declarations of that same column.
"""

from __future__ import annotations

import csv
import datetime
import io
import math
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcli.engine import aggregate, arrow_sizes
from dpcli.engine.cells import Queries, used_columns
from dpcli.engine.columnar import check_streaming, float_text, scan_columnar, typed_batch, typed_frame
from dpcli.engine.source import input_format
from dpcli.errors import InputError, InternalError
from dpcli.plan.model import make_plan
from dpcli.specs.load import parse_spec
from tests.helpers import run_in_process
from tests.spec_builder import spec_text

# keys that canonical texts of the sources below hit (and their near misses: ` 7`, `TRUE`)
KEYS = [
    "12", "-7", "0", "1", "true", "false", "TRUE", "3.0", "-0.0", "0.0", "1e+20", "1e-05", "1e-07", "nan", "inf",
    "-inf", "0.1", "0.10000000149011612", "12.50", "-0.01", "2024-01-02", "Male", " 7", "9223372036854775807",
    "18446744073709551615", "5e-324", "a,b", 'q"uote',
]


def yaml_list(keys: list[str]) -> str:
    return "[" + ", ".join("'" + k.replace("'", "''") + "'" for k in keys) + "]"


SPEC = f"""\
version: 1
dataset: t
privacy: {{epsilon: 1}}
columns:
  as_int: {{type: int, bounds: [-1000, 1000]}}
  as_int_imputed: {{type: int, bounds: [0, 10], impute: 5}}
  as_float: {{type: float, bounds: [-1000, 1000], precision: 0.5}}
  as_cat: {{type: category, categories: {yaml_list(KEYS)}}}
  as_other: {{type: category, categories: {yaml_list([*KEYS, "OTHER"])}, other: OTHER}}
  as_bool: {{type: bool}}
statistics:
  - {{name: n, kind: count}}
  - {{name: ints, kind: histogram, column: as_int, bins: {{start: -1000, stop: 1001, step: 1}}}}
  - {{name: int_sum, kind: sum, column: as_int}}
  - {{name: imputed_sum, kind: sum, column: as_int_imputed}}
  - {{name: float_hist, kind: histogram, column: as_float, bins: {{start: -1000, stop: 1000.5, step: 0.5}}}}
  - {{name: float_mean, kind: mean, column: as_float}}
  - {{name: cats, kind: count, by: [as_cat]}}
  - {{name: others, kind: histogram, column: as_other}}
  - {{name: bools, kind: count, by: [as_bool]}}
  - {{name: bool_by_cat, kind: mean, column: as_float, by: [as_bool, as_cat]}}
"""
COLUMNS = ["as_int", "as_int_imputed", "as_float", "as_cat", "as_other", "as_bool"]
INT64_MAX = 2**63 - 1

FLOATS = [
    None, math.nan, math.inf, -math.inf, -0.0, 0.0, 1e20, 1e-5, 1e-7, 3.0, 2.5, -7.0, 12.0, 0.1, 1e308, 5e-324,
    1500.0, -1500.25, 999.75, 1.0,
]
STRINGS = [
    None, "", "12", " 7", "+3", "3.0", "-7", "\ufffd", "1\ufffd", "1e5", "nan", "inf", "Male", "male", "Male ",
    "true", "TRUE", "False", "0", "1", "x", "a,b", 'q"uote', "9223372036854775808", "0x10", "1_000", "١٢",
    ".5", "2.25", "-0.0", "\x00",
]

# source type -> (the column's values as polars writes them, the polars type)
SOURCES: dict[str, tuple[list[Any], pl.DataType]] = {
    "Int64": ([None, 0, 1, -7, 12, 3, 2, -1, INT64_MAX, -(2**63), 5000, -5000, 10], pl.Int64()),
    "Int8": ([None, -128, 127, 0, 1, -7, 12], pl.Int8()),
    "UInt64": ([None, 0, 1, 12, INT64_MAX, 2**63, 2**64 - 1, 999], pl.UInt64()),
    "Int128": ([None, 0, 1, -7, 2**100, -(2**100), INT64_MAX, 2**63], pl.Int128()),
    "Float64": (FLOATS, pl.Float64()),
    "Float32": (FLOATS, pl.Float32()),
    "Float16": ([None, 1.5, 0.1, 65504.0, -0.0, math.inf, math.nan, 12.0], pl.Float16()),
    "Decimal(38,2)": (
        [None, Decimal("12.50"), Decimal("-0.01"), Decimal("12.00"), Decimal("999999999999999999999999999999.99"),
         Decimal("-0.00"), Decimal("0.10"), Decimal("500.25")],
        pl.Decimal(38, 2),
    ),
    "Decimal(38,0)": (
        [None, Decimal(12), Decimal(-7), Decimal(1), Decimal(0), Decimal(10**37), Decimal(2**63), Decimal(INT64_MAX)],
        pl.Decimal(38, 0),
    ),
    "String": (STRINGS, pl.String()),
    "Categorical": (STRINGS, pl.Categorical()),
    "Enum": ([None, "Male", "true", "12", "x"], pl.Enum(["Male", "true", "12", "x", "unused"])),
    "Boolean": ([None, True, False, True], pl.Boolean()),
    "Date": ([None, datetime.date(2024, 1, 2), datetime.date(1, 1, 1)], pl.Date()),
    # no canonical text: every cell missing
    "Datetime": ([None, datetime.datetime(2024, 1, 2, 3, 4)], pl.Datetime("us")),
    "Time": ([None, datetime.time(1, 2)], pl.Time()),
    "Duration": ([None, datetime.timedelta(days=1)], pl.Duration("us")),
    "Binary": ([None, b"Male", b"12", b"\xff"], pl.Binary()),
    "List": ([None, [1], [12]], pl.List(pl.Int64())),
    "Struct": ([None, {"a": 12}], pl.Struct({"a": pl.Int64()})),
    "Null": ([None, None], pl.Null()),
}
WITHOUT_TEXT = {"Datetime", "Time", "Duration", "Binary", "List", "Struct", "Null"}


def canonical_text(value: Any) -> str:
    """The documented canonical text, computed in plain Python (independently of dpcli and polars' formatting)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, Decimal):
        return f"{value:f}".lstrip("-") if value == 0 else f"{value:f}"
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, str):
        return value
    return ""  # no text: missing


def exact(path: Path, **kwargs: Any) -> dict[str, tuple[list[int], list[int] | None]]:
    plan = make_plan(parse_spec(SPEC))
    out = {}
    for sp, ex in zip(plan.statistics, aggregate(plan, path, **kwargs), strict=True):
        out[sp.statistic.name] = (ex.counts.tolist(), None if ex.sums is None else [int(s) for s in ex.sums])
    return out


def frame_of(source: str) -> pl.DataFrame:
    values, dtype = SOURCES[source]
    return pl.DataFrame({name: pl.Series(name, values, dtype=dtype) for name in COLUMNS})


def csv_of(frame: pl.DataFrame) -> bytes:
    """The same records as a CSV of canonical texts (values as the file holds them: Float32 widened by polars)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(frame.columns)
    for row in frame.iter_rows():
        writer.writerow([canonical_text(v) for v in row])
    return out.getvalue().encode()


def files(tmp_path: Path, frame: pl.DataFrame) -> dict[str, Path]:
    paths = {name: tmp_path / name for name in ("data.csv", "data.parquet", "data.arrow", "lz4.arrow", "plain.pq")}
    paths["data.csv"].write_bytes(csv_of(frame))
    frame.write_parquet(paths["data.parquet"])  # zstd, dictionary-encoded strings
    frame.write_parquet(paths["plain.pq"], compression="uncompressed", row_group_size=4)  # several row groups
    frame.write_ipc(paths["data.arrow"])
    frame.write_ipc(paths["lz4.arrow"], compression="lz4")
    return {"csv": paths["data.csv"], "parquet": paths["data.parquet"], "arrow": paths["data.arrow"],
            "lz4": paths["lz4.arrow"], "plain": paths["plain.pq"]}


@pytest.mark.parametrize("source", list(SOURCES))
def test_every_source_type_reads_as_the_csv_of_its_canonical_text(tmp_path: Path, source: str) -> None:
    paths = files(tmp_path, frame_of(source))
    expected = exact(paths["csv"])
    for kind in ("parquet", "plain", "arrow", "lz4"):
        assert exact(paths[kind]) == expected, kind
    # the comparison is not vacuous: every row is counted, and sources with a text reach some declared key
    rows = len(SOURCES[source][0])
    assert expected["n"][0] == [rows]
    read_keys = sum(expected["cats"][0])
    assert read_keys == 0 if source in WITHOUT_TEXT else read_keys > 0


def test_the_hostile_values_land_where_the_spec_says(tmp_path: Path) -> None:
    """A few of the rules spelt out (the parametrized test shows they are the CSV's; this shows what they are)."""
    keys = KEYS
    out = exact(files(tmp_path, frame_of("Float64"))["parquet"])
    assert sum(out["ints"][0]) == 0  # 3.0 in an int column is missing, as the CSV cell `3.0` is
    for key in ("nan", "inf", "-inf", "-0.0", "1e+20", "1e-05", "1e-07", "3.0", "5e-324"):
        assert out["cats"][0][keys.index(key)] == 1, key
    finite = [v for v in FLOATS if v is not None and math.isfinite(v)]
    assert out["float_mean"][0] == [len(finite)]  # nan, inf, -inf and null are missing
    out = exact(files(tmp_path, frame_of("UInt64"))["parquet"])
    # INT64_MAX clamps to 1000, 999 is 999; 2**63 and 2**64-1 are beyond 64 bits: missing, as their CSV text is
    assert (out["ints"][0][2000], out["ints"][0][1999], sum(out["ints"][0])) == (1, 1, 5)
    assert out["cats"][0][keys.index("18446744073709551615")] == 1
    out = exact(files(tmp_path, frame_of("Boolean"))["parquet"])
    assert out["bools"][0] == [1, 2]  # declared order [false, true]
    assert sum(out["ints"][0]) == 0


def test_float_text_is_pythons_repr(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    values = np.concatenate(
        [
            rng.integers(0, 2**64, size=20000, dtype=np.uint64).view(np.float64),  # every exponent, subnormals, nan
            rng.uniform(-1e6, 1e6, 5000),
            rng.uniform(0, 1e-4, 5000),  # around repr's switch to exponent form at 1e-4
            np.array([1e-5, 1.5e-5, 9.99e-6, 1e-4, 1e16, 9999999999999998.0, 1e22, 1e23, 2.0**63, -0.0, np.inf]),
        ]
    )
    got = pl.select(float_text(pl.lit(pl.Series(values)))).to_series().to_list()
    assert got == [repr(float(v)) for v in values]
    with np.errstate(over="ignore", invalid="ignore"):  # doubles beyond Float32 become inf: fine here
        as32 = values[:5000].astype(np.float32)
    got = pl.select(float_text(pl.lit(pl.Series(as32)))).to_series().to_list()
    assert got == [repr(float(v)) for v in as32]  # widened exactly, then the double's text


def test_typed_batch_is_typed_frame_in_memory() -> None:
    spec = parse_spec(SPEC)
    batch = typed_batch(frame_of("String"), spec, COLUMNS)
    assert batch.schema == pl.Schema(
        {"as_int": pl.Int64, "as_int_imputed": pl.Int64, "as_float": pl.Float64, "as_cat": pl.String,
         "as_other": pl.String, "as_bool": pl.String}
    )
    assert batch["as_int"].to_list()[:8] == [None, None, 12, 7, 3, None, -7, None]


# -- structure: exit 3 from the schema, before anything is read ------------------------------------------------------

SECRET = "SECRET-CELL-4711"


def test_a_file_that_is_not_parquet_is_exit_3_without_quoting_it(tmp_path: Path) -> None:
    path = tmp_path / "data.parquet"
    path.write_text(f"as_int,as_cat\n{SECRET},x\n")
    with pytest.raises(InputError) as info:
        exact(path)
    assert str(info.value) == f"input {path} is not a readable Parquet file (ComputeError)"
    path = tmp_path / "data.arrow"
    path.write_text(f"as_int,as_cat\n{SECRET},x\n")
    with pytest.raises(InputError, match=r"is not a readable Arrow IPC file \(\w+\)$") as info:
        exact(path)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_a_truncated_file_is_exit_3(tmp_path: Path, fmt: str) -> None:
    paths = files(tmp_path, frame_of("String"))
    data = paths[fmt].read_bytes()
    paths[fmt].write_bytes(data[: len(data) - 20])  # the footer's end and magic gone
    with pytest.raises(InputError, match="is not a readable"):
        exact(paths[fmt])


def test_an_arrow_ipc_stream_is_not_an_ipc_file(tmp_path: Path) -> None:
    frame_of("Int64").write_ipc_stream(tmp_path / "data.arrow")
    with pytest.raises(InputError, match=r"is not a readable Arrow IPC file \(ComputeError\)$"):
        exact(tmp_path / "data.arrow")


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_string_data_that_is_not_utf8_fails_the_file_without_quoting_it(tmp_path: Path, fmt: str) -> None:
    """The documented limit: the formats forbid it and polars refuses the file (exit 3, nothing quoted)."""
    marker = "QZQZ" + SECRET
    frame = pl.DataFrame({name: ["Male", marker, "1"] for name in COLUMNS})
    path = tmp_path / f"data.{fmt}"
    if fmt == "parquet":
        frame.write_parquet(path, compression="uncompressed", statistics=False)
    else:
        frame.write_ipc(path, compression="uncompressed")
    data = path.read_bytes()
    assert data.count(marker.encode()) == len(COLUMNS)
    path.write_bytes(data.replace(b"QZQZ", b"\xffZQ\xfe"))  # same length: the file's structure is intact
    with pytest.raises(InputError) as info:
        exact(path)
    kind = "Parquet" if fmt == "parquet" else "Arrow IPC"
    assert str(info.value) == f"input {path} could not be read as a {kind} file (ComputeError)"


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_columns_the_spec_does_not_use_are_never_read(tmp_path: Path, fmt: str) -> None:
    """Bytes that would fail the file (string data that is not UTF-8) in a column no statistic uses change nothing,
    and a release of plain counts reads no column at all (every row still counts)."""
    marker = "QZQZ" + SECRET
    frame = pl.DataFrame({"as_cat": ["Male", "12", None], "junk": ["a", marker, "b"]})
    path = tmp_path / f"data.{fmt}"
    if fmt == "parquet":
        frame.write_parquet(path, compression="uncompressed", statistics=False)
    else:
        frame.write_ipc(path, compression="uncompressed")
    data = path.read_bytes()
    assert data.count(b"QZQZ") >= 1  # (Arrow keeps a 4-byte prefix of a long string beside it too)
    path.write_bytes(data.replace(b"QZQZ", b"\xffZQ\xfe"))
    for statistics in ("  - {name: n, kind: count}\n", "  - {name: n, kind: count, by: [as_cat]}\n"):
        columns = {"as_cat": f"{{type: category, categories: {yaml_list(KEYS)}}}"}
        spec = spec_text(columns, statistics, privacy="epsilon: 1", dataset="t")
        plan = make_plan(parse_spec(spec))
        counts = aggregate(plan, path)[0].counts.tolist()
        assert counts == ([3] if "by" not in statistics else [int(k in ("Male", "12")) for k in KEYS])


def test_a_damaged_page_is_exit_3(tmp_path: Path) -> None:
    path = tmp_path / "data.parquet"
    frame_of("Int64").write_parquet(path, compression="zstd", statistics=False)
    data = bytearray(path.read_bytes())
    data[40:120] = bytes(b ^ 0x5A for b in data[40:120])  # inside the first column chunk, far from the footer
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"could not be read as a Parquet file \(\w+\)$"):
        exact(path)


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_a_missing_declared_column_is_named(tmp_path: Path, fmt: str) -> None:
    frame = frame_of("Int64").drop("as_bool", "as_cat").with_columns(pl.lit(SECRET).alias(SECRET))
    path = tmp_path / f"data.{fmt}"
    frame.write_parquet(path) if fmt == "parquet" else frame.write_ipc(path)
    with pytest.raises(InputError) as info:
        exact(path)
    assert str(info.value) == f"input {path}: declared column(s) missing from the schema: as_cat, as_bool"


def test_a_directory_is_exit_3(tmp_path: Path) -> None:
    (tmp_path / "parts.parquet").mkdir()
    frame_of("Int64").write_parquet(tmp_path / "parts.parquet" / "part-0.parquet")
    with pytest.raises(InputError, match=r"is a directory, not a Parquet file$"):
        exact(tmp_path / "parts.parquet")


def test_the_format_comes_from_the_extension_or_the_argument(tmp_path: Path) -> None:
    paths = files(tmp_path, frame_of("Int64"))
    expected = exact(paths["csv"])
    for name, fmt in (("data.pq", "parquet"), ("data.bin", "parquet"), ("data.feather", "arrow"), ("x.ipc", "arrow")):
        (tmp_path / name).write_bytes(paths[fmt].read_bytes())
    assert exact(tmp_path / "data.pq") == expected
    assert exact(tmp_path / "data.feather") == expected
    assert exact(tmp_path / "x.ipc") == expected
    assert exact(tmp_path / "data.bin", input_format="parquet") == expected
    (tmp_path / "data.parquet.csv").write_bytes(paths["csv"].read_bytes())
    assert exact(tmp_path / "data.parquet.csv") == expected
    assert exact(paths["csv"], input_format="csv") == expected
    # the one table of extensions (dpcli.engine.source); an explicit format wins over it
    assert [input_format(n) for n in ("a.parquet", "a.PQ", "a.arrow", "a.ipc", "a.feather", "a.csv", "a")] == [
        "parquet", "parquet", "arrow", "arrow", "arrow", "csv", "csv"
    ]
    assert input_format("a.parquet", "csv") == "csv"


# -- bounded memory: the streaming engine, or an error -----------------------------------------------------------


def test_a_plan_that_would_fall_back_to_memory_is_refused(tmp_path: Path) -> None:
    path = files(tmp_path, frame_of("Int64"))["parquet"]
    scan = pl.scan_parquet(path)
    check_streaming([scan.group_by("as_cat").agg(pl.len(), pl.col("as_int").sum())])  # streams: no error
    doubled = pl.col("as_int").map_batches(lambda s: s * 2)  # a Python function: the in-memory engine only
    udf = scan.with_columns(doubled).group_by("as_cat").agg(pl.col("as_int").sum())
    with pytest.raises(InternalError, match="fall back to polars' in-memory engine"):
        check_streaming([udf])


def test_a_histogram_with_edges_streams(tmp_path: Path) -> None:
    """Edge bins are counted by comparisons (cells.bin_index), which the streaming engine runs: the engine's own
    queries for the edges histogram pass check_streaming, and its counts are those of the same records as a CSV."""
    paths = files(tmp_path, frame_of("Int64"))
    spec = parse_spec(SPEC + "  - {name: edges, kind: histogram, column: as_int, bins: [-1000, 0, 10, 1001]}\n")
    plan = make_plan(spec)
    frame = typed_frame(scan_columnar(paths["parquet"], "parquet", spec.columns.keys()), spec, used_columns(spec))
    check_streaming(Queries(plan, pl.Int128()).apply(frame))  # InternalError if any node falls back to memory
    counts = {fmt: aggregate(plan, paths[fmt])[-1].counts.tolist() for fmt in ("parquet", "csv")}
    assert counts["parquet"] == counts["csv"]
    assert sum(counts["parquet"]) > 0, "no record fell in any edge bin: nothing was counted"


# -- end to end ------------------------------------------------------------------------------------------------------

CLI_SPEC = spec_text(
    {"age": "{type: int, bounds: [0, 100]}", "sex": "{type: category, categories: [F, M]}"},
    ["{name: by_sex, kind: count, by: [sex]}", "{name: ages, kind: sum, column: age}"],
    privacy="epsilon: 1",
)


@pytest.mark.parametrize("writer", ["write_parquet", "write_ipc"])
def test_release_of_a_columnar_file_end_to_end(tmp_path: Path, writer: str) -> None:
    (tmp_path / "spec.yaml").write_text(CLI_SPEC)
    assert run_in_process("budget", "set", "toy", "--epsilon", "5", "--ledger", tmp_path / "L.jsonl").returncode == 0
    name = "data.parquet" if writer == "write_parquet" else "data.arrow"
    frame = pl.DataFrame({"age": [30, None, 200], "sex": ["F", "M", SECRET], "other": [SECRET] * 3})
    getattr(frame, writer)(tmp_path / name)
    run: Callable[..., Any] = run_in_process
    r = run("release", "spec.yaml", "--input", name, "--ledger", "L.jsonl", "--output", "out.csv", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.csv").read_text().count("\n") == 4  # header, F, M, the sum
    frame.drop("sex").write_parquet(tmp_path / "missing.parquet")
    r = run("release", "spec.yaml", "--input", "missing.parquet", "--ledger", "L.jsonl", cwd=tmp_path)
    assert r.returncode == 3
    assert b"declared column(s) missing from the schema: sex" in r.stderr
    assert SECRET.encode() not in r.stderr + r.stdout


# Issue 23 (5): a Parquet or Arrow file can carry one huge, compressible string in one row. Its decompressed sizes are
# public (the footer and page headers state them): past the input cap, or with a page over MAX_PAGE_BYTES in a used
# column, a Parquet file is exit 3 before anything is read or spent; a string longer than csv.max_record_bytes is a
# missing cell.
LONG_STRING_SPEC = """\
version: 1
dataset: t
privacy: {epsilon: 1}
csv: {max_record_bytes: 1024}
columns:
  k: {type: category, categories: [a, b], other: b}
  n: {type: int, bounds: [0, 9]}
statistics:
  - {name: c, kind: count, by: [k]}
  - {name: s, kind: sum, column: n}
"""


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_a_string_longer_than_max_record_bytes_is_missing(tmp_path: Path, fmt: str) -> None:
    frame = pl.DataFrame(
        {"k": ["a", "a" * 1025, "b", "x" * 1024, "y" * 5000], "n": ["1", " " * 2000 + "2", "3", "4", "5"]}
    )
    path = tmp_path / f"d.{fmt}"
    frame.write_parquet(path) if fmt == "parquet" else frame.write_ipc(path, compression="zstd")
    exact = aggregate(make_plan(parse_spec(LONG_STRING_SPEC)), path)
    # "x" * 1024 is at the limit: an undeclared key, counted under b; "a" * 1025 and "y" * 5000 are missing
    assert exact[0].counts.tolist() == [1, 2]
    assert exact[1].sums is not None
    assert exact[1].sums.tolist() == [1 + 3 + 4 + 5]


def test_parquet_columns_that_decompress_past_the_input_cap_are_exit_3_before_the_spend(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(LONG_STRING_SPEC.replace("csv: {max_record_bytes: 1024}\n", ""))
    data = tmp_path / "d.parquet"
    pl.DataFrame({"k": [f"a{i}" for i in range(200_000)], "n": ["1"] * 200_000}).write_parquet(data)
    ledger = tmp_path / "l.jsonl"
    assert run_in_process("budget", "set", "t", "--epsilon", "5", "--ledger", ledger).returncode == 0
    before = ledger.read_bytes()
    out = tmp_path / "o.csv"
    done = run_in_process("release", spec, "--input", data, "--ledger", ledger, "-o", out, "--max-input-bytes", "1M")
    assert done.returncode == 3, done.stderr
    assert "its used columns decompress to more than the input cap (1048576 bytes): nothing was spent" in \
        done.stderr.decode()
    assert ledger.read_bytes() == before
    assert not out.exists()
    assert run_in_process("release", spec, "--input", data, "--ledger", ledger, "-o", out).returncode == 0


@pytest.mark.slow
def test_a_parquet_page_over_the_page_limit_is_exit_3_before_anything_is_read(tmp_path: Path) -> None:
    """One row's 400 MB string compresses to a few hundred KB; polars would decompress its page whole."""
    path = tmp_path / "d.parquet"
    pl.DataFrame({"k": ["a", "x" * 400_000_000, "b"], "n": ["1", "2", "3"]}).write_parquet(path, compression="zstd")
    assert path.stat().st_size < 1 << 20
    with pytest.raises(InputError, match=r"holds a page over 64 MiB uncompressed in a used column: nothing was spent"):
        aggregate(make_plan(parse_spec(LONG_STRING_SPEC)), path)
    # a release that does not use the column reads the file
    spec = LONG_STRING_SPEC.replace("  - {name: c, kind: count, by: [k]}\n", "").replace(
        "  k: {type: category, categories: [a, b], other: b}\n", "")
    sums = aggregate(make_plan(parse_spec(spec)), path)[0].sums
    assert sums is not None
    assert sums.tolist() == [6]


# Issue 23 (5), Arrow IPC: its decompressed sizes are public too (the footer lists each batch's block, each batch's
# header its buffers, and a compressed buffer starts with its uncompressed length); past the input cap, or with a
# buffer over MAX_PAGE_BYTES in a used column, an Arrow IPC file is exit 3 before anything is read or spent.
IpcCompression = Literal["uncompressed", "lz4", "zstd"]
IPC_COMPRESSIONS: list[IpcCompression] = ["uncompressed", "lz4", "zstd"]


def _decoded_buffer_sizes(path: Path, used: list[str]) -> tuple[int, int]:
    """What pyarrow decodes: the used columns' buffers (their dictionaries' once per dictionary batch) per batch."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    sizes: list[int] = []
    reader = ipc.open_file(path)
    for i in range(reader.num_record_batches):
        batch = reader.get_batch(i)
        for name in used:
            column = batch.column(name)
            arrays = [column.indices] if isinstance(column, pa.DictionaryArray) else [column]
            if isinstance(column, pa.DictionaryArray) and i == 0:
                arrays.append(column.dictionary)  # polars writes each dictionary once, before the first batch
            sizes += [b.size for a in arrays for b in a.buffers() if b is not None]
    return sum(sizes), max(sizes, default=0)


@settings(max_examples=25, deadline=None)
@given(
    chunks=st.lists(
        st.lists(st.tuples(st.none() | st.integers(-(2**40), 2**40), st.none() | st.text(max_size=40),
                           st.booleans(), st.sampled_from(["u", "v", "w"])), min_size=1, max_size=30),
        min_size=1, max_size=4),
    compression=st.sampled_from(IPC_COMPRESSIONS),
    used=st.lists(st.sampled_from(["i", "s", "b", "c", "f"]), min_size=1, max_size=5, unique=True),
)
def test_arrow_sizes_are_the_decoded_buffer_sizes(
    tmp_path_factory: pytest.TempPathFactory, chunks: list[list[tuple[Any, ...]]], compression: IpcCompression,
    used: list[str],
) -> None:
    schema = {"i": pl.Int64(), "s": pl.String(), "b": pl.Boolean(), "c": pl.Categorical(), "f": pl.Float32()}
    frames = [
        pl.DataFrame({"i": [r[0] for r in rows], "s": [r[1] for r in rows], "b": [r[2] for r in rows],
                      "c": [r[3] for r in rows], "f": [float(len(rows))] * len(rows)},
                     schema=schema)
        for rows in chunks
    ]
    path = tmp_path_factory.mktemp("ipc") / "d.arrow"
    pl.concat(frames, rechunk=False).write_ipc(path, compression=compression)
    sizes = arrow_sizes.used_column_sizes(path, used)
    assert (sizes.uncompressed, sizes.largest_page) == _decoded_buffer_sizes(path, used)


def test_arrow_columns_that_decompress_past_the_input_cap_are_exit_3_before_the_spend(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(LONG_STRING_SPEC.replace("csv: {max_record_bytes: 1024}\n", ""))
    data = tmp_path / "d.arrow"
    # 800 KB of used strings compress to a few KB: the cap reads the decompressed size, not the file's
    pl.DataFrame({"k": ["a" * 1000] * 800, "n": ["1"] * 800}).write_ipc(data, compression="lz4")
    assert data.stat().st_size < 64 << 10
    ledger = tmp_path / "l.jsonl"
    assert run_in_process("budget", "set", "t", "--epsilon", "5", "--ledger", ledger).returncode == 0
    before = ledger.read_bytes()
    out = tmp_path / "o.csv"
    done = run_in_process(
        "release", spec, "--input", data, "--ledger", ledger, "-o", out, "--max-input-bytes", "500K")
    assert done.returncode == 3, done.stderr
    assert "its used columns decompress to more than the input cap (512000 bytes): nothing was spent" in \
        done.stderr.decode()
    assert ledger.read_bytes() == before
    assert not out.exists()
    assert run_in_process("release", spec, "--input", data, "--ledger", ledger, "-o", out).returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_an_arrow_buffer_over_the_page_limit_is_exit_3_before_anything_is_read(
    tmp_path: Path, compression: IpcCompression
) -> None:
    """One row's 400 MB string compresses to a few KB; polars would decompress its buffer whole."""
    path = tmp_path / "d.arrow"
    pl.DataFrame({"k": ["a", "x" * 400_000_000, "b"], "n": ["1", "2", "3"]}).write_ipc(
        path, compression=compression)
    assert path.stat().st_size < 2 << 20
    with pytest.raises(InputError, match=r"holds a buffer over 64 MiB uncompressed in a used column: nothing was"):
        aggregate(make_plan(parse_spec(LONG_STRING_SPEC)), path)
    # a release that does not use the column reads the file
    spec = LONG_STRING_SPEC.replace("  - {name: c, kind: count, by: [k]}\n", "").replace(
        "  k: {type: category, categories: [a, b], other: b}\n", "")
    sums = aggregate(make_plan(parse_spec(spec)), path)[0].sums
    assert sums is not None
    assert sums.tolist() == [6]


@pytest.mark.parametrize("compression", IPC_COMPRESSIONS)
def test_arrow_sizes_of_nested_view_and_dictionary_types(tmp_path: Path, compression: IpcCompression) -> None:
    """pyarrow's writer, every buffer layout the size reader lays out (lists, structs, maps, fixed-size lists, large
    strings, string views with their variadic buffers, dictionaries, nulls), in several record batches."""
    import pyarrow as pa
    import pyarrow.feather as feather

    n = 1000
    table = pa.table({
        "i": pa.array(range(n), pa.int32()),
        "ls": pa.array([[str(j)] * (j % 3) for j in range(n)], pa.list_(pa.string())),
        "st": pa.array([{"a": j, "b": str(j)} for j in range(n)]),
        "large": pa.array([str(j) * 5 for j in range(n)], pa.large_string()),
        "d": pa.array([str(j % 7) for j in range(n)]).dictionary_encode(),
        "v": pa.array([f"a string longer than twelve bytes {j}" for j in range(n)], pa.string_view()),
        "nul": pa.nulls(n),
        "ts": pa.array(range(n), pa.timestamp("ms")),
        "fsl": pa.array([[1, 2]] * n, pa.list_(pa.int8(), 2)),
        "m": pa.array([[("k", 1)]] * n, pa.map_(pa.string(), pa.int64())),
        "s": pa.array(["x" * (j % 50) for j in range(n)]),
    })
    path = tmp_path / "d.arrow"
    feather.write_feather(table, path, compression=compression, chunksize=300)
    for used in (["i"], ["v"], ["d"], ["large", "s"], ["ls", "st", "m", "fsl", "nul", "ts"], table.column_names):
        sizes = arrow_sizes.used_column_sizes(path, used)
        assert (sizes.uncompressed, sizes.largest_page) == _decoded_buffer_sizes(path, used), used
