"""The table built from the engine's exact values (post-processing and output, no noise), open keys at row level,
and the line aggregator's rows against the typed rows."""

from __future__ import annotations

import csv
import io
import itertools
import re
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcli.engine import aggregate
from dpcli.plan.model import make_plan
from dpcli.plan.scales import laplace_halfwidth
from dpcli.specs.load import parse_spec
from tests import spec_builder
from tests.engine.test_aggregate import (
    ADULT,
    ADULT_COLUMNS,
    ADULT_STATISTICS,
    INCOMES,
    RACES,
    SEXES,
    WORKCLASSES,
    counts_by,
    spec_text,
)

# ---------------------------------------------------------------------------------------------------------------
# The table built from exact values (post-processing and output, no noise)


def test_table_from_exact_values(adult):
    from dpcli.mechanisms.noise import exact_noisy
    from dpcli.publish.table import build_table

    plan = make_plan(parse_spec(spec_text(ADULT_COLUMNS, ADULT_STATISTICS)))
    table = build_table(plan, exact_noisy(aggregate(plan, ADULT)))
    columns = table.columns
    dims = ("sex", "race", "age", "income", "workclass")
    bins = ("bin_low", "bin_high")
    assert columns == ("statistic", "kind", "column", *dims, *bins, "value", "ci_low", "ci_high", "epsilon")
    rows = [dict(zip(columns, row, strict=True)) for row in table.rows()]
    eps = {sp.statistic.name: sp.epsilon for sp in plan.statistics}
    assert all(eps[name] == Fraction(1, 10) for name in eps)

    def block(name: str) -> list[dict]:
        return [r for r in rows if r["statistic"] == name]

    # rows come in spec order
    order = [r["statistic"] for r in rows]
    assert order == sorted(order, key=[sp.statistic.name for sp in plan.statistics].index)

    # counts are integers, with the interval value -+ the plan's 95% half-width
    (people,) = block("people")
    assert people["value"] == "48842"
    k = laplace_halfwidth(plan.statistics[0].component("count").scale)
    assert (people["ci_low"], people["ci_high"]) == (str(48842 - k), str(48842 + k))
    assert people["epsilon"] == "0.1"
    assert all(people[d] is None for d in dims)  # no dimension applies to a plain count

    by_sex = block("people_by_sex")
    assert [(r["sex"], int(r["value"])) for r in by_sex] == list(
        zip(SEXES, counts_by(adult, ["sex"], [SEXES]), strict=True)
    )
    assert all(r["race"] is None and r["age"] is None for r in by_sex)

    by_race_sex = block("people_by_race_sex")
    expected = counts_by(adult, ["race", "sex"], [RACES, SEXES])
    assert [(r["race"], r["sex"], int(r["value"])) for r in by_race_sex] == [
        (race, sex, n) for (race, sex), n in zip(itertools.product(RACES, SEXES), expected, strict=True)
    ]

    ages = [min(max(a, 17), 90) for a in adult["age"].cast(pl.Int64).to_list()]
    hist = block("age_hist")
    assert [r["age"] for r in hist] == ["[17..25)", "[25..35)", "[35..45)", "[45..55)", "[55..65)", "[65..91)"]
    assert hist[0]["age"] == "[17..25)"
    edges = [17, 25, 35, 45, 55, 65, 91]
    assert [int(r["value"]) for r in hist] == [sum(lo <= a < hi for a in ages) for lo, hi in itertools.pairwise(edges)]
    assert all(r["sex"] is None for r in hist)

    grid = block("age_grid")
    assert [r["age"] for r in grid] == [f"[{10 * i}..{10 * i + 10})" for i in range(10)]
    assert next(r["value"] for r in grid) == "0"

    income = block("income_hist")
    assert [(r["income"], int(r["value"])) for r in income] == list(
        zip(INCOMES, counts_by(adult, ["income"], [INCOMES]), strict=True)
    )

    # every count-like value is integer text
    for name in (
        "people",
        "people_by_sex",
        "people_by_race_sex",
        "age_hist",
        "age_grid",
        "income_hist",
        "by_workclass",
    ):
        for r in block(name):
            for key in ("value", "ci_low", "ci_high"):
                assert r[key] == str(int(r[key]))

    (total,) = block("total_gain")
    assert Fraction(total["value"]) == sum(int(v) for v in adult["capital_gain"].to_list())
    assert total["value"] == str(sum(int(v) for v in adult["capital_gain"].to_list()))

    # mean: the exact mean, released on a grid 1000 times finer than the precision (half to even)
    mean_rows = block("mean_hours")
    for r, key in zip(mean_rows, SEXES, strict=True):
        hours = [int(h) for h in adult.filter(pl.col("sex") == key)["hours_per_week"].to_list()]
        exact_mean = (Decimal(sum(hours)) / Decimal(len(hours))).quantize(Decimal("0.001"), rounding=ROUND_HALF_EVEN)
        assert r["sex"] == key
        assert Fraction(r["value"]) == Fraction(exact_mean)
        assert Fraction(r["ci_low"]) < Fraction(r["value"]) < Fraction(r["ci_high"])

    workclass = block("by_workclass")
    assert [r["workclass"] for r in workclass] == WORKCLASSES
    assert [int(r["value"]) for r in workclass] == counts_by(adult, ["workclass"], [WORKCLASSES])

    edu = block("edu_by_income")
    assert [r["income"] for r in edu] == INCOMES
    assert len(rows) == 1 + 2 + 10 + 6 + 10 + 2 + 1 + 2 + 8 + 2


# -- issue 12: open keys at row level, and the typed rows of a chunk (dpcli.engine.persons reads them) ---------------


OPEN_SPEC = spec_builder.spec_text(
    {"sex": "{type: category, categories: [F, M]}", "country": "{type: category, categories: open, max_length: 3}",
     "amount": "{type: int, bounds: [0, 10]}"},
    ["{name: by_country, kind: count, by: [country]}", "{name: by_sex_country, kind: count, by: [sex, country]}",
     "{name: amounts, kind: histogram, column: country}"],
    privacy="epsilon: 1, delta: 1e-6", dataset="people",
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["F", "M", "X", ""]),
            st.sampled_from(["France", "Fr", "Germany", "", "a,b", 'q"t', "\u00e9t\u00e9s", "It\ufffd"]),
            st.booleans(),
        ),
        max_size=40,
    )
)
def test_open_keys_at_row_level(tmp_path: Path, rows: list[tuple[str, str, bool]]) -> None:
    """Row level: one entry per observed (declared cell, key cut to max_length); missing keys are no entry."""
    lines = ["sex,country,amount"]
    for sex, country, quoted in rows:
        field = '"' + country.replace('"', '""') + '"' if quoted or "," in country or '"' in country else country
        lines.append(f"{sex},{field},1")
    path = tmp_path / "open.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    plan = make_plan(parse_spec(OPEN_SPEC))
    exact = aggregate(plan, path)
    expected: list[dict] = [{}, {}, {}]
    for sex, country, _ in rows:
        if country == "" or "\ufffd" in country:
            continue
        key = country[:3]
        expected[0][(0, key)] = expected[0].get((0, key), 0) + 1
        expected[2][(0, key)] = expected[2].get((0, key), 0) + 1
        if sex in ("F", "M"):
            cell = (["F", "M"].index(sex), key)
            expected[1][cell] = expected[1].get(cell, 0) + 1
    for e, want in zip(exact, expected, strict=True):
        assert e.sums is None
        assert e.keys is not None
        assert dict(zip(e.keys, e.counts.tolist(), strict=True)) == want


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["p1", "p2", "", "x y"]),
            st.sampled_from(["F", "M", "", "F,M", 'say "hi"']),
            st.sampled_from(["1", "", "7", "x", "-3"]),
            st.booleans(),
        ),
        max_size=30,
    ),
    st.sampled_from(["\n", "\r"]),
)
def test_line_aggregator_rows_are_the_typed_rows(rows: list[tuple[str, str, str, bool]], eol: str) -> None:
    """``LineAggregator.rows``: the typed rows of a chunk, quoted lines read as the csv module reads them (as a
    multiset: the engine may give them in another order)."""
    from dpcli.engine.persons import ID_COLUMN
    from dpcli.engine.polars_engine import LineAggregator
    from dpcli.engine.source import CsvLayout

    spec = OPEN_SPEC.replace("privacy: {epsilon: 1, delta: 1e-6}",
                             "privacy: {epsilon: 1, delta: 1e-6, unit: {id: pid, max_rows: 2, missing_id: drop}}")
    spec = spec.replace("  - {name: amounts, kind: histogram, column: country}",
                        "  - {name: total, kind: sum, column: amount, clamp: row}")
    plan = make_plan(parse_spec(spec))
    lines = []
    for pid, sex, amount, quoted in rows:
        field = '"' + sex.replace('"', '""') + '"' if quoted or "," in sex or '"' in sex else sex
        lines.append(f"{pid},{field},Fr,{amount}")
    data = "".join(line + eol for line in lines).encode()
    aggregator = LineAggregator(plan, CsvLayout(("pid", "sex", "country", "amount"), eol.encode()))
    got = aggregator.rows(data)
    assert got.columns == ["country", "sex", "amount", ID_COLUMN]  # the used columns, in the statistics' order
    expected = []
    for fields in csv.reader(io.StringIO("\n".join(lines))):
        pid, sex, country, amount = fields
        number = int(amount) if re.fullmatch(r"[+-]?\d+", amount) else None
        expected.append((country, sex or None, number, pid or None))
    key = repr
    got_rows = [(r[0], r[1] or None, r[2], r[3] or None) for r in got.iter_rows()]
    assert sorted(got_rows, key=key) == sorted(expected, key=key)
