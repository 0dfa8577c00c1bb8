"""Exact aggregates with polars: one streaming scan of the declared columns for all statistics of a release.

How a row becomes numbers (documented in docs/spec.md, "How cells are read"):
- int cells: an optional sign and ASCII digits (polars' integer parser); anything else is missing.
- float cells: decimal or scientific notation; nan, inf and overflowing values are missing. Values are clamped to
  the bounds and rounded to the nearest point of the column's fixed-point grid (precision), then clamped again in
  integer grid units, so every value is an integer within [L', U'] and sums are exact integer sums (128-bit).
- category cells: exactly a declared key, byte for byte (no case folding, trimming or Unicode normalisation: a key
  that differs in any way is undeclared). Undeclared keys and empty cells are missing, except that a column with
  ``other: KEY`` counts undeclared non-empty text under its declared KEY.
- bool cells: true/false/1/0 (ASCII case-insensitive); anything else is missing.
- missing cells take the column's ``impute:`` value when declared; otherwise the row is left out of the statistics
  that use that column (a count with no ``by:`` still counts every row).

One query groups the rows of the whole release by the keys its statistics need (the raw text of category and bool
columns, numeric bin indices) and sums and counts the fixed-point values; each statistic's declared
cells are then summed out of that small result, where category text is decoded to declared keys (undeclared text
drops out there). The CSV is parsed once. Grouping by raw text and decoding afterwards measured ~2x faster on 10M
rows than decoding every row. When the product of the statistics' cell counts is too large for one grouping,
statistics are split into several groupings (evaluated together by ``collect_all``).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl

from dpcli.errors import InputError
from dpcli.plan import Plan, StatisticPlan
from dpcli.spec import Column, GridBins, Spec

# Largest product of (cells + 1) grouped in one query. Past it the group-by's hash table (at most one entry per
# distinct combination, bounded by the row count too) could grow large, so statistics are grouped separately.
COMBINED_GROUP_LIMIT = 1 << 22

_BOOL_TEXT = {"true": 1, "false": 0, "1": 1, "0": 0}


@dataclass(frozen=True)
class ExactStatistic:
    """Exact aggregates of one statistic, one entry per declared cell (in declared order)."""

    counts: np.ndarray  # int64: rows per cell (for a mean: rows with a value)
    sums: np.ndarray | None  # object array of Python ints: fixed-point sums (centred for a mean), or None


def _ceil(x: Fraction) -> int:
    return -((-x.numerator) // x.denominator)


def _schema(spec: Spec, used: list[str]) -> dict[str, pl.DataType]:
    schema: dict[str, pl.DataType] = {}
    for name in used:
        column = spec.columns[name]
        if column.type == "int":
            schema[name] = pl.Int64()
        elif column.type == "float":
            schema[name] = pl.Float64()
        else:
            schema[name] = pl.String()  # decoded to declared keys after grouping (see _key_index)
    return schema


def _numeric(column: Column) -> pl.Expr:
    """A numeric column on its integer grid (grid units), clamped to the bounds; null when missing."""
    c = pl.col(column.name)
    lo, hi = column.grid_bounds
    p = column.precision
    assert p is not None and column.bounds is not None
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


def _key_index(column: Column, raw: pl.Expr) -> pl.Expr:
    """Raw text of a category/bool column -> index of its declared key; null for missing or undeclared."""
    if column.type == "category":
        # an Enum of the declared keys: undeclared text becomes null (1.5x faster than replace_strict)
        value = raw.cast(pl.Enum(list(column.keys)), strict=False).to_physical().cast(pl.Int64)
        if column.other is not None:
            # `other: KEY`: undeclared non-empty text counts under KEY (never as a key of its own)
            undeclared = value.is_null() & raw.is_not_null() & (raw != "")
            value = pl.when(undeclared).then(pl.lit(column.keys.index(column.other), dtype=pl.Int64)).otherwise(value)
    else:
        value = raw.str.to_lowercase().replace_strict(_BOOL_TEXT, default=None, return_dtype=pl.Int64)
    if column.impute is not None:
        value = value.fill_null(column.keys.index(str(column.impute)))
    return value


def _bin_index(spec: Spec, sp: StatisticPlan, value: pl.Expr) -> pl.Expr:
    """Histogram bin of a numeric value already on the integer grid; null outside the bins."""
    column = spec.columns[sp.statistic.column]  # type: ignore[index]
    p = column.precision
    bins = sp.statistic.bins
    assert p is not None and bins is not None
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
    # keeps them exact Int64s (edges far outside the bounds used to collide as floats in cut(): a DuplicateError
    # reported as an unreadable input). The bin is the last i with t_i <= k: an exact integer binary search.
    lo, hi = column.grid_bounds
    thresholds = pl.Series([min(max(_ceil(bins.edge(i) / p), lo - 1), hi + 1) for i in range(n + 1)], dtype=pl.Int64)
    idx = pl.lit(thresholds).search_sorted(value, side="right").cast(pl.Int64) - 1
    return pl.when(value.is_not_null() & (idx >= 0) & (idx < n)).then(idx)


class _Query:
    """The group-by keys and sums one query needs, shared between statistics (named once each)."""

    def __init__(self) -> None:
        self.keys: dict[str, pl.Expr] = {}
        self.sums: dict[str, pl.Expr] = {}

    def key(self, name: str, expr: pl.Expr) -> str:
        self.keys.setdefault(name, expr.alias(name))
        return name

    def total(self, name: str, expr: pl.Expr) -> str:
        self.sums.setdefault(name, expr.alias(name))
        return name


@dataclass(frozen=True)
class _Recipe:
    """How to read one statistic's cells out of the grouped result."""

    dims: tuple[tuple[str, Column | None, int], ...]  # (key column, column to decode or None for a bin index, size)
    counted: str | None  # per-group count of rows with a value (sum/mean); else rows are counted with len()
    total: str | None  # summed column (sum/mean)


def _recipe(spec: Spec, sp: StatisticPlan, q: _Query, sum_type: pl.DataType) -> _Recipe:
    stat = sp.statistic
    dims: list[tuple[str, Column | None, int]] = []
    for d in stat.by:
        column = spec.columns[d]
        dims.append((q.key(f"raw:{d}", pl.col(d)), column, len(column.keys)))
    counted = total = None
    if stat.kind == "histogram":
        column = spec.columns[stat.column]  # type: ignore[index]
        if column.numeric:
            idx = _bin_index(spec, sp, _numeric(column))
            dims.append((q.key(f"bin:{stat.name}", idx), None, stat.bins.count))  # type: ignore[union-attr]
        else:
            dims.append((q.key(f"raw:{column.name}", pl.col(column.name)), column, len(column.keys)))
    elif stat.kind in ("sum", "mean"):
        column = spec.columns[stat.column]  # type: ignore[index]
        value = _numeric(column)
        offset = sp.component("sum").offset
        # counting values per group (rather than grouping by "has a value") keeps the key short: ~10% faster
        counted = q.total(f"count:{column.name}", value.count().cast(pl.Int64))
        total = q.total(f"sum:{column.name}:{offset}", (value - offset).cast(sum_type).sum())
    return _Recipe(tuple(dims), counted, total)


def _groups(plan: Plan) -> list[list[int]]:
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
        for name in (*s.by, *([s.column] if s.column else [])):
            used.setdefault(name, None)
    return list(used)


def _sum_type(plan: Plan, path: Path) -> pl.DataType:
    """Int64 when no sum can overflow it, else Int128 (measured: Int128 sums cost ~25% of the scan).

    A CSV of B bytes has at most B rows, so |sum| <= B * max|value| bounds every fixed-point sum.
    """
    try:
        size = path.stat().st_size
    except OSError:
        return pl.Int128()
    biggest = 1
    for sp in plan.statistics:
        if sp.statistic.kind in ("sum", "mean"):
            lo, hi = plan.spec.columns[sp.statistic.column].grid_bounds  # type: ignore[index]
            offset = sp.component("sum").offset
            biggest = max(biggest, abs(lo - offset), abs(hi - offset))
    return pl.Int64() if (size + 1) * biggest < 2**63 else pl.Int128()


def build_queries(plan: Plan, path: Path) -> tuple[list[list[int]], list[pl.LazyFrame], list[list[_Recipe]]]:
    spec = plan.spec
    used = used_columns(spec)
    scan = pl.scan_csv(
        path,
        has_header=True,
        infer_schema=False,  # everything not declared stays text; nothing is inferred from the data
        schema_overrides=_schema(spec, used),
        ignore_errors=True,  # an unparseable cell becomes null: a value problem, handled by the column's policy
        raise_if_empty=False,
        truncate_ragged_lines=True,  # extra fields are ignored, missing fields are null (docs/spec.md)
        encoding="utf8",
        glob=False,  # the path is one file: 'data[1].csv' must not be read as a pattern matching 'data1.csv'
    )
    if used:
        scan = scan.select(used)
    sum_type = _sum_type(plan, path)
    groups = _groups(plan)
    queries, recipes = [], []
    for group in groups:
        q = _Query()
        recipes.append([_recipe(spec, plan.statistics[i], q, sum_type) for i in group])
        aggs = [pl.len().alias("n"), *q.sums.values()]
        queries.append(scan.group_by(list(q.keys.values())).agg(aggs) if q.keys else scan.select(aggs))
    return groups, queries, recipes


def aggregate(plan: Plan, path: Path) -> list[ExactStatistic]:
    """Exact per-cell aggregates for every statistic of the plan, in plan order. One scan of the file."""
    if Path(path).is_dir():
        # polars would scan every file in the directory as one dataset
        raise InputError(f"input {path} is a directory, not a CSV file")
    groups, queries, recipes = build_queries(plan, path)
    try:
        frames = pl.collect_all(queries, engine="streaming")
    except pl.exceptions.PolarsError as exc:
        # polars' message may quote a cell: only its class name leaves this function
        raise InputError(f"input {path} could not be read as a UTF-8 CSV ({type(exc).__name__})") from None
    except OSError as exc:
        raise InputError(f"cannot read input {path}: {exc.strerror or 'unreadable'}") from None
    results: list[ExactStatistic | None] = [None] * len(plan.statistics)
    for group, frame, recipe in zip(groups, frames, recipes):
        for i, r in zip(group, recipe):
            results[i] = _marginal(plan.statistics[i], frame, r)
    return results  # type: ignore[return-value]


def _marginal(sp: StatisticPlan, frame: pl.DataFrame, recipe: _Recipe) -> ExactStatistic:
    """Sum one statistic's declared cells out of the grouped result (small: one row per distinct key tuple)."""
    code: pl.Expr = pl.lit(0, dtype=pl.Int64)
    for key, column, size in recipe.dims:
        index = pl.col(key) if column is None else _key_index(column, pl.col(key))
        code = code * size + index
    part = frame.lazy()
    aggs = [pl.col(recipe.counted or "n").sum().alias("n")]
    if recipe.total is not None:
        aggs.append(pl.col(recipe.total).cast(pl.Int128).sum().alias("s"))
    cells = part.with_columns(code.alias("code")).filter(pl.col("code").is_not_null()).group_by("code").agg(aggs).collect()
    idx = cells["code"].to_numpy().astype(np.int64)
    counts = np.zeros(sp.cells, dtype=np.int64)
    counts[idx] = cells["n"].to_numpy().astype(np.int64)
    sums = None
    if recipe.total is not None:
        sums = np.zeros(sp.cells, dtype=object)
        sums[:] = 0
        for j, s in zip(idx.tolist(), cells["s"].to_list()):
            sums[j] = int(s)
    return ExactStatistic(counts, sums)
