"""Fixtures of the engine's tests: the Adult extract (tests/data/adult.csv) read by plain polars, the reference the
engine's exact aggregates are checked against; a local Spark session (``local[2]``) for the whole test run, for the
Spark engine's parity tests (skipped without pyspark or Java, failed under CI)."""

import os
from pathlib import Path

import polars as pl
import pytest

from dpcli.engine import spark_engine


@pytest.fixture(scope="module")
def adult() -> pl.DataFrame:
    df = pl.read_csv(Path(__file__).resolve().parents[1] / "data" / "adult.csv", infer_schema=False)
    assert df.height == 48_842
    return df


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
