"""The table's label columns: per statistic, one label per row from the declared keys and bins (made on demand), an
open-key statistic's released entries, and the check that every label column can be written, made before the spend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dpcli.core.accounting import format_exact
from dpcli.errors import InternalError
from dpcli.plan.bins import bin_label
from dpcli.plan.model import Plan, StatisticPlan
from dpcli.publish.columns import GridLabels, KeyLabels, LazyColumn, Texts
from dpcli.specs.kinds import KINDS, Value
from dpcli.specs.model import EdgeBins, GridBins, Quantile, histogram_bins
from dpcli.specs.v1 import QUANTILE_COLUMN


def bin_labels(bins: EdgeBins | GridBins) -> list[str]:
    """Every bin as its interval '[lo..hi)', as a list (small bins; tables use label columns made on demand)."""
    if isinstance(bins, GridBins):
        return list(GridLabels(bins, 1, bins.count))
    return [bin_label(bins, i) for i in range(bins.count)]


def label_columns(keys: Sequence[Sequence[str] | EdgeBins | GridBins]) -> list[LazyColumn]:
    """Per dimension, the label column of the product of the dimensions (first dimension slowest), made on demand:
    declared keys, or a numeric histogram's bins. O(1) memory in the number of cells."""
    sizes = [k.count if isinstance(k, EdgeBins | GridBins) else len(k) for k in keys]
    total = math.prod(sizes)  # exact: an int, never an overflowing int64
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
            if bins is None:
                raise InternalError(f"statistic {stat.name}: a dimension with neither declared keys nor bins")
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
    import numpy as np  # here, not at the top: `dpcli plan` builds labels without numpy

    from dpcli.mechanisms.selection import declared_sizes

    if sp.selection is None:
        raise InternalError(f"statistic {sp.statistic.name}: entry labels of a statistic without open keys")
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


def check_labels(plan: Plan, format_rows: bool = True) -> None:
    """Build every label column of the plan and format its first and last rows both ways, before the spend: label
    code that can fail fails while nothing is paid. Cheap at any size (two rows per column). ``format_rows=False``
    builds the columns only: formatting is polars' work, which ``dpcli plan`` does not import."""
    for sp, labels in zip(plan.statistics, statistic_labels(plan), strict=True):
        if labels is None and sp.selection is None:  # a top_k's labels: some of its column's declared keys
            continue
        if labels is None:  # open keys: the label code of one entry (code 0 is a declared cell of every statistic)
            labels = entry_labels(sp, [(0, "k")])
        if not format_rows:
            continue
        for column in labels.values():
            for i in {0, len(column) - 1}:
                column.csv(i, i + 1), column.json(i, i + 1), column.text(i, i + 1)
