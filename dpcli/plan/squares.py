"""The grid of a variance's centred squares: its step, from the column's bounds alone, and a value's square on it (the
engine's rounding rule)."""

from __future__ import annotations

from dpcli.specs.model import Column

# The squares' grid has at most this many steps between 0 and the largest centred square, like a float column's
# default grid (10^6-10^7 steps across its bounds). On the column's grid squared, a float column's default precision
# gives up to ~2.5e13 steps, whose noise scale at a small epsilon runs past MAX_SCALE (2^40).
MAX_SQUARE_STEPS = 10**7


def centre(column: Column) -> int:
    """The value (in grid units) a variance's sum and squares are centred on: the middle of the column's bounds."""
    lo, hi = column.grid_bounds
    return (lo + hi) // 2


def square_step(column: Column) -> int:
    """D: the squares' grid step in units of precision², the smallest power of ten that puts the largest centred
    square within MAX_SQUARE_STEPS steps (1 for any column whose centred values are at most 3162 steps)."""
    lo, hi = column.grid_bounds
    offset = centre(column)
    biggest = max(abs(lo - offset), abs(hi - offset))
    step = 1
    while -(-biggest * biggest // step) > MAX_SQUARE_STEPS:
        step *= 10
    return step


def rounded_square(value: int, step: int) -> int:
    """A centred value's square on the squares' grid (units of precision² × step), rounded half up: the engine's
    rule (dpcli.engine.cells), in exact integer arithmetic."""
    return (value * value + step // 2) // step


def largest_square(column: Column) -> int:
    """Q: the largest centred square a row of the column adds, on the squares' grid (what bounds a sum of squares)."""
    lo, hi = column.grid_bounds
    offset = centre(column)
    return rounded_square(max(offset - lo, hi - offset), square_step(column))
