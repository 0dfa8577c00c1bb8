"""Variance and std (issue 13): the loader's rules, the plan's parts and squares' grid, exact answers through the
internal no-noise path on every input format, the fallback, and the interval arithmetic against a brute force."""

from __future__ import annotations

import csv
import functools
import itertools
from decimal import ROUND_HALF_UP, Decimal, localcontext
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dpcli.engine import aggregate
from dpcli.errors import SpecError
from dpcli.mechanisms.noise import exact_noisy
from dpcli.plan.model import make_plan
from dpcli.plan.squares import MAX_SQUARE_STEPS, rounded_square, square_step
from dpcli.postprocess.values import Released
from dpcli.postprocess.variance import _box, part_confidence, variance_grids
from dpcli.publish.table import build_table
from dpcli.specs.load import parse_spec
from tests.spec_builder import spec_text

ADULT = Path(__file__).resolve().parents[1] / "data" / "adult.csv"

COLUMNS = """\
  age:   {type: int, bounds: [17, 90]}
  hours: {type: float, bounds: [1, 99]}
  fine:  {type: float, bounds: [-1, 1], precision: 0.0001}
  sex:   {type: category, categories: [Female, Male]}
  job:   {type: category, categories: [a, b]}
"""


def spec(statistics: str, privacy: str = "epsilon: 1", columns: str = COLUMNS) -> str:
    return spec_text(columns, statistics, privacy=privacy, dataset="t")


def refusal(text: str) -> str:
    with pytest.raises(SpecError) as info:
        make_plan(parse_spec(text))
    return str(info.value)


# ---------------------------------------------------------------------------------------------------------------
# the loader


def test_a_variance_needs_a_numeric_column():
    assert refusal(spec("  - {name: v, kind: variance, column: sex}\n")) == (
        "statistics[0].column: a variance needs a numeric column; 'sex' is category"
    )


def test_a_std_takes_no_clamp_and_no_bins():
    assert refusal(spec("  - {name: v, kind: std, column: age, clamp: row}\n")) == (
        "statistics[0].clamp: not allowed for a std"
    )
    assert refusal(spec("  - {name: v, kind: variance, column: age, bins: [0, 1]}\n")) == (
        "statistics[0].bins: not allowed for a variance"
    )


def test_a_variance_under_a_person_unit_is_planned_from_k_g_and_r():
    # issue 25: no longer refused; each part scales with the person's kept rows (tests/plan/test_persons.py checks
    # the squares against a brute force, tests/test_sensitivity_persons.py all three parts against the engine)
    plan = make_plan(parse_spec(spec(
        "  - {name: v, kind: variance, column: age}\n  - {name: s, kind: std, column: age, by: [sex]}\n",
        "unit: {id: pid, max_rows: 3, max_groups: 2, max_rows_per_group: 2, missing_id: drop}, epsilon: 1",
    )))
    alone, by_sex = ({c.role: c for c in sp.components} for sp in plan.statistics)
    q = rounded_square(37, square_step(plan.spec.columns["age"]))  # centred on 53: 17..90 is -36..37
    assert (alone["sum"].sensitivity, alone["squares"].sensitivity, alone["count"].sensitivity) == (111, 3 * q, 3)
    assert by_sex["squares"].sensitivity == 3 * q  # min(K, g·r) = 3 rows over the cells of by:
    assert alone["squares"].derivation.startswith(
        f"add/remove one person (K=3, G=2, R=2): one person has at most K=3 rows, each row's square in [0, Q], "
        f"Q = {q}, so the sums of squares change by L1 {3 * q}"
    )


def test_a_variance_by_an_open_column_is_refused():
    columns = COLUMNS + "  place: {type: category, categories: open}\n"
    text = spec("  - {name: v, kind: std, column: age, by: [place]}\n", "epsilon: 1, delta: 1e-6", columns)
    assert refusal(text) == (
        "statistics[0].by: open keys ('place') are released only by counts and histograms (a key is released with "
        "its noisy count)"
    )


# ---------------------------------------------------------------------------------------------------------------
# the plan


def test_three_parts_each_a_third_of_the_share():
    plan = make_plan(parse_spec(spec("  - {name: v, kind: variance, column: age, epsilon: 0.3}\n", "epsilon: 1")))
    (sp,) = plan.statistics
    assert [c.role for c in sp.components] == ["sum", "squares", "count"]
    assert [c.epsilon for c in sp.components] == [Fraction(1, 10)] * 3
    sum_part, squares, count = sp.components
    # age in [17, 90] centred on 53: values in [-36, 37], largest square 37² on a grid of 1 (D = 1)
    assert (sum_part.sensitivity, sum_part.offset) == (37, 53)
    assert (squares.sensitivity, squares.unit, squares.offset) == (37 * 37, 1, 53)
    assert count.sensitivity == 1


@pytest.mark.parametrize(
    ("neighbours", "by", "l1", "l2"),
    [
        ("add_remove", "", 1, 1),
        ("add_remove", ", by: [sex]", 1, 1),
        ("replace", "", 1, 1),  # squares lie in [0, Q]: a replaced row changes their sum by at most Q
        ("replace", ", by: [sex]", 2, 2),  # a row moving between cells: Q in each (L2² 2Q²)
    ],
)
def test_the_squares_sensitivity_in_units_of_q(neighbours, by, l1, l2):
    statistic = f"  - {{name: v, kind: std, column: age{by}, mechanism: gaussian}}\n"
    text = spec(statistic, f"neighbours: {neighbours}, rho: 1")
    squares = make_plan(parse_spec(text)).statistics[0].component("squares")
    q = 37 * 37
    assert (squares.sensitivity, squares.l2_squared) == (l1 * q, l2 * q * q)
    assert squares.rho == Fraction(1, 3)


def test_the_squares_grid_keeps_the_largest_square_within_its_steps():
    # hours [1, 99] at the default precision 0.00001: centred values up to 4.9e6 steps, squares to 2.4e13 steps²;
    # the smallest power of ten that brings them under 10^7 steps is 10^7
    plan = make_plan(parse_spec(spec("  - {name: v, kind: variance, column: hours}\n")))
    column = plan.spec.columns["hours"]
    assert column.precision == Fraction(1, 10**5)
    assert square_step(column) == 10**7
    squares = plan.statistics[0].component("squares")
    assert squares.unit == Fraction(1, 10**10) * 10**7
    assert squares.sensitivity == rounded_square(4_900_000, 10**7) == 2_401_000 <= MAX_SQUARE_STEPS
    # a coarser precision needs no coarser squares: D = 1 up to 3162 centred steps
    ages = make_plan(parse_spec(spec("  - {name: v, kind: variance, column: age}\n"))).spec.columns["age"]
    assert square_step(ages) == 1


def test_rounded_squares_are_half_up_in_exact_integers():
    assert [rounded_square(v, 10) for v in (0, 2, 3, -3, 10**4)] == [0, 0, 1, 1, 10**7]
    big = 2**53  # the largest grid: no float anywhere
    assert rounded_square(big, 10**20) == (big * big + 5 * 10**19) // 10**20


def test_plan_text_names_the_squares_grid():
    text = spec("  - {name: v, kind: variance, column: fine, by: [sex]}\n", "neighbours: replace, epsilon: 1")
    plan = make_plan(parse_spec(text))
    squares = plan.statistics[0].component("squares")
    # fine in [-1, 1] at 0.0001: centred values up to 10^4 steps, squares on a grid of 10 × 0.0001²
    assert squares.unit == Fraction(10, 10**8)
    assert squares.derivation == (
        "replace one row: it can leave one cell and join another, changing each by at most the largest square "
        "Q = 10000000 (L1 2Q, L2² 2Q²); squares of values centred on 0, on a grid of 0.0000001"
    )


# ---------------------------------------------------------------------------------------------------------------
# exact answers (the internal no-noise path: mechanisms.exact_noisy, never reachable from the CLI)


@functools.cache
def adult_rows() -> list[dict[str, str]]:
    with open(ADULT, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@functools.cache
def adult_truth(column: str, sex: str | None) -> tuple[int, Fraction]:
    """The rows and the exact sample variance of an adult.csv column (of one sex, or all), once for the three
    formats: (n·Σx² − (Σx)²) / (n(n − 1)) in integers, sample_variance's two-pass value exactly, without its Fraction
    sums over 32k rows (most of these tests' time)."""
    values = [int(r[column]) for r in adult_rows() if sex is None or r["sex"] == sex]
    n, total, squares = len(values), sum(values), sum(v * v for v in values)
    return n, Fraction(n * squares - total * total, n * (n - 1))


def sample_variance(values: list[Fraction]) -> Fraction:
    n = len(values)
    mean = sum(values, Fraction(0)) / n
    return sum(((v - mean) ** 2 for v in values), Fraction(0)) / (n - 1)


def rounded(x: Fraction, step: Fraction) -> Fraction:
    return round(x / step) * step


def sqrt_rounded(x: Fraction, step: Fraction) -> Fraction:
    with localcontext() as ctx:
        ctx.prec = 60
        root = (Decimal(x.numerator) / Decimal(x.denominator)).sqrt()
        steps = (root / (Decimal(step.numerator) / Decimal(step.denominator))).quantize(Decimal(1), ROUND_HALF_UP)
    return int(steps) * step


ADULT_SPEC = """\
version: 1
dataset: adult
privacy: {epsilon: 1}
columns:
  age:            {type: int, bounds: [17, 90]}
  hours_per_week: {type: float, bounds: [1, 99]}
  sex:            {type: category, categories: [Female, Male]}
statistics:
  - {name: age_var,   kind: variance, column: age}
  - {name: age_std,   kind: std,      column: age, by: [sex]}
  - {name: hours_std, kind: std,      column: hours_per_week, by: [sex]}
  - {name: hours_var, kind: variance, column: hours_per_week}
"""


@pytest.fixture(scope="module")
def adult_files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("adult")
    frame = pl.read_csv(ADULT, infer_schema=False).select("age", "hours_per_week", "sex")
    paths = {"csv": ADULT, "parquet": folder / "adult.parquet", "arrow": folder / "adult.arrow"}
    frame = frame.with_columns(pl.col("age").cast(pl.Int64), pl.col("hours_per_week").cast(pl.Float64))
    frame.write_parquet(paths["parquet"], row_group_size=10_000)
    frame.write_ipc(paths["arrow"])
    return paths


@pytest.mark.parametrize("fmt", ["csv", "parquet", "arrow"])
def test_exact_variance_and_std_of_adult_on_every_format(adult_files, fmt):
    plan = make_plan(parse_spec(ADULT_SPEC))
    table = build_table(plan, exact_noisy(aggregate(plan, adult_files[fmt])))
    rows = [dict(zip(table.columns, row, strict=True)) for row in table.rows()]
    got = {(r["statistic"], r["sex"]): (Fraction(r["value"]), Fraction(r["ci_low"]), Fraction(r["ci_high"]))
           for r in rows}
    milli = Fraction(1, 1000)
    # age: squares on a grid of 1 (exact), released to 0.001 (variance) and 0.001 (std)
    true = adult_truth("age", None)[1]
    assert got[("age_var", None)][0] == rounded(true, milli)
    for sex in ("Female", "Male"):
        assert got[("age_std", sex)][0] == sqrt_rounded(adult_truth("age", sex)[1], milli)
    # hours: squares on a grid of 0.001 (each within 0.0005 of the true one); std released to 0.00000001
    for (name, sex), (value, low, high) in got.items():
        n, truth = adult_truth("age" if name.startswith("age") else "hours_per_week", sex)
        if name.startswith("hours"):
            # each square within 0.0005 of the true one (a grid of 0.001), the variance released on a grid of 10^-6
            slack = Fraction(n, n - 1) / 2000 + Fraction(1, 10**6)
            if name == "hours_var":
                assert abs(value - truth) <= slack, (name, float(value), float(truth))
            else:  # the std on a grid of 10^-8
                assert abs(value * value - truth) <= slack + 2 * value / 10**8 + Fraction(1, 10**16), (name, sex)
        # with no noise the box around the exact values holds the truth (its half-widths are the noise's)
        target = truth if name.endswith("var") else None
        if target is not None:
            assert low <= target <= high, (name, sex)
        else:
            assert low * low <= truth <= high * high, (name, sex)


def test_exact_values_by_hand(tmp_path):
    """Three values 1, 2, 6: mean 3, sample variance (4 + 1 + 9) / 2 = 7, std 2.6457513..."""
    text = spec(
        "  - {name: v, kind: variance, column: age}\n  - {name: s, kind: std, column: age, by: [job]}\n",
        columns="  age: {type: int, bounds: [0, 10]}\n  job: {type: category, categories: [a, b]}\n",
    )
    plan = make_plan(parse_spec(text))
    path = tmp_path / "d.csv"
    path.write_text("age,job\n1,a\n2,a\n6,a\n11,b\n-4,b\n,b\nx,b\n", encoding="utf-8")  # b: 10 and 0 once clamped
    exact_stats = aggregate(plan, path)
    # centred on 5: values 1 2 6 10 0 -> -4 -3 1 5 -5
    v, s = exact_stats
    assert (v.counts.tolist(), v.sums.tolist(), v.squares.tolist()) == ([5], [-6], [76])
    assert (s.counts.tolist(), s.sums.tolist(), s.squares.tolist()) == ([3, 2], [-6, 0], [26, 50])
    table = build_table(plan, exact_noisy(exact_stats))
    values = [row[table.columns.index("value")] for row in table.rows()]
    # all five: mean 3.8, squares about it 7.84 + 3.24 + 4.84 + 38.44 + 14.44 = 68.8, / 4 = 17.2
    assert values == ["17.2", "2.646", "7.071"]


def variances(*args):
    """The released numbers as exact rationals in the output's units."""
    *grids, unit = variance_grids(*args)
    return Released(*([g * unit for g in column] for column in grids))


def test_a_noisy_count_below_two_falls_back_to_the_whole_range():
    text = spec("  - {name: v, kind: variance, column: age}\n  - {name: s, kind: std, column: age}\n")
    plan = make_plan(parse_spec(text))
    bounds = (17, 90)
    for sp in plan.statistics:
        r = variances(sp, np.array([1, -3]), np.array([0, 5]), np.array([0, 7]), bounds)
        if sp.statistic.kind == "variance":
            assert r.value == [Fraction(73 * 73, 4)] * 2
            assert (r.ci_low, r.ci_high) == ([0, 0], [Fraction(73 * 73, 2)] * 2)
        else:
            assert r.value == [Fraction(73, 2)] * 2
            # sqrt(73² / 2) = 51.6187..., rounded up on the std's grid of 0.001
            assert (r.ci_low, r.ci_high) == ([0, 0], [Fraction(51619, 1000)] * 2)


def test_a_negative_estimate_is_released_as_zero_and_a_huge_one_at_the_largest_variance():
    plan = make_plan(parse_spec(spec("  - {name: v, kind: variance, column: age}\n")))
    (sp,) = plan.statistics
    r = variances(sp, np.array([100, 100]), np.array([0, 0]), np.array([-50, 10**9]), (17, 90))
    assert r.value[0] == 0
    assert r.value[1] == Fraction(round(Fraction(73 * 73 * 100, 4 * 99) * 1000), 1000)  # on the grid of 0.001


# ---------------------------------------------------------------------------------------------------------------
# the interval: the box of the three parts, by interval arithmetic, against a brute force over the box


def brute(n: int, s: int, q: int, hn: int, hs: int, hq: int, width: int) -> tuple[Fraction, Fraction]:
    values = []
    for n2, s2, q2 in itertools.product(range(n - hn, n + hn + 1), range(s - hs, s + hs + 1),
                                        range(q - hq, q + hq + 1)):
        v = (q2 - Fraction(s2 * s2, n2)) / (n2 - 1)
        values.append(min(max(v, Fraction(0)), Fraction(width * width * n2, 4 * (n2 - 1))))
    return min(values), max(values)


@pytest.mark.parametrize(
    ("n", "s", "q", "hn", "hs", "hq"),
    [
        (10, 0, 40, 2, 3, 5),
        (10, 12, 40, 2, 3, 5),
        (10, -12, 40, 2, 3, 5),
        (5, 2, 1, 2, 4, 3),  # a numerator that crosses zero
        (4, 20, 30, 1, 2, 2),  # negative numerators only: clipped to 0
        (30, 7, 900, 5, 6, 40),
        (3, 0, 10, 1, 0, 0),  # n - hn = 2: the smallest count the box takes
    ],
)
def test_the_box_holds_every_variance_of_its_points(n, s, q, hn, hs, hq):
    low, high = (Fraction(*end) for end in _box(n, s, q, hn, hs, hq, 1, 20))
    b_low, b_high = brute(n, s, q, hn, hs, hq, 20)
    assert low <= b_low
    assert b_high <= high


def test_the_box_counts_the_squares_rounding_when_their_grid_is_coarser():
    # D = 10: each row's square may be 5 off; with n up to 12 rows the sum of squares may be 60 off
    low, high = (Fraction(*end) for end in _box(10, 0, 40, 2, 0, 0, 10, 100))
    assert (low, high) == (Fraction(400 - 12 * 5, 11), Fraction(400 + 12 * 5, 7))


def test_a_box_reaching_below_two_rows_is_the_whole_range():
    assert _box(3, 0, 10, 2, 0, 0, 1, 20) == ((0, 1), (400, 2))


def test_part_confidence_is_a_union_bound():
    assert part_confidence(0.95) == pytest.approx(1 - 0.05 / 3)


def test_a_grid_without_a_decimal_step_is_written_as_exact_fractions(tmp_path):
    """precision 1/3: the std's grid (1/3000) has no terminating decimal, so the table holds exact fractions."""
    columns = "  x: {type: float, bounds: [0, 2], precision: 1/3}\n"
    plan = make_plan(parse_spec(spec("  - {name: s, kind: std, column: x}\n", columns=columns)))
    path = tmp_path / "d.csv"
    path.write_text("x\n0\n1\n2\n", encoding="utf-8")  # grid points 0, 3/3, 6/3: variance 1, std 1
    table = build_table(plan, exact_noisy(aggregate(plan, path)))
    (row,) = list(table.rows())
    # 3 rows: the box reaches below 2 rows, so the interval is the whole range [0, sqrt(2² / 2)] rounded up
    assert row[1:6] == ("std", "x", "1", "0", "4243/3000")
