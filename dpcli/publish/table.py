"""The contract's tidy output table, its writers (CSV, JSON) and the metadata sidecar, written atomically.

One row per released number (contract 0.3): ``statistic``, ``kind``, ``column``, one column per dimension of the
spec, ``bin_low``/``bin_high`` (when a statistic has bins), ``quantile``, ``value``, ``ci_low``, ``ci_high``,
``epsilon`` (``rho``). Numbers are written as exact decimal text (the fixed-point grid makes every released
sum and mean a terminating decimal), so nothing is lost to float formatting.

The table is columnar: labels are generators over the declared keys and bins, numbers int64 arrays on their decimal
grid, and the writers format a chunk of rows at a time with polars. The bytes are those csv.writer and dpcli 0.2's
JSON writer produced; a 10^7-row table costs its arrays, not 10^7 Python strings.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import sys
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from dpcli.core.accounting import format_decimal_up, format_exact
from dpcli.core.files import atomic_write
from dpcli.core.version import __version__
from dpcli.errors import UsageError
from dpcli.plan.bins import bin_label
from dpcli.plan.model import Plan, StatisticPlan
from dpcli.plan.scales import CONFIDENCE
from dpcli.plan.sensitivity import NoiseComponent
from dpcli.postprocess import values as postprocess
from dpcli.postprocess import variance

# the table's own columns: one declaration, which the spec's loader also reads (no dimension may take these names)
from dpcli.publish.columns import (
    CHUNK_ROWS,
    Blank,
    GridLabels,
    Ints,
    KeyLabels,
    LazyColumn,
    Masked,
    Texts,
    as_column,
    csv_field,
    load_polars,
)
from dpcli.spec.grid import candidate_grid
from dpcli.spec.kinds import KINDS, Value
from dpcli.spec.model import Column, Count, EdgeBins, GridBins, Mean, Quantile, Sum, TopK, histogram_bins
from dpcli.spec.v1 import (
    BIN_COLUMNS,
    DESCRIBING_COLUMNS,
    FIXED_COLUMNS_AFTER,
    FLAG_COLUMN,
    QUANTILE_COLUMN,
    RHO_COLUMN,
    STATISTIC_COLUMN,
)

if TYPE_CHECKING:

    from dpcli.ledger import Record
    from dpcli.mechanisms.noisy import Noisy

# Contract 0.3: what each row is (DESCRIBING_COLUMNS, after `statistic`), and a binned row's edges as numbers
# (BIN_COLUMNS, after the dimensions)
# The table's contract: the columns and labels this version writes (docs/contract-0.3.md). A table stored by
# dpcli 0.2 is re-issued in the layout it was first written in ("0.2"): a re-issue gives back the same bytes.
CONTRACT = "0.3"
LEGACY_CONTRACT = "0.2"
# Columns the JSON writer prints as bare text (numbers), by name, as dpcli 0.2 did.
NUMERIC_COLUMNS = frozenset({*FIXED_COLUMNS_AFTER, "rho", *BIN_COLUMNS})
# Cells per compressed piece of a packed column in the release store (a reader decodes piece by piece).
PACK_CHUNK = 1 << 20
# The release store's table format. dpcli 0.2 wrote JSON without this key (every cell as text), then format 2
# (both still read, and re-issued in contract 0.2's layout); format 3 adds kind, column and the bin edges.
STORE_FORMAT = 3
LEGACY_STORE_FORMAT = 2


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

    def to_json(self) -> bytes:
        """The table as kept in the release store: JSON, labels as their generators (keys, grid) and integer
        columns packed (compressed little-endian integers in base64 pieces). A 10^7-cell histogram stores in a
        few MB and ~0.2 s instead of ~500 MB of text. Reading it gives the same table, so the same output bytes."""
        doc = {
            "format": STORE_FORMAT if self.contract == CONTRACT else LEGACY_STORE_FORMAT,
            "dimensions": list(self.dimensions),
            "with_rho": self.with_rho,
            "with_bins": self.with_bins,
            "blocks": [_block_doc(b) for b in self.blocks],
        }
        if self.with_flag:
            doc["with_flag"] = True
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    @staticmethod
    def from_json(data: bytes) -> Table:
        """A stored table: this version's format, or dpcli 0.2's (every cell as text, or format 2), which is
        re-issued in contract 0.2's layout (no kind, column or bin edges; labels '[lo, hi)'), the bytes first
        written: a re-issue never changes what a paid release published."""
        from dpcli.core.accounting import parse_exact

        doc = json.loads(data)

        def exact(x: str | None) -> Fraction | None:
            return None if x is None else parse_exact(x)

        if doc.get("format") is None:  # dpcli 0.2
            blocks = tuple(
                Block(
                    b["statistic"], exact(b["epsilon"]), b["labels"], b["value"], b["ci_low"], b["ci_high"],
                    exact(b.get("rho")),
                )
                for b in doc["blocks"]
            )
        elif doc["format"] in (LEGACY_STORE_FORMAT, STORE_FORMAT):
            blocks = tuple(_block_from_doc(b, exact) for b in doc["blocks"])
        else:
            raise ValueError("stored table of an unknown format")
        contract = CONTRACT if doc.get("format") == STORE_FORMAT else LEGACY_CONTRACT
        return Table(
            tuple(doc["dimensions"]), blocks, bool(doc.get("with_rho")), bool(doc.get("with_bins")), contract,
            bool(doc.get("with_flag")),
        )

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
        return getattr(block, name)  # kind, column, bin_low, bin_high, value, ci_low, ci_high

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


# -- the release store's form of a block ---------------------------------------------------------------------------


def _block_doc(b: Block) -> dict:
    doc: dict = {
        "statistic": b.statistic,
        "epsilon": None if b.epsilon is None else format_exact(b.epsilon),
        "rho": None if b.rho is None else format_exact(b.rho),
        "rows": len(b),
        "labels": {k: v.store() for k, v in b.labels.items()},
        "kind": b.kind,
        "column": b.column,
        "bins": None if b.bin_low is None or b.bin_high is None else [b.bin_low.store(), b.bin_high.store()],
    }
    if b.flag is not None:  # its suppressed cells: value and interval stored as empty texts
        doc["flag"] = b.flag.store()
    v, lo, hi = b.value, b.ci_low, b.ci_high
    if isinstance(v, Ints) and isinstance(lo, Ints) and isinstance(hi, Ints):
        if v.offset == 0 and v.same_array(lo) and v.same_array(hi) and lo.offset == -hi.offset:
            # value -/+ a half-width (counts, sums): one array
            dtype, packed = _pack([v.values])
            doc["numbers"] = {"dtype": dtype, "mult": v.mult, "digits": v.digits, "halfwidth": hi.offset}
            doc["value"] = packed[0]
            return doc
        same_grid = (v.mult, v.digits) == (lo.mult, lo.digits) == (hi.mult, hi.digits)
        if same_grid and v.offset == lo.offset == hi.offset == 0:
            dtype, packed = _pack([v.values, lo.values, hi.values])
            doc["numbers"] = {"dtype": dtype, "mult": v.mult, "digits": v.digits, "halfwidth": None}
            doc["value"], doc["ci_low"], doc["ci_high"] = packed
            return doc
    doc["value"], doc["ci_low"], doc["ci_high"] = (None if isinstance(c, Blank) else list(c) for c in (v, lo, hi))
    return doc


def _block_from_doc(b: dict[str, Any], exact: Callable[[str | None], Fraction | None]) -> Block:
    rows = int(b["rows"])
    labels = {k: _labels_from_doc(v, rows) for k, v in b["labels"].items()}
    numbers = b.get("numbers")
    value: LazyColumn
    low: LazyColumn
    high: LazyColumn
    if numbers is None:
        value, low, high = (Blank(rows) if b[c] is None else Texts(b[c]) for c in ("value", "ci_low", "ci_high"))
    else:
        dtype, mult, digits, k = numbers["dtype"], numbers["mult"], numbers["digits"], numbers["halfwidth"]
        values = _unpack(b["value"], dtype, rows)
        value = Ints(values, 0, mult, digits)
        if k is not None:
            low, high = Ints(values, -k, mult, digits), Ints(values, k, mult, digits)
        else:
            low = Ints(_unpack(b["ci_low"], dtype, rows), 0, mult, digits)
            high = Ints(_unpack(b["ci_high"], dtype, rows), 0, mult, digits)
    flag = None if b.get("flag") is None else Texts(b["flag"])
    if flag is not None:
        hidden = np.array([f == "suppressed" for f in flag.values], dtype=bool)
        if hidden.any():
            value, low, high = (Masked(c, hidden) for c in (value, low, high))
    edges = [_labels_from_doc(e, rows) for e in b["bins"]] if b.get("bins") else [None, None]
    if len(value) != rows or any(len(c) != rows for c in (low, high, *labels.values(), *filter(None, edges))):
        raise ValueError("stored table with columns of different lengths")
    return Block(
        b["statistic"], exact(b["epsilon"]), labels, value, low, high, exact(b.get("rho")), b.get("kind"),
        b.get("column"), bin_low=edges[0], bin_high=edges[1], flag=flag,
    )


def _labels_from_doc(doc: list[str] | dict[str, Any], rows: int) -> LazyColumn:
    from dpcli.core.accounting import parse_exact

    if isinstance(doc, list):
        return Texts(doc)
    if "keys" in doc:
        return KeyLabels(doc["keys"], doc["inner"], doc["rows"])
    g = doc["grid"]
    bins = GridBins(parse_exact(g["start"]), parse_exact(g["stop"]), parse_exact(g["step"]))
    # a grid stored without "sep" is dpcli 0.2's: its labels are re-issued as they were first written
    return GridLabels(bins, doc["inner"], doc["rows"], doc.get("sep", ", "), doc.get("part", "label"))


_DTYPES = ((np.int8, "<i1"), (np.int16, "<i2"), (np.int32, "<i4"), (np.int64, "<i8"))


def _pack(arrays: list[np.ndarray]) -> tuple[str, list[list[str]]]:
    """Arrays in the narrowest little-endian integer type holding all of them, zlib-compressed (level 1: noisy
    counts are mostly small, so the bytes shrink ~3x at ~200 MB/s) in base64 pieces of PACK_CHUNK cells."""
    lo = min((int(a.min()) for a in arrays if len(a)), default=0)
    hi = max((int(a.max()) for a in arrays if len(a)), default=0)
    code = next(c for t, c in _DTYPES if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max)
    packed = []
    for a in arrays:
        raw = np.ascontiguousarray(a, dtype=np.dtype(code))
        packed.append(
            [
                base64.b64encode(zlib.compress(raw[i : i + PACK_CHUNK].tobytes(), 1)).decode("ascii")
                for i in range(0, max(len(raw), 1), PACK_CHUNK)
            ]
        )
    return code, packed


def _unpack(pieces: list[str], code: str, rows: int) -> np.ndarray:
    if code not in {c for _, c in _DTYPES}:
        raise ValueError("stored table with an unknown integer type")
    try:
        parts = [np.frombuffer(zlib.decompress(base64.b64decode(p)), dtype=np.dtype(code)) for p in pieces]
    except zlib.error:
        raise ValueError("stored table with a damaged packed column") from None
    values = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return values.astype(np.int64)


# ---------------------------------------------------------------------------------------------------------------
# Labels


def bin_labels(bins: EdgeBins | GridBins) -> list[str]:
    """Every bin as its interval '[lo..hi)', as a list (small bins; tables use label columns made on demand)."""
    if isinstance(bins, GridBins):
        return list(GridLabels(bins, 1, bins.count))
    return [bin_label(bins, i) for i in range(bins.count)]


def label_columns(keys: Sequence[Sequence[str] | EdgeBins | GridBins]) -> list[LazyColumn]:
    """Per dimension, the label column of the product of the dimensions (first dimension slowest), made on demand:
    declared keys, or a numeric histogram's bins. O(1) memory in the number of cells."""
    sizes = [k.count if isinstance(k, EdgeBins | GridBins) else len(k) for k in keys]
    total = int(np.prod(sizes, dtype=object)) if sizes else 1
    out: list[LazyColumn] = []
    inner = total
    for k, size in zip(keys, sizes, strict=True):
        inner //= size
        if isinstance(k, GridBins):
            out.append(GridLabels(k, inner, total))
        elif isinstance(k, EdgeBins):
            out.append(KeyLabels(bin_labels(k), inner, total))
        else:
            out.append(KeyLabels(k, inner, total))
    return out


def statistic_labels(plan: Plan) -> list[dict[str, LazyColumn] | None]:
    """Per statistic of the plan, its label columns (dimension -> column): from the declared keys and bins alone.
    None for an open-key statistic: its rows are the released entries (``entry_labels``)."""
    out: list[dict[str, LazyColumn] | None] = []
    for sp in plan.statistics:
        stat = sp.statistic
        if sp.selection is not None or KINDS[stat.kind].value is Value.RANK:  # rows: released entries, or chosen keys
            out.append(None)
            continue
        dims: list[Sequence[str] | EdgeBins | GridBins] = []
        for keys in sp.dimension_keys:
            bins = keys if keys is not None else stat.bins  # no declared keys: the histogram's own bins
            assert bins is not None
            dims.append(bins)
        names = stat.dimensions
        if isinstance(stat, Quantile):  # one row per level, after the by: cells
            dims.append([format_exact(q) for q in stat.levels])
            names = (*names, QUANTILE_COLUMN)
        out.append(dict(zip(names, label_columns(dims), strict=True)))
    return out


def entry_labels(sp: StatisticPlan, keys: Sequence[tuple[int, str]]) -> dict[str, LazyColumn]:
    """The label columns of an open-key statistic's released entries (dimension -> one label per entry): the open
    dimension's key text as it is, each declared dimension's key from the entry's code (first dimension slowest).
    Texts columns: the writers quote and escape each one (commas, quotes, line breaks, any character)."""
    from dpcli.mechanisms.selection import declared_sizes  # the mechanisms' own reading of an entry's code

    assert sp.selection is not None
    stat = sp.statistic
    sizes = declared_sizes(sp)
    codes = np.fromiter((code for code, _ in keys), dtype=np.int64, count=len(keys))
    out: dict[str, LazyColumn] = {}
    inner = 1
    for j in range(len(sizes) - 1, -1, -1):  # last dimension fastest
        name = stat.dimensions[j]
        if j == sp.selection.dimension:
            out[name] = Texts([text for _, text in keys])
            continue
        declared = sp.dimension_keys[j]
        names = list(declared) if declared is not None else bin_labels(histogram_bins(stat))
        index = (codes // inner) % sizes[j]
        out[name] = Texts([names[i] for i in index.tolist()])
        inner *= sizes[j]
    return {name: out[name] for name in stat.dimensions}


def check_labels(plan: Plan) -> None:
    """Build every label column of the plan and format its first and last rows both ways, before the spend: label
    code that can fail fails while nothing is paid. Cheap at any size (two rows per column)."""
    for sp, labels in zip(plan.statistics, statistic_labels(plan), strict=True):
        if labels is None and sp.selection is None:  # a top_k's labels: some of its column's declared keys
            continue
        if labels is None:  # open keys: the label code of one entry (code 0 is a declared cell of every statistic)
            labels = entry_labels(sp, [(0, "k")])
        for column in labels.values():
            for i in {0, len(column) - 1}:
                column.csv(i, i + 1), column.json(i, i + 1), column.text(i, i + 1)


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
            assert nz.keys is not None
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
    return Table(plan.dimensions, tuple(blocks), with_rho=plan.rho > 0, with_bins=with_bins, with_flag=with_flag)


def bin_edge_columns(bins: EdgeBins | GridBins, labels: LazyColumn | None) -> tuple[LazyColumn, LazyColumn]:
    """A histogram's bin_low and bin_high columns, row for row with its bin labels (a grid's, a few edges', or an
    open-key histogram's released entries'): the edges' exact decimal text, made on demand like the labels."""
    assert labels is not None
    if isinstance(labels, GridLabels):
        return tuple(  # type: ignore[return-value]
            GridLabels(labels.bins, labels.inner, labels.rows, labels.sep, part) for part in ("low", "high")
        )
    edges = {
        bin_label(bins, i): (format_exact(bins.edge(i)), format_exact(bins.edge(i + 1))) for i in range(bins.count)
    }
    if isinstance(labels, KeyLabels):
        return tuple(  # type: ignore[return-value]
            KeyLabels([edges[k][side] for k in labels.keys], labels.inner, labels.rows) for side in (0, 1)
        )
    texts = list(labels)
    return Texts([edges[t][0] for t in texts]), Texts([edges[t][1] for t in texts])


def quantile_columns(column: Column, stat: Quantile, nz: Noisy) -> tuple[LazyColumn, LazyColumn, LazyColumn]:
    """A quantile's values (the chosen candidates, on the column's decimal grid) and no interval columns."""
    assert nz.choices is not None and column.precision is not None
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
    assert nz.chosen is not None
    if nz.keys is not None:  # open keys: the selected entries in rank order
        labels = entry_labels(sp, nz.keys)
    else:
        keys = sp.dimension_keys[-1]
        assert keys is not None
        labels = {stat.column: Texts([keys[i] for i in nz.chosen.tolist()])}
    n = len(nz.chosen)
    rho = sp.rho if plan.rho else None
    ranks = Ints(np.arange(1, n + 1, dtype=np.int64))
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
        assert noisy_counts is not None
        value_texts, low_texts, high_texts = postprocess.frequencies(sp, noisy_counts)
        return Texts(value_texts), Texts(low_texts), Texts(high_texts)
    if meaning is Value.COUNT:
        assert noisy_counts is not None
        k = sp.component("count").halfwidth(confidence)
        values = np.asarray(noisy_counts, dtype=np.int64)  # value -/+ k share this one array
        return Ints(values), Ints(values, -k), Ints(values, k)
    assert noisy_sums is not None
    if meaning in (Value.VARIANCE, Value.STD):
        assert noisy_counts is not None and noisy_squares is not None and bounds is not None
        *released, unit = variance.variance_grids(
            sp, np.asarray(noisy_counts), np.asarray(noisy_sums), np.asarray(noisy_squares), bounds, confidence
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
        assert noisy_counts is not None and bounds is not None
        grids = postprocess.mean_grids(sp, noisy_sums, noisy_counts, bounds, confidence)
        if grids is not None:
            value, low, high, mult, digits = grids
            return Ints(value, 0, mult, digits), Ints(low, 0, mult, digits), Ints(high, 0, mult, digits)
        r = postprocess.means(sp, noisy_sums, noisy_counts, bounds, confidence)
    return Texts(decimal_text(r.value)), Texts(decimal_text(r.ci_low)), Texts(decimal_text(r.ci_high))


# ---------------------------------------------------------------------------------------------------------------
# Number text


def decimal_text(values: Sequence[Fraction]) -> list[str]:
    return [format_exact(v) for v in values]


# ---------------------------------------------------------------------------------------------------------------
# Writers


class _HashingWriter(io.TextIOBase):
    """Text sink that encodes to UTF-8, hashes and writes to a binary file in one pass.

    Small text is gathered into ~1 MiB blocks first; chunks of a table arrive as bytes (``write_bytes``)."""

    BLOCK = 1 << 20

    def __init__(self, raw: IO[bytes], tolerate_closed_reader: bool = False):
        self.raw: IO[bytes] | None = raw
        self.sha = hashlib.sha256()
        self.tolerate_closed_reader = tolerate_closed_reader
        self.reader_closed = False
        self._parts: list[str] = []
        self._size = 0

    def write(self, s: str) -> int:
        self._parts.append(s)
        self._size += len(s)
        if self._size >= self.BLOCK:
            self.flush()
        return len(s)

    def flush(self) -> None:
        if not self._parts:
            return
        data = "".join(self._parts).encode("utf-8")
        self._parts, self._size = [], 0
        self._emit(data)

    def write_bytes(self, data: bytes | memoryview) -> None:
        self.flush()
        self._emit(data)

    def _emit(self, data: bytes | memoryview) -> None:
        self.sha.update(data)
        if self.raw is not None:
            try:
                self.raw.write(data)
            except BrokenPipeError:
                # `dpcli release ... | head -1`: the reader stopped reading. The release is already paid for;
                # keep hashing (the ledger records the whole table's hash) and finish quietly.
                if not self.tolerate_closed_reader:
                    raise
                self.raw, self.reader_closed = None, True


def _chunks(n: int) -> Iterator[tuple[int, int]]:
    for i in range(0, n, CHUNK_ROWS):
        yield i, min(n, i + CHUNK_ROWS)


def write_csv(table: Table, sink: _HashingWriter) -> None:
    """The table as CSV: byte for byte what csv.writer writes (minimal quoting, '\\n' line ends), a chunk at a time."""
    pl = load_polars()
    head = io.StringIO()
    csv.writer(head, lineterminator="\n").writerow(table.columns)
    sink.write(head.getvalue())
    for block in table.blocks:
        cells = [table.cell(block, name) for name in table.columns]
        for i, j in _chunks(len(block)):
            frame = {}
            for n, cell in enumerate(cells):
                if isinstance(cell, LazyColumn):
                    frame[f"c{n}"] = cell.csv(i, j)
                else:  # one text for every row, or a column that does not apply (empty)
                    text = "" if cell is None else csv_field(cell)
                    frame[f"c{n}"] = pl.repeat(text, j - i, dtype=pl.String, eager=True)
            buf = io.BytesIO()
            pl.DataFrame(frame).write_csv(buf, include_header=False, quote_style="never", line_terminator="\n")
            sink.write_bytes(buf.getvalue())


def write_json(table: Table, sink: _HashingWriter) -> None:
    """A JSON list of objects, as dpcli 0.2 wrote it row by row: numbers as their exact decimal text (valid JSON
    numbers), a column that does not apply as null, one object per line. Built by polars a chunk at a time."""
    pl = load_polars()
    cols = table.columns
    keys = [json.dumps(c) for c in cols]
    sink.write("[")
    first = True
    for block in table.blocks:
        cells = [table.cell(block, name) for name in cols]
        for i, j in _chunks(len(block)):
            pieces: list = []
            literal = "{"
            for n, (key, name, cell) in enumerate(zip(keys, cols, cells, strict=True)):
                literal += ("" if n == 0 else ", ") + key + ": "
                numeric = name in NUMERIC_COLUMNS and name not in table.dimensions
                if cell is None:
                    literal += "null"
                elif not isinstance(cell, LazyColumn):
                    literal += cell if numeric else json.dumps(cell, ensure_ascii=False)
                else:
                    series = cell.number_json(i, j) if numeric else cell.json(i, j)
                    pieces += [pl.lit(literal), pl.lit(series.cast(pl.String))]
                    literal = ""
            pieces.append(pl.lit(literal + "}"))
            # one String column written raw by polars straight to bytes (no Python str of the chunk), each row
            # followed by the separator; the last one's is dropped
            buf = io.BytesIO()
            pl.select(pl.concat_str(pieces)).write_csv(
                buf, include_header=False, quote_style="never", line_terminator=",\n  "
            )
            sink.write_bytes(b"\n  " if first else b",\n  ")
            sink.write_bytes(buf.getbuffer()[: -len(b",\n  ")])
            first = False
    sink.write("\n]\n" if not first else "]\n")


# Extensions of table formats dpcli does not write: such an output is refused (exit 2) rather than filled with CSV
# under a name that promises something else. Any other extension (.txt, .out, a date) is a CSV.
FOREIGN_FORMATS = frozenset({
    ".parquet", ".pq", ".xlsx", ".xls", ".xlsm", ".ods", ".feather", ".arrow", ".ipc", ".avro", ".orc", ".tsv",
    ".tab", ".ndjson", ".jsonl", ".h5", ".hdf5", ".sqlite", ".db", ".pickle", ".pkl", ".gz", ".bz2", ".xz", ".zst",
    ".zip",
})


def output_format(path: Path | None, explicit: str | None) -> str:
    """csv or json: --format, else json for a .json path, else csv (standard output, no extension, .csv, others).

    A path whose extension names another table format (or a compression) is a UsageError, --format or not: checked
    before anything is read or spent."""

    suffix = "" if path is None or str(path) == "-" else path.suffix.lower()
    if suffix in FOREIGN_FORMATS:
        wanted = f"--format {explicit}" if explicit else "CSV or JSON"
        raise UsageError(
            f"output {path}: dpcli does not write {suffix[1:]} files; name a .csv or .json file ({wanted}), or - "
            "for standard output"
        )
    if explicit:
        return explicit
    return "json" if suffix == ".json" else "csv"


def write_table(table: Table, path: Path | None, fmt: str) -> str:
    """Write atomically (temp file in the target directory, fsync, rename) or to stdout. Returns the sha256."""
    write = write_json if fmt == "json" else write_csv
    if path is None or str(path) == "-":
        sink = _HashingWriter(sys.stdout.buffer, tolerate_closed_reader=True)
        write(table, sink)
        sink.flush()
        if sink.raw is not None:
            try:
                sys.stdout.buffer.flush()
            except BrokenPipeError:
                sink.reader_closed = True
        if sink.reader_closed:
            _detach_stdout()
        return sink.sha.hexdigest()
    holder: dict[str, str] = {}

    def body(fh: IO[bytes]) -> None:
        sink = _HashingWriter(fh)
        write(table, sink)
        sink.flush()
        holder["sha"] = sink.sha.hexdigest()

    atomic_write(path, body)
    return holder["sha"]


def _detach_stdout() -> None:
    """Point stdout at /dev/null so later flushes (and the interpreter's exit) do not raise on a closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + ".meta.json")


def write_sidecar(path: Path, metadata: dict, meta_path: Path | None = None) -> None:
    """The sidecar at ``meta_path`` (``release --meta``), else beside the table at ``path``."""
    text = json.dumps(metadata, indent=2, sort_keys=False) + "\n"
    atomic_write(meta_path or sidecar_path(path), lambda fh: fh.write(text.encode("utf-8")))


def _with_postprocess(plan: Plan, statistics: list[dict]) -> list[dict]:
    """Each statistic's sidecar entry with its `postprocess` block when the spec declares one
    (dpcli.postprocess.consistency)."""
    if not plan.spec.postprocess:
        return statistics
    from dpcli.postprocess.consistency import sidecar_blocks

    blocks = sidecar_blocks(plan)
    return [{**meta, "postprocess": blocks[meta["name"]]} if meta["name"] in blocks else meta for meta in statistics]


# The sidecar's JSON Schema (draft 2020-12), shipped in the package: `dpcli schema --sidecar` prints it
SIDECAR_SCHEMA = Path(__file__).parent / "schemas" / "sidecar.schema.json"


def sidecar_schema_text() -> str:
    return SIDECAR_SCHEMA.read_text(encoding="utf-8")


def release_metadata(plan: Plan, spend: Record, head: str, contract: str = CONTRACT) -> dict:
    """The sidecar: public facts only. The spec's hash and its public parameters (bounds, bins, keys, mechanisms,
    scales, shares), the release id, the time of the spend (UTC, from the ledger record: the same on a re-issue)
    and the ledger record and head. Never anything computed from the input's bytes (no input hash, row count or
    size) and no path of the operator's machine (threat model, contract). Its schema: SIDECAR_SCHEMA."""
    spec = plan.spec
    return {
        "contract": contract,
        "release_id": spend.get("release_id"),
        "release_time": release_time(spend),
        "dpcli_version": __version__,
        "dataset": spec.dataset,
        "spec_sha256": spec.sha256,
        "unit": spec.privacy.unit,
        "neighbours": spec.privacy.neighbours,
        "accounting": spec.privacy.accounting,
        "epsilon": format_exact(plan.epsilon),
        "rho": format_exact(plan.rho),
        "delta": None if plan.delta is None else format_exact(plan.delta),
        "confidence": format_exact(plan.confidence),
        **_person_meta(plan),
        "columns": {name: _column_meta(column) for name, column in spec.columns.items()},
        "statistics": _with_postprocess(plan, [_statistic_meta(sp) for sp in plan.statistics]),
        "ledger": {"record": spend.seq, "release_id": spend.get("release_id"), "head": head},
    }


def release_time(spend: Record) -> str | None:
    """When the release was paid for: the ledger record's UTC time to the second ('2026-11-24T18:14:13Z'). The
    record's milliseconds are left out: they would time the scan before the spend more finely than anyone needs."""
    time = spend.get("time")
    return None if time is None else time[:19] + "Z"


def _person_meta(plan: Plan) -> dict:
    """A person-level release's unit: the id field's name (never an id), K, G, R and what a missing id means."""
    person = plan.spec.privacy.person
    if person is None:
        return {}
    return {
        "person": {
            "id": person.id,
            "max_rows": person.max_rows,
            "max_groups": person.max_groups,
            "max_rows_per_group": person.max_rows_per_group,
            "missing_id": person.missing_id,
        }
    }


def _statistic_meta(sp: StatisticPlan) -> dict:
    stat = sp.statistic
    meta: dict = {
        "name": stat.name,
        "kind": stat.kind,
        "column": stat.column,
        "by": list(stat.by),
        "bins": _bins_meta(stat.bins),
        "mechanism": sp.mechanism,
        "epsilon": format_exact(sp.epsilon),
        "rho": format_exact(sp.rho),
        "cells": sp.cells,
        "noise": [_component_meta(c) for c in sp.components],
    }
    if sp.bounding is not None:  # person unit: what each person may contribute here
        if isinstance(stat, Count):
            meta["of"] = stat.of
        if isinstance(stat, Sum | Mean):
            meta["clamp"] = stat.clamp or "row"
        b = sp.bounding
        meta["bounding"] = {"max_rows": b.max_rows, "max_groups": b.groups, "max_rows_per_group": b.rows_per_group}
    if isinstance(stat, Quantile):
        meta["q"] = [format_exact(q) for q in stat.levels]
        meta["step"] = None if stat.step is None else format_exact(stat.step)
    if isinstance(stat, TopK):
        meta["k"] = stat.k
        meta["released"] = "the keys ranked by their counts: value = rank (1 = the largest); no interval"
    if sp.selection is not None:
        sel = sp.selection
        meta["selection"] = {
            "keys": "data-selected",
            "dimension": stat.dimensions[sel.dimension],
            "threshold": sel.threshold,
            "delta": format_exact(sel.delta),
            "max_length": sel.max_length,
            "rule": "an entry is released when its noisy count >= threshold; the released value is that noisy count",
        }
    return meta


def _column_meta(column: Column) -> dict:
    meta: dict = {"type": column.type}
    if column.bounds is not None:
        meta["bounds"] = [format_exact(b) for b in column.bounds]
    if column.precision is not None and column.type == "float":
        meta["precision"] = format_exact(column.precision)
    if column.type == "category" and column.open:  # keys come from the data, through partition selection
        meta["categories"] = "open"
        meta["max_length"] = column.max_length
    elif column.type == "category":
        meta["categories"] = list(column.keys)
    if column.other is not None:
        meta["other"] = column.other
    if column.impute is not None:
        meta["impute"] = column.impute if isinstance(column.impute, str) else format_exact(column.impute)
    return meta


def _bins_meta(bins: EdgeBins | GridBins | None) -> dict | list | None:
    if isinstance(bins, GridBins):  # a million-bin grid stays three numbers, as in the spec
        return {"start": format_exact(bins.start), "stop": format_exact(bins.stop), "step": format_exact(bins.step)}
    if isinstance(bins, EdgeBins):
        return [format_exact(e) for e in bins.edges]
    return None


def _component_meta(c: NoiseComponent) -> dict:
    meta = {"part": c.role, "mechanism": c.mechanism, "sensitivity": c.sensitivity, "unit": format_exact(c.unit)}
    if c.mechanism == "discrete_gaussian":
        assert c.variance is not None
        meta.update(l2_sensitivity_squared=c.l2_squared, variance=format_exact(c.variance), rho=format_exact(c.rho))
    elif c.mechanism == "exponential" and not c.draws:  # a quantile level: its accuracy as a rank bound (public)
        assert c.scale is not None
        meta.update(
            scale=format_exact(c.scale), epsilon=format_exact(c.epsilon), candidates=c.candidates,
            rank_error95=format_exact(c.halfwidth(CONFIDENCE) * c.unit),
        )
    else:
        assert c.scale is not None
        meta.update(scale=format_exact(c.scale), epsilon=format_exact(c.epsilon))
    if c.mechanism == "exponential" and c.draws:  # a top_k: scale is the temperature; epsilon each draw's
        meta.update(draws=c.draws, choices=c.choices)
    return meta
