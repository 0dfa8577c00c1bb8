"""The engine's "cannot happen" checks are explicit errors (issue 24): an ``assert`` vanishes under ``python -O``,
an InternalError does not; each runs before anything is spent (the input is read before the charge)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dpcli.engine.cells import numeric_value
from dpcli.errors import InternalError
from dpcli.specs.model import Column


def test_a_numeric_column_without_its_grid_is_an_internal_error() -> None:
    with pytest.raises(InternalError, match="'x' is read as a number without its precision and bounds"):
        numeric_value(Column("x", "int"))


def test_the_check_holds_under_python_o() -> None:
    code = (
        "from dpcli.engine.cells import numeric_value\nfrom dpcli.errors import InternalError\n"
        "from dpcli.specs.model import Column\n"
        "try:\n    numeric_value(Column('x', 'float'))\nexcept InternalError:\n    print('internal')\n"
    )
    out = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "internal", out.stderr[-500:]
