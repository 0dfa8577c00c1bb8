"""The contract's tidy output table, and the table of a release built from its noisy integers (post-processing only).

One row per released number (contract 0.3): ``statistic``, ``kind``, ``column``, one column per dimension of the
spec, ``bin_low``/``bin_high`` (when a statistic has bins), ``quantile``, ``value``, ``ci_low``, ``ci_high``,
``epsilon`` (``rho``). Numbers are written as exact decimal text (the fixed-point grid makes every released
sum and mean a terminating decimal), so nothing is lost to float formatting.

The table is columnar: labels are generators over the declared keys and bins (dpcli.publish.labels), numbers int64
arrays on their decimal grid; dpcli.publish.writers formats a chunk of rows at a time, dpcli.publish.store keeps it
in the release store. A 10^7-row table costs its arrays, not 10^7 Python strings.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from dpcli.core.accounting import format_decimal_up, format_exact
from dpcli.errors import InternalError
from dpcli.plan.bins import bin_label
from dpcli.plan.model import Plan, StatisticPlan
from dpcli.plan.scales import CONFIDENCE
from dpcli.postprocess import values as postprocess
from dpcli.postprocess import variance
from dpcli.publish.columns import Blank, GridLabels, Ints, KeyLabels, LazyColumn, Texts, as_column
from dpcli.publish.labels import entry_labels, label_columns, statistic_labels
from dpcli.specs.grid import candidate_grid
from dpcli.specs.kinds import KINDS, Value
from dpcli.specs.model import Column, EdgeBins, GridBins, Quantile, TopK

# the table's own columns: one declaration, which the spec's loader also reads (no dimension may take these names)
from dpcli.specs.v1 import (
    BIN_COLUMNS,
    DESCRIBING_COLUMNS,
    FIXED_COLUMNS_AFTER,
    FLAG_COLUMN,
    QUANTILE_COLUMN,
    RHO_COLUMN,
    STATISTIC_COLUMN,
)

if TYPE_CHECKING:
    from dpcli.mechanisms.noisy import Noisy

# Contract 0.3: what each row is (DESCRIBING_COLUMNS, after `statistic`), and a binned row's edges as numbers
# (BIN_COLUMNS, after the dimensions)
# The table's contract: the columns and labels this version writes (docs/contract-0.3.md). A table stored by
# dpcli 0.2 is re-issued in the layout it was first written in ("0.2"): a re-issue gives back the same bytes.
CONTRACT = "0.3"
LEGACY_CONTRACT = "0.2"


# ---------------------------------------------------------------------------------------------------------------
# The table


@dataclass(frozen=True)
class Block:
    """The rows of one statistic: per-cell labels and numbers, as columns made on demand."""

    statistic: str
    epsilon: Fraction | None  # the statistic's epsilon (None: a zCDP statistic with no delta to convert at)
    labels: dict[str, LazyColumn]  # dimension -> one label per row (dimensions this statistic has)
    value: LazyColumn
    ci_low: LazyColumn
    ci_high: LazyColumn
    rho: Fraction | None = None  # zCDP releases: the statistic's rho
    kind: str | None = None  # contract 0.3: the statistic's kind (None: a table stored by dpcli 0.2)
    column: str | None = None  # contract 0.3: the statistic's column (None: a count without one)
    bin_low: LazyColumn | None = None  # a histogram's rows: each bin's edges as numbers (None: rows without a bin)
    bin_high: LazyColumn | None = None
    # the small-cell policy's column (empty, flagged or suppressed per row); None: the statistic declares none
    flag: LazyColumn | None = None

    def __post_init__(self) -> None:
        # plain lists of text (a 0.2 stored table, a test) become Texts columns
        object.__setattr__(self, "labels", {k: as_column(v) for k, v in self.labels.items()})
        if self.flag is not None:
            object.__setattr__(self, "flag", as_column(self.flag))
        for name in ("value", "ci_low", "ci_high"):
            object.__setattr__(self, name, as_column(getattr(self, name)))
        for name in BIN_COLUMNS:
            if getattr(self, name) is not None:
                object.__setattr__(self, name, as_column(getattr(self, name)))

    def __len__(self) -> int:
        return len(self.value)


@dataclass(frozen=True)
class Table:
    dimensions: tuple[str, ...]
    blocks: tuple[Block, ...]
    with_rho: bool = False  # zCDP releases add a trailing `rho` column (pure releases keep the contract's columns)
    with_bins: bool = False  # some statistic has bins: the table has bin_low and bin_high (contract 0.3)
    contract: str = CONTRACT  # the layout written: "0.3", or "0.2" for a table stored by dpcli 0.2
    with_flag: bool = False  # some statistic declares a small-cell policy: a last `flag` column
    # the `quantile` column holds quantile levels, written as JSON numbers (issue 25); False: no quantile, or a table
    # stored before, whose levels a re-issue writes as the JSON strings first published
    levels_as_numbers: bool = False

    @property
    def columns(self) -> tuple[str, ...]:
        rho = (RHO_COLUMN,) if self.with_rho else ()
        if self.contract == LEGACY_CONTRACT:
            return (STATISTIC_COLUMN, *self.dimensions, *FIXED_COLUMNS_AFTER, *rho)
        dims = tuple(d for d in self.dimensions if d != QUANTILE_COLUMN)
        bins = BIN_COLUMNS if self.with_bins else ()
        level = (QUANTILE_COLUMN,) if QUANTILE_COLUMN in self.dimensions else ()
        flag = (FLAG_COLUMN,) if self.with_flag else ()
        return (STATISTIC_COLUMN, *DESCRIBING_COLUMNS, *dims, *bins, *level, *FIXED_COLUMNS_AFTER, *rho, *flag)

    def __len__(self) -> int:
        return sum(len(b) for b in self.blocks)

    def cell(self, block: Block, name: str) -> LazyColumn | str | None:
        """The block's column ``name``: a column of texts, one text for every row (statistic, kind, column,
        epsilon, rho), or None where the column does not apply to this statistic."""
        if name in self.dimensions:
            return block.labels.get(name)
        if name == "statistic":
            return block.statistic
        if name in ("epsilon", "rho"):
            x = block.epsilon if name == "epsilon" else block.rho
            return None if x is None else format_decimal_up(x)
        columns: dict[str, LazyColumn | str | None] = {
            "kind": block.kind, "column": block.column, "bin_low": block.bin_low, "bin_high": block.bin_high,
            "value": block.value, "ci_low": block.ci_low, "ci_high": block.ci_high, FLAG_COLUMN: block.flag,
        }
        return columns[name]

    def block_columns(self, block: Block, missing: str | None = None) -> list[Sequence[str | None]]:
        """One block as whole columns in table order; ``missing`` where a column does not apply."""
        n = len(block)
        columns: list[Sequence[str | None]] = []
        for name in self.columns:
            c = self.cell(block, name)
            columns.append(c if isinstance(c, LazyColumn) else [missing if c is None else c] * n)
        return columns

    def rows(self) -> Iterator[tuple[str | None, ...]]:
        """Rows as text; None where a dimension (or a zCDP statistic's epsilon) does not apply to a row."""
        for b in self.blocks:
            yield from zip(*self.block_columns(b), strict=True)


# ---------------------------------------------------------------------------------------------------------------
# The table of a release, from noisy integers


def build_table(plan: Plan, noisy: list[Noisy]) -> Table:
    """The tidy output table from noisy integers (post-processing only). Its columns are made when written: labels
    from the declared keys and bins, numbers as int64 arrays on their decimal grid. A 10^7-cell histogram costs its
    noisy array here, not 10^7 Python strings (which cost 3 GB and 13 s after the spend)."""
    from dpcli.postprocess import consistency
    from dpcli.publish import policies as table_postprocess

    spec = plan.spec
    noisy = consistency.consistent_noisy(plan, noisy)  # post-processing of noisy counts: spends nothing
    blocks = []
    for sp, nz, labels in zip(plan.statistics, noisy, statistic_labels(plan), strict=True):
        stat = sp.statistic
        if isinstance(stat, TopK):
            blocks.append(_ranking_block(plan, sp, stat, nz))
            continue
        if labels is None:
            if nz.keys is None:
                raise InternalError(f"statistic {stat.name}: open keys drawn without their entries")
            labels = entry_labels(sp, nz.keys)
        column = spec.columns[stat.column] if stat.column is not None else None
        bounds = column.grid_bounds if column is not None and KINDS[stat.kind].bounded else None
        if isinstance(stat, Quantile):
            value, low, high = quantile_columns(spec.columns[stat.column], stat, nz)
        else:
            value, low, high = number_columns(sp, nz.counts, nz.sums, bounds, nz.squares, float(plan.confidence))
        flag = None
        policy = spec.postprocess.get(stat.name)
        if policy is not None:
            value, low, high, flag = table_postprocess.apply(KINDS[stat.kind], policy, value, low, high)
        rho = sp.rho if plan.rho else None
        low_edge, high_edge = bin_edge_columns(stat.bins, labels.get(stat.column or "")) if stat.bins else (None, None)
        blocks.append(
            Block(stat.name, sp.reported_epsilon, labels, value, low, high, rho, stat.kind, stat.column, low_edge,
                  high_edge, flag)
        )
    with_bins = any(sp.statistic.bins is not None for sp in plan.statistics)
    with_flag = any(p.small_cells is not None for p in spec.postprocess.values())
    levels = any(isinstance(sp.statistic, Quantile) for sp in plan.statistics)
    return Table(plan.dimensions, tuple(blocks), with_rho=plan.rho > 0, with_bins=with_bins, with_flag=with_flag,
                 levels_as_numbers=levels)


def bin_edge_columns(bins: EdgeBins | GridBins, labels: LazyColumn | None) -> tuple[LazyColumn, LazyColumn]:
    """A histogram's bin_low and bin_high columns, row for row with its bin labels (a grid's, a few edges', or an
    open-key histogram's released entries'): the edges' exact decimal text, made on demand like the labels."""
    if labels is None:
        raise InternalError("a histogram's rows without its bin labels")
    if isinstance(labels, GridLabels):
        low, high = (GridLabels(labels.bins, labels.inner, labels.rows, labels.sep, part) for part in ("low", "high"))
        return low, high
    edges = {
        bin_label(bins, i): (format_exact(bins.edge(i)), format_exact(bins.edge(i + 1))) for i in range(bins.count)
    }
    if isinstance(labels, KeyLabels):
        key_low, key_high = (
            KeyLabels([edges[k][side] for k in labels.keys], labels.inner, labels.rows) for side in (0, 1)
        )
        return key_low, key_high
    texts = list(labels)
    return Texts([edges[t][0] for t in texts]), Texts([edges[t][1] for t in texts])


def quantile_columns(column: Column, stat: Quantile, nz: Noisy) -> tuple[LazyColumn, LazyColumn, LazyColumn]:
    """A quantile's values (the chosen candidates, on the column's decimal grid) and no interval columns."""
    if nz.choices is None or column.precision is None:
        raise InternalError(f"statistic {stat.name}: a quantile without its chosen candidates or its column's grid")
    lo, spacing, _ = candidate_grid(column, stat.step)
    grid = postprocess.quantile_values(lo, spacing, nz.choices)
    step = postprocess.decimal_step(column.precision)
    value: LazyColumn
    if step is not None and int(np.abs(grid).max(initial=0)) * step[0] < 2**62:
        value = Ints(grid, 0, *step)
    else:
        value = Texts(decimal_text([int(g) * column.precision for g in grid.tolist()]))
    if nz.interval is None:
        return value, Blank(len(grid)), Blank(len(grid))
    ends = []
    for offsets in nz.interval:  # grid offsets from the lowest candidate (dpcli.mechanisms.quantiles.intervals)
        units = lo + np.asarray(offsets, dtype=np.int64).reshape(-1)
        ends.append(Ints(units, 0, *step) if isinstance(value, Ints) and step is not None
                    else Texts(decimal_text([int(g) * column.precision for g in units.tolist()])))
    return value, ends[0], ends[1]


def _ranking_block(plan: Plan, sp: StatisticPlan, stat: TopK, nz: Noisy) -> Block:
    """A top_k's or mode's rows: one per rank, its key in the column's dimension, value = the rank (1: the largest
    count), no interval (docs/spec.md, "Top-k and mode")."""
    if nz.chosen is None:
        raise InternalError(f"statistic {stat.name}: a ranking drawn without its chosen keys")
    if nz.keys is not None:  # open keys: the selected entries in rank order
        labels = entry_labels(sp, nz.keys)
    else:
        keys = sp.dimension_keys[-1]
        if keys is None:
            raise InternalError(f"statistic {stat.name}: a ranking over a column without declared keys")
        labels = {stat.column: Texts([keys[i] for i in nz.chosen.tolist()])}
        if stat.by:  # each cell of by: its k ranks in turn: the cells' labels, each repeated k times
            cells = [keys for keys in sp.dimension_keys[:-1] if keys is not None]
            if len(cells) != len(stat.by):  # the loader refuses an open column in a top_k's by:
                raise InternalError(f"statistic {stat.name}: a ranking by a column without declared keys")
            by_labels = label_columns([*cells, [str(rank) for rank in range(stat.k)]])[:-1]
            labels = {**dict(zip(stat.by, by_labels, strict=True)), **labels}
    n = len(nz.chosen)
    rho = sp.rho if plan.rho else None
    ranks = Ints(np.arange(n, dtype=np.int64) % stat.k + 1)
    return Block(stat.name, sp.reported_epsilon, labels, ranks, Blank(n), Blank(n), rho, stat.kind, stat.column)


def number_columns(
    sp: StatisticPlan, noisy_counts: np.ndarray | None, noisy_sums: np.ndarray | None, bounds: tuple[int, int] | None,
    noisy_squares: np.ndarray | None = None, confidence: float = CONFIDENCE,
) -> tuple[LazyColumn, LazyColumn, LazyColumn]:
    """The released numbers of one statistic (dpcli.postprocess.values) as the table's value, ci_low and ci_high
    columns:
    int64 arrays on their decimal grid where they fit (always for counts), else the exact Fractions' text (the same
    text either way)."""
    meaning = KINDS[sp.statistic.kind].value
    if meaning is Value.FREQUENCY:
        value_texts, low_texts, high_texts = postprocess.frequencies(sp, _drawn(sp, noisy_counts, "counts"))
        return Texts(value_texts), Texts(low_texts), Texts(high_texts)
    if meaning is Value.COUNT:
        k = sp.component("count").halfwidth(confidence)
        values = np.asarray(_drawn(sp, noisy_counts, "counts"), dtype=np.int64)  # value -/+ k share this one array
        return Ints(values), Ints(values, -k), Ints(values, k)
    noisy_sums = _drawn(sp, noisy_sums, "sums")
    if meaning in (Value.VARIANCE, Value.STD):
        *released, unit = variance.variance_grids(
            sp, np.asarray(_drawn(sp, noisy_counts, "counts")), np.asarray(noisy_sums),
            np.asarray(_drawn(sp, noisy_squares, "sums of squares")), _bounded(sp, bounds), confidence,
        )
        step = postprocess.decimal_step(unit)
        largest = max((abs(g) for column in released for g in column), default=0)
        if step is not None and (largest + 1) * step[0] < 2**62:  # int64 with room, as postprocess's grids
            value, low, high = (np.asarray(column, dtype=np.int64) for column in released)
            return Ints(value, 0, *step), Ints(low, 0, *step), Ints(high, 0, *step)
        r = postprocess.Released(*([g * unit for g in column] for column in released))
    elif meaning is Value.SUM:
        grid = postprocess.sum_grid(sp, noisy_sums, confidence)
        if grid is not None:
            values, k, mult, digits = grid
            return Ints(values, 0, mult, digits), Ints(values, -k, mult, digits), Ints(values, k, mult, digits)
        r = postprocess.sums(sp, noisy_sums, confidence)
    else:
        noisy_counts, bounds = _drawn(sp, noisy_counts, "counts"), _bounded(sp, bounds)
        grids = postprocess.mean_grids(sp, noisy_sums, noisy_counts, bounds, confidence)
        if grids is not None:
            value, low, high, mult, digits = grids
            return Ints(value, 0, mult, digits), Ints(low, 0, mult, digits), Ints(high, 0, mult, digits)
        r = postprocess.means(sp, noisy_sums, noisy_counts, bounds, confidence)
    return Texts(decimal_text(r.value)), Texts(decimal_text(r.ci_low)), Texts(decimal_text(r.ci_high))


def _drawn(sp: StatisticPlan, noisy: np.ndarray | None, what: str) -> np.ndarray:
    """The noisy ``what`` a statistic's kind releases: drawn for it by dpcli.mechanisms.noise, by its family."""
    if noisy is None:
        raise InternalError(f"statistic {sp.statistic.name}: its noisy {what} were not drawn")
    return noisy


def _bounded(sp: StatisticPlan, bounds: tuple[int, int] | None) -> tuple[int, int]:
    """A bounded kind's column bounds on its grid (build_table passes them by the kind's ``bounded`` trait)."""
    if bounds is None:
        raise InternalError(f"statistic {sp.statistic.name}: a bounded kind without its column's bounds")
    return bounds


# ---------------------------------------------------------------------------------------------------------------
# Number text


def decimal_text(values: Sequence[Fraction]) -> list[str]:
    return [format_exact(v) for v in values]
