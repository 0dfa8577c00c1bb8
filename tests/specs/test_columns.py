"""The spec's columns (dpcli/specs/model.py): types, names, bounds, precision, categories and impute; a good case and a
bad case of each rule, with the full one-line message."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dpcli.specs.load import parse_spec
from dpcli.specs.rules import default_precision
from tests.specs.test_model import NOT_A_NUMBER, col, error, text

# ---------------------------------------------------------------------------------------------------------------
# Columns: type, name, bounds, precision


def test_column_type_and_name():
    assert (
        error(col("{type: str}")) == "columns.x.type: 'str' is not a column type (one of: int, float, category, bool)"
    )
    assert error(text(columns="  1x: {type: bool}\n")) == (
        "columns.1x: '1x' is not a valid column name (letters, digits, _ . -; starting with a letter or _)"
    )
    spec = parse_spec(text(columns="  capital-gain.2: {type: bool}\n"))
    assert list(spec.columns) == ["capital-gain.2"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{type: int, bounds: [90, 17]}", "columns.x.bounds: low must be less than high"),
        ("{type: int, bounds: [17, 17]}", "columns.x.bounds: low must be less than high"),
        ("{type: float, bounds: [1.5, 1.5]}", "columns.x.bounds: low must be less than high"),
        ("{type: int, bounds: [17]}", "columns.x.bounds: expected exactly two numbers [low, high]"),
        ("{type: int, bounds: [1, 2, 3]}", "columns.x.bounds: expected exactly two numbers [low, high]"),
        ("{type: int, bounds: []}", "columns.x.bounds: expected exactly two numbers [low, high]"),
        ("{type: int, bounds: 17}", "columns.x.bounds: expected a list"),
        ("{type: int, bounds: [nan, 17]}", f"columns.x.bounds[0]: 'nan' {NOT_A_NUMBER}"),
        ("{type: float, bounds: [0, inf]}", f"columns.x.bounds[1]: 'inf' {NOT_A_NUMBER}"),
        ("{type: float, bounds: [-inf, 0]}", f"columns.x.bounds[0]: '-inf' {NOT_A_NUMBER}"),
        (
            "{type: int}",
            "columns.x.bounds: required: numeric columns need a-priori bounds [low, high] written by a person "
            "(never from the data)",
        ),
        (
            "{type: float}",
            "columns.x.bounds: required: numeric columns need a-priori bounds [low, high] written by a person "
            "(never from the data)",
        ),
        ("{type: int, bounds: [0.5, 17]}", "columns.x.bounds: an int column needs whole-number bounds"),
        ("{type: int, bounds: [0, 1e-1]}", "columns.x.bounds: an int column needs whole-number bounds"),
        ("{type: int, bounds: [0, 1e16]}", "columns.x.bounds[1]: bounds are limited to ±1000000000000000"),
        ("{type: int, bounds: [0, 1000000000000001]}", "columns.x.bounds[1]: bounds are limited to ±1000000000000000"),
        (
            "{type: float, bounds: [-1000000000000000.5, 0]}",
            "columns.x.bounds[0]: bounds are limited to ±1000000000000000",
        ),
        ("{type: int, bounds: [0, 9], precision: 1}", "columns.x.precision: not allowed for an int column"),
        ("{type: int, bounds: [0, 9], categories: [a]}", "columns.x.categories: not allowed for an int column"),
        ("{type: float, bounds: [0, 9], categories: [a]}", "columns.x.categories: not allowed for a float column"),
    ],
)
def test_bounds_refused(body, message):
    assert error(col(body)) == message


def test_bounds_accepted_up_to_1e15():
    spec = parse_spec(col("{type: int, bounds: [-1e15, 1e15]}"))
    assert spec.columns["x"].bounds == (Fraction(-(10**15)), Fraction(10**15))
    spec = parse_spec(col("{type: int, bounds: [-5, '2.0']}"))
    assert spec.columns["x"].bounds == (Fraction(-5), Fraction(2))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "{type: float, bounds: [0, 1], precision: 2}",
            "columns.x.precision: precision is too coarse: the bounds hold fewer than two grid points",
        ),
        (
            "{type: float, bounds: [0, 1], precision: 1.5}",
            "columns.x.precision: precision is too coarse: the bounds hold fewer than two grid points",
        ),
        (
            "{type: float, bounds: [0.1, 0.9], precision: 1}",
            "columns.x.precision: precision is too coarse: the bounds hold fewer than two grid points",
        ),
        (
            "{type: float, bounds: [0, 1], precision: 1e-16}",
            "columns.x.precision: bounds/precision exceed 2^53 grid steps: use a coarser precision "
            "(now 0.0000000000000001)",
        ),
        (
            "{type: float, bounds: [0, 1e15], precision: 0.1}",
            "columns.x.precision: bounds/precision exceed 2^53 grid steps: use a coarser precision (now 0.1)",
        ),
        ("{type: float, bounds: [0, 1], precision: 0}", "columns.x.precision: must be positive, got 0"),
        ("{type: float, bounds: [0, 1], precision: -0.1}", "columns.x.precision: must be positive, got -0.1"),
        ("{type: float, bounds: [0, 1], precision: fine}", f"columns.x.precision: 'fine' {NOT_A_NUMBER}"),
    ],
)
def test_precision_refused(body, message):
    assert error(col(body)) == message


def test_precision_accepted_at_the_limits():
    # exactly two grid points
    spec = parse_spec(col("{type: float, bounds: [0, 1], precision: 1}"))
    assert spec.columns["x"].grid_bounds == (0, 1)
    # 2^53 grid units exactly is fine, one step more is not (bounds are at most 1e15, so use a fine precision)
    spec = parse_spec(col(f"{{type: float, bounds: [0, {2**49}], precision: 0.0625}}"))
    assert spec.columns["x"].grid_bounds == (0, 2**53)
    spec = parse_spec(col(f"{{type: float, bounds: [-{2**49}, 0], precision: 0.0625}}"))
    assert spec.columns["x"].grid_bounds == (-(2**53), 0)
    assert error(col(f"{{type: float, bounds: [0, {2**49 + 1}], precision: 0.0625}}")) == (
        "columns.x.precision: bounds/precision exceed 2^53 grid steps: use a coarser precision (now 0.0625)"
    )


def test_grid_bounds_are_inside_the_bounds():
    spec = parse_spec(col("{type: float, bounds: [0.05, 1.01], precision: 0.1}"))
    assert spec.columns["x"].grid_bounds == (1, 10)
    spec = parse_spec(col("{type: float, bounds: [-1.05, -0.01], precision: 0.1}"))
    assert spec.columns["x"].grid_bounds == (-10, -1)


@pytest.mark.parametrize(
    ("lo", "hi", "precision"),
    [
        ("0", "99999", Fraction(1, 100)),
        ("0", "1", Fraction(1, 10**6)),
        ("0", "9.99", Fraction(1, 10**6)),
        ("0", "10", Fraction(1, 10**5)),
        ("17", "90", Fraction(1, 10**5)),
        ("-5", "5", Fraction(1, 10**5)),
        ("0", "1e15", Fraction(10**9)),
        ("0", "1e-5", Fraction(1, 10**11)),
        ("0", "0.5", Fraction(1, 10**7)),
    ],
)
def test_default_precision_power_of_ten_with_1e6_to_1e7_steps(lo, hi, precision):
    spec = parse_spec(col(f"{{type: float, bounds: [{lo}, {hi}]}}"))
    p = spec.columns["x"].precision
    assert p == precision
    assert default_precision(Fraction(lo), Fraction(hi)) == precision
    steps = (Fraction(hi) - Fraction(lo)) / p
    assert 10**6 <= steps < 10**7
    assert p in {Fraction(10) ** k for k in range(-20, 20)}  # a power of ten


# ---------------------------------------------------------------------------------------------------------------
# Categories and impute


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{type: category}", "columns.x.categories: required: list the category keys (public, written by a person)"),
        ("{type: category, categories: []}", "columns.x.categories: expected at least 1 item"),
        ("{type: category, categories: a}", "columns.x.categories: expected a list"),
        ("{type: category, categories: [a, b, a]}", "columns.x.categories[2]: duplicate category 'a'"),
        (
            "{type: category, categories: [a, '']}",
            "columns.x.categories[1]: empty category (an empty cell is a missing value)",
        ),
        (
            "{type: category, categories: [a, [b]]}",
            "columns.x.categories[1]: expected a single value, not a list or mapping",
        ),
        ("{type: category, categories: [a], bounds: [0, 1]}", "columns.x.bounds: not allowed for a category column"),
        ("{type: category, categories: [a], precision: 1}", "columns.x.precision: not allowed for a category column"),
        ("{type: bool, categories: [a]}", "columns.x.categories: not allowed for a bool column"),
        ("{type: bool, bounds: [0, 1]}", "columns.x.bounds: not allowed for a bool column"),
    ],
)
def test_categories_refused(body, message):
    assert error(col(body)) == message


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{type: category, categories: [a, \"b\\ufffd\"]}", "columns.x.categories[1]"),
        ("{type: category, categories: [\"\\ufffd\"]}", "columns.x.categories[0]"),
        ("{type: category, categories: [a], impute: \"\\ufffd\"}", "columns.x.impute"),
        ("{type: category, categories: [a], other: \"a\\ufffd\"}", "columns.x.other"),
    ],
)
def test_keys_holding_the_replacement_character_refused(body, message):
    """A cell that is not valid UTF-8 is read with U+FFFD and is missing, so no declared key may hold U+FFFD."""
    assert (
        error(col(body))
        == f"{message}: contains U+FFFD (the replacement character), which a data cell is never read as"
    )


def test_categories_accepted_in_declared_order():
    spec = parse_spec(col("{type: category, categories: [b, a, ' a', A]}"))
    assert spec.columns["x"].keys == ("b", "a", " a", "A")


@pytest.mark.parametrize(
    ("body", "impute"),
    [
        ("{type: int, bounds: [0, 10], impute: 5}", Fraction(5)),
        ("{type: int, bounds: [0, 10], impute: 0}", Fraction(0)),
        ("{type: int, bounds: [0, 10], impute: 10}", Fraction(10)),
        ("{type: float, bounds: [0, 1], precision: 0.01, impute: 0.25}", Fraction(1, 4)),
        ("{type: category, categories: [a, b], impute: b}", "b"),
        ("{type: bool, impute: 'false'}", "false"),
        ("{type: bool, impute: true}", "true"),
    ],
)
def test_impute_accepted(body, impute):
    assert parse_spec(col(body)).columns["x"].impute == impute


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{type: int, bounds: [0, 10], impute: 11}", "columns.x.impute: must lie within the column's bounds"),
        ("{type: int, bounds: [0, 10], impute: -1}", "columns.x.impute: must lie within the column's bounds"),
        ("{type: float, bounds: [0, 1], impute: 1.0001}", "columns.x.impute: must lie within the column's bounds"),
        (
            "{type: int, bounds: [0, 10], impute: 5.5}",
            "columns.x.impute: an int column needs a whole-number impute value",
        ),
        ("{type: int, bounds: [0, 10], impute: nan}", f"columns.x.impute: 'nan' {NOT_A_NUMBER}"),
        ("{type: category, categories: [a, b], impute: c}", "columns.x.impute: 'c' is not one of the declared keys"),
        ("{type: category, categories: [a, b], impute: A}", "columns.x.impute: 'A' is not one of the declared keys"),
        ("{type: bool, impute: yes}", "columns.x.impute: 'yes' is not one of the declared keys"),
        ("{type: bool, impute: 'True'}", "columns.x.impute: 'True' is not one of the declared keys"),
    ],
)
def test_impute_refused(body, message):
    assert error(col(body)) == message
