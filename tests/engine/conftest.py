"""Fixtures of the engine's tests: the Adult extract (tests/data/adult.csv) read by plain polars, the reference the
engine's exact aggregates are checked against."""

from pathlib import Path

import polars as pl
import pytest


@pytest.fixture(scope="module")
def adult() -> pl.DataFrame:
    df = pl.read_csv(Path(__file__).resolve().parents[1] / "data" / "adult.csv", infer_schema=False)
    assert df.height == 48_842
    return df
