"""The typed release spec: frozen objects (``Column``, bins, each kind's statistic, ``Privacy``, ``Spec`` ...) and the
questions asked of them (a statistic's bins, its open dimensions, whether it counts persons).

They are built only by the loader (``dpcli.specs.load``, through the builders and cross-field rules of
``dpcli.specs.rules``), so every instance is valid. Nothing here reads data: a spec is public, person-written
knowledge (bounds, bins, categories, budget split).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from fractions import Fraction
from pathlib import Path
from typing import ClassVar, TypeVar

from dpcli.errors import InternalError
from dpcli.specs.input_template import InputTemplate
from dpcli.specs.kinds import KINDS
from dpcli.specs.v1 import PERIOD_COLUMN, QUANTILE_COLUMN

# ---------------------------------------------------------------------------------------------------------------
# The typed spec


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # int | float | category | bool
    bounds: tuple[Fraction, Fraction] | None = None
    precision: Fraction | None = None  # fixed-point grid step (numeric columns; 1 for int)
    categories: tuple[str, ...] | None = None  # declared keys, in order (bool: ("false", "true"))
    impute: Fraction | str | None = None  # replaces null / unparseable / undeclared cells
    other: str | None = None  # category columns: the declared key that undeclared non-empty values count under
    open: bool = False  # `categories: open`: keys chosen from the data by private partition selection
    max_length: int | None = None  # open columns: released keys are cut to this many characters

    @property
    def numeric(self) -> bool:
        return self.type in ("int", "float")

    @property
    def keys(self) -> tuple[str, ...]:
        """Declared keys of a category or bool column (an open column has none)."""
        if self.categories is None:  # only a category or bool column's keys are asked for: never reached
            raise InternalError(f"column {self.name!r} has no declared keys")
        return self.categories

    @property
    def grid_step(self) -> Fraction:
        """The fixed-point grid step of a numeric column (its precision; 1 for int)."""
        if self.precision is None:  # only a numeric column's grid is asked for: never reached
            raise InternalError(f"column {self.name!r} is not numeric: it has no grid")
        return self.precision

    @property
    def grid_bounds(self) -> tuple[int, int]:
        """Bounds in grid units: the largest grid interval inside the declared bounds (so clamping is exact)."""
        step = self.grid_step
        if self.bounds is None:  # a numeric column has both bounds and a step (dpcli.specs.rules.build_column)
            raise InternalError(f"column {self.name!r} is not numeric: it has no grid")
        lo, hi = self.bounds
        return math.ceil(lo / step), math.floor(hi / step)  # exact on a Fraction


@dataclass(frozen=True)
class EdgeBins:
    """Bins given as a list of edges: bin i is [edges[i], edges[i+1])."""

    edges: tuple[Fraction, ...]

    @property
    def count(self) -> int:
        return len(self.edges) - 1

    def edge(self, i: int) -> Fraction:
        return self.edges[i]


@dataclass(frozen=True)
class GridBins:
    """An even grid of bins [start + i*step, start + (i+1)*step), i < count: O(1) to store at any size."""

    start: Fraction
    stop: Fraction
    step: Fraction

    @property
    def count(self) -> int:
        return int((self.stop - self.start) / self.step)

    def edge(self, i: int) -> Fraction:
        return self.start + i * self.step


Bins = EdgeBins | GridBins


@dataclass(frozen=True)
class Target:
    """``target:`` of a statistic: the largest acceptable error in its units, at ``confidence`` (95% for error95)."""

    error: Fraction
    confidence: Fraction


@dataclass(frozen=True, kw_only=True)
class _StatisticFields:
    """What every statistic has. Its kind, column and bins are each kind's own (see ``Statistic``)."""

    name: str
    by: tuple[str, ...] = ()
    weight: Fraction | None = None
    epsilon: Fraction | None = None  # explicit share of a pure release, when the spec names one
    rho: Fraction | None = None  # explicit share of a zCDP release, when the spec names one
    mechanism: str = "laplace"
    delta: Fraction | None = None  # an open-key statistic: the delta its partition selection spends, when named
    target: Target | None = None  # planning: the largest acceptable error (dpcli.plan.what_if)
    expected_rows: int | None = None  # planning, a mean: rows with a value per cell (None: the spec's)

    @property
    def dimensions(self) -> tuple[str, ...]:
        """Output dimension columns of this statistic: its by-columns, then the histogram column."""
        return self.by


@dataclass(frozen=True, kw_only=True)
class Count(_StatisticFields):
    kind: ClassVar[str] = "count"
    column: ClassVar[None] = None
    bins: ClassVar[None] = None
    of: str = "rows"  # "rows" | "persons" (distinct persons: a person unit only)


@dataclass(frozen=True, kw_only=True)
class Histogram(_StatisticFields):
    kind: ClassVar[str] = "histogram"
    column: str
    bins: Bins | None = None  # None: one bin per declared key of a category or bool column

    @property
    def dimensions(self) -> tuple[str, ...]:
        return (*self.by, self.column)


@dataclass(frozen=True, kw_only=True)
class Sum(_StatisticFields):
    kind: ClassVar[str] = "sum"
    column: str
    bins: ClassVar[None] = None
    clamp: str | None = None  # "row": each row's value is clamped; "person": each person's total in a cell (None: row)


@dataclass(frozen=True, kw_only=True)
class Mean(_StatisticFields):
    kind: ClassVar[str] = "mean"
    column: str
    bins: ClassVar[None] = None
    clamp: str | None = None  # "person": the mean over persons of each person's (clamped) total (None: row)


@dataclass(frozen=True, kw_only=True)
class Quantile(_StatisticFields):
    """Quantiles of a numeric column by the exponential mechanism over the candidate grid lo, lo + step, ... <= hi
    (dpcli.plan.quantiles). ``levels`` are in increasing order; each takes an even share of the statistic's budget."""

    kind: ClassVar[str] = "quantile"
    column: str
    bins: ClassVar[None] = None
    levels: tuple[Fraction, ...]
    step: Fraction | None = None  # candidate spacing, a whole number of the column's grid steps (None: its precision)
    interval_share: Fraction | None = None  # the share of the budget paying for value-unit intervals (None: none)


@dataclass(frozen=True, kw_only=True)
class Median(Quantile):
    kind: ClassVar[str] = "median"
    levels: tuple[Fraction, ...] = (Fraction(1, 2),)


@dataclass(frozen=True, kw_only=True)
class TopK(_StatisticFields):
    """``top_k`` (and ``mode``, k = 1): the k keys of a category or bool column with the largest counts, ranked, by
    report-noisy-max (the exponential mechanism on the counts, peeled k times). Its cells are the column's keys, so
    the engines count it as they count a histogram of that column (dpcli/mechanisms/topk.py)."""

    kind: str = "top_k"  # "top_k" | "mode" (the spec's own word, kept for the output and the sidecar)
    column: str
    bins: ClassVar[None] = None
    k: int = 1

    @property
    def dimensions(self) -> tuple[str, ...]:
        return (*self.by, self.column)


@dataclass(frozen=True, kw_only=True)
class Variance(_StatisticFields):
    """The sample variance (denominator n - 1) of a bounded numeric column per cell, from a noisy count, a noisy
    centred sum and a noisy centred sum of squares (dpcli.postprocess.variance)."""

    kind: ClassVar[str] = "variance"
    column: str
    bins: ClassVar[None] = None


@dataclass(frozen=True, kw_only=True)
class Std(Variance):
    """The square root of the released variance (post-processing): the same three noisy parts."""

    kind: ClassVar[str] = "std"


@dataclass(frozen=True, kw_only=True)
class Frequency(_StatisticFields):
    """Unbiased counts of a category/bool column's keys, estimated from a ``dpcli randomize`` output (the input),
    whose column was randomized at ``randomized_epsilon``: post-processing of published data, spending nothing."""

    kind: ClassVar[str] = "frequency"
    column: str
    bins: ClassVar[None] = None
    randomized_epsilon: Fraction

    @property
    def dimensions(self) -> tuple[str, ...]:
        return (self.column,)


@dataclass(frozen=True, kw_only=True)
class Marginal(_StatisticFields):
    """A synth spec's one- or two-way marginal (internal kind ``marginal``: made by dpcli.plan.synth, never written
    under ``statistics:``): the counts of rows per code combination of its columns, in row-major code order (first
    column slowest), exactly like a count by its columns. A category/bool column's codes are its declared keys'
    indices, a numeric column's its bin indices (``column_bins``); with ``kept_missing`` a missing cell is the last
    code, else its row is left out."""

    kind: ClassVar[str] = "marginal"
    column: ClassVar[None] = None
    bins: ClassVar[None] = None  # a histogram's one bins field; a marginal's are per column (column_bins)
    columns: tuple[str, ...]  # one or two synth columns
    column_bins: tuple[Bins | None, ...]  # per column: a numeric column's bins, None for category/bool
    kept_missing: tuple[bool, ...]  # per column: a missing cell is the column's last code

    @property
    def dimensions(self) -> tuple[str, ...]:
        return self.columns


# A statistic, typed per kind (a tagged union on ``kind``); the kinds that read a column
Statistic = Count | Histogram | Sum | Mean | Quantile | TopK | Variance | Frequency | Marginal
AnyStatistic = TypeVar("AnyStatistic", bound=_StatisticFields)  # any of them, its own type kept
ColumnStatistic = Histogram | Sum | Mean | Quantile | TopK | Variance


def histogram_bins(stat: Statistic) -> Bins:
    """The bins of a histogram of a numeric column: the cells of its one dimension without declared keys."""
    if stat.bins is None:  # only a ``has_bins`` kind (dpcli/specs/kinds.py) of a numeric column has them
        raise ValueError(f"statistic {stat.name!r} has no bins: every dimension of it has declared keys")
    return stat.bins


def counts_persons(stat: Statistic) -> bool:
    """A count of distinct persons (``of: persons``), not of rows."""
    return isinstance(stat, Count) and stat.of == "persons"


def clamps_persons(stat: Statistic) -> bool:
    """A sum or mean clamping each person's total in a cell (``clamp: person``), not each row."""
    return isinstance(stat, Sum | Mean) and stat.clamp == "person"


def summed_column(stat: Statistic) -> str | None:
    """The column whose values a statistic sums (its kind's ``sums_column``: dpcli/specs/kinds.py), None if it sums
    none."""
    return stat.column if KINDS[stat.kind].sums_column else None


@dataclass(frozen=True)
class PersonUnit:
    """``privacy.unit`` as a mapping: one person may own many rows. The engine keeps at most ``max_rows`` (K) rows
    per person, and per statistic at most ``max_groups`` (G) cells and ``max_rows_per_group`` (R) rows in each
    (dpcli.engine.persons); the plan's sensitivities follow from K, G and R."""

    id: str  # the input field holding the person id (never a declared column: ids are not public)
    max_rows: int
    max_groups: int | None = None
    max_rows_per_group: int | None = None
    missing_id: str = "drop"  # "drop": rows without an id are left out; "person": each is a person of its own


@dataclass(frozen=True)
class Privacy:
    """The release's budget as the spec states it. ``accounting`` is "pure" (an epsilon, Laplace only) or "zcdp" (a
    rho, stated directly or converted from epsilon and delta; Laplace and Gaussian mechanisms). The release's budget
    and each statistic's share of it are planning's work (dpcli.plan.budget.split_budget)."""

    unit: str  # "row" | "person"
    neighbours: str
    epsilon: Fraction | None  # pure: the release's epsilon; zcdp: the (epsilon, delta) target, if stated
    delta: Fraction | None = None  # the release's whole delta: partition selections' plus the zCDP conversion's
    rho: Fraction | None = None  # zcdp: the release's rho, if stated
    accounting: str = "pure"
    person: PersonUnit | None = None  # unit "person": the id field and the contribution bounds

    @property
    def pinned_unit(self) -> str:
        """The unit as the ledger pins it: ``row``, or ``person:FIELD`` (budgets add up only per one unit)."""
        return "row" if self.person is None else f"person:{self.person.id}"


@dataclass(frozen=True)
class PeriodRule:
    """``series.period``: the input field that puts each row in its period (never a declared column: its values are
    data; the boundaries are public). With ``start`` and ``every`` the field is a date or date-time and period i is
    [start + (i-1) every, start + i every) on the UTC timeline; without them it holds the period's index 1..T."""

    column: str
    start: str | None = None  # the instant period 1 starts, ISO 8601 in UTC ("2027-01-01T00:00:00+00:00")
    every: int | None = None  # a period's length in seconds of absolute time

    @property
    def indexed(self) -> bool:
        """The field holds the period's index (no clock: a period's end is not known)."""
        return self.start is None

    def start_time(self) -> datetime:
        if self.start is None:
            raise InternalError("an index period rule has no start")
        return datetime.fromisoformat(self.start)

    def bounds(self, period: int) -> tuple[datetime, datetime]:
        """The instants period ``period`` (1-based) starts and ends (exclusive), in UTC."""
        if self.every is None:
            raise InternalError("an index period rule has no length")
        first = self.start_time() + timedelta(seconds=(period - 1) * self.every)
        return first, first + timedelta(seconds=self.every)


@dataclass(frozen=True)
class Series:
    """``series:`` (issue 26): a public horizon of ``periods`` (T) periods released under one charge, each row in
    the period its own field puts it in (docs/spec.md, "Series")."""

    periods: int
    period: PeriodRule
    design: str = "per_period"  # "per_period" | "running_totals" | "both"
    running_share: Fraction | None = None  # design both: the running totals' share of the series' budget
    monotone: bool = False  # running totals of counts projected non-decreasing (post-processing)
    method: str = "tree"  # the running totals' mechanism: "tree" (dyadic blocks) | "factorization" (Gaussian only)

    @property
    def per_period(self) -> bool:
        """Periods' own values are released (designs per_period and both)."""
        return self.design in ("per_period", "both")

    @property
    def running(self) -> bool:
        """The tree of running totals is drawn (designs running_totals and both)."""
        return self.design in ("running_totals", "both")


# The longest record read as what it holds, by default: what one record can cost in memory and time is bounded by it
# (a 400 MB line in a .gz took 4.2 GB and 31 s). Public: the spec's ``csv: {max_record_bytes: N}``.
DEFAULT_MAX_RECORD_BYTES = 1 << 20


@dataclass(frozen=True)
class CsvDialect:
    """``csv:`` of the spec: how a CSV input's fields are separated, its text encoded, and its fields named."""

    delimiter: str | None = None  # None: from the input's name, a tab for *.tsv and *.tab, else a comma
    encoding: str = "utf-8"
    header: bool = True  # the first line names the fields
    names: tuple[str, ...] | None = None  # without a header line: the fields' names (None: the declared columns)
    line_end: str | None = None  # "lf" or "cr"; without a header line the default is "lf"
    # a longer record (its bytes in the file, decompressed, line end excluded) is read as an empty record, all its
    # cells missing, without being held whole (docs/spec.md, "Limits"); for Parquet/Arrow, a longer string is missing
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES


@dataclass(frozen=True)
class PostProcess:
    """A statistic's post-processing (docs/spec.md, "Post-processing"): the top level's ``postprocess:`` with the
    statistic's own over it, key by key. It reads noisy values only: it spends nothing."""

    digits: int | None = None  # sums, means, variances: decimal places of the value and interval (None: as today)
    nonnegative: bool = False  # counts, sums, variances: negative values and interval ends become 0
    consistent: bool = False  # counts and histograms: made to add up with the counts they share a breakdown with
    max_relative_width: Fraction | None = None  # small cells: interval wider than this x |value|
    small_cells: str | None = None  # "flag" | "suppress" (None: no small-cell policy)


@dataclass(frozen=True)
class SynthColumn:
    """One column of ``synth.columns``: how its cells become codes (docs/spec.md, "Synthetic data")."""

    name: str
    bins: Bins | None  # numeric: required (covering the column's bounds); None for category/bool
    values: str = "uniform"  # numeric only: an output value in its bin, uniform | low | mid
    missing: str = "drop"  # drop | keep (a missing cell is the extra last code, written as an empty cell)


@dataclass(frozen=True)
class Synth:
    """``synth:`` (issue 27): a synthetic CSV of ``columns`` from noisy marginals (dpcli.plan.synth plans it)."""

    method: str  # "mst"
    columns: tuple[SynthColumn, ...]  # in output order
    rows: int | None = None  # the output's rows; None: the noisy total
    shares: tuple[Fraction, Fraction, Fraction] = (Fraction(1, 3), Fraction(1, 3), Fraction(1, 3))  # one_way, select,
    # measure
    max_cells: int = 1_000_000  # one marginal's cells at most (public)


@dataclass(frozen=True)
class Spec:
    version: str
    dataset: str
    privacy: Privacy
    columns: Mapping[str, Column]
    statistics: tuple[Statistic, ...]
    input: Path | str | None = None  # resolved against the spec's directory; a URL (Spark) stays text
    output: Path | None = None
    ledger: Path | str | None = None  # a path, or a postgresql:// URL (without a password)
    source: str = "<string>"
    sha256: str = ""
    # `csv: {quoted_line_breaks: true}`: the file comes from a correct RFC 4180 writer whose quoted fields may hold
    # line breaks, so records are read with RFC 4180 quoting across lines (docs/spec.md, "How lines are read")
    quoted_line_breaks: bool = False
    csv: CsvDialect = CsvDialect()
    input_format: str | None = None  # csv, csv.gz, csv.zst, parquet, arrow; None: from the input's extension
    engine: str = "polars"
    confidence: Fraction = Fraction(95, 100)  # of the plan's errors and the table's intervals
    expected_rows: int | None = None  # planning: rows with a value per cell, for a mean's error (dpcli.plan.what_if)
    # statistic name -> its post-processing (`postprocess:`); statistics without any are not in it
    postprocess: Mapping[str, PostProcess] = field(default_factory=dict)
    # `name:`: this spec among several on one dataset that share release ids (a release id is paid once per dataset
    # and name: dpcli.ledger.base.rerun_key)
    name: str | None = None
    series: Series | None = None  # `series:` (issue 26): periods released under one charge
    # `input:` naming one file per period of the series ({date}, {period}); `input` is then its text as a path
    input_template: InputTemplate | None = None
    synth: Synth | None = None  # `synth:` (issue 27): a synthetic CSV instead of statistics (statistics is then ())

    @property
    def id_column(self) -> str | None:
        """The input field that names each row's person (a person unit), read as text beside the used columns."""
        return self.privacy.person.id if self.privacy.person is not None else None

    @property
    def field_names(self) -> tuple[str, ...] | None:
        """The fields of a CSV without a header line, in file order (None: the file's header names them)."""
        if self.csv.header:
            return None
        return self.csv.names if self.csv.names is not None else tuple(self.columns)

    @property
    def dimensions(self) -> tuple[str, ...]:
        """All output dimension columns, in order of first appearance (a quantile's level is one, after its by:)."""
        seen: dict[str, None] = {}
        for s in self.statistics:
            for d in s.dimensions:
                seen.setdefault(d, None)
            if isinstance(s, Quantile):
                seen.setdefault(QUANTILE_COLUMN, None)
        return tuple(seen)


def synth_sizes(spec: Spec) -> tuple[int, ...]:
    """Each synth column's number of codes: its declared keys (bool: false, true) or bins, plus one when missing
    cells are kept (the last code)."""
    if spec.synth is None:
        raise InternalError("a spec without synth: has no synth columns")
    sizes = []
    for sc in spec.synth.columns:
        column = spec.columns[sc.name]
        size = sc.bins.count if sc.bins is not None else len(column.keys)
        sizes.append(size + (1 if sc.missing == "keep" else 0))
    return tuple(sizes)


def periodic(stat: AnyStatistic) -> AnyStatistic:
    """A series' statistic as its sensitivities are derived (docs/spec.md, "Series"): with the period as a leading
    ``by:`` key over the T periods. Under add/remove each row lies in one period and nothing changes; under replace
    a row may move from one period to another, exactly as between two cells of ``by:`` (a plain count: L1 2)."""
    return replace(stat, by=(PERIOD_COLUMN, *stat.by))


def open_dimensions(stat: Statistic, columns: Mapping[str, Column]) -> list[str]:
    """The statistic's dimensions whose keys are open (chosen from the data by partition selection)."""
    return [d for d in stat.dimensions if d in columns and columns[d].open]


