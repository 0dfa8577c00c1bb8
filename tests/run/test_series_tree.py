"""A series' running totals (designs running_totals and both, issue 26): the tree's blocks drawn once each when
first needed, from the rows of their periods, at 1/h of the running totals' budget; the charge still made once;
the exact answers of a period's table through the no-noise path (Honaker's estimates of exact blocks are exact)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest

from dpcli.core.accounting import Cap
from dpcli.engine import aggregate
from dpcli.errors import UsageError
from dpcli.ledger import open_ledger
from dpcli.mechanisms.noise import exact_noisy
from dpcli.plan.series import make_series_plan
from dpcli.plan.tree import blocks_within
from dpcli.publish.writers import write_table
from dpcli.run.series import release_period, tree_table
from dpcli.specs.load import load_spec
from tests.run.test_series import ROWS

SPEC = """\
version: 1
dataset: admissions
input: admissions.csv
ledger: ledger.jsonl
privacy: {unit: row, neighbours: add_remove, epsilon: 1}
columns:
  ward: {type: category, categories: [a, b]}
  stay: {type: int, bounds: [0, 30]}
statistics:
  - {name: n, kind: count}
  - {name: w, kind: histogram, column: ward}
  - {name: s, kind: sum, column: stay}
  - {name: m, kind: mean, column: stay}
series: {periods: 3, period: {column: admitted, start: 2027-01-01, every: 1 day}, design: DESIGN}
"""
AFTER = datetime(2027, 2, 1, tzinfo=UTC)


@pytest.fixture(params=["running_totals", pytest.param("both", marks=pytest.mark.slow)])
def work(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    (tmp_path / "series.yaml").write_text(SPEC.replace("DESIGN", request.param))
    (tmp_path / "admissions.csv").write_text("admitted,ward,stay\n" + "".join(f"{d},{w},{s}\n" for d, w, s in ROWS))
    open_ledger(tmp_path / "ledger.jsonl").set_cap("admissions", Cap(Fraction(3), Fraction(0)), allow_raise=False)
    return tmp_path


def test_blocks_are_drawn_once_when_first_needed_and_the_series_charged_once(work: Path) -> None:
    both = "design: both" in (work / "series.yaml").read_text()
    for t in (1, 2, 3):
        release_period(work / "series.yaml", period=t, output=work / f"p{t}.csv", now=AFTER)
    records = open_ledger(work / "ledger.jsonl").records()
    spends = [r for r in records if r.type == "spend"]
    assert len(spends) == 1
    assert spends[0].get("epsilon") == "1"
    assert spends[0].get("series") == {"periods": 3, "design": "both" if both else "running_totals"}
    drawn = [[p["id"] for p in r.get("pieces")] for r in records if r.type == "pieces"]
    tree = [["b0.0"], ["b0.1", "b1.0"], ["b0.2"]]
    assert drawn == ([[f"p{t}", *blocks] for t, blocks in zip((1, 2, 3), tree, strict=True)] if both else tree)
    table = pl.read_csv(work / "p3.csv", infer_schema=False)
    assert table.filter(pl.col("span") == "to_date").height == 5  # n, w (2 keys), s, m


def test_a_period_out_of_order_draws_every_block_inside_it(work: Path) -> None:
    release_period(work / "series.yaml", period=3, output=work / "p3.csv", now=AFTER)
    records = open_ledger(work / "ledger.jsonl").records()
    drawn = {p["id"] for r in records if r.type == "pieces" for p in r.get("pieces")}
    assert {b.key for b in blocks_within(3)} <= drawn


def test_exact_answers_of_a_tree_table_through_the_no_noise_path(work: Path) -> None:
    spec = load_spec(work / "series.yaml")
    splan = make_series_plan(spec)
    assert splan.blocks is not None

    def exact(plan_periods: frozenset[int], plan):  # type: ignore[no-untyped-def]
        p = dataclasses.replace(plan, periods=plan_periods)
        return exact_noisy(aggregate(p, work / "admissions.csv"), p)

    blocks = {b: exact(frozenset(range(b.first, b.last + 1)), splan.blocks) for b in blocks_within(3)}
    own = exact(frozenset({3}), splan.per_period) if splan.per_period is not None else None
    write_table(tree_table(splan, 3, blocks, own), work / "exact.csv", "csv")
    rows = pl.read_csv(work / "exact.csv", infer_schema=False)

    def value(stat: str, span: str) -> str:
        return rows.filter((pl.col("statistic") == stat) & (pl.col("span") == span) & pl.col("ward").is_null()
                           )["value"].item()

    assert (value("n", "period"), value("n", "to_date")) == ("1", "6")
    assert (value("s", "period"), value("s", "to_date")) == ("30", "48")
    assert value("m", "to_date") == "8"


def test_monotone_is_refused_by_this_version(work: Path) -> None:
    text = (work / "series.yaml").read_text().replace("design:", "monotone: true, design:")
    (work / "series.yaml").write_text(text)
    with pytest.raises(UsageError, match="monotone"):
        release_period(work / "series.yaml", period=1, output=work / "x.csv", now=AFTER)
