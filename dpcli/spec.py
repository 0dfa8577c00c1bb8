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
import os
import re
import stat as _stat
from dataclasses import dataclass, field
from decimal import Decimal
from types import MappingProxyType
from fractions import Fraction
from pathlib import Path
from typing import Any, Mapping

import yaml

from dpcli.accounting import decimal_places, format_exact, parse_exact
from dpcli.errors import SpecError

# A spec file holds at most this many bytes: a 10^7-bin grid is one line, and 1 MiB holds ~100,000 category keys
# (ICD-10-CM, among the longest public code lists, has ~74,000 codes of up to 8 characters).
MAX_SPEC_BYTES = 1 << 20
SPEC_VERSION = "1"

# Every number a spec holds is small and exact, so planning, printing and the ledger stay fast (a 4,200-digit
# epsilon took seconds to plan and print) and no nonzero value underflows a double downstream (bounds [0, 1e-390]):
# either a decimal of at most MAX_NUMBER_DIGITS significant digits with MIN_NUMBER <= |x| < MAX_NUMBER (or 0), or a
# fraction p/q with p and q (in lowest terms) of at most MAX_NUMBER_DIGITS digits each. Its text is at most
# MAX_NUMBER_TEXT characters (checked before parsing). Sums of weights and of named shares stay within
# MAX_TOTAL_DIGITS digits in numerator and denominator: any sum of such decimals fits, while fractions with 40-digit
# denominators that share no factor would otherwise grow with every statistic (and the sum's cost with its square).
MAX_NUMBER_DIGITS = 40
MIN_NUMBER, MAX_NUMBER = Fraction(1, 10**MAX_NUMBER_DIGITS), Fraction(10**MAX_NUMBER_DIGITS)
MAX_NUMBER_TEXT = 200
MAX_TOTAL_DIGITS = 150

# Accepted ranges (documented in docs/spec.md).
MAX_RELEASE_EPSILON = Fraction(100)
MIN_EPSILON = Fraction(1, 10**6)  # below this no answer is useful and scales get absurd
MIN_RHO, MAX_RHO = Fraction(1, 10**12), Fraction(100)
MAX_DELTA = Fraction(1, 100)  # a delta larger than this is not a meaningful guarantee
MAX_ABS_BOUND = Fraction(10**15)
# A cell's fixed-point value must fit in 2^53 so that the float -> grid conversion is exact and sums stay far from
# int64 limits per row (sums themselves run in 128-bit integers).
MAX_GRID_UNITS = 2**53
MAX_CELLS = 10_000_000  # per statistic (a million-cell grid is fine; ten billion would exhaust memory)

COLUMN_TYPES = ("int", "float", "category", "bool")
STATISTIC_KINDS = ("count", "histogram", "sum", "mean")
NEIGHBOURS = ("add_remove", "replace")
MECHANISMS = ("laplace", "gaussian")
BOOL_KEYS = ("false", "true")
# Columns of the output table besides the dimensions: a dimension with one of these names would duplicate a header
# (and make the JSON output ambiguous), so such a column cannot be grouped by or histogrammed.
OUTPUT_COLUMNS = ("statistic", "value", "ci_low", "ci_high", "epsilon", "rho")  # rho: the zCDP table's last column

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}")
_DATASET = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")


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

    @property
    def numeric(self) -> bool:
        return self.type in ("int", "float")

    @property
    def keys(self) -> tuple[str, ...]:
        """Declared keys of a category or bool column."""
        assert self.categories is not None
        return self.categories

    @property
    def grid_bounds(self) -> tuple[int, int]:
        """Bounds in grid units: the largest grid interval inside the declared bounds (so clamping is exact)."""
        assert self.bounds is not None and self.precision is not None
        lo, hi = self.bounds
        return _ceil(lo / self.precision), _floor(hi / self.precision)


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
class Statistic:
    name: str
    kind: str  # count | histogram | sum | mean
    column: str | None
    by: tuple[str, ...]
    bins: Bins | None
    weight: Fraction | None
    epsilon: Fraction | None  # explicit share of a pure release, when the spec names one
    mechanism: str = "laplace"
    rho: Fraction | None = None  # explicit share of a zCDP release, when the spec names one

    @property
    def dimensions(self) -> tuple[str, ...]:
        """Output dimension columns of this statistic: its by-columns, then the histogram column."""
        return self.by + ((self.column,) if self.kind == "histogram" and self.column else ())


@dataclass(frozen=True)
class Privacy:
    """The release's budget. ``accounting`` is "pure" (an epsilon, Laplace only) or "zcdp" (a rho, stated directly
    or converted from epsilon and delta; Laplace and Gaussian mechanisms)."""

    unit: str
    neighbours: str
    epsilon: Fraction | None  # pure: the release's epsilon; zcdp: the (epsilon, delta) target, if stated
    delta: Fraction | None = None
    rho: Fraction | None = None  # zcdp: the release's rho

    @property
    def accounting(self) -> str:
        return "zcdp" if self.rho is not None else "pure"

    @property
    def budget(self) -> Fraction:
        """What the statistics' shares add up to at most: epsilon (pure) or rho (zcdp)."""
        value = self.rho if self.rho is not None else self.epsilon
        assert value is not None
        return value


@dataclass(frozen=True)
class Spec:
    version: str
    dataset: str
    privacy: Privacy
    columns: Mapping[str, Column]
    statistics: tuple[Statistic, ...]
    input: Path | None = None  # resolved against the spec's directory
    output: Path | None = None
    ledger: Path | str | None = None  # a path, or a postgresql:// URL (without a password)
    source: str = "<string>"
    sha256: str = ""
    shares: tuple[Fraction, ...] = field(default=())  # per statistic, exact, in the release's unit (epsilon or rho)
    # `csv: {quoted_line_breaks: true}`: the file comes from a correct RFC 4180 writer whose quoted fields may hold
    # line breaks, so records are read with RFC 4180 quoting across lines (docs/spec.md, "How lines are read")
    quoted_line_breaks: bool = False

    @property
    def dimensions(self) -> tuple[str, ...]:
        """All output dimension columns, in order of first appearance."""
        seen: dict[str, None] = {}
        for s in self.statistics:
            for d in s.dimensions:
                seen.setdefault(d, None)
        return tuple(seen)

    @property
    def epsilon_shares(self) -> tuple[Fraction, ...]:
        """The statistics' epsilon shares of a pure release."""
        assert self.privacy.accounting == "pure"
        return self.shares


# ---------------------------------------------------------------------------------------------------------------
# Strict YAML


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader with no implicit typing, no aliases/anchors, no explicit tags and no duplicate keys."""


# No implicit resolvers: every plain scalar is a str. Numbers are parsed exactly by the validators below.
_StrictLoader.yaml_implicit_resolvers = {}

_ALLOWED_TAGS = {"tag:yaml.org,2002:str", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"}


def _mark(node_or_event: Any) -> str:
    mark = getattr(node_or_event, "start_mark", None)
    return f"line {mark.line + 1}" if mark is not None else ""


def _compose_node(self: _StrictLoader, parent: Any, index: Any) -> Any:
    event = self.peek_event()
    if isinstance(event, yaml.AliasEvent):
        raise SpecError(_mark(event), "YAML aliases are not allowed in a spec")
    if getattr(event, "anchor", None) is not None:
        raise SpecError(_mark(event), "YAML anchors are not allowed in a spec")
    tag = getattr(event, "tag", None)
    if tag is not None and tag not in ("!",) and tag not in _ALLOWED_TAGS:
        raise SpecError(_mark(event), "explicit YAML tags are not allowed in a spec")
    return yaml.SafeLoader.compose_node(self, parent, index)


def _construct_mapping(self: _StrictLoader, node: Any, deep: bool = False) -> dict:
    if not isinstance(node, yaml.MappingNode):
        raise SpecError(_mark(node), "expected a mapping")
    result: dict = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise SpecError(_mark(key_node), "mapping keys must be plain names")
        key = self.construct_object(key_node, deep=deep)
        if key in result:
            raise SpecError(_mark(key_node), f"duplicate key '{key}'")
        result[key] = self.construct_object(value_node, deep=deep)
    return result


_StrictLoader.compose_node = _compose_node  # type: ignore[method-assign]
_StrictLoader.construct_mapping = _construct_mapping  # type: ignore[method-assign]
_StrictLoader.add_constructor("tag:yaml.org,2002:map", lambda loader, node: loader.construct_mapping(node, deep=True))


def _load_yaml(text: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - strict SafeLoader subclass
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


def _no_surrogates(doc: Any) -> None:
    """Refuse a lone surrogate anywhere (a double-quoted "\\ud800"): it is not a character, so no UTF-8 output, path
    or terminal can hold it, and it used to fail only when the table was written (exit 1, after the spend). UTF-8
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
# Field validators: each takes the YAML path and the raw value


def _ceil(x: Fraction) -> int:
    return -((-x.numerator) // x.denominator)


def _floor(x: Fraction) -> int:
    return x.numerator // x.denominator


def _mapping(path: str, value: Any, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> dict:
    if not isinstance(value, dict):
        raise SpecError(path, "expected a mapping")
    for key in value:
        if key not in allowed:
            sub = f"{path}.{key}" if path else str(key)
            raise SpecError(sub, f"unknown field (allowed: {', '.join(allowed)})")
    for key in required:
        if key not in value:
            raise SpecError(f"{path}.{key}" if path else key, "required field is missing")
    return value


def _text(path: str, value: Any) -> str:
    if not isinstance(value, str):
        raise SpecError(path, "expected a single value, not a list or mapping")
    return value


def _name(path: str, value: Any, what: str = "name") -> str:
    s = _text(path, value)
    if not _NAME.fullmatch(s):
        raise SpecError(path, f"'{s[:60]}' is not a valid {what} (letters, digits, _ . -; starting with a letter or _)")
    return s


_LEADING_ZERO = re.compile(r"(?:^[+-]?|/)0[0-9]")


def _number(path: str, value: Any, limits: bool = True) -> Fraction:
    """The exact value of a spec number. ``limits=False`` leaves the size limits to the caller, which checks its
    own range first (``epsilon: 1e400`` is better told its range than its digits)."""
    s = _text(path, value)
    if len(s) > MAX_NUMBER_TEXT:  # before parsing: int() of a long text is quadratic
        raise SpecError(
            path, f"'{s[:20]}…' is longer than {MAX_NUMBER_TEXT} characters, the most a spec number may have"
        )
    try:
        x = parse_exact(s)
    except ValueError:
        raise SpecError(path, f"'{s[:60]}' is not a number (write a plain decimal such as 1, 0.5 or 1e-3)") from None
    if _LEADING_ZERO.search(s.strip()):
        # YAML 1.1 tools (and editors) read 010 as octal 8, YAML 1.2 as 10: refuse rather than pick one
        raise SpecError(path, f"'{s[:60]}' has a leading zero, which YAML 1.1 reads as octal: write it without")
    if limits:
        _within_limits(path, s, x)
    return x


def number_within_limits(x: Fraction) -> bool:
    """A spec number's size limits (see MAX_NUMBER_DIGITS): a short decimal of moderate magnitude, or a short p/q."""
    cap = 10**MAX_NUMBER_DIGITS
    if abs(x.numerator) < cap and x.denominator < cap:
        return True
    if not MIN_NUMBER <= abs(x) < MAX_NUMBER:
        return False
    places = decimal_places(x.denominator)
    if places is None:  # not a decimal: the p/q rule above was the only way in
        return False
    # x = significand / 10^places in lowest terms (x is not whole here: a whole x under 10^40 passed the p/q rule)
    significand = abs(x.numerator) * 10**places // x.denominator
    return significand < cap


def _within_limits(path: str, text: str, x: Fraction) -> None:
    if not number_within_limits(x):
        shown = text.strip() if len(text.strip()) <= 40 else text.strip()[:40] + "…"
        raise SpecError(
            path,
            f"'{shown}' is beyond the limits of a spec number: at most {MAX_NUMBER_DIGITS} significant digits and "
            f"1e-{MAX_NUMBER_DIGITS} <= |x| < 1e{MAX_NUMBER_DIGITS} (or 0), or a fraction p/q of at most "
            f"{MAX_NUMBER_DIGITS} digits each",
        )


def _positive(path: str, value: Any) -> Fraction:
    x = _number(path, value)
    if x <= 0:
        raise SpecError(path, f"must be positive, got {format_exact(x)}")
    return x


def _epsilon(path: str, value: Any, maximum: Fraction = MAX_RELEASE_EPSILON) -> Fraction:
    x = _number(path, value, limits=False)
    if not (MIN_EPSILON <= x <= maximum):
        raise SpecError(
            path, f"epsilon must be in [{format_exact(MIN_EPSILON)}, {format_exact(maximum)}], got {_short(x)}"
        )
    _within_limits(path, value, x)
    return x


def _short(x: Fraction) -> str:
    text = format_exact(x)
    # Decimal, not float: float(1e400) overflows (an internal error where `epsilon: 1e400` deserves exit 2)
    return text if len(text) <= 40 else f"{(Decimal(x.numerator) / Decimal(x.denominator)).normalize():.6g}"


def _list(path: str, value: Any, min_len: int = 0) -> list:
    if not isinstance(value, list):
        raise SpecError(path, "expected a list")
    if len(value) < min_len:
        raise SpecError(path, f"expected at least {min_len} item{'s' if min_len != 1 else ''}")
    return value


# ---------------------------------------------------------------------------------------------------------------
# Sections


def _column(name: str, raw: Any) -> Column:
    path = f"columns.{name}"
    _name(path, name, "column name")
    body = _mapping(path, raw, ("type", "bounds", "precision", "categories", "impute", "other"), ("type",))
    ctype = _text(f"{path}.type", body["type"])
    if ctype not in COLUMN_TYPES:
        raise SpecError(f"{path}.type", f"'{ctype[:40]}' is not a column type (one of: {', '.join(COLUMN_TYPES)})")

    def forbid(*keys: str) -> None:
        for k in keys:
            if k in body:
                raise SpecError(f"{path}.{k}", f"not allowed for {'an' if ctype == 'int' else 'a'} {ctype} column")

    if ctype != "category":
        forbid("other")
    if ctype in ("int", "float"):
        forbid("categories")
        if "bounds" not in body:
            raise SpecError(
                f"{path}.bounds",
                "required: numeric columns need a-priori bounds [low, high] written by a person (never from the data)",
            )
        pair = _list(f"{path}.bounds", body["bounds"])
        if len(pair) != 2:
            raise SpecError(f"{path}.bounds", "expected exactly two numbers [low, high]")
        lo, hi = (_number(f"{path}.bounds[{i}]", v, limits=False) for i, v in enumerate(pair))
        for i, b in enumerate((lo, hi)):
            if abs(b) > MAX_ABS_BOUND:
                raise SpecError(f"{path}.bounds[{i}]", f"bounds are limited to ±{format_exact(MAX_ABS_BOUND)}")
            _within_limits(f"{path}.bounds[{i}]", pair[i], b)
        if not lo < hi:
            raise SpecError(f"{path}.bounds", "low must be less than high")
        if ctype == "int":
            forbid("precision")
            if lo.denominator != 1 or hi.denominator != 1:
                raise SpecError(f"{path}.bounds", "an int column needs whole-number bounds")
            precision = Fraction(1)
        elif "precision" in body:
            precision = _positive(f"{path}.precision", body["precision"])
        else:
            precision = default_precision(lo, hi)
        column = Column(name, ctype, bounds=(lo, hi), precision=precision)
        glo, ghi = column.grid_bounds
        if glo >= ghi:
            raise SpecError(f"{path}.precision", "precision is too coarse: the bounds hold fewer than two grid points")
        if max(abs(glo), abs(ghi)) > MAX_GRID_UNITS:
            raise SpecError(
                f"{path}.precision",
                f"bounds/precision exceed 2^53 grid steps: use a coarser precision (now {format_exact(precision)})",
            )
        impute = None
        if "impute" in body:
            impute = _number(f"{path}.impute", body["impute"])
            if not lo <= impute <= hi:
                raise SpecError(f"{path}.impute", "must lie within the column's bounds")
            if ctype == "int" and impute.denominator != 1:
                raise SpecError(f"{path}.impute", "an int column needs a whole-number impute value")
        return Column(name, ctype, bounds=(lo, hi), precision=precision, impute=impute)

    forbid("bounds", "precision")
    if ctype == "bool":
        forbid("categories")
        keys: tuple[str, ...] = BOOL_KEYS
    else:
        if "categories" not in body:
            raise SpecError(f"{path}.categories", "required: list the category keys (public, written by a person)")
        items = _list(f"{path}.categories", body["categories"], min_len=1)
        values = []
        seen: set[str] = set()
        for i, v in enumerate(items):
            s = _text(f"{path}.categories[{i}]", v)
            if s == "":
                raise SpecError(f"{path}.categories[{i}]", "empty category (an empty cell is a missing value)")
            _no_replacement_character(f"{path}.categories[{i}]", s)
            if s in seen:
                raise SpecError(f"{path}.categories[{i}]", f"duplicate category '{s[:60]}'")
            seen.add(s)
            values.append(s)
        keys = tuple(values)
    impute_key = None
    if "impute" in body:
        impute_key = _text(f"{path}.impute", body["impute"])
        _no_replacement_character(f"{path}.impute", impute_key)
        if impute_key not in keys:
            raise SpecError(f"{path}.impute", f"'{impute_key[:60]}' is not one of the declared keys")
    other_key = None
    if "other" in body:
        other_key = _text(f"{path}.other", body["other"])
        _no_replacement_character(f"{path}.other", other_key)
        if other_key not in keys:
            raise SpecError(f"{path}.other", f"'{other_key[:60]}' is not one of the declared categories")
    return Column(name, ctype, categories=keys, impute=impute_key, other=other_key)


def _no_replacement_character(path: str, key: str) -> None:
    """A data cell that is not valid UTF-8 is read with U+FFFD in place of the bad bytes, and any cell holding U+FFFD
    is missing (docs/spec.md): a key with one could never match, and would hide that rule."""
    if "\ufffd" in key:
        raise SpecError(path, "contains U+FFFD (the replacement character), which a data cell is never read as")


def _csv_options(raw: Any) -> bool:
    """The ``csv:`` section: how the file's records are delimited. Returns ``quoted_line_breaks``."""
    body = _mapping("csv", raw, ("quoted_line_breaks",))
    if "quoted_line_breaks" not in body:
        return False
    value = _text("csv.quoted_line_breaks", body["quoted_line_breaks"])
    if value not in ("true", "false"):
        raise SpecError("csv.quoted_line_breaks", f"'{value[:40]}' is not a boolean (true or false)")
    return value == "true"


def default_precision(lo: Fraction, hi: Fraction) -> Fraction:
    """Default grid step of a float column: the power of ten that puts 10^6 to 10^7 steps across [lo, hi]."""
    width = hi - lo
    exp = 0
    while Fraction(10) ** (exp + 1) <= width:
        exp += 1
    while Fraction(10) ** exp > width:
        exp -= 1
    return Fraction(10) ** (exp - 6)


def _bins(path: str, raw: Any) -> Bins:
    if isinstance(raw, list):
        items = _list(path, raw, min_len=2)
        edges = tuple(_number(f"{path}[{i}]", v) for i, v in enumerate(items))
        for i in range(1, len(edges)):
            if edges[i] == edges[i - 1]:
                raise SpecError(f"{path}[{i}]", "duplicate bin edge")
            if edges[i] < edges[i - 1]:
                raise SpecError(f"{path}[{i}]", "bin edges must be increasing")
        return EdgeBins(edges)
    body = _mapping(path, raw, ("start", "stop", "step"), ("start", "stop", "step"))
    start, stop = _number(f"{path}.start", body["start"]), _number(f"{path}.stop", body["stop"])
    step = _positive(f"{path}.step", body["step"])
    if not start < stop:
        raise SpecError(f"{path}.stop", "must be greater than start")
    n = (stop - start) / step
    if n.denominator != 1:
        raise SpecError(f"{path}.step", "(stop - start) must be a whole number of steps")
    if n > MAX_CELLS:
        raise SpecError(f"{path}.step", f"{n} bins is over the limit of {MAX_CELLS}")
    return GridBins(start, stop, step)


def _statistic(i: int, raw: Any, columns: Mapping[str, Column]) -> Statistic:
    path = f"statistics[{i}]"
    body = _mapping(
        path, raw, ("name", "kind", "column", "by", "bins", "weight", "epsilon", "rho", "mechanism"), ("name", "kind")
    )
    name = _name(f"{path}.name", body["name"], "statistic name")
    kind = _text(f"{path}.kind", body["kind"])
    if kind not in STATISTIC_KINDS:
        raise SpecError(f"{path}.kind", f"'{kind[:40]}' is not a statistic kind (one of: {', '.join(STATISTIC_KINDS)})")

    column_name = None
    if "column" in body:
        if kind == "count":
            raise SpecError(f"{path}.column", "a count counts rows: use by: to split it")
        column_name = _text(f"{path}.column", body["column"])
        if column_name not in columns:
            raise SpecError(f"{path}.column", f"'{column_name[:60]}' is not a declared column")
    elif kind != "count":
        raise SpecError(f"{path}.column", f"required for a {kind}")
    column = columns[column_name] if column_name else None

    by: list[str] = []
    if "by" in body:
        for j, v in enumerate(_list(f"{path}.by", body["by"], min_len=1)):
            b = _text(f"{path}.by[{j}]", v)
            if b not in columns:
                raise SpecError(f"{path}.by[{j}]", f"'{b[:60]}' is not a declared column")
            if columns[b].numeric:
                raise SpecError(
                    f"{path}.by[{j}]",
                    f"'{b}' is numeric: group by category or bool columns, or use a histogram with bins",
                )
            if b in by or b == column_name:
                raise SpecError(f"{path}.by[{j}]", f"'{b}' is used twice")
            if b in OUTPUT_COLUMNS:
                raise SpecError(f"{path}.by[{j}]", _reserved(b))
            by.append(b)

    bins = None
    if kind in ("sum", "mean"):
        assert column is not None
        if not column.numeric:
            raise SpecError(f"{path}.column", f"a {kind} needs a numeric column; '{column.name}' is {column.type}")
        if "bins" in body:
            raise SpecError(f"{path}.bins", f"not allowed for a {kind}")
    elif kind == "histogram":
        assert column is not None
        if column.name in OUTPUT_COLUMNS:
            raise SpecError(f"{path}.column", _reserved(column.name))
        if column.numeric:
            if "bins" not in body:
                raise SpecError(f"{path}.bins", "required for a histogram of a numeric column (edges or {start, stop, step})")
            bins = _bins(f"{path}.bins", body["bins"])
        elif "bins" in body:
            raise SpecError(f"{path}.bins", "a histogram of a category or bool column has one bin per declared key")
    elif "bins" in body:
        raise SpecError(f"{path}.bins", "not allowed for a count (use a histogram)")

    weight = _positive(f"{path}.weight", body["weight"]) if "weight" in body else None
    epsilon = _epsilon(f"{path}.epsilon", body["epsilon"]) if "epsilon" in body else None
    rho = _rho(f"{path}.rho", body["rho"]) if "rho" in body else None
    if weight is not None and (epsilon is not None or rho is not None):
        raise SpecError(f"{path}.weight", f"give either weight or {'rho' if rho is not None else 'epsilon'}, not both")
    if epsilon is not None and rho is not None:
        raise SpecError(f"{path}.rho", "give either epsilon or rho, not both")

    mechanism = "laplace"
    if "mechanism" in body:
        mechanism = _text(f"{path}.mechanism", body["mechanism"])
        if mechanism not in MECHANISMS:
            raise SpecError(f"{path}.mechanism", f"'{mechanism[:40]}' is not available (one of: {', '.join(MECHANISMS)})")

    stat = Statistic(name, kind, column_name, tuple(by), bins, weight, epsilon, mechanism, rho)
    cells = 1
    for d in stat.by:
        cells *= len(columns[d].keys)
    if kind == "histogram":
        assert column is not None
        cells *= bins.count if bins is not None else len(column.keys)
    if cells > MAX_CELLS:
        raise SpecError(path, f"{cells} cells is over the limit of {MAX_CELLS} per statistic")
    return stat


def _reserved(name: str) -> str:
    return (
        f"'{name}' cannot be an output dimension: the table already has a column of that name "
        f"({', '.join(OUTPUT_COLUMNS)})"
    )


def _split(
    unit: str, budget: Fraction | None, stats: list[Statistic], maximum: Fraction
) -> tuple[Fraction, tuple[Fraction, ...]]:
    """The release's budget and each statistic's share of it, in ``unit`` ("epsilon" or "rho"), exactly."""
    other = "rho" if unit == "epsilon" else "epsilon"
    for i, s in enumerate(stats):
        if getattr(s, other) is not None:
            mode = "a pure epsilon release" if unit == "epsilon" else "a zCDP release (privacy.rho, or epsilon with delta)"
            raise SpecError(f"statistics[{i}].{other}", f"not used in {mode}: give each statistic's {unit} or a weight")
    explicit = [getattr(s, unit) is not None for s in stats]
    if any(explicit) and not all(explicit):
        i = explicit.index(False)
        raise SpecError(f"statistics[{i}].{unit}", f"either every statistic names its {unit}, or none does (use weight)")
    if all(explicit):
        shares = tuple(getattr(s, unit) for s in stats)
        total = _total(shares, unit)
        if budget is None:
            if total > maximum:
                raise SpecError(
                    "statistics", f"the statistics' {unit}s add up to {_short(total)}, over the maximum of {_short(maximum)}"
                )
            return total, shares
        if total > budget:
            raise SpecError(
                "statistics",
                f"the statistics' {unit}s add up to {_short(total)}, more than privacy.{unit} = {_short(budget)}",
            )
        return budget, shares
    if budget is None:
        raise SpecError(f"privacy.{unit}", f"required field is missing (or give every statistic its own {unit})")
    weights = [s.weight if s.weight is not None else Fraction(1) for s in stats]
    total_w = _total(weights, "weight")
    return budget, tuple(budget * w / total_w for w in weights)


def _total(values: list[Fraction] | tuple[Fraction, ...], field: str) -> Fraction:
    """The exact sum, refused once a partial sum has more than MAX_TOTAL_DIGITS digits: weights such as 1/p for
    distinct 40-digit primes would give every share a denominator growing with the number of statistics (and a sum
    whose cost grows with its square)."""
    cap = 10**MAX_TOTAL_DIGITS
    total = Fraction(0)
    for i, x in enumerate(values):
        total += x
        if abs(total.numerator) >= cap or total.denominator >= cap:
            raise SpecError(
                f"statistics[{i}].{field}",
                f"the exact sum of the {field}s up to here has over {MAX_TOTAL_DIGITS} digits in its numerator or "
                f"denominator: use {field}s with fewer digits (decimals, or fractions with a common denominator)",
            )
    return total


def _rho(path: str, value: Any) -> Fraction:
    x = _number(path, value, limits=False)
    if not (MIN_RHO <= x <= MAX_RHO):
        raise SpecError(path, f"rho must be in [{format_exact(MIN_RHO)}, {format_exact(MAX_RHO)}], got {_short(x)}")
    _within_limits(path, value, x)
    return x


def _delta(path: str, value: Any) -> Fraction:
    x = _number(path, value, limits=False)
    if not (0 < x <= MAX_DELTA):
        raise SpecError(path, f"delta must be in (0, {format_exact(MAX_DELTA)}], got {_short(x)}")
    _within_limits(path, value, x)
    return x


def _privacy(raw: Any, stats: list[Statistic]) -> tuple[Privacy, tuple[Fraction, ...]]:
    """Read the privacy section and split its budget over the statistics.

    - ``epsilon`` alone: a pure epsilon-DP release (Laplace mechanisms only);
    - ``rho`` (optionally with ``delta``, shown in the plan): a rho-zCDP release;
    - ``epsilon`` with ``delta``: converted to the largest rho whose (epsilon, delta) conversion fits (closed form,
      rounded down), then a zCDP release; it needs at least one ``mechanism: gaussian`` statistic.
    """
    priv = _mapping("privacy", raw, ("unit", "neighbours", "epsilon", "delta", "rho"))
    unit = _text("privacy.unit", priv.get("unit", "row"))
    if unit != "row":
        raise SpecError("privacy.unit", f"'{unit[:40]}' is not supported (version 1: one person = one row)")
    neighbours = _text("privacy.neighbours", priv.get("neighbours", "add_remove"))
    if neighbours not in NEIGHBOURS:
        raise SpecError("privacy.neighbours", f"'{neighbours[:40]}' is not one of: {', '.join(NEIGHBOURS)}")
    eps = _epsilon("privacy.epsilon", priv["epsilon"]) if "epsilon" in priv else None
    delta = _delta("privacy.delta", priv["delta"]) if "delta" in priv else None
    rho = _rho("privacy.rho", priv["rho"]) if "rho" in priv else None
    gaussian = [i for i, s in enumerate(stats) if s.mechanism == "gaussian"]
    explicit_rho = bool(stats) and all(s.rho is not None for s in stats)
    if rho is not None and eps is not None:
        raise SpecError("privacy.rho", "give either rho, or epsilon (with delta), not both")
    if eps is not None and delta is not None:
        if not gaussian:
            raise SpecError("privacy.delta", "only used by a release with a mechanism: gaussian statistic")
        from dpcli.accounting import epsilon_delta_to_rho

        rho = epsilon_delta_to_rho(eps, delta)
    zcdp = rho is not None or (eps is None and explicit_rho)
    if not zcdp and gaussian:
        raise SpecError(
            f"statistics[{gaussian[0]}].mechanism",
            "gaussian needs a zCDP budget: privacy.rho, or privacy.epsilon with privacy.delta",
        )
    if zcdp:
        budget, shares = _split("rho", rho, stats, MAX_RHO)
        return Privacy(unit, neighbours, eps, delta, budget), shares
    budget, shares = _split("epsilon", eps, stats, MAX_RELEASE_EPSILON)
    return Privacy(unit, neighbours, budget, delta, None), shares


def parse_spec(text: str, source: str = "<string>", base_dir: Path | None = None) -> Spec:
    """Validate spec text and return the frozen Spec. Raises SpecError (exit 2) with a one-line message."""
    raw_bytes = text.encode("utf-8", "surrogatepass")
    if len(raw_bytes) > MAX_SPEC_BYTES:
        raise SpecError("", f"the spec is larger than {MAX_SPEC_BYTES // 1024} KiB")
    doc = _load_yaml(text)
    _no_surrogates(doc)
    top = _mapping(
        "",
        doc if doc is not None else {},
        ("version", "dataset", "input", "output", "ledger", "csv", "privacy", "columns", "statistics"),
        ("version", "dataset", "privacy", "columns", "statistics"),
    )
    version = _text("version", top["version"])
    if version != SPEC_VERSION:
        raise SpecError("version", f"unsupported spec version '{version[:20]}' (this dpcli reads version 1)")
    dataset = _text("dataset", top["dataset"])
    if not _DATASET.fullmatch(dataset):
        raise SpecError("dataset", f"'{dataset[:60]}' is not a valid dataset name (letters, digits, _ . -)")
    quoted_line_breaks = _csv_options(top["csv"]) if "csv" in top else False

    _mapping("privacy", top["privacy"], ("unit", "neighbours", "epsilon", "delta", "rho"))

    raw_columns = top["columns"]
    if not isinstance(raw_columns, dict) or not raw_columns:
        raise SpecError("columns", "expected a mapping of at least one column")
    columns = {name: _column(name, body) for name, body in raw_columns.items()}

    raw_stats = _list("statistics", top["statistics"], min_len=1)
    stats: list[Statistic] = []
    names: set[str] = set()
    for i, raw in enumerate(raw_stats):
        st = _statistic(i, raw, columns)
        if st.name in names:
            raise SpecError(f"statistics[{i}].name", f"duplicate statistic name '{st.name}'")
        names.add(st.name)
        stats.append(st)
    privacy, shares = _privacy(top["privacy"], stats)

    base = base_dir if base_dir is not None else Path(".")

    def path_field(key: str) -> Path | None:
        if key not in top:
            return None
        p = _text(key, top[key])
        if not p:
            raise SpecError(key, "empty path")
        return p if p == "-" else (base / p)  # type: ignore[return-value]

    return Spec(
        version=version,
        dataset=dataset,
        privacy=privacy,
        columns=MappingProxyType(columns),
        statistics=tuple(stats),
        input=_dash_or_path(path_field("input")),
        output=_dash_or_path(path_field("output")),
        ledger=_ledger_location(top.get("ledger"), path_field),
        source=source,
        sha256=hashlib.sha256(raw_bytes).hexdigest(),
        shares=shares,
        quoted_line_breaks=quoted_line_breaks,
    )


def _ledger_location(raw: Any, path_field: Any) -> Path | str | None:
    """The spec's ledger: a path relative to the spec, or a PostgreSQL URL kept as text (never with a password:
    specs are shared and committed; put credentials in DPCLI_LEDGER, --ledger or a .pgpass file)."""
    if isinstance(raw, str) and raw.startswith(("postgresql://", "postgres://")):
        from urllib.parse import urlsplit

        try:
            has_password = urlsplit(raw).password is not None
        except ValueError:
            raise SpecError("ledger", "not a valid PostgreSQL URL") from None
        if has_password or "password=" in raw:
            raise SpecError("ledger", "a ledger URL in a spec must not carry a password (use DPCLI_LEDGER or .pgpass)")
        return raw
    return _dash_or_path(path_field("ledger"))


def _dash_or_path(p: Any) -> Path | None:
    if p is None:
        return None
    return Path("-") if p == "-" else Path(p)


def load_spec(path: str | Path) -> Spec:
    """Read and validate a spec file. Paths inside it are relative to the spec's directory. Every error starts with
    the file as given, then the YAML path: ``spec.yaml: statistics[2].column: 'incme' is not a declared column``."""
    p = Path(path)
    try:
        if str(path) == "-":
            raise SpecError("", "a spec is read from a file, not from standard input: give its path")
        data = _read_spec_file(p)
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise SpecError("", "the spec is not UTF-8 text") from None
        spec = parse_spec(text, source=str(p), base_dir=p.parent)
    except SpecError as exc:
        raise exc.in_file(printable(str(path))) from None
    # hash the bytes as read (BOM included) so the metadata names exactly this file
    return _replace_hash(spec, hashlib.sha256(data).hexdigest())


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
    from dataclasses import replace

    return replace(spec, sha256=digest)
