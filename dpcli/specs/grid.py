"""A quantile's candidate grid on its column's fixed-point grid: where the candidates are and how many bins the
engine keeps per cell. The spec's own checks need it (the candidate and cell limits are refused when the spec is
loaded, dpcli.specs.rules), so it sits in the spec's layer; planning, the engines, the mechanisms, the table and the
audit read it from here.
"""

from __future__ import annotations

from fractions import Fraction

from dpcli.specs.model import Column, Quantile


def candidate_grid(column: Column, step: Fraction | None) -> tuple[int, int, int]:
    """A quantile's candidates on the column's grid: (first, spacing, how many), in grid units: first + j * spacing
    for j < how many, from the lower bound up to the upper one (the last one may stop short of it)."""
    lo, hi = column.grid_bounds
    units = 1 if step is None else max(1, int(step / column.grid_step))
    return lo, units, (hi - lo) // units + 1


def quantile_bins(stat: Quantile, column: Column) -> int:
    """The engine's bins of a quantile per cell: one per candidate when candidates are the column's grid; else two
    per candidate, the values equal to it and those above it up to the next (exactly, on the integer grid)."""
    _, units, candidates = candidate_grid(column, stat.step)
    return candidates if units == 1 else 2 * candidates
