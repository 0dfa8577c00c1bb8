"""The spec model's invariants are explicit errors (InternalError, exit 1), not asserts that vanish under
``python -O``: a column asked for what its type has not (an open column's keys, a category column's grid) says so."""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction

import pytest

from dpcli.errors import InternalError
from dpcli.specs.grid import candidate_grid
from dpcli.specs.model import Column
from dpcli.specs.rules import STATISTIC_BUILDERS

OPEN = Column("city", "category", open=True, max_length=64)
CATEGORY = Column("sex", "category", categories=("f", "m"))


def test_an_open_column_has_no_declared_keys() -> None:
    with pytest.raises(InternalError, match="'city' has no declared keys"):
        _ = OPEN.keys


def test_a_category_column_has_no_grid() -> None:
    with pytest.raises(InternalError, match="'sex' is not numeric: it has no grid"):
        _ = CATEGORY.grid_bounds
    with pytest.raises(InternalError, match="'sex' is not numeric: it has no grid"):
        candidate_grid(CATEGORY, None)


def test_a_quantile_of_a_column_without_a_grid_is_an_internal_error() -> None:
    # the builders are reached only after the kind's column need is checked (rules._statistic); called directly
    from dpcli.specs.rules import _Declared

    declared = _Declared("statistics[0]", "median", {}, CATEGORY, (), {"name": "m"})
    with pytest.raises(InternalError, match="'sex' is not numeric: it has no grid"):
        STATISTIC_BUILDERS["median"](declared)


def test_the_checks_stay_under_python_dash_o() -> None:
    # `python -O` strips asserts: the same question must still fail as an InternalError, not with a TypeError
    code = (
        "from dpcli.errors import InternalError\n"
        "from dpcli.specs.model import Column\n"
        "try:\n"
        "    Column('sex', 'category', categories=('f', 'm')).grid_bounds\n"
        "except InternalError as exc:\n"
        "    print('InternalError:', exc)\n"
    )
    out = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True, check=False)
    assert out.stdout == "InternalError: column 'sex' is not numeric: it has no grid\n", out.stderr[-500:]


def test_a_numeric_column_answers() -> None:
    age = Column("age", "int", bounds=(Fraction(17), Fraction(90)), precision=Fraction(1))
    assert age.grid_bounds == (17, 90)
    assert candidate_grid(age, None) == (17, 1, 74)
    assert CATEGORY.keys == ("f", "m")
