"""What each statistic asks the engines for, written once: the cell rules as polars expressions, the per-cell
counts and fixed-point sums as group-by queries, and the grouped totals as per-cell arrays.

Both engines hand rows of the used columns (typed as ``column_types`` says: Int64, Float64, or the raw text of
category and bool columns) to ``Queries.apply``, and add up the grouped results with ``CellTotals``: the polars
engine chunk by chunk on this machine, Spark's executors partition by partition (through
``dpcli.engine.polars_engine.LineAggregator``), Parquet and Arrow IPC files through ``dpcli.engine.columnar``. A new
statistic kind is a new ``recipe`` (its group-by keys and what it counts and sums) and nothing else here.

How a row becomes numbers (documented in docs/spec.md, "How cells are read"):
- int cells: an optional sign and ASCII digits (polars' integer parser); anything else is missing.
- float cells: decimal or scientific notation; nan, inf and overflowing values are missing. Values are clamped to
  the bounds and rounded to the nearest point of the column's fixed-point grid (precision), then clamped again in
  integer grid units, so every value is an integer within [L', U'] and sums are exact integer sums (128-bit).
- category cells: exactly a declared key, byte for byte (no case folding, trimming or Unicode normalisation: a key
  that differs in any way is undeclared). Undeclared keys and empty cells are missing, except that a column with
  ``other: KEY`` counts undeclared non-empty text under its declared KEY (but not text holding U+FFFD: a cell that
  was not valid UTF-8 is missing, never "other").
- bool cells: true/false/1/0 (ASCII case-insensitive); anything else is missing.
- missing cells take the column's ``impute:`` value when declared; otherwise the row is left out of the statistics
  that use that column (a count with no ``by:`` still counts every row).

One query groups the rows by the keys the release's statistics need (the raw text of category and bool columns,
numeric bin indices) and sums and counts the fixed-point values; each statistic's declared cells are then summed out
of that small result, where category text is decoded to declared keys (undeclared text drops out there), and added
to the totals so far. Grouping by raw text and decoding afterwards measured ~2x faster on 10M rows than decoding
every row. When the product of the statistics' cell counts is too large for one grouping, statistics are split
into several groupings (evaluated together by ``collect_all``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import polars as pl

from dpcli.engine.periods import PERIOD_FIELD, period_index, period_rows
from dpcli.errors import InternalError
from dpcli.plan.model import Plan, StatisticPlan
from dpcli.plan.squares import largest_square, square_step
from dpcli.specs.grid import candidate_grid, quantile_bins
from dpcli.specs.kinds import KINDS
from dpcli.specs.model import (
    Bins,
    Column,
    GridBins,
    Histogram,
    Marginal,
    Quantile,
    Spec,
    histogram_bins,
    summed_column,
)

# Largest product of (cells + 1) grouped in one query. Past it the group-by's hash table (at most one entry per
# distinct combination, bounded by the row count too) could grow large, so statistics are grouped separately.
COMBINED_GROUP_LIMIT = 1 << 22

_BOOL_TEXT = {"true": 1, "false": 0, "1": 1, "0": 0}
# Up to this many bin edges, a value's bin is counted by comparisons (see bin_index), which streams
EDGE_COMPARISONS = 64


@dataclass(frozen=True)
class ExactStatistic:
    """Exact aggregates of one statistic: one entry per declared cell (in declared order), or, for a statistic with
    an open dimension, one entry per OBSERVED cell, ``keys[i]`` = (code over the declared dimensions, open key text)
    (in any order: the mechanism sorts)."""

    counts: np.ndarray  # int64: rows per cell (for a mean: rows with a value; person level: see engine.persons)
    sums: np.ndarray | None  # object array of Python ints: fixed-point sums (centred for a mean), or None
    keys: tuple[tuple[int, str], ...] | None = None  # open-key statistics only
    squares: np.ndarray | None = None  # variance/std: object array of centred squares' sums (their own grid)

    def part(self, role: str) -> np.ndarray | None:
        """The exact vector a noise component of this role (``NoiseComponent.role``) is added to."""
        return {"count": self.counts, "sum": self.sums, "squares": self.squares}[role]


def column_types(columns: Mapping[str, Column], used: list[str]) -> dict[str, pl.DataType]:
    """How each used column of ``columns`` (a spec's, by name) is read."""
    schema: dict[str, pl.DataType] = {}
    for name in used:
        column = columns[name]
        if column.type == "int":
            schema[name] = pl.Int64()
        elif column.type == "float":
            schema[name] = pl.Float64()
        else:
            schema[name] = pl.String()  # decoded to declared keys after grouping (see key_index)
    return schema


def numeric_value(column: Column) -> pl.Expr:
    """A numeric column on its integer grid (grid units), clamped to the bounds; null when missing."""
    c = pl.col(column.name)
    p = column.precision
    if p is None or column.bounds is None:  # the spec's loader gives every numeric column both
        raise InternalError(f"column {column.name!r} is read as a number without its precision and bounds")
    lo, hi = column.grid_bounds
    if column.type == "int":
        value = c.clip(lo, hi)
    else:
        finite = pl.when(c.is_finite()).then(c)
        clamped = finite.clip(float(column.bounds[0]), float(column.bounds[1]))
        inv = 1 / p
        scaled = clamped * float(inv) if inv.denominator == 1 else clamped / float(p)
        value = scaled.round().cast(pl.Int64).clip(lo, hi)
    if column.impute is not None:
        imp = Fraction(column.impute) / p
        value = value.fill_null(min(max(round(imp), lo), hi))
    return value


def open_column(spec: Spec, sp: StatisticPlan) -> Column | None:
    """The statistic's open dimension (``categories: open``), if it has one (at most one: the loader's rule)."""
    for name in sp.statistic.dimensions:
        if spec.columns[name].open:
            return spec.columns[name]
    return None


def open_key(column: Column, raw: pl.Expr) -> pl.Expr:
    """Raw text of an open column -> its key: the text cut to ``max_length`` characters; null when the cell is
    missing (null, empty, or holding U+FFFD: not valid UTF-8, never a key of its own)."""
    missing = raw.is_null() | (raw == "") | raw.str.contains("\ufffd", literal=True)
    cut = raw if column.max_length is None else raw.str.slice(0, column.max_length)
    return pl.when(~missing).then(cut)


def key_index(column: Column, raw: pl.Expr) -> pl.Expr:
    """Raw text of a category/bool column -> index of its declared key; null for missing or undeclared."""
    if column.type == "category":
        # an Enum of the declared keys: undeclared text becomes null (1.5x faster than replace_strict)
        value = raw.cast(pl.Enum(list(column.keys)), strict=False).to_physical().cast(pl.Int64)
        if column.other is not None:
            # `other: KEY`: undeclared non-empty text counts under KEY (never as a key of its own)
            # (a cell holding U+FFFD had a decoding problem: it stays missing, it is not some other value)
            undeclared = value.is_null() & raw.is_not_null() & (raw != "") & ~raw.str.contains("\ufffd", literal=True)
            value = pl.when(undeclared).then(pl.lit(column.keys.index(column.other), dtype=pl.Int64)).otherwise(value)
    else:
        value = raw.str.to_lowercase().replace_strict(_BOOL_TEXT, default=None, return_dtype=pl.Int64)
    if column.impute is not None:
        value = value.fill_null(column.keys.index(str(column.impute)))
    return value


def bin_index(spec: Spec, sp: StatisticPlan, value: pl.Expr) -> pl.Expr:
    """Histogram bin of a numeric value already on the integer grid; null outside the bins."""
    stat = sp.statistic
    if not isinstance(stat, Histogram):
        raise ValueError(f"statistic {stat.name!r}: only a histogram has bins")
    return edge_bin_index(spec.columns[stat.column], histogram_bins(stat), value)


def edge_bin_index(column: Column, bins: Bins, value: pl.Expr) -> pl.Expr:
    """The bin of ``bins`` a numeric value of ``column`` already on its integer grid lies in; null outside them."""
    p = column.precision
    if p is None:  # the spec's loader gives a histogram's numeric column its precision
        raise InternalError(f"column {column.name!r} is binned without its precision")
    n = bins.count
    if isinstance(bins, GridBins):
        # v = k*p is in bin i = floor((v - start) / step) = floor((k*sd - sn) * wd / (sd * wn)), with
        # start/p = sn/sd and step/p = wn/wd: integer arithmetic (128-bit), exact at every bin edge
        start, width = bins.start / p, bins.step / p
        sn, sd, wn, wd = start.numerator, start.denominator, width.numerator, width.denominator
        if sd == 1 and wd == 1:
            idx = (value - sn) // wn
        else:
            idx = ((value.cast(pl.Int128) * sd - sn) * wd // (sd * wn)).cast(pl.Int64)
        return pl.when((idx >= 0) & (idx < n)).then(idx)
    # edges: k (grid units) is in [e_i, e_{i+1}) iff t_i <= k < t_{i+1} with t_i = ceil(e_i/p), strictly increasing
    # (checked by the plan). Values lie in [lo, hi], so clamping every t_i into [lo - 1, hi + 1] changes no bin and
    # keeps them exact Int64s (edges far outside the bounds would collide as floats in cut(): a DuplicateError
    # reported as an unreadable input). The bin is the last i with t_i <= k, so the number of t_i <= k, minus one:
    # counted by comparisons up to EDGE_COMPARISONS edges (an element-wise expression, which polars' streaming
    # engine runs, where search_sorted falls back to its in-memory engine), else by an exact binary search.
    lo, hi = column.grid_bounds
    thresholds = [min(max(math.ceil(bins.edge(i) / p), lo - 1), hi + 1) for i in range(n + 1)]
    if len(thresholds) <= EDGE_COMPARISONS:
        idx = pl.sum_horizontal([(value >= t).cast(pl.Int64) for t in thresholds]) - 1
    else:
        series = pl.Series(thresholds, dtype=pl.Int64)
        idx = pl.lit(series).search_sorted(value, side="right").cast(pl.Int64) - 1
    return pl.when(value.is_not_null() & (idx >= 0) & (idx < n)).then(idx)


def candidate_bin(column: Column, stat: Quantile) -> pl.Expr:
    """A quantile's bin of a value on the integer grid (dpcli.mechanisms.quantiles.rank_counts reads them): with
    candidates on every grid point, the candidate's index; else 2j for a value equal to candidate j and 2j + 1 for one
    between it and the next. Exact integer arithmetic; null when the value is missing."""
    lo, spacing, _ = candidate_grid(column, stat.step)
    offset = numeric_value(column) - lo
    if spacing == 1:
        return offset
    return 2 * (offset // spacing) + (offset % spacing != 0).cast(pl.Int64)


class Query:
    """The group-by keys and sums one query needs, shared between statistics (named once each)."""

    def __init__(self) -> None:
        self.keys: dict[str, pl.Expr] = {}
        self.sums: dict[str, pl.Expr] = {}
        self.row_keys: dict[str, pl.Expr] = {}  # the keys as row expressions, unnamed (engine.persons)

    def key(self, name: str, expr: pl.Expr) -> str:
        self.keys.setdefault(name, expr.alias(name))
        self.row_keys.setdefault(name, expr)
        return name

    def total(self, name: str, expr: pl.Expr) -> str:
        self.sums.setdefault(name, expr.alias(name))
        return name


@dataclass(frozen=True)
class Recipe:
    """How to read one statistic's cells out of the grouped result."""

    dims: tuple[tuple[str, Column | None, int], ...]  # (key column, column to decode or None for a bin index, size)
    counted: str | None  # per-group count of rows with a value (sum/mean); else rows are counted with len()
    total: str | None  # summed column (sum/mean)
    open_dim: tuple[str, Column] | None = None  # (key column, open column): its text is the cell's key, not a code
    squares: str | None = None  # summed rounded centred squares (variance/std)
    # a synth marginal's category/bool columns whose missing cells are the last code (the dimension's size - 1)
    kept_missing: frozenset[str] = frozenset()

    def cell(self, key: Callable[[str], pl.Expr]) -> tuple[pl.Expr, pl.Expr | None]:
        """The cell of a group (or a row): its code over the declared dimensions (null outside every declared cell)
        and its open key (null when missing), ``key(name)`` giving each key column."""
        code: pl.Expr = pl.lit(0, dtype=pl.Int64)
        for name, column, size in self.dims:
            index = key(name) if column is None else key_index(column, key(name))
            if column is not None and column.name in self.kept_missing:
                index = index.fill_null(size - 1)
            code = code * size + index
        text = None if self.open_dim is None else open_key(self.open_dim[1], key(self.open_dim[0]))
        return code, text


def marginal_dims(spec: Spec, stat: Marginal, q: Query) -> list[tuple[str, Column | None, int]]:
    """A synth marginal's dimensions (docs/spec.md, "Synthetic data"): each column's codes, its declared keys' or its
    own bins' indices, and with ``kept_missing`` the last code for a missing cell (else the row drops out). Keys are
    shared between marginals of the same column and coding, so d one-ways and every pair group by d keys."""
    dims: list[tuple[str, Column | None, int]] = []
    for d, bins, kept in zip(stat.columns, stat.column_bins, stat.kept_missing, strict=True):
        column = spec.columns[d]
        if bins is not None:
            idx = edge_bin_index(column, bins, numeric_value(column))
            if kept:
                idx = idx.fill_null(bins.count)
            dims.append((q.key(f"code:{d}:{bins!r}:{kept}", idx), None, bins.count + kept))
        else:
            # grouped by raw text and decoded after grouping, as a statistic's keys (Recipe.cell): a kept missing
            # cell (null, undeclared, unreadable) is decoded to the last code there
            dims.append((q.key(f"raw:{d}", pl.col(d)), column, len(column.keys) + kept))
    return dims


def recipe(spec: Spec, sp: StatisticPlan, q: Query, sum_type: pl.DataType) -> Recipe:
    stat = sp.statistic
    if isinstance(stat, Marginal):
        kept = frozenset(d for d, b, k in zip(stat.columns, stat.column_bins, stat.kept_missing, strict=True)
                         if k and b is None)
        return Recipe(tuple(marginal_dims(spec, stat, q)), None, None, kept_missing=kept)
    dims: list[tuple[str, Column | None, int]] = []
    opened: tuple[str, Column] | None = None
    for d in stat.dimensions:
        column = spec.columns[d]
        if column.numeric:  # a histogram's column
            idx = bin_index(spec, sp, numeric_value(column))
            dims.append((q.key(f"bin:{stat.name}", idx), None, histogram_bins(stat).count))
        elif column.open:
            opened = (q.key(f"raw:{d}", pl.col(d)), column)
        else:
            dims.append((q.key(f"raw:{d}", pl.col(d)), column, len(column.keys)))
    if isinstance(stat, Quantile):
        column = spec.columns[stat.column]
        dims.append((q.key(f"quantile:{stat.name}", candidate_bin(column, stat)), None, quantile_bins(stat, column)))
    counted = total = squares = None
    summed = summed_column(stat)
    if summed is not None:
        column = spec.columns[summed]
        value = numeric_value(column)
        offset = sp.component("sum").offset
        # counting values per group (rather than grouping by "has a value") keeps the key short: ~10% faster
        counted = q.total(f"count:{column.name}", value.count().cast(pl.Int64))
        total = q.total(f"sum:{column.name}:{offset}", (value - offset).cast(sum_type).sum())
        if KINDS[stat.kind].sums_squares:
            squares = q.total(f"squares:{column.name}:{offset}", squared(value, offset, square_step(column), sum_type))
    return Recipe(tuple(dims), counted, total, opened, squares)


def squared(value: pl.Expr, offset: int, step: int, sum_type: pl.DataType) -> pl.Expr:
    """The sum of the centred values' squares on the squares' grid (``plan.rounded_square``, exact: a square of
    up to 2^53 grid steps is formed in 128 bits, and the rounded square is at most plan.MAX_SQUARE_STEPS)."""
    centred = (value - offset).cast(pl.Int128)
    return ((centred * centred + step // 2) // step).cast(sum_type).sum()


def groupings(plan: Plan) -> list[list[int]]:
    """Partition statistics so each group's product of (cells + 1) stays under COMBINED_GROUP_LIMIT."""
    groups: list[list[int]] = []
    current: list[int] = []
    product = 1
    for i, sp in enumerate(plan.statistics):
        size = sp.cells + 1
        if current and product * size > COMBINED_GROUP_LIMIT:
            groups.append(current)
            current, product = [], 1
        current.append(i)
        product *= size
    if current:
        groups.append(current)
    return groups


def used_columns(spec: Spec) -> list[str]:
    used: dict[str, None] = {}
    for s in spec.statistics:
        for name in (*s.dimensions, *s.by, *([s.column] if s.column else [])):
            used.setdefault(name, None)
    return list(used)


def largest_term(plan: Plan) -> int:
    """The largest |fixed-point value - offset| any sum of the plan adds up."""
    biggest = 1
    for sp in plan.statistics:
        summed = summed_column(sp.statistic)
        if summed is not None:
            column = plan.spec.columns[summed]
            lo, hi = column.grid_bounds
            offset = sp.component("sum").offset
            biggest = max(biggest, abs(lo - offset), abs(hi - offset))
            if KINDS[sp.statistic.kind].sums_squares:
                biggest = max(biggest, largest_square(column))  # the squares are centred on the same offset
    return biggest


# a series' rows grouped by their period (``Queries(..., by_period=True)``): the group key of the period's index
PERIOD_GROUP = "\0period:index"


class Queries:
    """The groupings of one release, applicable to any frame of the used columns; results of several frames add up.

    ``by_period`` (a series): every grouping also groups by the row's period, so that one scan gives each of the
    plan's periods its own exact aggregates (``CellTotals.result``: each statistic's cells, period after period)."""

    def __init__(self, plan: Plan, sum_type: pl.DataType, by_period: bool = False):
        self.rows = period_rows(plan)
        self.groups = groupings(plan)
        self.periods: tuple[int, ...] | None = None
        if by_period:
            if plan.spec.series is None or plan.periods is None or any(sp.selection is not None
                                                                       for sp in plan.statistics):
                raise InternalError("rows are grouped by period in a series without open keys, for chosen periods")
            self.periods = tuple(sorted(plan.periods))
        self.queries: list[Query] = []
        self.recipes: list[list[Recipe]] = []
        for group in self.groups:
            q = Query()
            if self.periods is not None and plan.spec.series is not None:
                q.key(PERIOD_GROUP, period_index(plan.spec.series, pl.col(PERIOD_FIELD)))
            self.recipes.append([recipe(plan.spec, plan.statistics[i], q, sum_type) for i in group])
            self.queries.append(q)

    def apply(self, frame: pl.LazyFrame) -> list[pl.LazyFrame]:
        if self.rows is not None:
            frame = frame.filter(self.rows)  # a series: only the rows of the periods this run aggregates
        out = []
        for q in self.queries:
            aggs = [pl.len().cast(pl.Int64).alias("n"), *q.sums.values()]
            out.append(frame.group_by(list(q.keys.values())).agg(aggs) if q.keys else frame.select(aggs))
        return out

    def collect(self, plus: list[pl.LazyFrame], minus: list[pl.LazyFrame]) -> list[list[pl.DataFrame]]:
        """Per grouping, the grouped results of every frame of ``plus``, and of ``minus`` with every count and sum
        negated (taken away when added up), computed together."""
        out = pl.collect_all([q for frame in [*plus, *minus] for q in self.apply(frame)])
        k = len(self.queries)
        results: list[list[pl.DataFrame]] = [[] for _ in self.queries]
        for j, frame in enumerate(out):
            g = j % k
            if j >= k * len(plus):
                frame = frame.with_columns(-pl.col(c) for c in frame.columns if c not in self.queries[g].keys)
            results[g].append(frame)
        return results


class CellTotals:
    """Per statistic, its declared cells' counts and sums added up over the chunks: (code, n, s) rows, compacted
    whenever they grow past COMPACT_ROWS (at most one row per declared cell survives a compaction)."""

    COMPACT_ROWS = 1 << 21

    def __init__(self, plan: Plan, queries: Queries):
        self.plan = plan
        self.slots = [(i, r) for group, recipes in zip(queries.groups, queries.recipes, strict=True)
                      for i, r in zip(group, recipes, strict=True)]
        self.periods = queries.periods
        self.group_of = {i: g for g, group in enumerate(queries.groups) for i in group}
        self.parts: list[list[pl.DataFrame]] = [[] for _ in plan.statistics]
        self.rows = [0] * len(plan.statistics)

    def add(self, grouped: list[list[pl.DataFrame]]) -> None:
        """``grouped``: per grouping, the chunk's grouped frames (negated ones included)."""
        for i, recipe in self.slots:
            for frame in grouped[self.group_of[i]]:
                codes = cell_codes(frame, recipe, None if self.periods is None
                                   else (self.periods, self.plan.statistics[i].cells))
                self.parts[i].append(codes)
                self.rows[i] += codes.height
            if self.rows[i] > self.COMPACT_ROWS:
                self.parts[i] = [compact(self.parts[i])]
                self.rows[i] = self.parts[i][0].height

    def result(self) -> list[ExactStatistic]:
        """Per statistic, its cells' totals; grouped by period, its cells of each period in turn (``periods``
        times the statistic's cells, in the order of ``Queries.periods``)."""
        periods = 1 if self.periods is None else len(self.periods)
        return [cell_arrays(sp, compact(parts), sp.cells * periods)
                for sp, parts in zip(self.plan.statistics, self.parts, strict=True)]


def cell_codes(
    frame: pl.DataFrame, recipe: Recipe, by_period: tuple[tuple[int, ...], int] | None = None,
) -> pl.DataFrame:
    """A grouped result as (declared cell code[, open key], count, sum) rows: category text decoded to declared keys
    (undeclared text and values outside the bins drop out), one row per distinct group. ``by_period``: (the periods,
    the statistic's cells): the code is the period's place among them times the cells, plus the cell's."""
    code, key = recipe.cell(pl.col)
    if by_period is not None:
        periods, cells = by_period
        place = pl.col(PERIOD_GROUP).replace_strict(periods, range(len(periods)), default=None,
                                                    return_dtype=pl.Int64)
        code = place * cells + code
    columns = [code.alias("code")]
    present = pl.col("code").is_not_null()
    if key is not None:
        columns.append(key.alias("key"))
        present = present & pl.col("key").is_not_null()
    columns.append(pl.col(recipe.counted or "n").cast(pl.Int64).alias("n"))
    if recipe.total is not None:
        columns.append(pl.col(recipe.total).cast(pl.Int128).alias("s"))
    if recipe.squares is not None:
        columns.append(pl.col(recipe.squares).cast(pl.Int128).alias("s2"))
    return frame.lazy().select(columns).filter(present).collect()


CELL = ("code", "key")  # the columns that name a cell in the per-cell totals (key: open-key statistics only)


def compact(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """Per-cell totals added up: one row per cell."""
    if not parts:
        return pl.DataFrame({"code": [], "n": []}, schema={"code": pl.Int64, "n": pl.Int64})
    both = pl.concat(parts, how="vertical")
    cell = [c for c in CELL if c in both.columns]
    totals = [pl.col(c).sum() for c in both.columns if c not in cell]
    return both.group_by(cell).agg(totals)


def cell_arrays(sp: StatisticPlan, cells: pl.DataFrame, size: int | None = None) -> ExactStatistic:
    """Per-cell totals as arrays over every declared cell (cells nobody falls in are zeros; ``size``: the arrays'
    length, the statistic's cells unless grouped by period); for an open-key statistic, one entry per observed cell,
    in (code, key) order."""
    size = sp.cells if size is None else size
    if sp.selection is not None:  # an open-key statistic
        if "key" not in cells.columns:  # nothing observed
            cells = pl.DataFrame(schema={"code": pl.Int64, "key": pl.String, "n": pl.Int64})
        # an entry the quote-blind read made and the quoted read took back adds up to nothing: not observed
        cells = cells.filter(pl.col("n") != 0).sort("code", "key")
        keys = tuple(zip(cells["code"].to_list(), cells["key"].to_list(), strict=True))
        sums = None
        if KINDS[sp.statistic.kind].sums_column:
            sums = np.array([int(s) for s in cells["s"].to_list()] if "s" in cells.columns else [0] * cells.height,
                            dtype=object)
        return ExactStatistic(cells["n"].to_numpy().astype(np.int64), sums, keys)
    idx = cells["code"].to_numpy().astype(np.int64)
    counts = np.zeros(size, dtype=np.int64)
    counts[idx] = cells["n"].to_numpy().astype(np.int64)
    sums = squares = None
    if KINDS[sp.statistic.kind].sums_column:
        sums = _object_cells(size, idx, cells, "s")
    if KINDS[sp.statistic.kind].sums_squares:
        squares = _object_cells(size, idx, cells, "s2")
    return ExactStatistic(counts, sums, squares=squares)


def split_periods(stats: list[ExactStatistic], periods: tuple[int, ...]) -> dict[int, list[ExactStatistic]]:
    """Statistics grouped by period (``CellTotals.result`` of ``Queries(..., by_period=True)``) -> each period's."""
    out: dict[int, list[ExactStatistic]] = {}
    for k, period in enumerate(periods):
        own = []
        for stat in stats:
            cells = len(stat.counts) // len(periods)
            part = slice(k * cells, (k + 1) * cells)
            own.append(ExactStatistic(stat.counts[part], None if stat.sums is None else stat.sums[part],
                                      squares=None if stat.squares is None else stat.squares[part]))
        out[period] = own
    return out


def _object_cells(size: int, idx: np.ndarray, cells: pl.DataFrame, name: str) -> np.ndarray:
    """A summed column of the per-cell totals over every declared cell, as Python ints (0 where nobody fell)."""
    out = np.zeros(size, dtype=object)
    out[:] = 0
    if name in cells.columns:
        for j, s in zip(idx.tolist(), cells[name].to_list(), strict=True):
            out[j] = int(s)
    return out
