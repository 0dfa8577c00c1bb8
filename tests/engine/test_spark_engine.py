"""The Spark engine gives exactly the polars engine's aggregates (issue 11, "Parity test").

The same spec over the same file through both engines' internal no-noise path (``dpcli.engine.aggregate`` and
``dpcli.engine.spark_engine.aggregate``): identical per-cell counts and fixed-point sums, for every statistic kind
and cell rule, on the Adult data and on files full of hostile cells and lines. Spark runs locally (``local[2]``) in
one session for the whole test run; each file is read in several splits (a small ``maxPartitionBytes``, checked),
so lines cut by split boundaries, headers dropped by position and CR files' leading LFs are all exercised.
Person-level releases and open keys (issue 12) are compared the same way, with a fixed secret, on a panel file
whose rows are in random order, so one person's rows start in several partitions.

Marked ``spark``: `make test-spark` installs the extra and runs them; `make test` leaves them out. Without pyspark
or Java they skip, except under CI (``CI`` set), where they fail: CI must really run them.
"""

from __future__ import annotations

import bz2
import gzip
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcli.engine import aggregate, spark_engine
from dpcli.errors import InputError, InternalError, UsageError
from dpcli.plan.model import make_plan
from dpcli.specs.load import parse_spec

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
ADULT = ROOT / "tests" / "data" / "adult.csv"
ADULT_SPEC = """\
version: 1
dataset: adult
privacy: {epsilon: 1}
columns:
  age:            {type: int, bounds: [17, 90]}
  hours_per_week: {type: float, bounds: [1, 99], precision: 0.5, impute: 40}
  capital_gain:   {type: float, bounds: [0, 99999], precision: 0.01}
  education_num:  {type: int, bounds: [1, 16], impute: 9}
  sex:            {type: category, categories: [Female, Male]}
  race:           {type: category, categories: [White, Black, Other], other: Other}
  income:         {type: category, categories: ['<=50K', '>50K'], impute: '<=50K'}
  workclass:      {type: category, categories: [Private, State-gov, Federal-gov]}
statistics:
  - {name: n, kind: count}
  - {name: by_sex_race, kind: count, by: [sex, race]}
  - {name: age_grid, kind: histogram, column: age, bins: {start: 17, stop: 92, step: 5}}
  - {name: age_edges, kind: histogram, column: age, bins: [0, 18, 25, 45, 65, 91], by: [income]}
  - {name: hours_grid, kind: histogram, column: hours_per_week, bins: {start: 0.5, stop: 100.5, step: 2.5}}
  - {name: income_by_workclass, kind: histogram, column: income, by: [workclass]}
  - {name: gain, kind: sum, column: capital_gain, by: [sex]}
  - {name: mean_hours, kind: mean, column: hours_per_week, by: [sex, income]}
  - {name: mean_edu, kind: mean, column: education_num}
  - {name: age_quartiles, kind: quantile, column: age, q: [0.25, 0.5, 0.75], by: [sex]}
  - {name: hours_median, kind: median, column: hours_per_week, step: 2}
  - {name: top_races, kind: top_k, column: race, k: 2}
  - {name: age_var, kind: variance, column: age, by: [sex]}
  - {name: hours_std, kind: std, column: hours_per_week}
"""

# every column type, impute and other:, on a header with extra columns and a quoted name
HOSTILE_SPEC = """\
version: 1
dataset: toy
privacy: {epsilon: 100}
columns:
  age:    {type: int, bounds: [0, 100]}
  big:    {type: int, bounds: [-1000000000000, 1000000000000]}
  income: {type: float, bounds: [-1000, 1000], precision: 0.01}
  wide:   {type: float, bounds: [-1000000000000, 1000000000000], precision: 0.5, impute: 3}
  sex:    {type: category, categories: [F, M, 'é', 'a,b']}
  grp:    {type: category, categories: [a, b, X], other: X}
  flag:   {type: bool, impute: 'false'}
statistics:
  - {name: n, kind: count}
  - {name: by_sex, kind: count, by: [sex]}
  - {name: ages, kind: histogram, column: age, bins: [0, 18, 65, 101]}
  - {name: age_grid, kind: histogram, column: age, bins: {start: 0, stop: 98, step: 7}, by: [grp]}
  - {name: mean_income, kind: mean, column: income, by: [sex]}
  - {name: total, kind: sum, column: income}
  - {name: big_sum, kind: sum, column: big, by: [flag]}
  - {name: wide_mean, kind: mean, column: wide}
  - {name: flags, kind: histogram, column: flag, by: [grp]}
  - {name: grps, kind: histogram, column: grp}
  - {name: commonest_sex, kind: mode, column: sex}
  - {name: income_var, kind: variance, column: income, by: [sex]}
  - {name: wide_std, kind: std, column: wide}
"""
HOSTILE_HEADER = b'age,big,income,"wi""de",wide,sex,grp,flag,note'

# cells that test every rule: numbers that overflow, NaN, infinities, blanks, undeclared keys, U+FFFD, bad UTF-8
CELLS = [
    b"", b"0", b"17", b"-3", b"101", b"+42", b" 7", b"7 ", b"1e2", b"3.0", b"nan", b"NaN", b"inf", b"-inf",
    b"Infinity", b"1e400", b"-1e400", b"9223372036854775807", b"9223372036854775808", b"-9223372036854775809",
    b"1000000000000000", b"1000000000000001", b"12.345", b"-0.005", b"0.005", b"999.995", b".5", b"1_000",
    b"\xef\xbf\xbd", b"\xff\xfe", b"\xc3\xa9", b"\xc3", b"F", b"M", b"f", b"X", b"zz", b"true", b"FALSE", b"1",
    b"yes", b'"F"', b'"a,b"', b'"M', b'"x""y"', b'"F"x', b"a\x00b", b"\t1", b"12\r",
]


def splits(spark, path: Path, parts: int = 4) -> int:
    """Read ``path`` (or a directory) in about ``parts`` splits per file; the number of splits Spark makes."""
    size = max(f.stat().st_size for f in ([path] if path.is_file() else path.iterdir()))
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(max(16, size // parts)))
    spark.conf.set("spark.sql.files.openCostInBytes", "0")
    return spark.read.text(str(path)).rdd.getNumPartitions()


def exacts(stats) -> list:
    """Per statistic: its counts and sums per declared cell, or an open-key statistic's entries sorted by (code,
    key) with their counts and sums (the engines may list entries in any order)."""
    out = []
    for e in stats:
        sums = [None] * len(e.counts) if e.sums is None else [int(s) for s in e.sums]
        if e.keys is None:
            squares = None if e.squares is None else [int(s) for s in e.squares]  # variance and std
            out.append((e.counts.tolist(), None if e.sums is None else sums, squares))
        else:
            out.append(sorted(zip(e.keys, e.counts.tolist(), sums, strict=True)))
    return out


def assert_parity(spark, plan, path: Path, parts: int = 4, polars_path: Path | None = None) -> list:
    if parts > 1 and path.is_file() and not path.name.endswith(".gz"):
        assert splits(spark, path, parts) > 1  # the lines really are cut across splits
    else:
        splits(spark, path, parts)
    want = exacts(aggregate(plan, polars_path or path))
    got = exacts(spark_engine.aggregate(plan, str(path)))
    assert got == want
    return want


def hostile_lines(rng: random.Random, n: int) -> list[bytes]:
    lines = []
    for i in range(n):
        fields = [rng.choice(CELLS) for _ in range(rng.randint(0, 10))]
        if i % 7 == 0:
            fields = [b"31", b"5", b"12.5", b"q", b"2.5", b"F", b"a", b"true", b"ok"]  # a well-formed row
        lines.append(b",".join(fields))
    return lines


@pytest.fixture(scope="module")
def hostile_plan():
    return make_plan(parse_spec(HOSTILE_SPEC))


def test_adult_every_statistic_kind(spark, tmp_path):
    plan = make_plan(parse_spec(ADULT_SPEC))
    want = assert_parity(spark, plan, ADULT, parts=6)
    assert want[0][0] == [48842]  # the whole file was read, by both
    assert sum(want[7][0]) > 0


@pytest.mark.parametrize(
    ("eol", "final"),
    [(b"\n", b"\n"), (b"\n", b""), (b"\r", b"\r"), (b"\r\n", b"\r\n"), (b"\r\n", b""), (b"\r", b"")],
    ids=["LF", "LF-no-final", "CR", "CRLF", "CRLF-no-final", "CR-no-final"],
)
def test_hostile_lines(spark, tmp_path, hostile_plan, eol, final):
    rng = random.Random(11)
    lines = hostile_lines(rng, 400)
    if eol == b"\n":
        # CRs inside lines and at line ends of an LF file, and empty lines
        lines += [b"31,5,12.5,q,2.5,F\r,a,1", b"4\r2,1,1,,,M,b", b"", b"", b"5,5,5,5,5,M,b,0\r"]
    else:
        lines += [b"", b"\n", b"31,5\n,12.5,q,2.5,F,a,1", b"", b"\n7,1,1,,,M,b"]  # LFs inside a CR file's lines
    rng.shuffle(lines)
    path = tmp_path / "a data file.csv"  # a space: the path reaches Hadoop as it is, not %-escaped
    path.write_bytes(HOSTILE_HEADER + eol + eol.join(lines) + final)
    want = assert_parity(spark, hostile_plan, path, parts=5)
    assert want[0][0][0] >= 400


def test_crlf_file_ending_in_an_empty_line(spark, tmp_path, hostile_plan):
    # CR file whose last line is the LF after a CRLF, then a CR: an empty line Spark reads as b"\n", which counts
    path = tmp_path / "data.csv"
    path.write_bytes(HOSTILE_HEADER + b"\r\n1,2,3,4,5,F,a,1\r\n\r")
    want = assert_parity(spark, hostile_plan, path, parts=1)
    assert want[0][0] == [2]


@pytest.mark.parametrize(
    "data",
    [
        HOSTILE_HEADER,
        HOSTILE_HEADER + b"\n",
        HOSTILE_HEADER + b"\r\n",
        HOSTILE_HEADER + b"\r",
        b"\xef\xbb\xbf" + HOSTILE_HEADER + b"\n1,2",
    ],
    ids=["header-only", "header-LF", "header-CRLF", "header-CR", "BOM"],
)
def test_files_without_many_rows(spark, tmp_path, hostile_plan, data):
    path = tmp_path / "data.csv"
    path.write_bytes(data)
    assert_parity(spark, hostile_plan, path, parts=1)


def test_directory_of_parts_and_gzip(spark, tmp_path, hostile_plan):
    rng = random.Random(5)
    parts = tmp_path / "parts"
    parts.mkdir()
    everything = []
    for k in range(3):
        lines = hostile_lines(rng, 100)
        everything += lines
        (parts / f"part-{k}.csv").write_bytes(HOSTILE_HEADER + b"\r\n" + b"\r\n".join(lines) + b"\r\n")
    (parts / "_SUCCESS").write_bytes(b"")
    whole = tmp_path / "whole.csv"
    whole.write_bytes(HOSTILE_HEADER + b"\r\n" + b"\r\n".join(everything) + b"\r\n")
    assert_parity(spark, hostile_plan, parts, polars_path=whole)
    packed = tmp_path / "whole.csv.gz"
    packed.write_bytes(gzip.compress(whole.read_bytes()))
    assert_parity(spark, hostile_plan, packed, polars_path=whole)
    # bzip2 splits (Hadoop finds block boundaries): the header is still dropped by position, once
    packed = tmp_path / "whole.csv.bz2"
    packed.write_bytes(bz2.compress(whole.read_bytes() * 20, compresslevel=1))
    (tmp_path / "twenty.csv").write_bytes(whole.read_bytes() * 20)
    assert_parity(spark, hostile_plan, packed, polars_path=tmp_path / "twenty.csv")


def test_parts_with_different_headers_are_refused(spark, tmp_path, hostile_plan):
    parts = tmp_path / "parts"
    parts.mkdir()
    (parts / "a.csv").write_bytes(HOSTILE_HEADER + b"\n1,2\n")
    (parts / "b.csv").write_bytes(HOSTILE_HEADER.replace(b"age,big", b"big,age") + b"\n1,2\n")
    with pytest.raises(InputError, match="do not all have the same header"):
        spark_engine.aggregate(hostile_plan, str(parts))
    (parts / "b.csv").write_bytes(HOSTILE_HEADER + b"\r1,2\r")
    with pytest.raises(InputError, match="do not all have the same header"):
        spark_engine.aggregate(hostile_plan, str(parts))


def test_refusals_before_anything_is_read(spark, tmp_path, hostile_plan):
    missing = tmp_path / "nope.csv"
    with pytest.raises(InputError, match="does not exist"):
        spark_engine.aggregate(hostile_plan, str(missing))
    with pytest.raises(UsageError, match="no file system for this URL's scheme"):
        spark_engine.aggregate(hostile_plan, "nosuchscheme://bucket/data.csv")
    zst = tmp_path / "data.csv.zst"
    zst.write_bytes(b"\x28\xb5\x2f\xfd")
    with pytest.raises(UsageError, match="native ZStandardCodec"):
        spark_engine.aggregate(hostile_plan, str(zst))
    with pytest.raises(InputError, match=r"could not be read as Parquet by Spark \(AnalysisException\)"):
        spark_engine.aggregate(hostile_plan, str(tmp_path / "x.parquet"))  # no such file
    import polars as pl

    pl.DataFrame({"age": [1]}).write_parquet(tmp_path / "ages.parquet")
    with pytest.raises(InputError, match=r"declared column\(s\) missing from the schema: big, income"):
        spark_engine.aggregate(hostile_plan, str(tmp_path / "ages.parquet"))
    no_age = tmp_path / "no_age.csv"
    no_age.write_bytes(HOSTILE_HEADER.replace(b"age,", b"") + b"\n1\n")
    with pytest.raises(InputError, match="missing from the header: age"):
        spark_engine.aggregate(hostile_plan, str(no_age))
    rfc = make_plan(parse_spec(HOSTILE_SPEC + "csv: {quoted_line_breaks: true}\n"))
    with pytest.raises(UsageError, match="quoted_line_breaks"):
        spark_engine.aggregate(rfc, str(no_age))


def test_a_failing_job_quotes_nothing(spark, tmp_path, hostile_plan, monkeypatch):
    # a Python error inside the job (here: the aggregator fails with a message holding a cell) reaches the user
    # as the engine's error naming a class, never the message
    path = tmp_path / "data.csv"
    path.write_bytes(HOSTILE_HEADER + b"\nsecret-cell-value,1\n")

    class Boom(spark_engine.LineAggregator):
        def add(self, data: bytes) -> None:
            raise ValueError(data.decode())

        def rows(self, data: bytes):
            if data:  # (the driver reads the rows' schema from no data)
                raise ValueError(data.decode())
            return super().rows(data)

    monkeypatch.setattr(spark_engine, "_line_aggregator", Boom)
    with pytest.raises(Exception, match="the Spark engine failed on input") as info:
        spark_engine.aggregate(hostile_plan, str(path))
    assert "secret-cell-value" not in str(info.value)
    # the same in a person-level job; a cell that looks like an executor's refusal is still just a failure
    person = make_plan(parse_spec(panel_spec("{id: person_id, max_rows: 3, missing_id: drop}")))
    path.write_bytes(PANEL_HEADER + b"\np1,secret-cell-value:version:9.9.9:,dpcli-executor-hash-differs\n")
    with pytest.raises(InternalError) as info:
        spark_engine.aggregate(person, str(path), secret=SECRET)
    assert str(info.value) == (
        f"the Spark engine failed on input {path} (PythonException); nothing was spent"
    )


_ALPHABET = st.sampled_from([b",", b'"', b"\r", b"\n", b"\r\n", b"1", b"-", b".", b"e", b"F", b"M", b"a", b"X",
                             b"true", b"\xff", b"\xc3\xa9", b"9223372036854775808", b"nan", b" ", b"\x00"])


@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pieces=st.lists(st.lists(_ALPHABET, max_size=12).map(b"".join), min_size=1, max_size=40),
    eol=st.sampled_from([b"\n", b"\r", b"\r\n"]),
)
def test_random_lines(spark, tmp_path, hostile_plan, pieces, eol):
    path = tmp_path / "random.csv"
    path.write_bytes(HOSTILE_HEADER + eol + eol.join(pieces))
    splits(spark, path, 3)
    assert exacts(spark_engine.aggregate(hostile_plan, str(path))) == exacts(aggregate(hostile_plan, path))


def test_sums_beyond_64_bits_add_up_exactly(spark, hostile_plan):
    # fixed-point sums travel as two DECIMAL(38,0) limbs: Spark adds them per cell without rounding or overflow
    import numpy as np
    import pyarrow as pa

    from dpcli.engine.cells import ExactStatistic

    rng = random.Random(3)
    parts = []
    for _ in range(5):
        stats = []
        for sp in hostile_plan.statistics:
            counts = np.array([rng.choice([0, 1, 2**40]) for _ in range(sp.cells)], dtype=np.int64)
            sums = squares = None
            if sp.statistic.kind in ("sum", "mean", "variance", "std"):
                sums = np.array([rng.choice([0, -1, 2**63, -(2**100) - 7, 2**120 + 3]) for _ in range(sp.cells)],
                                dtype=object)
            if sp.statistic.kind in ("variance", "std"):  # sums of squares: rows of their own, the same limbs
                squares = np.array([rng.choice([0, 1, 2**64 + 5, 2**121 + 9]) for _ in range(sp.cells)], dtype=object)
            stats.append(ExactStatistic(counts, sums, squares=squares))
        parts.append(stats)
    batches = [batch for p in parts for batch in spark_engine.cell_rows(p)]
    frame = spark.createDataFrame(pa.Table.from_batches(batches), schema=spark_engine._cell_schema())
    got = spark_engine.exact_statistics(hostile_plan, spark_engine.sum_cells(frame))
    for i in range(len(hostile_plan.statistics)):
        counts, sums = got[i].counts, got[i].sums
        assert counts.tolist() == [sum(int(p[i].counts[j]) for p in parts) for j in range(len(counts))]
        if sums is not None:
            assert sums.tolist() == [sum(int(p[i].sums[j]) for p in parts) for j in range(len(sums))]
        if got[i].squares is not None:
            squares = got[i].squares
            assert squares.tolist() == [sum(int(p[i].squares[j]) for p in parts) for j in range(len(squares))]
    assert sum(got[i].squares is not None for i in range(len(got))) == 2


def test_input_formats_it_cannot_read_are_refused(spark, tmp_path, hostile_plan):
    path = tmp_path / "data.csv"
    path.write_bytes(HOSTILE_HEADER + b"\n1\n")
    with pytest.raises(UsageError, match=r"reads csv.gz from files named \*.gz"):
        spark_engine.aggregate(hostile_plan, str(path), input_format="csv.gz")
    with pytest.raises(UsageError, match="not arrow"):  # Arrow IPC: the polars engine reads it
        spark_engine.aggregate(hostile_plan, str(path), input_format="arrow")
    assert exacts(spark_engine.aggregate(hostile_plan, str(path), input_format="csv"))[0] == ([1], None, None)


def _engine_in_child(env: dict[str, str], prelude: str, path: Path) -> subprocess.CompletedProcess:
    code = (
        f"{prelude}\n"
        "from dpcli.engine import spark_engine\n"
        "from dpcli.errors import DpcliError\n"
        "from tests.engine.test_spark_engine import HOSTILE_SPEC, make_plan, parse_spec\n"
        "try:\n"
        f"    spark_engine.aggregate(make_plan(parse_spec(HOSTILE_SPEC)), {str(path)!r})\n"
        "except DpcliError as exc:\n"
        "    print(type(exc).__name__, exc.exit_code, exc)\n"
    )
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)


def test_without_pyspark_or_java_one_clear_error(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes(HOSTILE_HEADER + b"\n1\n")
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME")}
    r = _engine_in_child(env, "import sys; sys.modules['pyspark'] = None", path)
    assert r.stdout.strip() == (
        "UsageError 2 the Spark engine needs pyspark: install dpcli with its spark extra (from a clone: "
        "pip install '.[spark]'; README.md, Install)"
    )
    assert r.stderr == ""
    pytest.importorskip("pyspark")
    env["PATH"] = str(Path(sys.executable).parent)  # no java on it
    r = _engine_in_child(env, "", path)
    assert r.stdout.strip() == (
        "UsageError 2 the Spark engine needs Java 17 or later: no `java` on PATH or in $JAVA_HOME"
    )
    assert r.stderr == ""


@pytest.mark.parametrize(
    ("dialect", "header", "eol"),
    [
        ("{delimiter: ';'}", True, b"\n"),
        ("{delimiter: tab}", True, b"\r\n"),
        ("{encoding: latin-1}", True, b"\n"),
        ("{header: false}", False, b"\n"),
        ("{header: [age, big, income, wide, sex, grp, flag, note], line_end: cr}", False, b"\r"),
    ],
)
def test_csv_dialects_read_as_the_polars_engine_reads_them(spark, tmp_path, dialect, header, eol):
    """Delimiters, a declared encoding and files without a header line: the same records on both engines (the
    polars engine's reading of the same file is the reference, its dialect tests compare it with plain CSV)."""
    plan = make_plan(parse_spec(HOSTILE_SPEC + f"csv: {dialect}\n"))
    sep = {"';'": b";", "tab": b"\t"}.get(dialect.split(": ")[1].rstrip("}"), b",") if "delimiter" in dialect else b","
    rng = random.Random(7)
    lines = [line.replace(b",", sep) for line in hostile_lines(rng, 3000)]
    if "latin-1" in dialect:
        lines = [line.decode("utf-8", "replace").encode("latin-1", "replace") for line in lines]
    names = b"age,big,income,wide,sex,grp,flag,note".replace(b",", sep)
    body = eol.join(lines) + eol
    path = tmp_path / "d.csv"
    # without a header line, a BOM at the start is dropped by both engines
    path.write_bytes((names + eol + body) if header else (b"\xef\xbb\xbf" + body))
    want = assert_parity(spark, plan, path)
    assert want[0][0][0] >= 3000  # (a hostile cell may hold the other line-break byte: more lines)


def test_a_directory_of_parquet_parts_reads_as_the_polars_engine_reads_the_file(spark, tmp_path):
    """Typed columns with hostile values (null, NaN, inf, out-of-bounds, undeclared keys) in Parquet parts: Spark's
    partitions run the polars engine's typed-column rules (columnar.FrameAggregator) on its Arrow batches."""
    import polars as pl

    rng = random.Random(11)
    n = 6000
    frame = pl.DataFrame(
        {
            "age": [rng.choice([None, -5, 0, 17, 30, 64, 99, 200]) for _ in range(n)],
            "big": [rng.choice([None, 2**62, -(2**40), 7]) for _ in range(n)],
            "income": [rng.choice([None, float("nan"), float("inf"), -3.25, 12.5, 999.99, 5000.0]) for _ in range(n)],
            "wide": [rng.choice([None, 1e11, -2.5, 0.25]) for _ in range(n)],
            "sex": [rng.choice([None, "F", "M", "é", "a,b", "", "Q"]) for _ in range(n)],
            "grp": [rng.choice([None, "a", "b", "X", "zz", "\ufffd"]) for _ in range(n)],
            "flag": [rng.choice([None, True, False]) for _ in range(n)],
        },
        schema_overrides={"age": pl.Int32, "big": pl.Int64, "flag": pl.Boolean},
    )
    whole = tmp_path / "whole.parquet"
    frame.write_parquet(whole)
    parts = tmp_path / "parts"
    parts.mkdir()
    for i in range(4):
        frame.slice(i * 1500, 1500).write_parquet(parts / f"part-{i}.parquet")
    plan = make_plan(parse_spec(HOSTILE_SPEC))
    want = exacts(aggregate(plan, whole))
    got = exacts(spark_engine.aggregate(plan, str(parts), input_format="parquet"))
    assert got == want
    assert want[0][0] == [n]
    columns_only = HOSTILE_SPEC.split("statistics:")[0]
    count_only = make_plan(parse_spec(columns_only + "statistics:\n  - {name: n, kind: count}\n"))
    assert exacts(spark_engine.aggregate(count_only, str(whole)))[0] == ([n], None, None)


def test_dpcli_release_with_the_spark_engine_end_to_end(spark, tmp_path):
    """The command: `--engine spark` (the session of this test run is reused), the table written, the spend
    recorded; standard input is refused before anything is spent."""
    from tests.helpers import run_in_process

    spec = tmp_path / "s.yaml"
    spec.write_text(HOSTILE_SPEC)
    data = tmp_path / "d.csv"
    data.write_bytes(HOSTILE_HEADER + b"\n" + b"\n".join(hostile_lines(random.Random(3), 500)) + b"\n")
    ledger = tmp_path / "l.jsonl"
    assert run_in_process("budget", "set", "toy", "--epsilon", "1000", "--ledger", ledger).returncode == 0
    done = run_in_process("release", spec, "--engine", "spark", "--spark-master", "local[2]", "--input", data,
                          "--ledger", ledger, "-o", tmp_path / "o.csv")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "o.csv").read_text().startswith("statistic,")
    refused = run_in_process("release", spec, "--engine", "spark", "--input", "-", "--ledger", ledger, "-o", "-")
    assert refused.returncode == 2
    assert refused.stderr.decode() == (
        "dpcli: error: the Spark engine reads files, not standard input; pass --input PATH\n"
    )
    shown = run_in_process("budget", "show", "--json", "--ledger", ledger)
    assert b'"releases": 1' in shown.stdout


# -- person-level releases and open keys (issue 12) ------------------------------------------------------------------

PANEL_HEADER = b"person_id,age,income,sex,grp,country,note"
PANEL_COLUMNS = """\
columns:
  age:     {type: int, bounds: [0, 100]}
  income:  {type: float, bounds: [-1000, 1000], precision: 0.01}
  sex:     {type: category, categories: [F, M]}
  grp:     {type: category, categories: [a, b, X], other: X}
  country: {type: category, categories: open, max_length: 8}
"""
PANEL_STATISTICS = """\
statistics:
  - {name: rows, kind: count}
  - {name: persons, kind: count, of: persons}
  - {name: persons_by_sex, kind: count, of: persons, by: [sex]}
  - {name: by_sex_grp, kind: count, by: [sex, grp]}
  - {name: ages, kind: histogram, column: age, bins: [0, 18, 65, 101]}
  - {name: spend_row, kind: sum, column: income, by: [sex], clamp: row}
  - {name: spend_person, kind: sum, column: income, by: [grp], clamp: person}
  - {name: mean_age, kind: mean, column: age, clamp: person}
  - {name: mean_income_row, kind: mean, column: income, by: [sex], clamp: row}
  - {name: mean_income_person, kind: mean, column: income, by: [grp], clamp: person}
  - {name: by_country, kind: count, by: [country]}
  - {name: country_by_sex, kind: count, by: [sex, country]}
  - {name: persons_by_country, kind: count, of: persons, by: [grp, country]}
  - {name: country_hist, kind: histogram, column: country}
"""


def panel_spec(unit: str, statistics: str = PANEL_STATISTICS) -> str:
    privacy = f"privacy: {{epsilon: 1, delta: 1e-6, unit: {unit}}}\n"
    return f"version: 1\ndataset: panel\n{privacy}{PANEL_COLUMNS}{statistics}"


SECRET = bytes(range(32))


# -- issue 23: a truncated .gz is the input's fault; a signal during a Spark job ends the run as a signal -----------


def test_a_truncated_gzip_is_an_input_error_as_on_polars(spark, tmp_path, hostile_plan):
    """A .csv.gz cut in the middle ended the Spark engine with exit 1 (an internal error, java.io.EOFException);
    the polars engine says exit 3: the file as a whole is not a valid csv.gz."""
    blob = gzip.compress(HOSTILE_HEADER + b"\n" + b"\n".join(hostile_lines(random.Random(5), 4000)) + b"\n")
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(InputError, match=r"is not a valid csv\.gz file") as on_polars:
        aggregate(hostile_plan, path)
    with pytest.raises(InputError) as on_spark:
        spark_engine.aggregate(hostile_plan, str(path))
    assert str(on_spark.value) == f"input {path} is not a valid csv.gz file (java.io.EOFException): nothing was spent"
    assert on_polars.value.exit_code == on_spark.value.exit_code == 3


def test_a_compressed_input_past_the_input_cap_is_exit_3_before_the_job_as_on_polars(spark, tmp_path, hostile_plan):
    """Issue 23 (5): Hadoop decompressed a .gz whatever its size; now the compressed parts' decompressed sizes,
    added up, are capped by --max-input-bytes before the job reads a line, with the polars engine's message."""
    from tests.helpers import run_in_process

    lines = HOSTILE_HEADER + b"\n" + b"\n".join(hostile_lines(random.Random(7), 2000)) + b"\n"
    parts = tmp_path / "parts"
    parts.mkdir()
    for name in ("a.csv.gz", "b.csv.gz"):
        (parts / name).write_bytes(gzip.compress(lines))
    cap = len(lines) * 3 // 2  # each part is within it, the two together are not
    with pytest.raises(InputError) as on_spark:
        spark_engine.aggregate(hostile_plan, str(parts), max_input_bytes=cap)
    assert str(on_spark.value) == (
        f"input {parts} decompresses to more than the input cap ({cap} bytes): nothing was spent"
    )
    assert on_spark.value.exit_code == 3
    assert exacts(spark_engine.aggregate(hostile_plan, str(parts), max_input_bytes=2 * len(lines))) == exacts(
        spark_engine.aggregate(hostile_plan, str(parts)))
    # through the command, as the polars engine: exit 3, nothing spent
    spec = tmp_path / "s.yaml"
    spec.write_text(HOSTILE_SPEC)
    data = parts / "a.csv.gz"
    ledger = tmp_path / "l.jsonl"
    assert run_in_process("budget", "set", "toy", "--epsilon", "1000", "--ledger", ledger).returncode == 0
    before = ledger.read_bytes()
    for engine in ("polars", "spark"):
        done = run_in_process("release", spec, "--engine", engine, "--spark-master", "local[2]", "--input", data,
                              "--ledger", ledger, "-o", tmp_path / "o.csv", "--max-input-bytes", str(len(lines) - 1))
        assert done.returncode == 3, done.stderr
        assert b"decompresses to more than the input cap" in done.stderr
    assert ledger.read_bytes() == before
    assert not (tmp_path / "o.csv").exists()
