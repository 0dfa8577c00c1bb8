"""YAML release spec -> frozen, typed, validated ``Spec``.

The loader is deliberately strict:
- every plain YAML scalar is read as *text* (no implicit booleans, octals, sexagesimals or floats: YAML 1.1's
  ``no``, ``010`` and ``1:30`` stay the strings they look like), and numbers are parsed exactly from that text
  into ``Fraction``s, so ``0.1`` in a spec is exactly 1/10, within size limits (``MAX_NUMBER_DIGITS``);
- aliases and anchors (billion laughs), explicit tags (``!!python/object``, ``!!float``), duplicate keys, lone
  surrogates, and files over ``MAX_SPEC_BYTES`` or not regular files (a FIFO) are refused;
- every error is one line that starts with the spec file (when read from one) and the YAML path of the offending
  field, e.g. ``spec.yaml: statistics[2].column: 'incme' is not a declared column``.

Nothing here reads data: a spec is public, person-written knowledge (bounds, bins, categories, budget split).
"""

from __future__ import annotations

import errno
import hashlib
import math
import os
import re
import stat as _stat
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import yaml

from dpcli.core.accounting import format_exact
from dpcli.core.locations import is_ledger_url, is_url
from dpcli.errors import SpecError
from dpcli.spec.fields import (  # noqa: F401 - the spec's limits and names are read from here too
    ALWAYS_COLUMNS,
    BOOL_KEYS,
    COLUMN,
    COLUMN_TYPES,
    CSV,
    DATASET_NAME,
    DEFAULT_KEY_LENGTH,
    FLAG_COLUMN,
    MAX_ABS_BOUND,
    MAX_CANDIDATES,
    MAX_CELLS,
    MAX_DELTA,
    MAX_NUMBER,
    MAX_NUMBER_DIGITS,
    MAX_NUMBER_TEXT,
    MAX_RELEASE_EPSILON,
    MAX_RHO,
    MAX_TOTAL_DIGITS,
    MECHANISMS,
    MIN_EPSILON,
    MIN_NUMBER,
    MIN_RHO,
    NEIGHBOURS,
    OPEN,
    OUTPUT_COLUMNS,
    POSTPROCESS,
    POSTPROCESS_KINDS,
    PRIVACY,
    QUANTILE_COLUMN,
    SOMETIMES_COLUMNS,
    SPEC_VERSION,
    STATISTIC,
    STATISTIC_KINDS,
    TOP,
    GridSpec,
    Name,
    Number,
    RuleError,
    list_value,
    number_within_limits,
)
from dpcli.spec.kinds import KINDS, ColumnNeed

# A spec file holds at most this many bytes: a 10^7-bin grid is one line, and 1 MiB holds ~100,000 category keys
# (ICD-10-CM, among the longest public code lists, has ~74,000 codes of up to 8 characters).
MAX_SPEC_BYTES = 1 << 20

# A cell's fixed-point value must fit in 2^53 so that the float -> grid conversion is exact and sums stay far from
# int64 limits per row (sums themselves run in 128-bit integers).
MAX_GRID_UNITS = 2**53


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
        assert self.categories is not None
        return self.categories

    @property
    def grid_bounds(self) -> tuple[int, int]:
        """Bounds in grid units: the largest grid interval inside the declared bounds (so clamping is exact)."""
        assert self.bounds is not None and self.precision is not None
        lo, hi = self.bounds
        return math.ceil(lo / self.precision), math.floor(hi / self.precision)  # exact on a Fraction


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


# A statistic, typed per kind (a tagged union on ``kind``); the kinds that read a column
Statistic = Count | Histogram | Sum | Mean | Quantile | TopK | Variance | Frequency
ColumnStatistic = Histogram | Sum | Mean | Quantile | TopK | Variance


def histogram_bins(stat: Statistic) -> Bins:
    """The bins of a histogram of a numeric column: the cells of its one dimension without declared keys."""
    if stat.bins is None:  # only a ``has_bins`` kind (dpcli/spec/kinds.py) of a numeric column has them
        raise ValueError(f"statistic {stat.name!r} has no bins: every dimension of it has declared keys")
    return stat.bins


def counts_persons(stat: Statistic) -> bool:
    """A count of distinct persons (``of: persons``), not of rows."""
    return isinstance(stat, Count) and stat.of == "persons"


def clamps_persons(stat: Statistic) -> bool:
    """A sum or mean clamping each person's total in a cell (``clamp: person``), not each row."""
    return isinstance(stat, Sum | Mean) and stat.clamp == "person"


def summed_column(stat: Statistic) -> str | None:
    """The column whose values a statistic sums (its kind's ``sums_column``: dpcli/spec/kinds.py), None if it sums
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


# The longest record read as what it holds, by default: what one record can cost in memory and time is bounded by it
# (a 400 MB line in a .gz took 4.2 GB and 31 s). Public: the spec's ``csv: {max_record_bytes: N}``.
DEFAULT_MAX_RECORD_BYTES = 1 << 20


@dataclass(frozen=True)
class CsvDialect:
    """``csv:`` of the spec: how a CSV input's fields are separated, its text encoded, and its fields named."""

    delimiter: str = ","
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


def _postprocess(top: dict | None, stats: Sequence[Statistic], own: Sequence[dict | None]) -> dict[str, PostProcess]:
    """Each statistic's post-processing: its own ``postprocess:`` key by key over the top level's. Statistics with
    none are left out. The top level's ``consistent: true`` applies to counts and histograms only."""
    out: dict[str, PostProcess] = {}
    for i, (st, mine) in enumerate(zip(stats, own, strict=True)):
        if mine is not None and mine.get("consistent") == "true" and not KINDS[st.kind].consistent:
            raise RuleError(f"statistics[{i}].postprocess.consistent", "applies to counts and histograms only")
        if not KINDS[st.kind].postprocess:
            continue
        f = {**(top or {}), **(mine or {})}
        if not f:
            continue
        cells = f.get("small_cells")
        out[st.name] = PostProcess(
            digits=f.get("digits"),
            nonnegative=f.get("nonnegative") == "true",
            consistent=f.get("consistent") == "true" and KINDS[st.kind].consistent,
            max_relative_width=None if cells is None else cells["max_relative_width"],
            small_cells=None if cells is None else cells["action"],
        )
    return out


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


# ---------------------------------------------------------------------------------------------------------------
# Strict YAML


_ALLOWED_TAGS = {"tag:yaml.org,2002:str", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"}


def _mark(node_or_event: Any) -> str:
    mark = getattr(node_or_event, "start_mark", None)
    return f"line {mark.line + 1}" if mark is not None else ""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader with no implicit typing, no aliases/anchors, no explicit tags and no duplicate keys."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise SpecError(_mark(event), "YAML aliases are not allowed in a spec")
        if getattr(event, "anchor", None) is not None:
            raise SpecError(_mark(event), "YAML anchors are not allowed in a spec")
        tag = getattr(event, "tag", None)
        if tag is not None and tag not in ("!",) and tag not in _ALLOWED_TAGS:
            raise SpecError(_mark(event), "explicit YAML tags are not allowed in a spec")
        return super().compose_node(parent, index)

    # any node (wider than SafeConstructor's MappingNode): the map constructor below hands over the node it is given
    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Hashable, Any]:
        if not isinstance(node, yaml.MappingNode):
            raise SpecError(_mark(node), "expected a mapping")
        result: dict[Hashable, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise SpecError(_mark(key_node), "mapping keys must be plain names")
            key = self.construct_object(key_node, deep=deep)
            if key in result:
                raise SpecError(_mark(key_node), f"duplicate key '{key}'")
            result[key] = self.construct_object(value_node, deep=deep)
        return result


# No implicit resolvers: every plain scalar is a str. Numbers are parsed exactly by the validators below.
_StrictLoader.yaml_implicit_resolvers = {}


def _construct_map(loader: _StrictLoader, node: yaml.Node) -> dict[Hashable, Any]:
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)


def load_yaml(text: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except SpecError:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(where, f"invalid YAML: {problem}") from None
    except RecursionError:
        raise SpecError("", "invalid YAML: nested too deeply") from None


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def no_surrogates(doc: Any) -> None:
    """Refuse a lone surrogate anywhere (a double-quoted "\\ud800"): it is not a character, so no UTF-8 output, path
    or terminal can hold it, and it would otherwise fail only when the table is written (exit 1, after the spend). UTF-8
    text cannot hold one, so only a YAML escape makes one; a character beyond U+FFFF is written "\\U0001F600"."""
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            found = _SURROGATE.search(node)
            if found:
                raise SpecError(
                    path, f"holds a lone surrogate (\\u{ord(found.group()):04x}), which is not a Unicode character"
                )
        elif isinstance(node, dict):
            if any(isinstance(key, str) and _SURROGATE.search(key) for key in node):
                raise SpecError(path, "a key holds a lone surrogate, which is not a Unicode character")
            # reversed onto the stack, so the first one in document order is reported
            stack.extend(reversed([(f"{path}.{key}" if path else str(key), value) for key, value in node.items()]))
        elif isinstance(node, list):
            stack.extend(reversed([(f"{path}[{i}]", item) for i, item in enumerate(node)]))


# ---------------------------------------------------------------------------------------------------------------
# Loading: the field rules come from the declaration (dpcli.spec.fields); the cross-field rules, which JSON Schema
# cannot express, are below and raise RuleError


class ErrorCollector:
    """Where errors go: raised at once (``errors`` None), or collected so that every error is reported."""

    def __init__(self, errors: list[SpecError] | None):
        self.errors = errors

    @property
    def list(self) -> list[SpecError] | None:
        return self.errors

    def count(self) -> int:
        return len(self.errors) if self.errors is not None else 0

    def attempt(self, fn: Any, *args: Any) -> Any:
        """fn(*args), or None after recording its SpecError."""
        try:
            return fn(*args)
        except SpecError as exc:
            if self.errors is None:
                raise
            self.errors.append(exc)
            return None


def default_precision(lo: Fraction, hi: Fraction) -> Fraction:
    """Default grid step of a float column: the power of ten that puts 10^6 to 10^7 steps across [lo, hi]."""
    width = hi - lo
    exp = 0
    while Fraction(10) ** (exp + 1) <= width:
        exp += 1
    while Fraction(10) ** exp > width:
        exp -= 1
    return Fraction(10) ** (exp - 6)


def build_column(name: str, raw: Any, out: ErrorCollector) -> Column | None:
    path = f"columns.{name}"
    Name("column name").load(path, name)
    before = out.count()
    ctype, f = COLUMN.load(path, raw, out.list)
    if out.count() > before:
        return None  # a field is bad: the column's own cross-field rules would only repeat it
    if ctype in ("int", "float"):
        lo, hi = f["bounds"]
        if not lo < hi:
            raise RuleError(f"{path}.bounds", "low must be less than high")
        precision = Fraction(1) if ctype == "int" else f.get("precision") or default_precision(lo, hi)
        column = Column(name, ctype, bounds=(lo, hi), precision=precision)
        glo, ghi = column.grid_bounds
        if glo >= ghi:
            raise RuleError(f"{path}.precision", "precision is too coarse: the bounds hold fewer than two grid points")
        if max(abs(glo), abs(ghi)) > MAX_GRID_UNITS:
            raise RuleError(
                f"{path}.precision",
                f"bounds/precision exceed 2^53 grid steps: use a coarser precision (now {format_exact(precision)})",
            )
        impute = f.get("impute")
        if impute is not None:
            if not lo <= impute <= hi:
                raise RuleError(f"{path}.impute", "must lie within the column's bounds")
            if ctype == "int" and impute.denominator != 1:
                raise RuleError(f"{path}.impute", "an int column needs a whole-number impute value", rule="text range")
        return replace(column, impute=impute)
    if f.get("categories") == OPEN:
        for key in ("impute", "other"):
            if key in f:
                raise RuleError(f"{path}.{key}", "not allowed for an open column (its keys come from the data)")
        return Column(name, ctype, open=True, max_length=f.get("max_length", DEFAULT_KEY_LENGTH))
    if "max_length" in f:
        raise RuleError(f"{path}.max_length", "only for an open column (categories: open)")
    keys: tuple[str, ...] = BOOL_KEYS if ctype == "bool" else f["categories"]
    impute_key, other_key = f.get("impute"), f.get("other")
    if impute_key is not None and impute_key not in keys:
        raise RuleError(f"{path}.impute", f"'{impute_key[:60]}' is not one of the declared keys")
    if other_key is not None and other_key not in keys:
        raise RuleError(f"{path}.other", f"'{other_key[:60]}' is not one of the declared categories")
    return Column(name, ctype, categories=keys, impute=impute_key, other=other_key)


def _bins(path: str, raw: tuple[Fraction, ...] | GridSpec) -> Bins:
    if isinstance(raw, tuple):
        for i in range(1, len(raw)):
            if raw[i] == raw[i - 1]:
                raise RuleError(f"{path}[{i}]", "duplicate bin edge")
            if raw[i] < raw[i - 1]:
                raise RuleError(f"{path}[{i}]", "bin edges must be increasing")
        return EdgeBins(raw)
    if not raw.start < raw.stop:
        raise RuleError(f"{path}.stop", "must be greater than start")
    n = (raw.stop - raw.start) / raw.step
    if n.denominator != 1:
        raise RuleError(f"{path}.step", "(stop - start) must be a whole number of steps")
    if n > MAX_CELLS:
        raise RuleError(f"{path}.step", f"{n} bins is over the limit of {MAX_CELLS}")
    return GridBins(raw.start, raw.stop, raw.step)


def _reserved(name: str) -> str:
    sometimes = "; ".join(f"{c} in {where}" for c, where in SOMETIMES_COLUMNS.items())
    return (
        f"'{name}' cannot be an output dimension: the table already has a column of that name "
        f"({', '.join(ALWAYS_COLUMNS)}; {sometimes})"
    )


def _statistic(path: str, kind: str, f: dict, columns: Mapping[str, Column]) -> Statistic:
    """The typed statistic, after its cross-field rules (declared columns of a suitable type, bins, cells)."""
    column_name: str | None = f.get("column")
    column = None
    if column_name is not None:
        if column_name not in columns:
            raise RuleError(f"{path}.column", f"'{column_name[:60]}' is not a declared column")
        column = columns[column_name]
    by: list[str] = []
    for j, b in enumerate(f.get("by", ())):
        if b not in columns:
            raise RuleError(f"{path}.by[{j}]", f"'{b[:60]}' is not a declared column")
        if columns[b].numeric:
            raise RuleError(
                f"{path}.by[{j}]", f"'{b}' is numeric: group by category or bool columns, or use a histogram with bins"
            )
        if b in by or b == column_name:
            raise RuleError(f"{path}.by[{j}]", f"'{b}' is used twice")
        if b in ALWAYS_COLUMNS:
            raise SpecError(f"{path}.by[{j}]", _reserved(b))
        by.append(b)
    if column is not None and KINDS[kind].column is ColumnNeed.NUMERIC and not column.numeric:
        raise RuleError(f"{path}.column", f"a {kind} needs a numeric column; '{column.name}' is {column.type}")
    common = {k: f[k] for k in ("name", "weight", "epsilon", "rho", "mechanism", "delta", "expected_rows") if k in f}
    if "target" in f:
        common["target"] = Target(f["target"]["error95"], Fraction(95, 100))
    stat = STATISTIC_BUILDERS[kind](_Declared(path, kind, f, column, tuple(by), common))
    _open_keys(path, stat, columns)
    cells = 1
    for d in stat.dimensions:
        dim = columns[d]
        if dim.open:
            continue  # observed keys, selected privately: not known before the release
        cells *= stat.bins.count if (d == column_name and stat.bins is not None) else len(dim.keys)
    if isinstance(stat, Quantile):
        cells *= quantile_bins(stat, columns[stat.column])
    if cells > MAX_CELLS:
        raise RuleError(path, f"{cells} cells is over the limit of {MAX_CELLS} per statistic")
    return stat


@dataclass(frozen=True)
class _Declared:
    """One statistic's fields as the declaration read them, its column and by: checked: what its kind's builder
    makes its typed statistic from."""

    path: str
    kind: str
    f: dict
    column: Column | None
    by: tuple[str, ...]
    common: dict

    @property
    def named(self) -> Column:
        """The statistic's column (every kind but a count has one: the declaration requires it)."""
        if self.column is None:  # the declaration requires it (STATISTIC's variants): never reached
            raise SpecError(f"{self.path}.column", f"required for a {self.kind}")
        return self.column


def _count(d: _Declared) -> Statistic:
    return Count(by=d.by, of=d.f.get("of", "rows"), **d.common)


def _histogram(d: _Declared) -> Statistic:
    column, path, f = d.named, d.path, d.f
    bins = None
    if column.name in ALWAYS_COLUMNS:
        raise SpecError(f"{path}.column", _reserved(column.name))
    if column.numeric:
        if "bins" not in f:
            raise RuleError(
                f"{path}.bins", "required for a histogram of a numeric column (edges or {start, stop, step})"
            )
        bins = _bins(f"{path}.bins", f["bins"])
    elif "bins" in f:
        raise RuleError(f"{path}.bins", "a histogram of a category or bool column has one bin per declared key")
    return Histogram(column=column.name, by=d.by, bins=bins, **d.common)


def _top_k(d: _Declared) -> Statistic:
    column, path, f = d.named, d.path, d.f
    if column.numeric:
        raise RuleError(
            f"{path}.column",
            f"a {d.kind} ranks the keys of a category or bool column; '{column.name}' is {column.type}",
        )
    if column.name in ALWAYS_COLUMNS:
        raise SpecError(f"{path}.column", _reserved(column.name))
    if not column.open and f.get("k", 1) > len(column.keys):
        raise RuleError(f"{path}.k", f"k is {f['k']}, more than the {len(column.keys)} keys of '{column.name}'")
    return TopK(kind=d.kind, column=column.name, k=f.get("k", 1), **d.common)


def _frequency(d: _Declared) -> Statistic:
    column, path = d.named, d.path
    if column.numeric or column.open:
        raise RuleError(f"{path}.column", f"'{column.name}' is {'open' if column.open else column.type}: a "
                        "frequency is estimated over the declared keys of a category or bool column")
    if column.name in ALWAYS_COLUMNS:
        raise SpecError(f"{path}.column", _reserved(column.name))
    return Frequency(column=column.name, randomized_epsilon=d.f["randomized"]["epsilon"], **d.common)


def _sum(d: _Declared) -> Statistic:
    return Sum(column=d.named.name, by=d.by, clamp=d.f.get("clamp"), **d.common)


def _mean(d: _Declared) -> Statistic:
    return Mean(column=d.named.name, by=d.by, clamp=d.f.get("clamp"), **d.common)


def _quantile_statistic(d: _Declared) -> Statistic:
    return _quantile(d.path, d.kind, d.f, d.named, d.by, d.common)


def _variance(d: _Declared) -> Statistic:
    return Variance(column=d.named.name, by=d.by, **d.common)


def _std(d: _Declared) -> Statistic:
    return Std(column=d.named.name, by=d.by, **d.common)


# Each kind's typed statistic from its declared fields (its traits: dpcli/spec/kinds.py; tests/test_kinds.py checks that
# every kind has its builder)
STATISTIC_BUILDERS: Mapping[str, Callable[[_Declared], Statistic]] = MappingProxyType({
    "count": _count, "histogram": _histogram, "sum": _sum, "mean": _mean, "quantile": _quantile_statistic,
    "median": _quantile_statistic, "top_k": _top_k, "mode": _top_k, "variance": _variance, "std": _std,
    "frequency": _frequency,
})


def candidate_grid(column: Column, step: Fraction | None) -> tuple[int, int, int]:
    """A quantile's candidates on the column's grid: (first, spacing, how many), in grid units: first + j * spacing
    for j < how many, from the lower bound up to the upper one (the last one may stop short of it)."""
    assert column.precision is not None
    lo, hi = column.grid_bounds
    units = 1 if step is None else max(1, int(step / column.precision))
    return lo, units, (hi - lo) // units + 1


def quantile_bins(stat: Quantile, column: Column) -> int:
    """The engine's bins of a quantile per cell: one per candidate when candidates are the column's grid; else two
    per candidate, the values equal to it and those above it up to the next (exactly, on the integer grid)."""
    _, units, candidates = candidate_grid(column, stat.step)
    return candidates if units == 1 else 2 * candidates


def _quantile(path: str, kind: str, f: dict, column: Column, by: tuple[str, ...], common: dict) -> Quantile:
    """A quantile's candidate grid: ``step`` a whole number of the column's grid steps, at most MAX_CANDIDATES."""
    assert column.precision is not None
    step = f.get("step")
    units = Fraction(1) if step is None else step / column.precision
    if units.denominator != 1:
        precision = format_exact(column.precision)
        raise RuleError(f"{path}.step", f"must be a whole number of the column's grid steps (precision {precision})")
    _, _, candidates = candidate_grid(column, step)
    if candidates > MAX_CANDIDATES:
        given = (
            f"step {format_exact(step)}" if step is not None
            else f"the column's precision {format_exact(column.precision)}"
        )
        raise RuleError(
            f"{path}.step" if step is not None else path,
            f"{candidates} candidates at {given} is over the limit of {MAX_CANDIDATES}: give a coarser step",
        )
    if candidates < 2:
        raise RuleError(f"{path}.step", "leaves fewer than two candidates within the column's bounds")
    share = f["interval"]["share"] if "interval" in f else None
    if kind == "median":
        return Median(column=column.name, by=by, step=step, interval_share=share, **common)
    return Quantile(column=column.name, by=by, levels=tuple(sorted(f["q"])), step=step, interval_share=share, **common)


def open_dimensions(stat: Statistic, columns: Mapping[str, Column]) -> list[str]:
    """The statistic's dimensions whose keys are open (chosen from the data by partition selection)."""
    return [d for d in stat.dimensions if d in columns and columns[d].open]


def _open_keys(path: str, stat: Statistic, columns: Mapping[str, Column]) -> None:
    """Open keys are released only through partition selection of noisy counts (dpcli.plan.model.Selection)."""
    opened = open_dimensions(stat, columns)
    if not opened:
        if stat.delta is not None:
            raise RuleError(f"{path}.delta", "only for a statistic with open keys (its partition selection's delta)")
        return
    if not KINDS[stat.kind].open_keys:
        raise RuleError(
            f"{path}.column" if KINDS[stat.kind].has_bins else f"{path}.by",
            f"open keys ('{opened[0]}') are released only by counts and histograms (a key is released with its "
            "noisy count)",
        )
    if len(opened) > 1:
        raise RuleError(f"{path}.by", f"at most one open column per statistic ('{opened[0]}', '{opened[1]}')")
    if stat.mechanism != "laplace":
        raise RuleError(f"{path}.mechanism", "open keys are selected with discrete Laplace noise: use laplace")


def _budget_rules(unit: str, budget_stated: bool, stats: list[Statistic]) -> None:
    """How the statistics share the budget, in ``unit`` ("epsilon" or "rho"): the loader's part. Computing the split,
    and refusing named shares that add up to more than the budget, is planning's (dpcli.plan.budget.split_budget)."""
    other = "rho" if unit == "epsilon" else "epsilon"
    for i, s in enumerate(stats):
        if getattr(s, other) is not None:
            mode = (
                "a pure epsilon release" if unit == "epsilon" else "a zCDP release (privacy.rho, or epsilon with delta)"
            )
            raise RuleError(f"statistics[{i}].{other}", f"not used in {mode}: give each statistic's {unit} or a weight")
    named: list[Fraction | None] = [getattr(s, unit) for s in stats]
    if any(x is not None for x in named) and None in named:
        raise RuleError(
            f"statistics[{named.index(None)}].{unit}",
            f"either every statistic names its {unit}, or none does (use weight)",
        )
    if None not in named:
        _total([x for x in named if x is not None], unit)
        return
    if not budget_stated:
        raise RuleError(f"privacy.{unit}", f"required field is missing (or give every statistic its own {unit})")
    _total([s.weight if s.weight is not None else Fraction(1) for s in stats], "weight")


def _total(values: list[Fraction], field: str) -> None:
    """Refuse a sum once a partial sum has more than MAX_TOTAL_DIGITS digits: weights such as 1/p for distinct
    40-digit primes would give every share a denominator growing with the number of statistics (and a sum whose cost
    grows with its square)."""
    cap = 10**MAX_TOTAL_DIGITS
    total = Fraction(0)
    for i, x in enumerate(values):
        total += x
        if abs(total.numerator) >= cap or total.denominator >= cap:
            raise RuleError(
                f"statistics[{i}].{field}",
                f"the exact sum of the {field}s up to here has over {MAX_TOTAL_DIGITS} digits in its numerator or "
                f"denominator: use {field}s with fewer digits (decimals, or fractions with a common denominator)",
            )


def _privacy(priv: dict, stats: list[Statistic], columns: Mapping[str, Column]) -> Privacy:
    """The privacy section's cross-field rules.

    - ``epsilon`` alone: a pure epsilon-DP release (Laplace mechanisms only);
    - ``rho`` (optionally with ``delta``, shown in the plan): a rho-zCDP release;
    - ``epsilon`` with ``delta``: a zCDP release whose rho the planner converts (dpcli.plan.budget.split_budget); it
    needs at
      least one ``mechanism: gaussian`` statistic.
    """
    raw_unit, neighbours = priv.get("unit", "row"), priv.get("neighbours", "add_remove")
    eps, delta, rho = priv.get("epsilon"), priv.get("delta"), priv.get("rho")
    if any(isinstance(s, Frequency) for s in stats):
        return _frequency_privacy(priv, stats)
    gaussian = [i for i, s in enumerate(stats) if s.mechanism == "gaussian"]
    opened = [i for i, s in enumerate(stats) if open_dimensions(s, columns)]
    explicit_rho = bool(stats) and all(s.rho is not None for s in stats)
    if eps is not None and delta is not None and not gaussian and not opened:
        raise RuleError(
            "privacy.delta", "only used by a release with a mechanism: gaussian statistic or open keys"
        )
    if opened and delta is None:
        raise RuleError(
            "privacy.delta",
            f"required: statistics[{opened[0]}] has open keys, whose partition selection spends a delta",
        )
    # epsilon with delta is a zCDP budget when a statistic is Gaussian; with open keys alone it stays pure (the delta
    # is the partition selections')
    zcdp = rho is not None or (eps is not None and delta is not None and bool(gaussian))
    zcdp = zcdp or (eps is None and explicit_rho)
    if not zcdp and gaussian:
        raise RuleError(
            f"statistics[{gaussian[0]}].mechanism",
            "gaussian needs a zCDP budget: privacy.rho, or privacy.epsilon with privacy.delta",
        )
    if zcdp:
        _budget_rules("rho", rho is not None or eps is not None, stats)
    else:
        _budget_rules("epsilon", eps is not None, stats)
    person = _person_unit(raw_unit, stats, columns) if isinstance(raw_unit, dict) else None
    if person is None:
        for i, s in enumerate(stats):
            if counts_persons(s) or clamps_persons(s):
                field = "of" if isinstance(s, Count) else "clamp"
                raise RuleError(f"statistics[{i}].{field}", "needs a person unit (privacy.unit: {id: FIELD, ...})")
    if opened and delta is not None:
        _selection_deltas(delta, zcdp, [stats[i] for i in opened], opened)
    return Privacy(
        "person" if person is not None else "row", neighbours, eps, delta, rho, "zcdp" if zcdp else "pure", person
    )


def _frequency_privacy(priv: dict, stats: list[Statistic]) -> Privacy:
    """A release of frequency statistics reads a randomized file (published data) and spends nothing: it holds
    nothing else, and states no budget and no person unit (the randomized file's own spend covers it)."""
    other = next((i for i, s in enumerate(stats) if not isinstance(s, Frequency)), None)
    if other is not None:
        raise RuleError(f"statistics[{other}].kind", "a spec with frequency statistics reads a randomized file: "
                        "other statistics belong in a spec of their own")
    for key in ("epsilon", "delta", "rho"):
        if key in priv:
            raise RuleError(f"privacy.{key}", "frequency statistics spend nothing (their input is a randomize "
                            "output, already paid for): leave the budget out")
    if isinstance(priv.get("unit", "row"), dict):
        raise RuleError("privacy.unit", "randomize protects each row: frequency statistics take unit: row")
    return Privacy("row", priv.get("neighbours", "replace"), None)


def _person_unit(raw: dict, stats: list[Statistic], columns: Mapping[str, Column]) -> PersonUnit:
    unit = PersonUnit(
        raw["id"], raw["max_rows"], raw.get("max_groups"), raw.get("max_rows_per_group"), raw["missing_id"]
    )
    if unit.id in columns:
        raise RuleError(
            "privacy.unit.id", f"'{unit.id[:60]}' is a declared column: person ids are not public, leave it undeclared"
        )
    for i, s in enumerate(stats):
        if isinstance(s, Quantile):
            raise RuleError(
                f"statistics[{i}].kind",
                f"a {s.kind} is not available under a person unit (its utility's sensitivity is derived for one row "
                "per person): use privacy.unit: row",
            )
        if isinstance(s, Variance):  # and Std
            # the person engine (dpcli.engine.persons) sums no squares yet: refused before anything is read or spent
            raise RuleError(
                f"statistics[{i}].kind",
                f"a {s.kind} is not available under a person unit yet: use a mean, or unit: row",
            )
        if isinstance(s, Sum | Mean) and s.clamp is None:
            raise RuleError(
                f"statistics[{i}].clamp",
                "required under a person unit: row (clamp each row's value) or person (clamp each person's total)",
            )
    return unit


def _selection_deltas(delta: Fraction, zcdp: bool, opened: list[Statistic], where: list[int]) -> None:
    """The deltas partition selections spend come out of privacy.delta: named per statistic (``delta:``), or in a
    pure release split evenly. A zCDP release keeps the rest for its conversion, so there each is named and they
    leave some of privacy.delta."""
    named = [s.delta for s in opened]
    if zcdp and None in named:
        raise RuleError(
            f"statistics[{where[named.index(None)]}].delta",
            "required in a zCDP release: the delta this statistic's partition selection spends (the rest of "
            "privacy.delta goes to the zCDP conversion)",
        )
    if None in named and any(x is not None for x in named):
        raise RuleError(
            f"statistics[{where[named.index(None)]}].delta",
            "either every open-key statistic names its delta, or none does (privacy.delta is then split evenly)",
        )
    total = sum((x for x in named if x is not None), Fraction(0))
    if zcdp and total >= delta:
        raise RuleError(
            f"statistics[{where[0]}].delta",
            f"the selections' deltas add up to {format_exact(total)}, which leaves nothing of privacy.delta = "
            f"{format_exact(delta)} for the zCDP conversion",
        )
    if total > delta:
        raise RuleError(
            f"statistics[{where[0]}].delta",
            f"the selections' deltas add up to {format_exact(total)}, more than privacy.delta = {format_exact(delta)}",
        )


def parse_spec(text: str, source: str = "<string>", base_dir: Path | None = None) -> Spec:
    """Validate spec text and return the frozen Spec. Raises SpecError (exit 2) with a one-line message: the first
    error found (``spec_errors`` gives them all)."""
    spec = _parse(text, source, base_dir, ErrorCollector(None))
    if spec is None:  # without a collector the first error is raised: never reached
        raise SpecError("", "invalid spec")
    return spec


def parse_errors(text: str, base_dir: Path | None = None) -> list[SpecError]:
    """Every error of spec text (none: it is valid): field rules first, then the cross-field rules (RuleError)."""
    errors: list[SpecError] = []
    try:
        _parse(text, "<string>", base_dir, ErrorCollector(errors))
    except SpecError as exc:  # an error that leaves nothing to check further (YAML, size, a missing section)
        errors.append(exc)
    return sorted(errors, key=lambda e: isinstance(e, RuleError) and e.rule == "cross-field")


def _parse(text: str, source: str, base_dir: Path | None, out: ErrorCollector) -> Spec | None:
    raw_bytes = text.encode("utf-8", "surrogatepass")
    if len(raw_bytes) > MAX_SPEC_BYTES:
        raise SpecError("", f"the spec is larger than {MAX_SPEC_BYTES // 1024} KiB")
    doc = load_yaml(text)
    no_surrogates(doc)
    top = TOP.keys("", doc if doc is not None else {}, out.list)
    fields = {
        key: out.attempt(TOP.fields[key].load, key, top[key])
        for key in ("version", "dataset", "input", "output", "ledger", "input_format", "engine", "confidence",
                    "expected_rows")
        if key in top
    }
    csv = out.attempt(CSV.load, "csv", top["csv"], out.list) if "csv" in top else {}
    priv = out.attempt(PRIVACY.load, "privacy", top["privacy"], out.list)

    columns: dict[str, Column] = {}
    bad_columns: set[str] = set()  # declared, but refused: statistics naming them are not checked further
    raw_columns = top["columns"]
    if not isinstance(raw_columns, dict) or not raw_columns:
        out.attempt(_raise, SpecError("columns", "expected a mapping of at least one column"))
        raw_columns = {}
    for name, body in raw_columns.items():
        column = out.attempt(build_column, name, body, out)
        if column is None:
            bad_columns.add(name)
        else:
            columns[name] = column

    raw_stats = out.attempt(list_value, "statistics", top["statistics"], 1) or []
    loaded: list[tuple[str, dict] | None] = [
        out.attempt(STATISTIC.load, f"statistics[{i}]", raw, out.list) for i, raw in enumerate(raw_stats)
    ]
    stats: list[Statistic] = []
    stat_index: list[int] = []  # each one's place in the spec's list
    names: set[str] = set()
    for i, tagged in enumerate(loaded):
        # a statistic's cross-field rules need its fields and the columns it names, all loaded
        named = () if tagged is None else (tagged[1].get("column"), *tagged[1].get("by", ()))
        if tagged is None or "name" not in tagged[1] or any(n in bad_columns for n in named):
            continue  # (a name that did not load is reported already)
        st = out.attempt(_statistic, f"statistics[{i}]", *tagged, columns)
        if st is None:
            continue
        if st.name in names:
            out.attempt(_raise, RuleError(f"statistics[{i}].name", f"duplicate statistic name '{st.name}'"))
        names.add(st.name)
        stats.append(st)
        stat_index.append(i)
    header = csv.get("header", True) if csv is not None else True
    if isinstance(header, tuple):
        undeclared = [name for name in columns if name not in header]
        if undeclared:
            out.attempt(_raise, RuleError(
                "csv.header", f"declared column(s) not among the fields it names: {', '.join(undeclared)[:200]}"
            ))
    top_post = (
        out.attempt(POSTPROCESS.load, "postprocess", top["postprocess"], out.list)
        if "postprocess" in top
        else {}
    )
    own_post = [None if t is None else t[1].get("postprocess") for t in loaded]
    postprocess = out.attempt(_postprocess, top_post, stats, own_post) if len(stats) == len(raw_stats) else None
    # the table's columns of some releases only (a quantile's level, the small-cell flag): no dimension of that name
    # in a release whose table has it
    present = {
        QUANTILE_COLUMN: any(isinstance(st, Quantile) for st in stats),
        FLAG_COLUMN: any(p.small_cells is not None for p in (postprocess or {}).values()),
    }
    for i, st in zip(stat_index, stats, strict=True):
        by: tuple[str, ...] = getattr(st, "by", ())
        for name in st.dimensions:
            if present.get(name):
                where = f"by[{by.index(name)}]" if name in by else "column"
                out.attempt(_raise, SpecError(f"statistics[{i}].{where}", _reserved(name)))
    if priv is None or len(stats) != len(raw_stats) or out.count():
        return None
    privacy = _privacy(priv, stats, columns)
    if privacy.person is not None and header is not True:
        input_fields = header if isinstance(header, tuple) else tuple(columns)
        if privacy.person.id not in input_fields:
            out.attempt(_raise, RuleError(
                "privacy.unit.id", f"'{privacy.person.id[:60]}' is not among the input's fields: name it in csv.header"
            ))
            return None
    if csv and any(isinstance(s, Frequency) for s in stats):
        # a randomize output is comma-separated UTF-8 with a header line: another dialect would read every cell as
        # missing and estimate every frequency from zero counts, without a word
        out.attempt(_raise, RuleError(
            "csv", "a frequency statistic reads a `dpcli randomize` output (comma-separated UTF-8 with a header line): "
            "leave csv: out"
        ))
        return None
    base = base_dir if base_dir is not None else Path(".")

    def path_field(key: str) -> Path | None:
        p = fields.get(key)
        return None if p is None else Path("-") if p == "-" else base / p

    def input_field() -> Path | str | None:
        p = fields.get("input")
        # a URL (hdfs://, s3a://: the Spark engine's) stays as written; a Path would fold its "//"
        return p if is_url(p) else path_field("input")

    ledger = fields.get("ledger")

    return Spec(
        version=fields["version"],
        dataset=fields["dataset"],
        privacy=privacy,
        columns=MappingProxyType(columns),
        statistics=tuple(stats),
        input=input_field(),
        output=path_field("output"),
        # a PostgreSQL URL stays text (Ledger in dpcli.spec.fields refuses one with a password)
        ledger=ledger if ledger is not None and is_ledger_url(ledger) else path_field("ledger"),
        source=source,
        sha256=hashlib.sha256(raw_bytes).hexdigest(),
        quoted_line_breaks=csv.get("quoted_line_breaks") == "true",
        csv=CsvDialect(
            delimiter="\t" if csv.get("delimiter") == "tab" else csv.get("delimiter", ","),
            encoding=csv.get("encoding", "utf-8"),
            header=header is True,
            names=header if isinstance(header, tuple) else None,
            line_end=csv.get("line_end"),
            max_record_bytes=csv.get("max_record_bytes", DEFAULT_MAX_RECORD_BYTES),
        ),
        input_format=fields.get("input_format"),
        engine=fields.get("engine", "polars"),
        confidence=fields.get("confidence", Fraction(95, 100)),
        expected_rows=fields.get("expected_rows"),
        postprocess=MappingProxyType(postprocess or {}),
    )


def _raise(exc: SpecError) -> None:
    raise exc


def load_spec(path: str | Path) -> Spec:
    """Read and validate a spec file. Paths inside it are relative to the spec's directory. Every error starts with
    the file as given, then the YAML path: ``spec.yaml: statistics[2].column: 'incme' is not a declared column``."""
    p = Path(path)
    try:
        data, text = read_spec_text(path)
        spec = parse_spec(text, source=str(p), base_dir=p.parent)
    except SpecError as exc:
        raise exc.in_file(printable(str(path))) from None
    # hash the bytes as read (BOM included) so the metadata names exactly this file
    return _replace_hash(spec, hashlib.sha256(data).hexdigest())


def spec_errors(path: str | Path) -> list[SpecError]:
    """Every error of the spec file at ``path``, for ``dpcli check``: empty when ``load_spec(path)`` succeeds, else
    one SpecError per problem found, each naming the file (``str(e)`` is ``file: yaml.path: message``), the field
    rules' errors first in document order, then the cross-field rules' (``RuleError``: declared columns, bounds and
    bin order, budget sums, ...). A problem that stops reading (an unreadable file, invalid YAML, a missing section)
    is the only error. The planner's limits (dpcli.plan.model.make_plan) are not checked here."""
    p = Path(path)
    try:
        _, text = read_spec_text(path)
    except SpecError as exc:
        return [exc.in_file(printable(str(path)))]
    return [e.in_file(printable(str(path))) for e in parse_errors(text, base_dir=p.parent)]


def read_spec_text(path: str | Path) -> tuple[bytes, str]:
    if str(path) == "-":
        raise SpecError("", "a spec is read from a file, not from standard input: give its path")
    data = _read_spec_file(Path(path))
    try:
        return data, data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SpecError("", "the spec is not UTF-8 text") from None


def _read_spec_file(p: Path) -> bytes:
    """The spec file's bytes, from a regular file only. It is opened without blocking and checked before anything is
    read: opening a FIFO for reading waits for a writer (``dpcli plan fifo`` hung), and a device can stream forever."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(p, flags)
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise SpecError("", "is a directory, not a spec file") from None
        raise SpecError("", f"cannot read the spec: {exc.strerror or 'unreadable'}") from None
    try:
        info = os.fstat(fd)
        if _stat.S_ISDIR(info.st_mode):
            raise SpecError("", "is a directory, not a spec file")
        if not _stat.S_ISREG(info.st_mode):
            raise SpecError("", "is not a regular file (a FIFO, device or socket cannot be a spec)")
        if info.st_size > MAX_SPEC_BYTES:
            raise SpecError("", f"the spec is larger than {MAX_SPEC_BYTES // 1024} KiB")
        chunks, size = [], 0
        while size <= MAX_SPEC_BYTES:  # up to one byte over the limit: the file may have grown since fstat
            chunk = os.read(fd, MAX_SPEC_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        raise SpecError("", f"cannot read the spec: {exc.strerror or 'unreadable'}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError("", f"the spec is larger than {MAX_SPEC_BYTES // 1024} KiB")
    return data


def printable(text: str) -> str:
    """``text`` on one printable line: control characters and lone surrogates (undecodable bytes of a file name)
    escaped, so a file name cannot break a one-line message."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _replace_hash(spec: Spec, digest: str) -> Spec:
    return replace(spec, sha256=digest)
