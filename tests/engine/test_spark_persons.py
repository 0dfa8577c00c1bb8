"""The Spark engine gives exactly the polars engine's person-level aggregates (issue 12), as
tests/engine/test_spark_engine.py does for rows: the same spec through both engines' no-noise path with a fixed secret,
on a panel file whose rows are in random order, so one person's rows start in several partitions; open keys at row
level; the refusals before the job.

Marked ``spark`` (make test-spark); without pyspark or Java they skip, except under CI, where they fail."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from dpcli.engine import aggregate, spark_engine
from dpcli.errors import InputError, UsageError
from dpcli.plan.model import make_plan
from dpcli.specs.load import parse_spec
from tests.engine.test_spark_engine import (
    PANEL_HEADER,
    PANEL_STATISTICS,
    SECRET,
    assert_parity,
    exacts,
    panel_spec,
    splits,
)
from tests.spec_builder import spec_text

pytestmark = pytest.mark.spark


# the same statistics at row level: no count of persons, no clamp
ROW_STATISTICS = "\n".join(
    line.replace(", clamp: row", "").replace(", clamp: person", "")
    for line in PANEL_STATISTICS.splitlines()
    if "of: persons" not in line
) + "\n"


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
    # ε=1/2 on a count of persons (sensitivity 1): discrete Laplace of scale t=2, q = e^(-1/t), so
    # P(|noise| >= 40) = 2 q^40 / (1 + q) ≈ 2.6e-9 < 1e-8
    assert plan.statistics[0].component("count").scale == 2
    assert abs(released - persons) < 40
    assert [r["grp"] for r in table if r["statistic"] == "spend_person"] == ["a", "b", "X"]
    shown = json.loads(run_in_process("budget", "show", "--json", "--ledger", ledger).stdout)
    assert '"releases": 1' in json.dumps(shown)


def test_rows_without_an_id_are_persons_of_their_own_when_no_cell_is_read(spark, tmp_path):
    """Issue 23 (12): with counts alone (no statistic reads a cell), ``missing_id: person`` counted nothing on Spark
    as on polars: a file whose rows had no id released 0 rows and 0 persons."""
    unit = "epsilon: 1, unit: {id: person_id, max_rows: 2, missing_id: person}"
    counts = make_plan(parse_spec(spec_text(
        statistics=["{name: rows, kind: count}", "{name: persons, kind: count, of: persons}"], privacy=unit,
        dataset="panel",
    )))
    path = tmp_path / "p.csv"
    path.write_bytes(b"person_id,age\n" + b"".join(b",%d\n" % i for i in range(30)) + b"p1,1\np1,2\np1,3\n")
    want = [([32], None, None), ([31], None, None)]
    assert exacts(spark_engine.aggregate(counts, str(path), secret=SECRET)) == want
    assert exacts(aggregate(counts, path, secret=SECRET)) == want
    # with a sum, which two of p1's three rows are kept shows: the same rows on both engines
    summed = make_plan(parse_spec(spec_text(
        statistics=["{name: total, kind: sum, column: age, clamp: row}"], privacy=unit, dataset="panel"
    )))
    assert exacts(spark_engine.aggregate(summed, str(path), secret=SECRET)) == exacts(
        aggregate(summed, path, secret=SECRET)
    )
