"""The statistic kinds: one declaration per kind, its traits, in one table (``KINDS``) that every module reads.

A module that treats kinds differently asks the kind's traits (``KINDS[stat.kind].rounded``) or the statistic's
type (``isinstance(stat, Quantile)``, which also narrows its fields), never a tuple of kind names. So a new kind is
its entry here, its class in dpcli/specs/model.py, its builder in dpcli/specs/rules.py and its own functions (plan,
engine, post-processing): docs/architecture.md, "A new statistic kind". tests/specs/test_kinds.py fails when a kind the
spec accepts has no entry, or an entry lacks a trait.

Nothing here reads data or imports the rest of dpcli: it sits under the spec (layer 1), which reads it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import MappingProxyType


class Family(enum.Enum):
    """How a kind's released numbers are drawn (dpcli.mechanisms.noise.draw_noise dispatches on it)."""

    ADDITIVE = "additive"  # exact counts and sums + discrete Laplace or Gaussian noise, one plan component each
    QUANTILE = "quantile"  # permute-and-flip over a candidate grid per cell and level (dpcli.plan.quantiles)
    # report-noisy-max over a column's keys (dpcli.mechanisms.topk); open keys: selection, then ranking
    RANKING = "ranking"
    RANDOMIZED = "randomized"  # none drawn here: the input was randomized, and paid for, by `dpcli randomize`


class ColumnNeed(enum.Enum):
    """What a kind's ``column:`` must be."""

    NONE = "none"  # no column (a count)
    ANY = "any"  # numeric (with bins) or category/bool (its keys)
    NUMERIC = "numeric"  # an int or float column with bounds
    KEYS = "keys"  # a category or bool column


class Value(enum.Enum):
    """What the table's ``value`` of a kind is (dpcli.publish.table.number_columns dispatches on it)."""

    COUNT = "count"  # a noisy count of rows (or persons) per cell
    SUM = "sum"  # a noisy sum of the column per cell
    MEAN = "mean"  # noisy sum / noisy count, within the column's bounds
    VARIANCE = "variance"  # the sample variance from a noisy count, sum and sum of squares (dpcli.postprocess.variance)
    STD = "std"  # the square root of that variance
    QUANTILE = "quantile"  # a candidate of the column's grid, one row per level
    RANK = "rank"  # the rank of a chosen key (1: the largest count)
    FREQUENCY = "frequency"  # an unbiased estimate of a key's count from randomized responses


class Interval(enum.Enum):
    """What a kind's ``ci_low``/``ci_high`` (and the plan's ±error) are."""

    NOISE = "noise"  # the value ± its noise's half-width at the release's confidence
    RANK = "rank"  # the plan's ±error is a rank bound; value-unit intervals only with ``interval: {share: S}``
    GAP = "gap"  # none in the table; the plan's ±error is a count gap between chosen and unchosen keys
    ESTIMATE = "estimate"  # the randomized-response estimate's interval, a factor × √rows


@dataclass(frozen=True)
class Kind:
    """One statistic kind's traits. Every field is required (no defaults): an entry without a trait is an error
    on import, and tests/specs/test_kinds.py keeps it so."""

    name: str  # the spec's word (``kind: histogram``), also written in the table's kind column and the sidecar
    family: Family
    value: Value
    interval: Interval
    column: ColumnNeed
    has_bins: bool  # a numeric column's ``bins:`` make its cells (a histogram)
    sums_column: bool  # the engine sums its column (fixed point), beside the count of rows with a value
    sums_squares: bool  # ... and the centred squares of its column
    bounded: bool  # its released numbers depend on its column's bounds (clipping, fallbacks)
    open_keys: bool  # may have an open column (its keys selected privately, each released with its noisy count)
    postprocess: bool  # takes ``postprocess:`` (it has a value and an interval)
    nonnegative: bool  # ``nonnegative: true`` applies: its value may be negative, its truth may not
    rounded: bool  # ``digits:`` applies (counts are integers already)
    consistent: bool  # ``consistent: true`` applies: its counts can be made to add up with others'
    target: bool  # ``target:`` (and plan --target) applies: one error figure in its units
    memory_per_cell: int  # bytes of peak memory per cell of a release (dpcli.plan.cost.release_cost)
    # a series' running totals apply (issue 26): its released value is a linear function of the per-cell counts and
    # sums, so a period's value adds up over periods (count, histogram, sum; a mean as noisy sum over noisy count)
    linear: bool


def _kinds(*kinds: Kind) -> MappingProxyType[str, Kind]:
    return MappingProxyType({k.name: k for k in kinds})


# memory_per_cell: peak RSS of `dpcli release`, 10^5 to 10^7 cells (docs/benchmarks.md), rounded up: 26 B/cell for
# counts, 23-46 for histograms, 66 for sums, 125 for means (exact and noisy arrays, the mean's parts, the int64
# columns and one chunk of text). Variance and std: 192 B/cell for a std by two 1000- and 2000-key columns (10^6 and
# 4 x 10^6 cells: 337 and 900 MB peak), against 86 B/cell for a mean in the same runs; rounded up as the mean's 125
# was to 144. A frequency is a histogram of its column to the engine.
KINDS = _kinds(
    Kind("count", Family.ADDITIVE, Value.COUNT, Interval.NOISE, ColumnNeed.NONE, has_bins=False, sums_column=False,
         sums_squares=False, bounded=False, open_keys=True, postprocess=True, nonnegative=True, rounded=False,
         consistent=True, target=True, memory_per_cell=48, linear=True),
    Kind("histogram", Family.ADDITIVE, Value.COUNT, Interval.NOISE, ColumnNeed.ANY, has_bins=True, sums_column=False,
         sums_squares=False, bounded=False, open_keys=True, postprocess=True, nonnegative=True, rounded=False,
         consistent=True, target=True, memory_per_cell=48, linear=True),
    Kind("sum", Family.ADDITIVE, Value.SUM, Interval.NOISE, ColumnNeed.NUMERIC, has_bins=False, sums_column=True,
         sums_squares=False, bounded=False, open_keys=False, postprocess=True, nonnegative=True, rounded=True,
         consistent=False, target=True, memory_per_cell=80, linear=True),
    Kind("mean", Family.ADDITIVE, Value.MEAN, Interval.NOISE, ColumnNeed.NUMERIC, has_bins=False, sums_column=True,
         sums_squares=False, bounded=True, open_keys=False, postprocess=True, nonnegative=False, rounded=True,
         consistent=False, target=True, memory_per_cell=144, linear=True),
    Kind("quantile", Family.QUANTILE, Value.QUANTILE, Interval.RANK, ColumnNeed.NUMERIC, has_bins=False,
         sums_column=False, sums_squares=False, bounded=False, open_keys=False, postprocess=False, nonnegative=False,
         rounded=False, consistent=False, target=False, memory_per_cell=48, linear=False),
    Kind("median", Family.QUANTILE, Value.QUANTILE, Interval.RANK, ColumnNeed.NUMERIC, has_bins=False,
         sums_column=False, sums_squares=False, bounded=False, open_keys=False, postprocess=False, nonnegative=False,
         rounded=False, consistent=False, target=False, memory_per_cell=48, linear=False),
    Kind("top_k", Family.RANKING, Value.RANK, Interval.GAP, ColumnNeed.KEYS, has_bins=False, sums_column=False,
         sums_squares=False, bounded=False, open_keys=True, postprocess=False, nonnegative=False, rounded=False,
         consistent=False, target=False, memory_per_cell=48, linear=False),
    Kind("mode", Family.RANKING, Value.RANK, Interval.GAP, ColumnNeed.KEYS, has_bins=False, sums_column=False,
         sums_squares=False, bounded=False, open_keys=True, postprocess=False, nonnegative=False, rounded=False,
         consistent=False, target=False, memory_per_cell=48, linear=False),
    Kind("variance", Family.ADDITIVE, Value.VARIANCE, Interval.NOISE, ColumnNeed.NUMERIC, has_bins=False,
         sums_column=True, sums_squares=True, bounded=True, open_keys=False, postprocess=True, nonnegative=True,
         rounded=True, consistent=False, target=False, memory_per_cell=224, linear=False),
    Kind("std", Family.ADDITIVE, Value.STD, Interval.NOISE, ColumnNeed.NUMERIC, has_bins=False, sums_column=True,
         sums_squares=True, bounded=True, open_keys=False, postprocess=True, nonnegative=True, rounded=True,
         consistent=False, target=False, memory_per_cell=224, linear=False),
    Kind("frequency", Family.RANDOMIZED, Value.FREQUENCY, Interval.ESTIMATE, ColumnNeed.KEYS, has_bins=False,
         sums_column=False, sums_squares=False, bounded=False, open_keys=False, postprocess=False, nonnegative=False,
         rounded=False, consistent=False, target=False, memory_per_cell=48, linear=False),
    # internal (INTERNAL_KINDS): a synth spec's one- and two-way marginals (dpcli.plan.synth), counted by the engine
    # as a count by their columns (numeric ones by their bins), never written under a spec's statistics:
    Kind("marginal", Family.ADDITIVE, Value.COUNT, Interval.NOISE, ColumnNeed.NONE, has_bins=False,
         sums_column=False, sums_squares=False, bounded=False, open_keys=False, postprocess=False, nonnegative=False,
         rounded=False, consistent=False, target=False, memory_per_cell=48, linear=False),
)
# Kinds that planning makes and a spec's statistics: never names (the declaration leaves them out: dpcli.specs.v1)
INTERNAL_KINDS = frozenset({"marginal"})
