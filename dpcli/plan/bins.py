"""A histogram's bins as the plan sees them: how many, each one's label, and that each holds a point of the column's
fixed-point grid."""

from __future__ import annotations

from dpcli.core.accounting import format_exact
from dpcli.errors import InternalError, SpecError
from dpcli.specs.model import EdgeBins, GridBins, Histogram, Spec


def bin_count(spec: Spec, stat: Histogram) -> int:
    """Bins of a histogram: its numeric bins or declared keys (1 for an open column: its keys are selected)."""
    column = spec.columns[stat.column]
    if column.open:
        return 1
    return stat.bins.count if column.numeric and stat.bins is not None else len(column.keys)


def check_bins_on_grid(path: str, spec: Spec, stat: Histogram) -> None:
    """Every bin must hold at least one point of the column's fixed-point grid, else it could never be counted."""
    column = spec.columns[stat.column]
    bins = stat.bins
    if not column.numeric or bins is None:
        return
    p = column.precision
    if p is None:  # the loader gives every numeric column a precision
        raise InternalError(f"column {column.name!r} has no precision")
    if isinstance(bins, GridBins):
        if bins.step < p:
            raise SpecError(f"{path}.bins.step", f"bins narrower than the column's precision {format_exact(p)}")
        return
    thresholds = [-((-e / p).numerator // (e / p).denominator) for e in bins.edges]
    for j in range(1, len(thresholds)):
        if thresholds[j] <= thresholds[j - 1]:
            raise SpecError(f"{path}.bins[{j}]", f"bin narrower than the column's precision {format_exact(p)}")


def bin_label(bins: EdgeBins | GridBins, i: int) -> str:
    """A histogram bin written as its interval, e.g. '[17..25)' (contract 0.3: never a comma, so never quoted)."""
    return f"[{format_exact(bins.edge(i))}..{format_exact(bins.edge(i + 1))})"
