"""Exact aggregates through the no-noise path, against plain polars / Python computed independently here."""

from __future__ import annotations

import itertools
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dpcli.engine import aggregate
from dpcli.plan.model import make_plan
from dpcli.specs.load import parse_spec
from tests import spec_builder

# the census extract, kept in the repository with its licence note (tests/data/README.md)
ADULT = Path(__file__).resolve().parents[1] / "data" / "adult.csv"
RACES = ["Amer-Indian-Eskimo", "Asian-Pac-Islander", "Black", "Other", "White"]
SEXES = ["Female", "Male"]
INCOMES = ["<=50K", ">50K"]
WORKCLASSES = [
    "Federal-gov",
    "Local-gov",
    "Never-worked",
    "Private",
    "Self-emp-inc",
    "Self-emp-not-inc",
    "State-gov",
    "Without-pay",
]

ADULT_COLUMNS = f"""\
  age: {{type: int, bounds: [17, 90]}}
  hours_per_week: {{type: int, bounds: [1, 99]}}
  education_num: {{type: int, bounds: [1, 16]}}
  capital_gain: {{type: float, bounds: [0, 99999], precision: 1}}
  sex: {{type: category, categories: [{", ".join(SEXES)}]}}
  race: {{type: category, categories: [{", ".join(RACES)}]}}
  income: {{type: category, categories: ['<=50K', '>50K']}}
  workclass: {{type: category, categories: [{", ".join(WORKCLASSES)}]}}
"""

ADULT_STATISTICS = """\
  - {name: people, kind: count}
  - {name: people_by_sex, kind: count, by: [sex]}
  - {name: people_by_race_sex, kind: count, by: [race, sex]}
  - {name: age_hist, kind: histogram, column: age, bins: [17, 25, 35, 45, 55, 65, 91]}
  - {name: age_grid, kind: histogram, column: age, bins: {start: 0, stop: 100, step: 10}}
  - {name: income_hist, kind: histogram, column: income}
  - {name: total_gain, kind: sum, column: capital_gain}
  - {name: mean_hours, kind: mean, column: hours_per_week, by: [sex]}
  - {name: by_workclass, kind: count, by: [workclass]}
  - {name: edu_by_income, kind: sum, column: education_num, by: [income]}
"""


def spec_text(columns: str, statistics: str) -> str:
    return spec_builder.spec_text(columns, statistics, privacy="epsilon: 1", dataset="t")


def plan_for(columns: str, statistics: str):
    return make_plan(parse_spec(spec_text(columns, statistics)))


def run(columns: str, statistics: str, path: Path) -> dict:
    plan = plan_for(columns, statistics)
    exact = aggregate(plan, path)
    out = {}
    for sp, ex in zip(plan.statistics, exact, strict=True):
        assert ex.counts.dtype == np.int64
        assert len(ex.counts) == sp.cells
        counts = ex.counts.tolist()
        sums = None if ex.sums is None else [int(s) for s in ex.sums]
        if sums is not None:
            assert len(sums) == sp.cells
            assert all(type(s) is int for s in ex.sums)
        out[sp.statistic.name] = (counts, sums)
    return out


def write(tmp_path: Path, text: str | bytes, name: str = "data.csv") -> Path:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, encoding="utf-8")
    return p


# ---------------------------------------------------------------------------------------------------------------
# adult.csv: plain polars as the reference


@pytest.fixture(scope="module")
def adult_exact() -> dict:
    return run(ADULT_COLUMNS, ADULT_STATISTICS, ADULT)


def counts_by(df: pl.DataFrame, columns: list[str], keys: list[list[str]]) -> list[int]:
    """Counts of every key combination, in declared order (first column slowest), zeros included."""
    grouped = df.group_by(columns).len()
    found = {tuple(row[:-1]): row[-1] for row in grouped.iter_rows()}
    return [found.get(combo, 0) for combo in itertools.product(*keys)]


def test_adult_count(adult, adult_exact):
    assert adult_exact["people"] == ([adult.height], None)
    assert adult_exact["people"][0] == [48_842]


def test_adult_count_by_sex(adult, adult_exact):
    expected = counts_by(adult, ["sex"], [SEXES])
    assert adult_exact["people_by_sex"] == (expected, None)
    assert sum(expected) == 48_842


def test_adult_count_by_race_and_sex_in_declared_order(adult, adult_exact):
    expected = counts_by(adult, ["race", "sex"], [RACES, SEXES])
    assert adult_exact["people_by_race_sex"] == (expected, None)
    assert len(expected) == 10


def test_adult_empty_cells_are_zeros():
    # a declared key nobody has is a zero cell, not a missing row
    columns = ADULT_COLUMNS.replace("categories: [Female, Male]", "categories: [Female, Male, Nobody]")
    out = run(columns, "  - {name: s, kind: count, by: [race, sex]}\n", ADULT)
    counts = out["s"][0]
    assert len(counts) == 15
    assert counts[2::3] == [0, 0, 0, 0, 0]
    assert sum(counts) == 48_842


def test_adult_age_histogram_with_edges(adult, adult_exact):
    ages = adult["age"].cast(pl.Int64).to_list()
    edges = [17, 25, 35, 45, 55, 65, 91]
    expected = [sum(1 for a in ages if lo <= min(max(a, 17), 90) < hi) for lo, hi in itertools.pairwise(edges)]
    assert adult_exact["age_hist"] == (expected, None)
    assert sum(expected) == 48_842


def test_adult_age_histogram_with_a_grid(adult, adult_exact):
    ages = adult["age"].cast(pl.Int64).to_list()
    expected = [0] * 10
    for a in ages:
        expected[min(max(a, 17), 90) // 10] += 1
    assert adult_exact["age_grid"] == (expected, None)
    assert expected[0] == 0  # [0, 10): declared, empty, present


def test_adult_histogram_of_a_category(adult, adult_exact):
    assert adult_exact["income_hist"] == (counts_by(adult, ["income"], [INCOMES]), None)


def test_adult_count_by_a_column_with_missing_values(adult, adult_exact):
    expected = counts_by(adult, ["workclass"], [WORKCLASSES])
    assert adult_exact["by_workclass"] == (expected, None)
    missing = adult["workclass"].null_count()
    assert missing > 0
    assert sum(expected) == 48_842 - missing  # rows with no workclass are in no cell


def test_adult_sum_of_capital_gain(adult, adult_exact):
    exact = sum(min(max(int(v), 0), 99999) for v in adult["capital_gain"].to_list())
    assert adult_exact["total_gain"] == ([48_842], [exact])


def test_adult_sum_by_income(adult, adult_exact):
    expected_sums = [
        sum(int(v) for v in adult.filter(pl.col("income") == key)["education_num"].to_list()) for key in INCOMES
    ]
    expected_counts = counts_by(adult, ["income"], [INCOMES])
    assert adult_exact["edu_by_income"] == (expected_counts, expected_sums)


def test_adult_mean_by_sex_is_a_centred_sum_and_a_count(adult, adult_exact):
    offset = (1 + 99) // 2
    sums, counts = [], []
    for key in SEXES:
        hours = [min(max(int(h), 1), 99) for h in adult.filter(pl.col("sex") == key)["hours_per_week"].to_list()]
        sums.append(sum(h - offset for h in hours))
        counts.append(len(hours))
    assert adult_exact["mean_hours"] == (counts, sums)


def grid_sum(values: list[str], lo: str, hi: str, precision: str) -> int:
    """Independent reference: clamp each decimal value to [lo, hi], round to the grid (half to even), in Decimal."""
    lo_d, hi_d, p = Decimal(lo), Decimal(hi), Decimal(precision)
    glo = int((lo_d / p).to_integral_value(rounding="ROUND_CEILING"))
    ghi = int((hi_d / p).to_integral_value(rounding="ROUND_FLOOR"))
    total = 0
    for v in values:
        x = min(max(Decimal(v), lo_d), hi_d)
        k = int((x / p).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))
        total += min(max(k, glo), ghi)
    return total


def test_adult_sum_of_capital_gain_in_cents(adult):
    columns = "  capital_gain: {type: float, bounds: [0, 99999], precision: 0.01}\n"
    out = run(columns, "  - {name: s, kind: sum, column: capital_gain}\n", ADULT)
    expected = grid_sum(adult["capital_gain"].to_list(), "0", "99999", "0.01")
    assert out["s"] == ([48_842], [expected])
    assert expected == 100 * sum(int(v) for v in adult["capital_gain"].to_list())


@pytest.mark.parametrize(
    ("lo", "hi", "precision"),
    [
        ("100", "5000", "0.01"),  # clamps most rows up to 100 and the large gains down to 5000
        ("100", "5000.5", "0.25"),  # an upper bound on the grid but not an integer
        ("0.3", "7777.7", "0.5"),  # bounds off the grid: clamped to the largest grid interval inside
    ],
)
def test_adult_float_column_clamped_by_its_bounds(adult, lo, hi, precision):
    columns = f"  capital_gain: {{type: float, bounds: [{lo}, {hi}], precision: {precision}}}\n"
    stats = "  - {name: s, kind: sum, column: capital_gain}\n  - {name: m, kind: mean, column: capital_gain}\n"
    plan = plan_for(columns, stats)
    exact = aggregate(plan, ADULT)
    values = adult["capital_gain"].to_list()
    expected = grid_sum(values, lo, hi, precision)
    assert exact[0].counts.tolist() == [48_842]
    assert exact[0].sums.tolist() == [expected]
    offset = plan.statistics[1].component("sum").offset
    assert exact[1].counts.tolist() == [48_842]
    assert exact[1].sums.tolist() == [expected - 48_842 * offset]
    # some values really were clamped on both sides
    as_int = [int(v) for v in values]
    assert min(as_int) < Decimal(lo)
    assert max(as_int) > Decimal(hi)


def test_adult_million_bin_histogram_split_from_the_other_statistics(adult):
    # 1,000,001 x 11 cells is over the engine's combined-grouping limit: the statistics are grouped separately
    columns = (
        "  capital_gain: {type: float, bounds: [0, 99999], precision: 0.01}\n"
        f"  sex: {{type: category, categories: [{', '.join(SEXES)}]}}\n"
        f"  race: {{type: category, categories: [{', '.join(RACES)}]}}\n"
    )
    stats = (
        "  - {name: fine, kind: histogram, column: capital_gain, bins: {start: 0, stop: 10000, step: 0.01}}\n"
        "  - {name: by_race_sex, kind: count, by: [race, sex]}\n"
        "  - {name: gain_by_sex, kind: sum, column: capital_gain, by: [sex]}\n"
    )
    out = run(columns, stats, ADULT)
    gains = [int(v) for v in adult["capital_gain"].to_list()]
    fine = out["fine"][0]
    assert len(fine) == 1_000_000
    expected_bins: dict[int, int] = {}
    for g in gains:
        if g < 10000:
            expected_bins[g * 100] = expected_bins.get(g * 100, 0) + 1
    assert {i: c for i, c in enumerate(fine) if c} == expected_bins
    assert out["by_race_sex"] == (counts_by(adult, ["race", "sex"], [RACES, SEXES]), None)
    sums = [sum(int(v) * 100 for v in adult.filter(pl.col("sex") == key)["capital_gain"].to_list()) for key in SEXES]
    assert out["gain_by_sex"] == (counts_by(adult, ["sex"], [SEXES]), sums)


# ---------------------------------------------------------------------------------------------------------------
# Hand-made CSVs


def test_clamping_of_out_of_bound_ints_and_floats(tmp_path):
    path = write(tmp_path, "i,f\n-5,-0.7\n0,0\n3,2.5\n10,9.99\n11,10.01\n1000000,1e300\n-1000000,-1e300\n")
    columns = "  i: {type: int, bounds: [0, 10]}\n  f: {type: float, bounds: [0, 10], precision: 0.01}\n"
    stats = (
        "  - {name: si, kind: sum, column: i}\n  - {name: sf, kind: sum, column: f}\n"
        "  - {name: hi, kind: histogram, column: i, bins: [0, 1, 10, 11]}\n"
        "  - {name: hf, kind: histogram, column: f, bins: {start: 0, stop: 10.01, step: 0.01}}\n"
    )
    out = run(columns, stats, path)
    # ints: 0, 0, 3, 10, 10, 10, 0
    assert out["si"] == ([7], [33])
    # floats in cents: 0, 0, 250, 999, 1000, 1000, 0
    assert out["sf"] == ([7], [3249])
    assert out["hi"] == ([3, 1, 3], None)
    hf = out["hf"][0]
    assert len(hf) == 1001
    assert (hf[0], hf[250], hf[999], hf[1000]) == (3, 1, 1, 2)
    assert sum(hf) == 7


MISSING_NUMBERS = ["", "n/a", "nan", "NaN", "inf", "-inf", "1e309", "-1e309", " 7 ", "1_000", "0x10", "١٢٣", "seven"]


def test_unusable_numeric_cells_are_missing(tmp_path):
    rows = [*MISSING_NUMBERS, "7", "+2", '"3"']
    path = write(
        tmp_path, "x,f\n" + "".join(f'"{v}","{v}"\n' if v and not v.startswith('"') else f"{v},{v}\n" for v in rows)
    )
    columns = "  x: {type: int, bounds: [0, 10]}\n  f: {type: float, bounds: [0, 10], precision: 0.5}\n"
    stats = (
        "  - {name: n, kind: count}\n"
        "  - {name: sx, kind: sum, column: x}\n  - {name: sf, kind: sum, column: f}\n"
        "  - {name: mx, kind: mean, column: x}\n  - {name: mf, kind: mean, column: f}\n"
        "  - {name: hx, kind: histogram, column: x, bins: [0, 5, 11]}\n"
    )
    out = run(columns, stats, path)
    assert out["n"] == ([len(rows)], None)  # a plain count counts every row
    assert out["sx"] == ([3], [12])  # 7 + 2 + 3
    assert out["sf"] == ([3], [24])  # (7 + 2 + 3) / 0.5
    assert out["mx"] == ([3], [12 - 3 * 5])  # centred on 5
    assert out["mf"] == ([3], [24 - 3 * 10])  # centred on 10 grid units
    assert out["hx"] == ([2, 1], None)


@pytest.mark.parametrize("value", MISSING_NUMBERS)
def test_each_unusable_numeric_cell_is_missing(tmp_path, value):
    quoted = value.replace('"', '""')
    path = write(tmp_path, f'x,f,c\n"{quoted}","{quoted}",a\n4,4,a\n')
    columns = (
        "  x: {type: int, bounds: [0, 10]}\n  f: {type: float, bounds: [0, 10], precision: 1}\n"
        "  c: {type: category, categories: [a]}\n"
    )
    stats = (
        "  - {name: n, kind: count}\n  - {name: nc, kind: count, by: [c]}\n"
        "  - {name: sx, kind: sum, column: x}\n  - {name: sf, kind: sum, column: f}\n"
    )
    out = run(columns, stats, path)
    assert out == {"n": ([2], None), "nc": ([2], None), "sx": ([1], [4]), "sf": ([1], [4])}


def test_impute_replaces_missing_cells(tmp_path):
    rows = [*MISSING_NUMBERS, "7"]
    path = write(tmp_path, "x,f,c,b\n" + "".join(f'"{v}","{v}",zz,maybe\n' for v in rows) + "7,7,a,true\n")
    columns = (
        "  x: {type: int, bounds: [0, 10], impute: 2}\n"
        "  f: {type: float, bounds: [0, 10], precision: 0.5, impute: 1.5}\n"
        "  c: {type: category, categories: [a, b], impute: b}\n"
        "  b: {type: bool, impute: 'false'}\n"
    )
    stats = (
        "  - {name: sx, kind: sum, column: x}\n  - {name: sf, kind: sum, column: f}\n"
        "  - {name: hc, kind: histogram, column: c}\n  - {name: hb, kind: histogram, column: b}\n"
        "  - {name: mx, kind: mean, column: x, by: [c]}\n"
    )
    out = run(columns, stats, path)
    n_missing = len(MISSING_NUMBERS)
    total = len(rows) + 1
    assert out["sx"] == ([total], [2 * n_missing + 7 + 7])
    assert out["sf"] == ([total], [3 * n_missing + 14 + 14])
    assert out["hc"] == ([1, total - 1], None)  # 'zz' is undeclared -> imputed to b
    assert out["hb"] == ([total - 1, 1], None)
    # mean of x by c, centred on 5: a has the last row (7); b has the imputed 2s and one 7
    assert out["mx"] == ([1, total - 1], [7 - 5, (2 - 5) * n_missing + (7 - 5)])


def test_undeclared_categories_and_variants_are_dropped(tmp_path):
    cells = ["Male", "male", "MALE", " Male", "Male ", "Ｍale", "Male\u200b", "Female", '"Female"', "Other", "", "n/a"]
    body = "".join(f'"{c}",1\n' if not c.startswith('"') else f"{c},1\n" for c in cells)
    path = write(tmp_path, "sex,x\n" + body)
    columns = "  sex: {type: category, categories: [Female, Male]}\n  x: {type: int, bounds: [0, 9]}\n"
    stats = (
        "  - {name: n, kind: count}\n  - {name: h, kind: histogram, column: sex}\n"
        "  - {name: s, kind: sum, column: x, by: [sex]}\n  - {name: c, kind: count, by: [sex]}\n"
    )
    out = run(columns, stats, path)
    assert out["n"] == ([len(cells)], None)
    assert out["h"] == ([2, 1], None)
    assert out["c"] == ([2, 1], None)
    assert out["s"] == ([2, 1], [2, 1])


def test_category_keys_that_look_like_other_types(tmp_path):
    path = write(tmp_path, "c\nyes\nno\n010\n10\n1.0\n1\non\nOff\n")
    columns = "  c: {type: category, categories: [yes, no, on, off, '010', '1.0']}\n"
    out = run(columns, "  - {name: h, kind: histogram, column: c}\n", path)
    assert out["h"] == ([1, 1, 1, 0, 1, 1], None)


def test_bool_parsing(tmp_path):
    cells = [
        "true",
        "TRUE",
        "True",
        "tRuE",
        "1",
        "false",
        "FALSE",
        "False",
        "0",
        "yes",
        "no",
        "t",
        "f",
        "2",
        "",
        " true",
        "01",
    ]
    path = write(tmp_path, "b\n" + "".join(f'"{c}"\n' for c in cells))
    stats = (
        "  - {name: h, kind: histogram, column: b}\n  - {name: n, kind: count}\n  - {name: c, kind: count, by: [b]}\n"
    )
    out = run("  b: {type: bool}\n", stats, path)
    # declared order: false, true
    assert out["h"] == ([4, 5], None)
    assert out["c"] == ([4, 5], None)
    assert out["n"] == ([len(cells)], None)


@pytest.mark.parametrize("precision", ["0.1", "0.01", None])
def test_float_grid_bins_are_exact_at_edges(tmp_path, precision):
    values = ["0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9", "0.30", "3e-1", "0.7000"]
    path = write(tmp_path, "f\n" + "\n".join(values) + "\n")
    p = f", precision: {precision}" if precision else ""
    columns = f"  f: {{type: float, bounds: [0, 1]{p}}}\n"
    stats = (
        "  - {name: grid, kind: histogram, column: f, bins: {start: 0, stop: 1, step: 0.1}}\n"
        "  - {name: edges, kind: histogram, column: f, bins: [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1]}\n"
        "  - {name: offset, kind: histogram, column: f, bins: {start: 0.3, stop: 0.8, step: 0.1}}\n"
    )
    out = run(columns, stats, path)
    # 0.3 (three spellings) lands in [0.3, 0.4), 0.7 (two spellings) in [0.7, 0.8): never one bin lower
    expected = [1, 1, 1, 3, 1, 1, 1, 2, 1, 1]
    assert out["grid"] == (expected, None)
    assert out["edges"] == (expected, None)
    assert out["offset"] == ([3, 1, 1, 1, 2], None)


def test_values_below_a_grid_start_are_in_no_bin(tmp_path):
    path = write(tmp_path, "f\n0\n0.01\n0.04\n0.05\n0.149\n0.15\n0.2\n")
    columns = "  f: {type: float, bounds: [0, 1], precision: 0.01}\n"
    stats = (
        "  - {name: g, kind: histogram, column: f, bins: {start: 0.05, stop: 0.35, step: 0.1}}\n"
        "  - {name: g3, kind: histogram, column: f, bins: {start: 0.05, stop: 0.35, step: 0.15}}\n"
    )
    out = run(columns, stats, path)
    # grid units: 0, 1, 4, 5, 15 (0.149 rounds to 0.15), 15, 20
    assert out["g"] == ([1, 3, 0], None)
    assert out["g3"] == ([3, 1], None)


@pytest.mark.parametrize(
    ("bins", "expected"),
    [
        # edges far beyond 2^53 used to collide as floats (a DuplicateError reported as an unreadable input, exit 3)
        ("[0, 5, 100000000000000000, 100000000000000001]", [3, 3, 0]),
        ("[-1e39, 0, 5, 1e39]", [0, 3, 3]),  # 1e39: about the largest a spec number may be
        ("[-100, -50, -20, 0, 5, 50, 100, 200]", [0, 0, 0, 3, 3, 0, 0]),
        ("[-3, 0.5, 4.5, 10, 10.5]", [2, 1, 1, 2]),
    ],
)
def test_edges_outside_the_bounds(tmp_path, bins, expected):
    path = write(tmp_path, "x\n-4\n0\n3\n7\n10\n11\n")  # clamped to 0, 0, 3, 7, 10, 10
    columns = "  x: {type: float, bounds: [0, 10], precision: 0.5}\n"
    out = run(columns, f"  - {{name: h, kind: histogram, column: x, bins: {bins}}}\n", path)
    assert out["h"] == (expected, None)


def test_header_only_gives_zeros(tmp_path):
    for name, text in (("a.csv", "x,c,b\n"), ("b.csv", "x,c,b")):
        path = write(tmp_path, text, name)
        columns = (
            "  x: {type: float, bounds: [0, 10]}\n  c: {type: category, categories: [a, b, c]}\n  b: {type: bool}\n"
        )
        stats = (
            "  - {name: n, kind: count}\n  - {name: nc, kind: count, by: [c, b]}\n"
            "  - {name: h, kind: histogram, column: x, bins: {start: 0, stop: 10, step: 2}}\n"
            "  - {name: s, kind: sum, column: x, by: [b]}\n  - {name: m, kind: mean, column: x}\n"
        )
        out = run(columns, stats, path)
        assert out == {
            "n": ([0], None),
            "nc": ([0] * 6, None),
            "h": ([0] * 5, None),
            "s": ([0, 0], [0, 0]),
            "m": ([0], [0]),
        }


def test_columns_not_declared_are_ignored_and_order_does_not_matter(tmp_path):
    path = write(tmp_path, "secret,b,a\nCANARY,1,x\nCANARY,2,y\nCANARY,3,x\n")
    columns = "  a: {type: category, categories: [x, y]}\n  b: {type: int, bounds: [0, 9]}\n"
    out = run(columns, "  - {name: s, kind: sum, column: b, by: [a]}\n", path)
    assert out["s"] == ([2, 1], [4, 2])


def test_a_path_with_glob_characters_is_one_file(tmp_path):
    # 'data[1].csv' read as a pattern would match 'data1.csv' instead
    write(tmp_path, "x\n5\n", "data[1].csv")
    write(tmp_path, "x\n1\n1\n", "data1.csv")
    write(tmp_path, "x\n2\n", "data*.csv")
    write(tmp_path, "x\n3\n", "dataX.csv")
    columns = "  x: {type: int, bounds: [0, 9]}\n"
    stats = "  - {name: s, kind: sum, column: x}\n"
    assert run(columns, stats, tmp_path / "data[1].csv")["s"] == ([1], [5])
    assert run(columns, stats, tmp_path / "data*.csv")["s"] == ([1], [2])
