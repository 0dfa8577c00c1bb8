"""`dpcli release --input-format, --engine, --spark-master`: the choices the command line offers, and what it does
with a choice before the engines behind it exist (the lead's engine rewrite gives the other values their meaning)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.test_progress import SPEC  # a count by city and a sum of income
from tests.helpers import run_in_process


@pytest.fixture
def work(make_work: Callable[..., Path]) -> Path:
    return make_work(SPEC, "city,income\nnorth,1\nsouth,2\nnorth,3\n", cap="10")


def release(work: Path, *extra: object, env: dict | None = None):
    return run_in_process(
        "release", work / "spec.yaml", "-i", work / "data.csv", "--ledger", work / "L.jsonl", "-o", work / "out.csv",
        *extra, env=env,
    )


@pytest.mark.parametrize(
    ("flag", "value", "choices"),
    [
        ("--input-format", "xml", "'csv', 'csv.gz', 'csv.zst', 'parquet', 'arrow'"),
        ("--engine", "hadoop", "'polars', 'spark'"),
    ],
)
def test_a_value_outside_the_choices_is_one_usage_line(work: Path, flag: str, value: str, choices: str) -> None:
    r = release(work, flag, value)
    assert r.returncode == 2
    assert r.stderr.decode() == (
        f"dpcli: error: Invalid value for '{flag}': '{value}' is not one of {choices}. (see 'dpcli release --help')\n"
    )
    assert not (work / "out.csv").exists()


def test_the_defaults_spelled_out_release_as_before(work: Path) -> None:
    r = release(work, "--input-format", "CSV", "--engine", "polars", "--spark-master", "spark://nowhere:7077")
    assert r.returncode == 0, r.stderr
    assert (work / "out.csv").read_text().count("\n") == 4  # the header, the two declared cities, the sum


def test_spark_master_comes_from_the_environment_and_is_not_used_by_polars(work: Path) -> None:
    r = release(work, env={"SPARK_MASTER": "spark://nowhere:7077"})
    assert r.returncode == 0, r.stderr


def test_a_format_the_input_is_not_in_is_exit_3_with_nothing_spent(work: Path) -> None:
    r = release(work, "--input-format", "parquet")
    assert r.returncode == 3, r.stderr
    expected = f"dpcli: error: input {work / 'data.csv'} is not a readable Parquet file (ComputeError)\n"
    assert r.stderr.decode() == expected
    shown = run_in_process("budget", "show", "--json", "--ledger", work / "L.jsonl")
    assert b'"releases": 0' in shown.stdout


def test_a_url_input_needs_the_spark_engine(work: Path) -> None:
    r = release(work, "--input", "hdfs://namenode/people.csv")
    assert r.returncode == 2, r.stderr
    assert r.stderr.decode() == (
        "dpcli: error: input hdfs://namenode/people.csv is a URL: only the Spark engine reads one; use --engine spark\n"
    )


def test_the_spark_engine_without_pyspark_says_how_to_install_it(work: Path) -> None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("pyspark is installed here (make test-spark): tests/engine/test_spark_engine.py covers the engine")
    r = release(work, "--engine", "spark")
    assert r.returncode == 2, r.stderr
    assert "pip install '.[spark]'" in r.stderr.decode()
    shown = run_in_process("budget", "show", "--json", "--ledger", work / "L.jsonl")
    assert b'"releases": 0' in shown.stdout


def test_help_lists_the_choices() -> None:
    r = run_in_process("release", "--help", env={"COLUMNS": "200"})
    text = r.stdout.decode()
    assert "--input-format <csv|csv.gz|csv.zst|parquet|arrow>" in text
    assert "--engine <polars|spark>" in text
    assert "--spark-master URL" in text
    assert "env var: SPARK_MASTER" in text
