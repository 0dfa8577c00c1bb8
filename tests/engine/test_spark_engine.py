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
from dpcli.spec.model import parse_spec

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


def _problem() -> str | None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (make test-spark installs dpcli[spark])"
    if spark_engine._java() is None:
        return "no Java (the Spark engine needs Java 17: apt-get install openjdk-17-jre-headless)"
    return None


@pytest.fixture(scope="session")
def spark():
    problem = _problem()
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the Spark tests must run in CI: {problem}")
        pytest.skip(problem)
    return spark_engine.session("local[2]", {"spark.sql.shuffle.partitions": "2"})


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

    from dpcli.engine.polars_engine import ExactStatistic

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
    assert r.stdout.strip() == "UsageError 2 the Spark engine needs pyspark: pip install 'dpcli[spark]'"
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
# the same statistics at row level: no count of persons, no clamp
ROW_STATISTICS = "\n".join(
    line.replace(", clamp: row", "").replace(", clamp: person", "")
    for line in PANEL_STATISTICS.splitlines()
    if "of: persons" not in line
) + "\n"


def panel_spec(unit: str, statistics: str = PANEL_STATISTICS) -> str:
    privacy = f"privacy: {{epsilon: 1, delta: 1e-6, unit: {unit}}}\n"
    return f"version: 1\ndataset: panel\n{privacy}{PANEL_COLUMNS}{statistics}"


# ids: people with one to many rows, ids that differ only by a blank or case, quoted ids (one holding the
# delimiter), and missing ones (empty, invalid UTF-8, which reads as U+FFFD, and a short line without the field)
SPECIAL_IDS = [b"", b"", b"\xff", b"\xef\xbf\xbd", b"P1", b" p1", b'"q,1"', b'"q"', b"q", b"\xc3\xa9"]
# open keys: cut to 8 characters (two merge; a multi-byte key is cut by characters), missing, quoted
COUNTRIES = [b"", b"DE", b"FR", b"Germany-East", b"Germany-West", ("\u00e9" * 5).encode() + b"xyzw", b"\xff",
             b'"a,b"', b"US", b"US ", b"nan"]


def panel_lines(rng: random.Random, persons: int, rows: int) -> list[bytes]:
    """Rows of a panel file in random order (so one person's rows land in several splits): most persons have a few
    rows, some many, and every cell of the other columns is sometimes hostile."""
    weights = [rng.choice([1, 1, 2, 3, 8, 30]) for _ in range(persons)]
    ids = rng.choices([f"p{k}".encode() for k in range(persons)], weights, k=rows)
    lines = []
    for i, ident in enumerate(ids):
        if i % 11 == 0:
            ident = rng.choice(SPECIAL_IDS)
        fields = [
            ident,
            rng.choice([b"", b"5", b"17", b"30", b"64", b"99", b"150", b"-3", b"x"]),
            rng.choice([b"", b"12.5", b"-3.25", b"999.99", b"5000", b"nan", b"0.005", b"%d" % rng.randint(-900, 900)]),
            rng.choice([b"F", b"M", b"", b"f"]),
            rng.choice([b"a", b"b", b"X", b"zz", b"", b"\xff"]),
            rng.choice(COUNTRIES),
            b"n",
        ]
        if i % 97 == 0:
            fields = fields[: rng.randint(0, 3)]  # a short line: the missing fields are missing cells
        lines.append(b",".join(fields))
    return lines


def write_panel(path: Path, lines: list[bytes], eol: bytes = b"\n", final: bytes | None = None) -> Path:
    path.write_bytes(PANEL_HEADER + eol + eol.join(lines) + (eol if final is None else final))
    return path


SECRET = bytes(range(32))


def assert_person_parity(spark, plan, path: Path, parts: int = 5, secret: bytes = SECRET, polars_path=None) -> list:
    # several partitions after the shuffle by person too (adaptive execution would merge such small ones into one)
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    if path.is_file() and parts > 1:
        assert splits(spark, path, parts) > 1
    else:
        splits(spark, path, parts)
    want = exacts(aggregate(plan, polars_path or path, secret=secret))
    got = exacts(spark_engine.aggregate(plan, str(path), secret=secret))
    assert got == want
    return want


@pytest.fixture(scope="module")
def panel_file(tmp_path_factory) -> Path:
    return write_panel(tmp_path_factory.mktemp("panel") / "panel.csv", panel_lines(random.Random(12), 300, 4000))


@pytest.mark.parametrize(
    "unit",
    [
        "{id: person_id, max_rows: 3, missing_id: drop}",
        "{id: person_id, max_rows: 4, max_groups: 2, max_rows_per_group: 2, missing_id: drop}",
        "{id: person_id, max_rows: 5, max_groups: 1, missing_id: person}",
        "{id: person_id, max_rows: 2, max_rows_per_group: 1, missing_id: person}",
    ],
    ids=["K", "K-G-R-drop", "K-G-person", "K-R-person"],
)
def test_person_level_release_as_the_polars_engine(spark, panel_file, unit):
    """Every statistic kind under a person unit (K, G, R, both missing_id choices, count of persons, clamp row
    and person, open keys), the file in several splits and Spark's rows repartitioned by person: identical cells."""
    plan = make_plan(parse_spec(panel_spec(unit)))
    want = assert_person_parity(spark, plan, panel_file)
    k = plan.spec.privacy.person.max_rows
    assert 0 < want[1][0][0] < want[0][0][0] <= k * want[1][0][0]  # persons < kept rows <= K per person
    assert len(want[10]) > 3  # open keys were observed


def test_rows_of_one_person_meet_in_one_partition(spark):
    """by_person: every row of an id in one partition, the ids over several; rows without an id spread out."""
    from pyspark.sql import functions as F

    from dpcli.engine.persons import ID_COLUMN

    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
    spark.conf.set("spark.sql.shuffle.partitions", "4")
    rng = random.Random(2)
    ids = [rng.choice([None, "", "\ufffd", *(f"p{k}" for k in range(50))]) for _ in range(3000)]
    rows = spark.createDataFrame([(i, n) for n, i in enumerate(ids)], f"`{ID_COLUMN}` string, age long")
    placed = spark_engine.by_person(rows, [ID_COLUMN, "age"]).select(
        F.col(ID_COLUMN).alias("id"), F.spark_partition_id().alias("part")
    )
    parts = placed.groupBy("id").agg(F.countDistinct("part").alias("parts")).collect()
    named = {r["id"]: r["parts"] for r in parts if r["id"] not in (None, "", "\ufffd")}
    assert len(named) == 50
    assert set(named.values()) == {1}
    assert placed.filter(F.col("id").isNotNull() & (F.col("id") != "")).select("part").distinct().count() > 1
    assert placed.filter(F.col("id").isNull()).select("part").distinct().count() > 1


def test_person_level_choice_follows_the_secret(spark, panel_file):
    """The secret reaches the executors: another secret keeps other rows (the sums differ), the same one the same."""
    plan = make_plan(parse_spec(panel_spec("{id: person_id, max_rows: 1, missing_id: drop}")))
    splits(spark, panel_file, 4)
    first = exacts(spark_engine.aggregate(plan, str(panel_file), secret=SECRET))
    assert exacts(spark_engine.aggregate(plan, str(panel_file), secret=SECRET)) == first
    other = exacts(spark_engine.aggregate(plan, str(panel_file), secret=bytes(32)))
    assert other[5] != first[5]  # spend_row: which of a person's rows is kept moved its sum
    assert other[1] == first[1]  # but the persons are the same persons


@pytest.mark.parametrize(("eol", "final"), [(b"\r", b"\r\n"), (b"\r\n", b"\r\n"), (b"\n", b"")],
                         ids=["CR-ending-CRLF", "CRLF", "LF-no-final"])
def test_person_level_line_ends(spark, tmp_path, eol, final):
    # a CR file ending in CRLF gives Spark one last record that is not a line: under `missing_id: person` it would
    # be a person of its own if its part were not taken back out
    plan = make_plan(parse_spec(panel_spec("{id: person_id, max_rows: 2, missing_id: person}")))
    lines = panel_lines(random.Random(4), 40, 400)
    path = write_panel(tmp_path / "p.csv", lines, eol, final)
    want = assert_person_parity(spark, plan, path, parts=3)
    # and the same records without a final line end
    plain = write_panel(tmp_path / "plain.csv", lines, eol, b"")
    assert exacts(aggregate(plan, plain, secret=SECRET)) == want
    assert want[1][0][0] > 40  # the persons with an id, and the rows without one each a person


def test_person_level_parts_and_parquet(spark, tmp_path):
    """A directory of CSV parts and of Parquet parts: one person's rows in several files."""
    import polars as pl

    plan = make_plan(parse_spec(panel_spec("{id: person_id, max_rows: 3, max_groups: 2, missing_id: person}")))
    rng = random.Random(8)
    lines = panel_lines(rng, 200, 3000)
    whole = write_panel(tmp_path / "whole.csv", lines)
    parts = tmp_path / "parts"
    parts.mkdir()
    for k in range(3):
        write_panel(parts / f"part-{k}.csv", lines[k * 1000:(k + 1) * 1000])
    assert_person_parity(spark, plan, parts, polars_path=whole)
    frame = pl.DataFrame(
        {
            "person_id": [rng.choice([None, "", "\ufffd", *(f"p{k}" for k in range(150))]) for _ in range(4000)],
            "age": [rng.choice([None, 3, 30, 64, 200]) for _ in range(4000)],
            "income": [rng.choice([None, float("nan"), -3.25, 12.5, 5000.0]) for _ in range(4000)],
            "sex": [rng.choice([None, "F", "M"]) for _ in range(4000)],
            "grp": [rng.choice([None, "a", "b", "zz"]) for _ in range(4000)],
            "country": [rng.choice([None, "", "DE", "Germany-East", "Germany-West", "\ufffd"]) for _ in range(4000)],
        },
        schema_overrides={"age": pl.Int32},
    )
    frame.write_parquet(tmp_path / "whole.parquet")
    pq = tmp_path / "pq"
    pq.mkdir()
    for i in range(4):
        frame.slice(i * 1000, 1000).write_parquet(pq / f"part-{i}.parquet")
    want = exacts(aggregate(plan, tmp_path / "whole.parquet", secret=SECRET))
    assert exacts(spark_engine.aggregate(plan, str(pq), input_format="parquet", secret=SECRET)) == want
    assert want[1][0][0] > 150  # the named persons, and the missing ids each a person


def test_open_keys_at_row_level(spark, panel_file, tmp_path):
    """Open-key statistics without a person unit: each partition's entries carry the key text, added up by
    (cell, key)."""
    import polars as pl

    plan = make_plan(parse_spec(panel_spec("row", ROW_STATISTICS)))
    want = assert_parity(spark, plan, panel_file, parts=5)
    keys = {key for _, key in (entry[0] for entry in want[-1])}
    assert "Germany-" in keys
    assert "Germany-East" not in keys  # cut to max_length, the two merged
    frame = pl.read_csv(panel_file, infer_schema=False, truncate_ragged_lines=True, encoding="utf8-lossy")
    frame.write_parquet(tmp_path / "p.parquet")
    assert exacts(spark_engine.aggregate(plan, str(tmp_path / "p.parquet"))) == exacts(
        aggregate(plan, tmp_path / "p.parquet")
    )


def test_executors_with_another_polars_are_refused(spark, panel_file, monkeypatch):
    """The rows' choice rests on polars' seeded hash, stable only within one polars version (and one platform): a
    partition whose polars version, or whose hash of fixed rows, is not the driver's refuses, exit 2. Here the driver
    is made to expect another version, then another hash; the executors check their own."""
    import polars as pl

    plan = make_plan(parse_spec(panel_spec("{id: person_id, max_rows: 3, missing_id: drop}")))
    version, probe = spark_engine.expected_polars()
    monkeypatch.setattr(spark_engine, "expected_polars", lambda: ("0.0.1", probe))
    with pytest.raises(UsageError) as info:
        spark_engine.aggregate(plan, str(panel_file), secret=SECRET)
    assert info.value.exit_code == 2
    assert str(info.value) == (
        f"the Spark engine's executors run polars {pl.__version__}, this machine 0.0.1: a person-level release "
        "picks each person's rows by polars' seeded hash, which is the same only within one polars version; "
        "install the same polars on the workers; nothing was spent"
    )
    monkeypatch.setattr(spark_engine, "expected_polars", lambda: (version, (*probe[:-1], probe[-1] ^ 1)))
    with pytest.raises(UsageError, match=r"^the Spark engine's executors hash rows differently from this machine"):
        spark_engine.aggregate(plan, str(panel_file), secret=SECRET)


def test_a_missing_id_field_is_refused_before_anything_is_read(spark, tmp_path):
    plan = make_plan(parse_spec(panel_spec("{id: pid, max_rows: 3, missing_id: drop}")))
    path = write_panel(tmp_path / "p.csv", [b"p1,3,4,F,a,DE,n"])
    with pytest.raises(InputError) as info:
        spark_engine.aggregate(plan, str(path), secret=SECRET)
    with pytest.raises(InputError) as polars_info:
        aggregate(plan, path, secret=SECRET)
    assert str(info.value) == str(polars_info.value)
    import polars as pl

    assert str(info.value).endswith("the person id field pid (privacy.unit.id) is missing from the header")
    pl.read_csv(path).write_parquet(tmp_path / "p.parquet")
    with pytest.raises(InputError) as info:
        spark_engine.aggregate(plan, str(tmp_path / "p.parquet"), secret=SECRET)
    with pytest.raises(InputError) as polars_info:
        aggregate(plan, tmp_path / "p.parquet", secret=SECRET)
    assert str(info.value) == str(polars_info.value)


def test_a_person_level_release_with_the_spark_engine_end_to_end(spark, panel_file, tmp_path):
    """The command on a person-level spec: the release's own secret reaches the executors (the persons are the
    same whichever rows it keeps), the table written, the person unit recorded."""
    import csv
    import json

    from tests.helpers import run_in_process

    spec = tmp_path / "s.yaml"
    spec.write_text("""\
version: 1
dataset: panel
privacy: {epsilon: 1, unit: {id: person_id, max_rows: 3, max_groups: 2, missing_id: drop}}
columns:
  income:  {type: float, bounds: [-1000, 1000], precision: 0.01}
  grp:     {type: category, categories: [a, b, X], other: X}
statistics:
  - {name: persons, kind: count, of: persons}
  - {name: spend_person, kind: sum, column: income, by: [grp], clamp: person}
""")
    ledger = tmp_path / "l.jsonl"
    assert run_in_process("budget", "set", "panel", "--epsilon", "1000", "--neighbours", "add_remove", "--unit",
                          "person:person_id", "--ledger", ledger).returncode == 0
    done = run_in_process("release", spec, "--engine", "spark", "--spark-master", "local[2]", "--input", panel_file,
                          "--ledger", ledger, "-o", tmp_path / "o.csv")
    assert done.returncode == 0, done.stderr
    table = list(csv.DictReader((tmp_path / "o.csv").open()))
    plan = make_plan(parse_spec(spec.read_text()))
    persons = exacts(aggregate(plan, panel_file, secret=SECRET))[0][0][0]
    released = float(next(r["value"] for r in table if r["statistic"] == "persons"))
    # ε=1/2 on a count of persons (sensitivity 1): Laplace scale 2, P(|noise| >= 40) = e^-20 < 1e-8
    assert plan.statistics[0].component("count").scale == 2
    assert abs(released - persons) < 40
    assert [r["grp"] for r in table if r["statistic"] == "spend_person"] == ["a", "b", "X"]
    shown = json.loads(run_in_process("budget", "show", "--json", "--ledger", ledger).stdout)
    assert '"releases": 1' in json.dumps(shown)


def test_rows_without_an_id_are_persons_of_their_own_when_no_cell_is_read(spark, tmp_path):
    """Issue 23 (12): with counts alone (no statistic reads a cell), ``missing_id: person`` counted nothing on Spark
    as on polars: a file whose rows had no id released 0 rows and 0 persons."""
    head = (
        "version: 1\ndataset: panel\nprivacy: {epsilon: 1, unit: {id: person_id, max_rows: 2, missing_id: person}}\n"
        "columns:\n  age: {type: int, bounds: [0, 100]}\nstatistics:\n"
    )
    counts = make_plan(parse_spec(
        head + "  - {name: rows, kind: count}\n  - {name: persons, kind: count, of: persons}\n"
    ))
    path = tmp_path / "p.csv"
    path.write_bytes(b"person_id,age\n" + b"".join(b",%d\n" % i for i in range(30)) + b"p1,1\np1,2\np1,3\n")
    want = [([32], None, None), ([31], None, None)]
    assert exacts(spark_engine.aggregate(counts, str(path), secret=SECRET)) == want
    assert exacts(aggregate(counts, path, secret=SECRET)) == want
    # with a sum, which two of p1's three rows are kept shows: the same rows on both engines
    summed = make_plan(parse_spec(head + "  - {name: total, kind: sum, column: age, clamp: row}\n"))
    assert exacts(spark_engine.aggregate(summed, str(path), secret=SECRET)) == exacts(
        aggregate(summed, path, secret=SECRET)
    )


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


# Runs `dpcli release --engine spark` (argv[2:]) with a fault in pyspark's reading of the job's result: the process
# sends itself the signal argv[1] there; with "cleanup-fails" pyspark's clean-up then fails while the interruption
# unwinds (as closing the result socket or joining its server thread can: the TypeError of the issue).
SIGNAL_DURING_A_SPARK_JOB = """\
import contextlib, os, signal, sys
from pyspark.sql.pandas import conversion

signum, mode = int(sys.argv[1]), sys.argv[2]
load = conversion._load_from_socket

@contextlib.contextmanager
def signalled(*args, **kwargs):
    with load(*args, **kwargs) as stream:
        try:
            os.kill(os.getpid(), signum)
            yield stream
        finally:
            if mode == "cleanup-fails":
                raise TypeError("a clean-up that failed")

conversion._load_from_socket = signalled
sys.argv = ["dpcli", *sys.argv[3:]]
from dpcli.__main__ import main
main()
"""


def _spark_release(tmp_path, signum: int, mode: str, preexec=None):
    from tests.helpers import clean_env, run_in_process

    spec = tmp_path / "s.yaml"
    spec.write_text(HOSTILE_SPEC)
    data = tmp_path / "d.csv"
    data.write_bytes(HOSTILE_HEADER + b"\n" + b"\n".join(hostile_lines(random.Random(3), 300)) + b"\n")
    ledger = tmp_path / "l.jsonl"
    assert run_in_process("budget", "set", "toy", "--epsilon", "1000", "--ledger", ledger).returncode == 0
    r = subprocess.run([sys.executable, "-c", SIGNAL_DURING_A_SPARK_JOB, str(signum), mode, "release", str(spec),
                        "--engine", "spark", "--spark-master", "local[1]", "--input", str(data), "--ledger",
                        str(ledger), "-o", str(tmp_path / "o.csv"), "--quiet"],
                       capture_output=True, env=clean_env(), timeout=600, preexec_fn=preexec)
    return r, ledger


def test_a_sigterm_during_a_spark_job_is_exit_143_with_nothing_spent(spark, tmp_path):
    """A SIGTERM while the driver read the job's result, with pyspark's clean-up failing as it unwound, ended in an
    internal error (TypeError, exit 1); it is the signal's 143, nothing spent."""
    import signal

    from dpcli.ledger import JsonlLedger

    r, ledger = _spark_release(tmp_path, signal.SIGTERM, "cleanup-fails")
    assert r.returncode == 143, r.stderr.decode()
    assert r.stderr.decode() == "dpcli: error: interrupted by SIGTERM; nothing was spent\n"
    assert not [x for x in JsonlLedger(ledger).records() if x.type == "spend"]


def test_an_ignored_sigint_stays_ignored_with_the_spark_engine(spark, tmp_path):
    """pyspark's SparkContext sets a SIGINT handler of its own (it cancels the jobs and raises KeyboardInterrupt),
    over a SIGINT the parent set to be ignored: a script's `dpcli release --engine spark &` was interrupted by it.
    dpcli puts the disposition back: the release completes."""
    import signal

    r, _ledger = _spark_release(tmp_path, signal.SIGINT, "plain",
                                preexec=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert r.returncode == 0, r.stderr.decode()
    assert r.stderr == b"", r.stderr.decode()
    assert (tmp_path / "o.csv").exists()
