"""The one declaration of spec v1's fields: every section's keys, which are required or forbidden (per column type and
per statistic kind), every field's type, range and message, and the names and limits they use (the output table's
columns, the accepted ranges). Written with the field library (``dpcli.specs.fields``); ``dpcli.specs.load`` loads a
document through it, ``dpcli.specs.schema`` prints it as JSON Schema and scripts/gen_docs.py as docs/spec-fields.md;
tests/specs/test_schema.py generates documents from that schema. The rules JSON Schema cannot express (declared columns,
bounds and bin order, budget sums, ...) are written once, in ``dpcli.specs.rules``, and raise ``RuleError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from dpcli.errors import SpecError
from dpcli.specs.fields import (
    NAME_PATTERN,
    Bounds,
    Choice,
    Columns,
    Key,
    Keys,
    Ledger,
    Levels,
    Loaded,
    Name,
    Number,
    PathText,
    RuleError,
    Schema,
    Section,
    Union,
    Variant,
    Whole,
    list_value,
    text_value,
)
from dpcli.specs.kinds import INTERNAL_KINDS, KINDS

SPEC_VERSION = "1"

# Accepted ranges (documented in docs/spec.md).
MAX_RELEASE_EPSILON = Fraction(100)
MIN_EPSILON = Fraction(1, 10**6)  # below this no answer is useful and scales get absurd
MIN_RHO, MAX_RHO = Fraction(1, 10**12), Fraction(100)
MAX_DELTA = Fraction(1, 100)  # a delta larger than this is not a meaningful guarantee
MAX_CELLS = 10_000_000  # per statistic (a million-cell grid is fine; ten billion would exhaust memory)
MAX_CANDIDATES = 1_000_000  # a quantile's candidate grid (docs/spec.md, "Quantiles and the median")

COLUMN_TYPES = ("int", "float", "category", "bool")
STATISTIC_KINDS = tuple(k for k in KINDS if k not in INTERNAL_KINDS)  # each kind's traits: dpcli/specs/kinds.py
MAX_TOP_K = 1000  # top_k: the most keys one statistic ranks (k draws of the exponential mechanism)
NEIGHBOURS = ("add_remove", "replace")
MISSING_ID = ("drop", "person")  # a row whose id is missing: left out, or a person of its own
COUNT_OF = ("rows", "persons")
CLAMPS = ("row", "person")  # a sum/mean under a person unit clamps each row, or each person's total in a cell
MAX_CONTRIBUTIONS = 1_000_000  # K, G and R of a person unit
DEFAULT_KEY_LENGTH, MAX_KEY_LENGTH = 64, 1024  # open keys: released keys are cut to this many characters
MECHANISMS = ("laplace", "gaussian")
BOOL_KEYS = ("false", "true")
# How the input is stored and what its text looks like (docs/spec.md, "Input formats" and "CSV dialects")
INPUT_FORMATS = ("csv", "csv.gz", "csv.zst", "parquet", "arrow")
ENGINES = ("polars", "spark")
DELIMITERS = (",", ";", "\t", "|", "tab")  # "tab" is "\t" spelled out
# Encodings a CSV may be declared in. Each is decoded to UTF-8 before the line rules apply (bytes that are not valid
# in it become U+FFFD, so a missing cell); the list is short on purpose: each one is tested.
ENCODINGS = ("utf-8", "latin-1", "iso-8859-15", "cp1252", "cp1250", "ascii", "utf-16", "utf-16-le", "utf-16-be")
LINE_ENDS = ("lf", "cr")
MIN_RECORD_BYTES, MAX_RECORD_BYTES = 1 << 10, 1 << 30  # csv.max_record_bytes: 1 KiB to 1 GiB
# The output table's columns besides the dimensions (dpcli/publish/table.py lays the table out from these names): a
# dimension with one of these names would duplicate a header (and make the JSON output ambiguous), so such a column
# cannot be grouped by or histogrammed. kind, column, bin_low, bin_high: contract 0.3's (what a row is, a bin's
# edges); quantile: a quantile's level; rho: the zCDP table's; flag: the small-cell policy's last column.
STATISTIC_COLUMN = "statistic"
DESCRIBING_COLUMNS = ("kind", "column")
BIN_COLUMNS = ("bin_low", "bin_high")
QUANTILE_COLUMN = "quantile"
PERIOD_COLUMN = "period"  # a series' table: the period each row is of (1..T)
SPAN_COLUMN = "span"  # ... and what a row's value spans: the period's own value, or the running total to date
FIXED_COLUMNS_AFTER = ("value", "ci_low", "ci_high", "epsilon")
RHO_COLUMN = "rho"
FLAG_COLUMN = "flag"
OUTPUT_COLUMNS = (
    STATISTIC_COLUMN, *FIXED_COLUMNS_AFTER, RHO_COLUMN, *DESCRIBING_COLUMNS, *BIN_COLUMNS, QUANTILE_COLUMN, FLAG_COLUMN,
    PERIOD_COLUMN, SPAN_COLUMN,
)
# The two the table has only in some releases, with the releases that have them: a dimension of that name is
# refused there only (a data column called flag is common, and a table without a small-cell policy has no flag
# column). Every other one is refused in every release (rho too: a spec does not become invalid when its budget
# changes form).
SOMETIMES_COLUMNS = {
    QUANTILE_COLUMN: "a release with a quantile (the level)",
    PERIOD_COLUMN: "a series (the period)",
    SPAN_COLUMN: "a series (a value's span: period or to_date)",
    FLAG_COLUMN: "a release with a small-cell policy (postprocess: small_cells)",
}
ALWAYS_COLUMNS = tuple(c for c in OUTPUT_COLUMNS if c not in SOMETIMES_COLUMNS)


@dataclass(eq=False, repr=False)
class Version:
    def load(self, path: str, raw: Any) -> str:
        version = text_value(path, raw)
        if version != SPEC_VERSION:
            raise SpecError(path, f"unsupported spec version '{version[:20]}' (this dpcli reads version 1)")
        return version

    def schema(self) -> Schema:
        return {"anyOf": [{"const": 1}, {"const": "1"}]}


@dataclass(eq=False, repr=False)
class GridSpec:
    start: Fraction
    stop: Fraction
    step: Fraction


@dataclass(eq=False, repr=False)
class BinsField:
    """A histogram's bins: a list of edges, or an even grid ``{start, stop, step}``."""

    def load(self, path: str, raw: Any) -> tuple[Fraction, ...] | GridSpec:
        if isinstance(raw, list):
            items = list_value(path, raw, min_len=2)
            return tuple(Number().load(f"{path}[{i}]", v) for i, v in enumerate(items))
        body = GRID.load(path, raw)
        return GridSpec(body["start"], body["stop"], body["step"])

    def schema(self) -> Schema:
        return {
            "oneOf": [
                {
                    "type": "array", "minItems": 2, "items": Number().schema(),
                    "description": "increasing edges; bin i is [e_i, e_i+1)",
                },
                {**GRID.schema(), "description": f"an even grid of at most {MAX_CELLS} bins"},
            ]
        }


def _article(tag: str) -> str:
    return "an" if tag == "int" else "a"


@dataclass(eq=False, repr=False)
class ColumnMap:
    """``columns:``, a mapping of COLUMN by name (loaded by dpcli.specs.model, which builds the typed columns)."""

    def schema(self) -> Schema:
        return {
            "type": "object", "minProperties": 1, "propertyNames": {"pattern": f"^{NAME_PATTERN}$"},
            "additionalProperties": {"$ref": "#/$defs/column"},
        }


@dataclass(eq=False, repr=False)
class StatisticList:
    """``statistics:``, a list of STATISTIC (loaded by dpcli.specs.model)."""

    def schema(self) -> Schema:
        return {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/statistic"}}


NUMBER_KEYS_MESSAGE = (
    "required: numeric columns need a-priori bounds [low, high] written by a person (never from the data)"
)

COLUMN = Union(
    Section(
        {
            "type": Choice(COLUMN_TYPES, "'{value}' is not a column type (one of: {choices})"),
            "bounds": Bounds(whole=False),
            "precision": Number(positive=True),
            "categories": Keys(),
            "impute": Number(bound=True),
            "other": Key("a declared key that undeclared non-empty values count under (else they are dropped)"),
            "max_length": Whole(1, MAX_KEY_LENGTH, f"open keys: released keys are cut to this many characters "
                                                   f"(default {DEFAULT_KEY_LENGTH})"),
        },
        required=("type",),
    ),
    "type",
    (
        Variant("int", ("type", "bounds", "impute"), {"bounds": NUMBER_KEYS_MESSAGE},
                overrides={"bounds": Bounds(whole=True), "impute": Number(bound=True, whole=True)}),
        Variant("float", ("type", "bounds", "precision", "impute"), {"bounds": NUMBER_KEYS_MESSAGE}),
        Variant("category", ("type", "categories", "impute", "other", "max_length"),
                {"categories": "required: list the category keys (public, written by a person)"},
                overrides={"impute": Key()}),
        Variant("bool", ("type", "impute"),
                overrides={"impute": Choice(BOOL_KEYS, "'{value}' is not one of the declared keys", boolean=True)}),
    ),
    lambda tag: f"not allowed for {_article(tag)} {tag} column",
)

GRID = Section(
    {"start": Number(), "stop": Number(), "step": Number(positive=True)}, required=("start", "stop", "step")
)

_BUDGET_FIELDS = ("weight", "epsilon", "rho", "mechanism", "delta")
_QUANTILE_FORBIDDEN = {
    "mechanism": "a quantile is chosen by the exponential mechanism: there is no noise mechanism to choose",
    "bins": "a quantile's candidates are its column's grid: use step",
}
# top_k / mode: the exponential mechanism (no mechanism: choice); delta only with open keys
_TOP_K_FIELDS = ("weight", "epsilon", "rho", "delta")
_TOP_K_FORBIDDEN = {
    "mechanism": "a top_k or mode uses the exponential mechanism (report-noisy-max): no mechanism to choose",
}
_KEY_COLUMN = {"column": Name("column name", reserved=ALWAYS_COLUMNS, description="a declared category or bool column",
                              reference=True)}
# `kind: frequency`: estimated from a `dpcli randomize` output, whose per-column epsilon this states (it spends none)
RANDOMIZED = Section(
    {"epsilon": Number(MIN_EPSILON, MAX_RELEASE_EPSILON, range_name="epsilon")},
    required=("epsilon",),
    description="the input is a `dpcli randomize` output: the epsilon its column was randomized at",
)
# a quantile's value-unit intervals: the share of its budget that pays for them (docs/spec.md, "Quantiles and the
# median"); at most 0.99 so the levels keep a share (a closed bound keeps the schema and the loader alike)
INTERVAL = Section(
    {"share": Number(Fraction(0), Fraction(99, 100), low_open=True, range_name="interval share")},
    required=("share",),
    description="95% intervals in value units around each level, paid by this share of the statistic's budget",
)
# planning (dpcli.plan.what_if): the largest useful confidence and row count; a target is an error in the statistic's
# units
MAX_CONFIDENCE = Fraction(999999, 1000000)
MAX_EXPECTED_ROWS = 10**15
TARGET = Section(
    {"error95": Number(positive=True)},
    required=("error95",),
    description="the largest acceptable error in the statistic's units at 95% confidence (whatever the spec's "
                "confidence): dpcli plan finds the smallest epsilon meeting every target",
)
# `postprocess:` (top level: the default of every statistic; a statistic's own: key by key over it). Post-processing
# of noisy values only: it spends nothing (docs/spec.md, "Post-processing")
SMALL_CELL_ACTIONS = ("flag", "suppress")
POSTPROCESS_KINDS = tuple(name for name, kind in KINDS.items() if kind.postprocess)  # a value and an interval
SMALL_CELLS = Section(
    {
        "max_relative_width": Number(positive=True),
        "action": Choice(SMALL_CELL_ACTIONS, "'{value}' is not one of: {choices}"),
    },
    required=("max_relative_width", "action"),
    description="a cell whose interval is wider than max_relative_width x |value| is flagged, or suppressed (value "
                "and interval left empty; the row stays)",
)
POSTPROCESS = Section(
    {
        "digits": Whole(0, 18, "sums, means, variances: decimal places the value and interval are rounded to"),
        "nonnegative": Choice(BOOL_KEYS, "'{value}' is not a boolean (true or false)", boolean=True,
                              description="counts, sums, variances: negative values and interval ends become 0"),
        "consistent": Choice(BOOL_KEYS, "'{value}' is not a boolean (true or false)", boolean=True,
                             description="counts sharing a breakdown are made to add up (least squares weighted by "
                                         "each value's noise variance, then rounding keeping the grand total)"),
        "small_cells": SMALL_CELLS,
    },
    description="post-processing of the noisy values (spends nothing)",
)
STATISTIC = Union(
    Section(
        {
            "name": Name("statistic name"),
            "kind": Choice(STATISTIC_KINDS, "'{value}' is not a statistic kind (one of: {choices})"),
            "column": Name("column name", description="a declared column", reference=True),
            "by": Columns("declared category or bool columns", reserved=ALWAYS_COLUMNS),
            "bins": BinsField(),
            "weight": Number(positive=True),
            "epsilon": Number(MIN_EPSILON, MAX_RELEASE_EPSILON, range_name="epsilon"),
            "rho": Number(MIN_RHO, MAX_RHO, range_name="rho"),
            "mechanism": Choice(MECHANISMS, "'{value}' is not available (one of: {choices})"),
            "of": Choice(COUNT_OF, "'{value}' is not one of: {choices}",
                         description="rows (default) or persons: distinct persons (a person unit only)"),
            "clamp": Choice(CLAMPS, "'{value}' is not one of: {choices}",
                            description="row: clamp each row's value; person: clamp each person's total in a cell "
                                        "(required under a person unit)"),
            "delta": Number(Fraction(0), MAX_DELTA, low_open=True, range_name="delta"),
            "q": Levels(),
            "step": Number(positive=True),
            "k": Whole(1, MAX_TOP_K, "top_k: how many keys to rank (the k largest counts, by report-noisy-max)"),
            "randomized": RANDOMIZED,
            "interval": INTERVAL,
            "target": TARGET,
            "expected_rows": Whole(1, MAX_EXPECTED_ROWS, "rows with a value in one cell, for the plan's mean error"),
            "postprocess": POSTPROCESS,
        },
        required=("name", "kind"),
        exclusive=(
            ("weight", ("rho", "epsilon"), "give either weight or {other}, not both"),
            ("epsilon", ("rho",), "give either epsilon or rho, not both"),
        ),
    ),
    "kind",
    (
        Variant("count", ("name", "kind", "by", "of", *_BUDGET_FIELDS, "target"),
                forbidden={"column": "a count counts rows: use by: to split it",
                           "bins": "not allowed for a count (use a histogram)"}),
        # whether a histogram needs bins depends on its column's type: a cross-field rule
        Variant(
            "histogram", ("name", "kind", "column", "by", "bins", *_BUDGET_FIELDS, "target"),
            {"column": "required for a {tag}"},
            overrides={
                "column": Name("column name", reserved=ALWAYS_COLUMNS, description="a declared column", reference=True),
            },
        ),
        Variant("sum", ("name", "kind", "column", "by", "clamp", *_BUDGET_FIELDS, "target"),
                {"column": "required for a {tag}"}),
        Variant("mean", ("name", "kind", "column", "by", "clamp", *_BUDGET_FIELDS, "target", "expected_rows"),
                {"column": "required for a {tag}"}),
        # the exponential mechanism over a candidate grid: no noise mechanism to choose, no open keys (no delta)
        Variant("quantile", ("name", "kind", "column", "by", "q", "step", "interval", "weight", "epsilon", "rho"),
                {"column": "required for a {tag}", "q": "required for a {tag}: the levels, e.g. [0.25, 0.5, 0.9]"},
                forbidden=_QUANTILE_FORBIDDEN),
        Variant("median", ("name", "kind", "column", "by", "step", "interval", "weight", "epsilon", "rho"),
                {"column": "required for a {tag}"},
                forbidden={**_QUANTILE_FORBIDDEN, "q": "a median is the quantile q = 0.5 (use kind: quantile)"}),
        # top_k / mode: report-noisy-max over a category or bool column's keys (docs/spec.md, "Top-k and mode")
        Variant("top_k", ("name", "kind", "column", "by", "k", *_TOP_K_FIELDS), {"column": "required for a {tag}",
                "k": "required for a top_k: how many keys to rank"}, forbidden=_TOP_K_FORBIDDEN, overrides=_KEY_COLUMN),
        Variant("mode", ("name", "kind", "column", "by", *_TOP_K_FIELDS), {"column": "required for a {tag}"},
                forbidden={**_TOP_K_FORBIDDEN, "k": "a mode is a top_k with k: 1 (use kind: top_k for more)"},
                overrides=_KEY_COLUMN),
        # variance/std: a noisy count, centred sum and sum of squares (dpcli.postprocess.variance); no clamp: under a
        # person unit
        # they are refused by a cross-field rule (dpcli.specs.model), so clamp is not one of their fields
        Variant("variance", ("name", "kind", "column", "by", *_BUDGET_FIELDS), {"column": "required for a {tag}"}),
        Variant("std", ("name", "kind", "column", "by", *_BUDGET_FIELDS), {"column": "required for a {tag}"}),
        # estimated from a randomized file (dpcli randomize): no budget of its own, no by:
        Variant(
            "frequency", ("name", "kind", "column", "randomized"),
            {"column": "required for a {tag}",
             "randomized": "required for a {tag}: {{epsilon: E}}, the ε its column was randomized at"},
            overrides={
                "column": Name("column name", reserved=ALWAYS_COLUMNS, description="a declared column", reference=True),
            },
        ),
    ),
    lambda tag: f"not allowed for a {tag}",
)
# `postprocess:` is allowed on the kinds with a value and an interval. Added here, after the variants, rather than in
# each variant's list, so the declaration above stays as it was.
for _variant in STATISTIC.variants:
    if _variant.tag in POSTPROCESS_KINDS:
        _variant.allowed = (*_variant.allowed, "postprocess")

PERSON_UNIT = Section(
    {
        "id": PathText("the input field holding each row's person id (not a declared column: ids are not public)"),
        "max_rows": Whole(1, MAX_CONTRIBUTIONS, "K: rows kept per person"),
        "max_groups": Whole(1, MAX_CONTRIBUTIONS, "G: cells of one statistic a person's rows may reach"),
        "max_rows_per_group": Whole(1, MAX_CONTRIBUTIONS, "R: rows of one person in one cell"),
        "missing_id": Choice(MISSING_ID, "'{value}' is not one of: {choices}",
                             description="a row with a missing id: drop it, or count it as a person of its own"),
    },
    required=("id", "max_rows", "missing_id"),
    description="one person may own many rows: contributions are bounded per person (docs/spec.md, Person-level)",
)


@dataclass(eq=False, repr=False)
class UnitField:
    """``privacy.unit``: ``row`` (one person = one row) or a person unit (PERSON_UNIT)."""

    def load(self, path: str, raw: Any) -> str | Loaded:
        if isinstance(raw, dict):
            return PERSON_UNIT.load(path, raw)
        value = text_value(path, raw)
        if value != "row":
            raise SpecError(
                path, f"'{value[:40]}' is not a unit: row, or a person unit {{id: FIELD, max_rows: K, missing_id: "
                "drop or person}"
            )
        return value

    def schema(self) -> Schema:
        return {"anyOf": [{"const": "row"}, PERSON_UNIT.schema()]}


# `series:` (issue 26): a public horizon of T periods released under one charge (docs/spec.md, "Series")
MAX_PERIODS = 100_000
SERIES_DESIGNS = ("per_period", "running_totals", "both")
SERIES_METHODS = ("tree", "factorization")
# method factorization: its estimates weigh every product drawn so far (O(T^2) weights), and the run of period t
# aggregates each of periods 1..t: a horizon beyond this is refused (the tree serves any T)
MAX_FACTORIZATION_PERIODS = 10_000
EVERY_UNITS = {"minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400}
_EVERY = re.compile(r"\s*([1-9][0-9]{0,5})\s+(minute|hour|day|week)s?\s*")
_START = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2}))?(Z|[+-]\d{2}:\d{2})?)?"
)
START_PATTERN = r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2})?(Z|[+-]\d{2}:\d{2})?)?$"


@dataclass(eq=False, repr=False)
class Start:
    """``series.period.start``: an ISO 8601 date (midnight UTC) or date-time with ``Z`` or ``±HH:MM`` (naive: UTC),
    loaded as its instant in UTC (``YYYY-MM-DDTHH:MM:SS+00:00``). Public: the periods' boundaries."""

    description = "period 1 starts at this instant (a date: midnight UTC; a date-time without an offset: UTC)"

    def load(self, path: str, raw: Any) -> str:
        text = text_value(path, raw).strip()
        m = _START.fullmatch(text)
        if m is None:
            raise SpecError(path, f"'{text[:40]}' is not a date (2027-01-01) or a date-time (2027-01-01T06:00+01:00)")
        zone = m.group(7)
        iso = text.replace(" ", "T", 1)
        if m.group(4) is not None and m.group(6) is None:
            iso = iso[:16] + ":00" + iso[16:]
        if zone == "Z":
            iso = iso[:-1] + "+00:00"
        try:
            moment = datetime.fromisoformat(iso)
        except ValueError:
            raise SpecError(path, f"'{text[:40]}' is not a valid date") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC).isoformat()

    def schema(self) -> Schema:
        return {"type": "string", "pattern": START_PATTERN, "description": self.description}


@dataclass(eq=False, repr=False)
class Every:
    """``series.period.every``: a period's fixed length, ``N minute(s)|hour(s)|day(s)|week(s)``, as seconds."""

    description = "each period's fixed length of absolute time (a local DST change neither skips nor repeats one)"

    def load(self, path: str, raw: Any) -> int:
        text = text_value(path, raw)
        m = _EVERY.fullmatch(text)
        if m is None:
            raise SpecError(path, f"'{text[:40]}' is not a period length: N minute(s), hour(s), day(s) or week(s)")
        return int(m.group(1)) * EVERY_UNITS[m.group(2)]

    def schema(self) -> Schema:
        return {"type": "string", "pattern": r"^\s*[1-9][0-9]{0,5}\s+(minute|hour|day|week)s?\s*$",
                "description": self.description}


PERIOD = Section(
    {
        "column": PathText("the input field that puts each row in its period (not a declared column: its values are "
                           "data, the periods' boundaries are public): a date/time, or with neither start nor every "
                           "the period's index 1..T"),
        "start": Start(),
        "every": Every(),
    },
    required=("column",),
    description="what puts a row in its period: its own field",
)
SERIES = Section(
    {
        "periods": Whole(1, MAX_PERIODS, "T: the public horizon, periods 1..T released under one charge"),
        "period": PERIOD,
        "design": Choice(SERIES_DESIGNS, "'{value}' is not a series design (one of: {choices})",
                         description="per_period (default): each period from its own rows at the whole budget; "
                                     "running_totals: noisy sums over dyadic blocks of periods; both: the budget "
                                     "split by running_share"),
        # design both: the running totals' share of the series' budget (the rest is the periods' own values')
        "running_share": Number(Fraction(0), Fraction(99, 100), low_open=True, range_name="running share"),
        "monotone": Choice(BOOL_KEYS, "'{value}' is not a boolean (true or false)", boolean=True,
                           description="running totals of counts projected non-decreasing (post-processing)"),
        "method": Choice(SERIES_METHODS, "'{value}' is not a running-totals method (one of: {choices})",
                         description="the running totals' mechanism: tree (default: dyadic blocks, Honaker's "
                                     "estimates) or factorization (Gaussian zCDP, add_remove: the square-root "
                                     "factorisation on an integer lattice)"),
    },
    required=("periods", "period"),
    description="a series: T periods released under one charge (docs/spec.md, Series)",
)


# `synth:` (issue 27): a synthetic CSV of the declared columns from noisy marginals (docs/spec.md, "Synthetic data")
SYNTH_METHODS = ("mst", "aim")  # aim: declared so its refusal can say why ("not built"), never run
SYNTH_VALUES = ("uniform", "low", "mid")  # a numeric column's output value within its bin
SYNTH_MISSING = ("drop", "keep")  # a missing cell: its row left out of that column's marginals, or a code of its own
MIN_SYNTH_COLUMNS, MAX_SYNTH_COLUMNS = 2, 64
MAX_SYNTH_ROWS = 10**9
DEFAULT_SYNTH_MAX_CELLS = 1_000_000  # one marginal's cells (a public limit; at most MAX_CELLS)
NOISY_ROWS = "noisy"  # synth.rows: the noisy total (post-processing), never the true n

SYNTH_COLUMN = Section(
    {
        "bins": BinsField(),
        "values": Choice(SYNTH_VALUES, "'{value}' is not one of: {choices}",
                         description="numeric columns: an output value is a grid point drawn uniformly in its bin "
                                     "(uniform, default), the bin's least (low) or the one nearest its middle (mid)"),
        "missing": Choice(SYNTH_MISSING, "'{value}' is not one of: {choices}",
                          description="drop (default): a row missing this column is left out of its marginals; keep: "
                                      "missing is a code of its own, written as an empty cell"),
    },
    description="how one declared column is coded: category/bool by its declared keys, numeric by its bins",
)


@dataclass(eq=False, repr=False)
class SynthColumnMap:
    """``synth.columns``: the declared columns to synthesise, in output order, each with its coding (SYNTH_COLUMN)."""

    def load(self, path: str, raw: Any) -> dict[str, Loaded]:
        if not isinstance(raw, dict):
            raise SpecError(path, "expected a mapping of declared columns (name: {bins, values, missing})")
        if not MIN_SYNTH_COLUMNS <= len(raw) <= MAX_SYNTH_COLUMNS:
            raise SpecError(path, f"synthesises {MIN_SYNTH_COLUMNS} to {MAX_SYNTH_COLUMNS} columns (the marginals "
                            f"are pairs of them), got {len(raw)}")
        return {str(name): SYNTH_COLUMN.load(f"{path}.{name}", {} if body in (None, "") else body)
                for name, body in raw.items()}

    def schema(self) -> Schema:
        return {
            "type": "object", "minProperties": MIN_SYNTH_COLUMNS, "maxProperties": MAX_SYNTH_COLUMNS,
            "propertyNames": {"pattern": f"^{NAME_PATTERN}$"}, "additionalProperties": SYNTH_COLUMN.schema(),
            "description": "declared columns to synthesise, in output order; numeric ones need bins covering their "
                           "bounds",
        }


@dataclass(eq=False, repr=False)
class SynthRows:
    """``synth.rows``: ``noisy`` (the noisy total, post-processing of a released count) or a declared integer."""

    def load(self, path: str, raw: Any) -> int | None:
        if text_value(path, raw) == NOISY_ROWS:
            return None
        return Whole(1, MAX_SYNTH_ROWS).load(path, raw)

    def schema(self) -> Schema:
        return {"anyOf": [{"const": NOISY_ROWS}, Whole(1, MAX_SYNTH_ROWS).schema()],
                "description": "the output's rows: noisy (default: the noisy total) or a declared number"}


_SHARE = Number(Fraction(0), Fraction(1), low_open=True, range_name="a share")
SYNTH_SHARES = Section(
    {"one_way": _SHARE, "select": _SHARE, "measure": _SHARE},
    required=("one_way", "select", "measure"),
    description="the budget's split between the one-way marginals, the tree's selection and the pairs' measurement "
                "(each > 0, summing to 1; default a third each)",
)
SYNTH = Section(
    {
        "method": Choice(SYNTH_METHODS, "'{value}' is not a synthesis method (one of: {choices})",
                         description="mst: McKenna et al. 2021 (aim: not built in this version)"),
        "rows": SynthRows(),
        "shares": SYNTH_SHARES,
        "max_cells": Whole(1, MAX_CELLS, f"the most cells one marginal may have (default {DEFAULT_SYNTH_MAX_CELLS})"),
        "columns": SynthColumnMap(),
    },
    required=("method", "columns"),
    description="publish a synthetic CSV of these columns from noisy marginals (docs/spec.md, Synthetic data)",
)


PRIVACY = Section(
    {
        "unit": UnitField(),
        "neighbours": Choice(NEIGHBOURS, "'{value}' is not one of: {choices}"),
        "epsilon": Number(MIN_EPSILON, MAX_RELEASE_EPSILON, range_name="epsilon"),
        "delta": Number(Fraction(0), MAX_DELTA, low_open=True, range_name="delta"),
        "rho": Number(MIN_RHO, MAX_RHO, range_name="rho"),
    },
    exclusive=(("rho", ("epsilon",), "give either rho, or epsilon (with delta), not both"),),
)

@dataclass(eq=False, repr=False)
class HeaderField:
    """``csv.header``: true (the first line names the fields), false (no header line: the fields are the declared
    columns in declaration order) or the list of the fields' names (no header line; a file with undeclared fields)."""

    def load(self, path: str, raw: Any) -> bool | tuple[str, ...]:
        if isinstance(raw, list):
            names: dict[str, None] = {}
            for i, v in enumerate(list_value(path, raw, min_len=1)):
                name = text_value(f"{path}[{i}]", v)
                if not name:
                    raise SpecError(f"{path}[{i}]", "empty field name")
                if name in names:
                    raise RuleError(f"{path}[{i}]", f"duplicate field name '{name[:60]}'")
                names[name] = None
            return tuple(names)
        value = text_value(path, raw)
        if value not in BOOL_KEYS:
            raise SpecError(path, f"'{value[:40]}' is not true, false or a list of field names")
        return value == "true"

    def schema(self) -> Schema:
        return {
            "anyOf": [
                {"enum": [True, False, "true", "false"]},
                {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"type": "string", "minLength": 1}},
            ],
            "description": (
                "true (default): the first line names the fields; false: no header line, the fields are the "
                "declared columns in order; a list: no header line, these are the fields' names"
            ),
        }


CSV = Section(
    {
        "delimiter": Choice(
            DELIMITERS, "'{value}' is not an accepted delimiter (one of: , ; | tab)",
            description="the field separator: , ; | or a tab (\"\\t\" or tab); default: a tab for an input named "
                        "*.tsv or *.tab, else ,",
        ),
        "encoding": Choice(
            ENCODINGS, "'{value}' is not an accepted encoding (one of: {choices})",
            description="the text encoding of the file (default utf-8)",
        ),
        "header": HeaderField(),
        "line_end": Choice(
            LINE_ENDS, "'{value}' is not one of: {choices}",
            description=(
                "lf (default) or cr: the line end of a file without a header line (with a header, the header "
                "decides; a declared line_end must then agree)"
            ),
        ),
        "max_record_bytes": Whole(
            MIN_RECORD_BYTES, MAX_RECORD_BYTES,
            "the longest record read as what it holds (default 1048576): a longer one is an empty record, all its "
            "cells missing, never held whole; in a Parquet/Arrow input, a longer string is missing",
        ),
        "quoted_line_breaks": Choice(
            BOOL_KEYS, "'{value}' is not a boolean (true or false)", boolean=True,
            description=(
                "true: the file comes from a correct RFC 4180 writer and quoted fields may hold line breaks; the "
                "guarantee then assumes that writer. Default false: one line is one record"
            ),
        ),
    },
    description="how the input's records and fields are delimited and encoded",
)

TOP = Section(
    {
        "version": Version(),
        "dataset": Name("dataset name", dataset=True, description="the ledger key whose budget this release spends"),
        "name": Name(
            "spec name",
            description="names this spec among several on one dataset sharing a release id: a release id is paid "
            "once per dataset and name",
        ),
        "input": PathText("CSV path relative to this file, or -; a series' may name one file per period: "
                          "data/{date}.csv, data/{period}.csv"),
        "output": PathText("output path relative to this file, or -"),
        "ledger": Ledger("ledger path relative to this file"),
        "input_format": Choice(
            INPUT_FORMATS, "'{value}' is not an input format (one of: {choices})",
            description="how the input is stored (default: from its extension; csv for standard input)",
        ),
        "engine": Choice(
            ENGINES, "'{value}' is not an engine (one of: {choices})",
            description="what computes the exact aggregates: polars (default, this machine) or spark (a cluster)",
        ),
        "csv": CSV,
        "privacy": PRIVACY,
        "columns": ColumnMap(),
        "statistics": StatisticList(),
        "confidence": Number(Fraction(1, 2), MAX_CONFIDENCE, range_name="confidence"),
        "expected_rows": Whole(1, MAX_EXPECTED_ROWS, "rows with a value per cell, for the plan's mean errors"),
        "postprocess": POSTPROCESS,
        "series": SERIES,
        "synth": SYNTH,
    },
    # statistics: or synth: (dpcli.specs.rules.build_spec requires one of them; the schema says so too)
    required=("version", "dataset", "privacy", "columns"),
)
# One of these sections says what a release publishes (a spec names exactly one)
PUBLISHES = ("statistics", "synth")
