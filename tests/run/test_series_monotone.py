"""``series.monotone`` (issue 26): each count's running total to date, as published, is non-decreasing over the
periods whatever order they are released in, and each published interval holds its value; frozen tables are never
revised. Both designs that publish running totals: the sums of the released periods (per_period) and the tree's."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest

from dpcli.core.accounting import Cap
from dpcli.ledger import open_ledger
from dpcli.run.series import release_period
from tests.run.test_series import AFTER

# few rows and a small budget: the noisy totals of periods with no rows would go down without the projection
SPEC = """\
version: 1
dataset: admissions
input: admissions.csv
ledger: ledger.jsonl
privacy: {unit: row, neighbours: add_remove, epsilon: 1/10}
columns:
  ward: {type: category, categories: [a, b]}
  stay: {type: int, bounds: [0, 30]}
statistics:
  - {name: n, kind: count}
  - {name: w, kind: histogram, column: ward}
  - {name: s, kind: sum, column: stay}
series: {periods: 4, period: {column: admitted, start: 2027-01-01, every: 1 day}, design: DESIGN, monotone: true}
"""
# out of order, and period 3 again (its frozen table); the tree's totals are all published, so a later period's
# total bounds an earlier one's from above (per_period: periods 1, 2 and 4 publish theirs, 3 came before 2)
ORDER = (1, 3, 2, 4, 3)


# the tree's Laplace intervals take ~1.5 s of CPU over these periods: in the slow suite
@pytest.mark.parametrize("design", ["per_period", pytest.param("running_totals", marks=pytest.mark.slow)])
def test_running_totals_of_counts_are_non_decreasing_and_intervals_hold_their_values(
    tmp_path: Path, design: str,
) -> None:
    (tmp_path / "series.yaml").write_text(SPEC.replace("DESIGN", design))
    (tmp_path / "admissions.csv").write_text("admitted,ward,stay\n2027-01-01,a,3\n2027-01-02,b,4\n2027-01-03,a,5\n")
    open_ledger(tmp_path / "ledger.jsonl").set_cap("admissions", Cap(Fraction(1), Fraction(0)), allow_raise=False)
    tables = {}
    for i, t in enumerate(ORDER):
        release_period(tmp_path / "series.yaml", period=t, output=tmp_path / f"r{i}.csv", now=AFTER)
        tables[t] = pl.read_csv(tmp_path / f"r{i}.csv", infer_schema=False)
    assert (tmp_path / "r1.csv").read_bytes() == (tmp_path / f"r{len(ORDER) - 1}.csv").read_bytes()  # frozen
    totals = pl.concat(tables.values()).filter(pl.col("span") == "to_date")
    counts = totals.filter(pl.col("statistic").is_in(["n", "w"]))
    assert counts.height >= 3 * 3  # periods 1, 2 and 4 at least, three count cells each
    for (statistic, ward), cell in counts.group_by(["statistic", "ward"]):
        ordered = cell.with_columns(pl.col("period").cast(pl.Int64)).sort("period")
        values = [int(v) for v in ordered["value"]]
        assert values == sorted(values), (statistic, ward, values)
        for low, value, high in zip(ordered["ci_low"], ordered["value"], ordered["ci_high"], strict=True):
            assert int(low) <= int(value) <= int(high)
    # a sum's running total is published as estimated (a projection is for counts only)
    assert totals.filter(pl.col("statistic") == "s").height > 0
