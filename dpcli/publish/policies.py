"""Post-processing of a statistic's table columns (docs/spec.md, "Post-processing"): non-negativity, rounding to
declared digits, and the small-cell policy (the ``flag`` column; a suppressed cell keeps its row, its value and
interval empty). Reads the released numbers and the spec only: it spends nothing. Consistency of counts is done
before the columns are made (dpcli.postprocess.consistency.consistent_noisy), on the noisy integers."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from dpcli.core.accounting import format_exact, parse_exact
from dpcli.errors import InternalError
from dpcli.postprocess.consistency import flag_column, small_cells
from dpcli.publish.columns import Ints, LazyColumn, Masked, Texts
from dpcli.specs.kinds import Kind
from dpcli.specs.model import PostProcess


def _exact(column: LazyColumn) -> list[Fraction]:
    return [parse_exact(t) for t in column]


def _grid(columns: tuple[LazyColumn, ...]) -> tuple[list[np.ndarray], int, int] | None:
    """The columns as integer arrays on one decimal grid (mult / 10**digits), or None when they are not."""
    ints = [c for c in columns if isinstance(c, Ints)]
    if len(ints) != len(columns):
        return None
    if len({(c.mult, c.digits) for c in ints}) != 1:
        return None
    return [np.asarray(c.values, dtype=np.int64) + c.offset for c in ints], ints[0].mult, ints[0].digits


def _round_half_even(num: np.ndarray, den: int) -> np.ndarray:
    q = num // den
    twice = 2 * (num - q * den)
    rounded: np.ndarray = q + ((twice > den) | ((twice == den) & (q % 2 == 1))).astype(np.int64)
    return rounded


def _small_cell_width(policy: PostProcess) -> Fraction:
    """The small-cell policy's max_relative_width (the spec's loader sets it with the policy's action)."""
    if policy.max_relative_width is None:
        raise InternalError("a small-cell policy without its max_relative_width")
    return policy.max_relative_width


def apply(
    kind: Kind, policy: PostProcess, value: LazyColumn, low: LazyColumn, high: LazyColumn
) -> tuple[LazyColumn, LazyColumn, LazyColumn, LazyColumn | None]:
    """(value, ci_low, ci_high, flag) after the statistic's policy. Integer columns stay integer columns; other
    columns (huge sums written as text) go through exact Fractions. Non-negativity and digits apply to the kinds
    whose traits say so (dpcli/specs/kinds.py: a mean is clipped to its bounds already; counts are integers)."""
    columns = (value, low, high)
    nonnegative = policy.nonnegative and kind.nonnegative
    digits = policy.digits if kind.rounded else None
    grid = _grid(columns)
    if grid is not None:
        arrays, mult, step_digits = grid
        if nonnegative:
            arrays = [np.maximum(a, 0) for a in arrays]
        if digits is not None and digits < step_digits:
            arrays = [_round_half_even(a * mult, 10 ** (step_digits - digits)) for a in arrays]
            mult, step_digits = 1, digits
        if nonnegative or digits is not None:
            value, low, high = (Ints(a, 0, mult, step_digits) for a in arrays)
        if policy.small_cells is None:
            return value, low, high, None
        small = _small_on_grid(arrays, _small_cell_width(policy))
        return _flagged(policy.small_cells, small, value, low, high)
    numbers = [_exact(c) for c in columns]
    if nonnegative:
        numbers = [[max(x, Fraction(0)) for x in column] for column in numbers]
    if digits is not None:
        step = Fraction(1, 10**digits)
        numbers = [[round(x / step) * step for x in column] for column in numbers]
    if nonnegative or digits is not None:
        value, low, high = (Texts([format_exact(x) for x in column]) for column in numbers)
    if policy.small_cells is None:
        return value, low, high, None
    value_numbers, low_numbers, high_numbers = numbers
    small = np.array(small_cells(value_numbers, low_numbers, high_numbers, _small_cell_width(policy)), dtype=np.bool_)
    return _flagged(policy.small_cells, small, value, low, high)


def _small_on_grid(arrays: list[np.ndarray], max_relative_width: Fraction) -> np.ndarray:
    """``consistency.small_cells`` on integer columns sharing one grid (the grid's step cancels): vectorised, as a
    10^7-cell histogram needs (exact Fractions per cell took minutes there). Python ints where int64 could overflow."""
    value, low, high = arrays
    num, den = max_relative_width.numerator, max_relative_width.denominator
    largest = max((int(np.abs(a).max()) for a in arrays if a.size), default=0)
    if (2 * largest + 1) * max(num, den) >= 2**62:
        value, low, high = (a.astype(object) for a in arrays)
    return np.asarray((high - low) * den > num * abs(value), dtype=np.bool_)


def _flagged(
    action: str, small: np.ndarray, value: LazyColumn, low: LazyColumn, high: LazyColumn
) -> tuple[LazyColumn, LazyColumn, LazyColumn, LazyColumn]:
    flag = Texts(flag_column(small.tolist(), action))
    if action == "suppress":
        value, low, high = (Masked(c, small) for c in (value, low, high))
    return value, low, high, flag
