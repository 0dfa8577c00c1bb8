"""A small schema library for the spec: field types (``Number``, ``Whole``, ``Choice``, ``Name``, ``Keys`` ...),
mappings of fields (``Section``) and tagged unions of them (``Union``, ``Variant``). Each field both checks a raw YAML
value (text, list or mapping) and describes itself as JSON Schema, so the loader and ``dpcli schema`` cannot drift.
Spec v1's declaration is written with them in ``dpcli.specs.v1``. The rules JSON Schema cannot express raise
``RuleError``: the cross-field rules (``dpcli.specs.rules``) and the range of a number written as text.

Why plain Python and not pydantic v2 models (pydantic 2.14 is installed, as typer's dependency): defining the tagged
unions and an exact-number type as pydantic models added ~90 ms to every `dpcli` start (median of 10 runs with
farm-bench: 268 ms against 175 ms for importing typer and pydantic alone, on a 269 ms `dpcli plan`), and dpcli runs
from cron and shell loops; its messages would also need mapping back to today's one-line texts. These field objects
import nothing but the standard library and PyYAML's output, and each one both checks a value and describes it.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

from dpcli.core.accounting import decimal_places, format_exact, parse_exact
from dpcli.core.locations import is_ledger_url
from dpcli.core.suggest import did_you_mean
from dpcli.errors import SpecError

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
# A numeric column's bounds and impute value lie within ±MAX_ABS_BOUND (documented in docs/spec.md).
MAX_ABS_BOUND = Fraction(10**15)

NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}"
DATASET_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}"
_NAME = re.compile(NAME_PATTERN)
DATASET_NAME = re.compile(DATASET_PATTERN)  # the spec's dataset: and the CLI's `dpcli budget DATASET`
_LEADING_ZERO = re.compile(r"(?:^[+-]?|/)0[0-9]")

# The loader's number grammar (dpcli.core.accounting.parse_exact) within its limits, as a pattern that accepts only
# texts
# the loader accepts: (a) up to 20 digits before and 20 after the point, an exponent within ±19 (so
# 1e-39 <= |x| < 1e39); (b) one digit, up to 19 decimals and an exponent from -40 to 39 (a double's shortest text,
# 1.2345678901234567e-30); (c) p/q of at most 40 digits each. Spelled with [0-9] (not \d, which is Unicode in
# Python). No leading zero in the integer part (``010`` is octal 8 to YAML 1.1 tools: the loader refuses it).
NUMBER_PATTERN = (
    r"^(?:[+-]?(?:(?:0|[1-9][0-9]{0,19})(?:\.[0-9]{0,20})?|\.[0-9]{1,20})(?:[eE][+-]?0?(?:[0-9]|1[0-9]))?"
    r"|[+-]?[1-9](?:\.[0-9]{0,19})?[eE](?:\+?0?[0-9]|\+?[1-3][0-9]|-0?[0-9]|-[1-3][0-9]|-40)"
    r"|[+-]?(?:0|[1-9][0-9]{0,39})/[1-9][0-9]{0,39})$"
)
# A number as YAML tools type it (a JSON number) is 0 or TINY <= |x| <= HUGE: a double's shortest text has at most 17
# significant digits, so within these it meets the loader's limits. TINY's text is 1e-40, the loader's inclusive
# limit; HUGE is 1e39 rather than 1e40 because the double nearest 1e40 is above 10^40 (and an integer up to it would
# have 41 digits).
TINY, HUGE = 1e-40, 1e39
NUMBER_TEXT = {"$ref": "#/$defs/number_text"}

# A JSON Schema fragment, as `dpcli schema` prints it (its values are of every JSON type)
Schema = dict[str, Any]
# A section's loaded fields by key, each value as its field type loaded it (a Fraction, a text, a tuple, a nested
# section's fields): the builders (dpcli.specs.rules) read each key as its field declares it
Loaded = dict[str, Any]


class RuleError(SpecError):
    """An error of a rule JSON Schema cannot express, so that a schema-valid document may still break it: the
    cross-field rules (``rule="cross-field"``: declared columns, bounds and bin order, budget sums, ...) and the
    range of a number written as text (``rule="text range"``: the schema checks a numeric string's form only)."""

    def __init__(self, path: str, message: str, file: str | None = None, rule: str = "cross-field"):
        super().__init__(path, message, file)
        self.rule = rule

    def in_file(self, file: str) -> SpecError:
        return self if self.file is not None else RuleError(self.path, self.detail, file, self.rule)


# The declaration's classes are `@dataclass(eq=False, repr=False)`, with an __init__ only: a frozen dataclass (six
# generated methods) cost ~0.7 ms each to create, 12 of this module's 14 ms import time (cProfile), paid by every
# dpcli start. Their instances are this module's constants and are never changed. The decorator is spelled out at
# each class (not bound to a name once) because mypy recognises a dataclass only by the `dataclass(...)` call itself.


def join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def suggested(message: str, suggestion: str) -> str:
    """``message``, then ``; did you mean 'x'?`` when there is a suggestion (dpcli.core.suggest)."""
    return f"{message}; {suggestion}" if suggestion else message


def undeclared(name: str, columns: Iterable[str]) -> str:
    """The message of a statistic's (or randomize's) column that is not declared, with the declared names closest to
    it: ``'incme' is not a declared column; did you mean 'income'?``."""
    return suggested(f"'{name[:60]}' is not a declared column", did_you_mean(name, columns))


def short(x: Fraction) -> str:
    text = format_exact(x)
    # Decimal, not float: float(1e400) overflows (an internal error where `epsilon: 1e400` deserves exit 2)
    return text if len(text) <= 40 else f"{(Decimal(x.numerator) / Decimal(x.denominator)).normalize():.6g}"


def text_value(path: str, value: Any) -> str:
    if not isinstance(value, str):
        raise SpecError(path, "expected a single value, not a list or mapping")
    return value


def list_value(path: str, value: Any, min_len: int = 0) -> list[Any]:
    if not isinstance(value, list):
        raise SpecError(path, "expected a list")
    if len(value) < min_len:
        raise SpecError(path, f"expected at least {min_len} item{'s' if min_len != 1 else ''}")
    return value


def number_within_limits(x: Fraction) -> bool:
    """A spec number's size limits (see MAX_NUMBER_DIGITS): a short decimal of moderate magnitude, or a short p/q."""
    cap: int = 10**MAX_NUMBER_DIGITS
    if abs(x.numerator) < cap and x.denominator < cap:
        return True
    if not MIN_NUMBER <= abs(x) < MAX_NUMBER:
        return False
    places = decimal_places(x.denominator)
    if places is None:  # not a decimal: the p/q rule above was the only way in
        return False
    # x = significand / 10^places in lowest terms (x is not whole here: a whole x under 10^40 passed the p/q rule)
    significand: int = abs(x.numerator) * 10**places // x.denominator
    return significand < cap


def parse_number(path: str, value: Any) -> Fraction:
    """The exact value of a spec number's text, before its range and size limits."""
    s = text_value(path, value)
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
    return x


def check_limits(path: str, text: str, x: Fraction) -> None:
    if not number_within_limits(x):
        shown = text.strip() if len(text.strip()) <= 40 else text.strip()[:40] + "…"
        raise SpecError(
            path,
            f"'{shown}' is beyond the limits of a spec number: at most {MAX_NUMBER_DIGITS} significant digits and "
            f"1e-{MAX_NUMBER_DIGITS} <= |x| < 1e{MAX_NUMBER_DIGITS} (or 0), or a fraction p/q of at most "
            f"{MAX_NUMBER_DIGITS} digits each",
        )


def json_number(x: Fraction) -> float | int:
    """A limit as a JSON number (ints stay exact)."""
    return int(x) if x.denominator == 1 else float(x)


# ---------------------------------------------------------------------------------------------------------------
# Field types: each checks a raw YAML value (text, list or mapping) and describes itself as JSON Schema


@dataclass(eq=False, repr=False)
class Number:
    """An exact number. ``range_name`` set: ``{range_name} must be in [low, high], got x`` (checked before the size
    limits: ``epsilon: 1e400`` is better told its range than its digits); ``positive``: ``must be positive``;
    ``bound``: within ±MAX_ABS_BOUND; ``whole``: the schema's JSON number is an integer."""

    low: Fraction | None = None
    high: Fraction | None = None
    low_open: bool = False
    range_name: str | None = None
    positive: bool = False
    bound: bool = False
    whole: bool = False

    def load(self, path: str, raw: Any) -> Fraction:
        x = parse_number(path, raw)
        if self.range_name is not None and not self._in_range(x):
            left = "(" if self.low_open else "["
            low = format_exact(self.low) if self.low is not None else ""
            high = format_exact(self.high) if self.high is not None else ""
            raise RuleError(
                path, f"{self.range_name} must be in {left}{low}, {high}], got {short(x)}", rule="text range"
            )
        if self.bound and abs(x) > MAX_ABS_BOUND:
            raise RuleError(path, f"bounds are limited to ±{format_exact(MAX_ABS_BOUND)}", rule="text range")
        check_limits(path, raw, x)
        if self.positive and x <= 0:
            raise RuleError(path, f"must be positive, got {format_exact(x)}", rule="text range")
        return x

    def _in_range(self, x: Fraction) -> bool:
        if self.low is not None and (x <= self.low if self.low_open else x < self.low):
            return False
        return self.high is None or x <= self.high

    def schema(self) -> Schema:
        if self.bound:
            lo, hi, exclusive = -json_number(MAX_ABS_BOUND), json_number(MAX_ABS_BOUND), False
        elif self.positive:
            lo, hi, exclusive = 0, HUGE, True
        else:
            lo = json_number(self.low) if self.low is not None else -HUGE
            hi = json_number(self.high) if self.high is not None else HUGE
            exclusive = self.low_open
        if self.whole:
            return {"anyOf": [{"type": "integer", "minimum": lo, "maximum": hi}, NUMBER_TEXT]}
        return number_schema(lo, hi, exclusive)


# An integer field's text: its digits and nothing else (no sign, point, exponent, fraction or space), no leading zero
INTEGER_PATTERN = r"^(0|[1-9][0-9]{0,39})$"
_INTEGER = re.compile(INTEGER_PATTERN)


@dataclass(eq=False, repr=False)
class Whole:
    """An integer field, in [low, high] (a person unit's K, G, R; an open column's max_length; top_k's k; digits;
    expected_rows). A count, not a measurement: written as its digits only (``1000``, quoted or not), never as a
    number that happens to be whole (``1e3``, ``1000.0``, ``2000/2``), which a reader could take for another value
    or another type (YAML 1.1 tools read ``1e3`` as a string)."""

    low: int
    high: int
    description: str = ""

    def load(self, path: str, raw: Any) -> int:
        text = text_value(path, raw)
        if not _INTEGER.fullmatch(text):
            x = parse_number(path, raw)  # refuses what is no number at all, or has a leading zero, in those words
            shown = text if len(text) <= 40 else text[:40] + "…"
            raise RuleError(
                path,
                f"'{shown}' is not written as an integer: an integer field takes digits only"
                + (f" ({short(x)})" if x.denominator == 1 and abs(x) < 10**40 else "")
                + ", with no sign, decimal point, exponent or fraction",
                rule="text range",
            )
        return int(Number(Fraction(self.low), Fraction(self.high), range_name="the value").load(path, raw))

    def schema(self) -> Schema:
        text = {"type": "string", "pattern": INTEGER_PATTERN}
        out: Schema = {"anyOf": [{"type": "integer", "minimum": self.low, "maximum": self.high}, text]}
        return {**out, **({"description": self.description} if self.description else {})}


def number_schema(lo: float, hi: float, exclusive: bool) -> Schema:
    """A number as YAML tools see it: a JSON number within the limits (as branches: positive, 0, negative, each within
    TINY <= |x| <= HUGE), or a numeric string (form only)."""
    low_key = "exclusiveMinimum" if exclusive else "minimum"
    lo, hi = max(lo, -HUGE), min(hi, HUGE)
    branches: list[Schema] = []
    if hi >= TINY:
        branches.append({"type": "number", **({low_key: lo} if lo >= TINY else {"minimum": TINY}), "maximum": hi})
    if (lo < 0 or (lo == 0 and not exclusive)) and hi >= 0:
        branches.append({"const": 0})
    if lo <= -TINY:
        branches.append({"type": "number", low_key: lo, "maximum": min(hi, -TINY)})
    return {"anyOf": [*branches, NUMBER_TEXT]}


@dataclass(eq=False, repr=False)
class Choice:
    """One of a few words. ``message`` is formatted with the value (shortened) and the choices."""

    values: tuple[str, ...]
    message: str
    boolean: bool = False  # true/false: YAML tools may type it as a boolean
    description: str = ""

    def load(self, path: str, raw: Any) -> str:
        value = text_value(path, raw)
        if value not in self.values:
            raise SpecError(path, self.message.format(value=value[:40], choices=", ".join(self.values)))
        return value

    def schema(self) -> Schema:
        out: Schema = {"const": self.values[0]} if len(self.values) == 1 else {"enum": list(self.values)}
        if self.boolean:
            out = {"enum": [True, False, *self.values[::-1]]}
        return {**out, **({"description": self.description} if self.description else {})}


@dataclass(eq=False, repr=False)
class Name:
    """A name of a column or statistic (``what``), or of a dataset."""

    what: str
    dataset: bool = False
    reserved: tuple[str, ...] = ()  # names it may not be: an output dimension's (schema only; the loader says why)
    description: str = ""
    reference: bool = False  # names a declared column: the loader says whether it is declared, whatever its form

    def load(self, path: str, raw: Any) -> str:
        s = text_value(path, raw)
        if self.reference:
            return s
        if self.dataset:
            if not DATASET_NAME.fullmatch(s):
                raise SpecError(path, f"'{s[:60]}' is not a valid dataset name (letters, digits, _ . -)")
        elif not _NAME.fullmatch(s):
            raise SpecError(
                path, f"'{s[:60]}' is not a valid {self.what} (letters, digits, _ . -; starting with a letter or _)"
            )
        return s

    def schema(self) -> Schema:
        extra = {"description": self.description} if self.description else {}
        if self.dataset:
            return {
                **extra,
                "anyOf": [
                    {"type": "string", "pattern": f"^{DATASET_PATTERN}$"},
                    {"type": "integer", "minimum": 0, "maximum": 10**18},
                ],
            }
        out: dict[str, Any] = {"type": "string", "pattern": f"^{NAME_PATTERN}$", **extra}
        if self.reserved:
            out["not"] = {"enum": list(self.reserved)}
        return out


@dataclass(eq=False, repr=False)
class PathText:
    description: str

    def load(self, path: str, raw: Any) -> str:
        p = text_value(path, raw)
        if not p:
            raise SpecError(path, "empty path")
        return p

    def schema(self) -> Schema:
        return {"type": "string", "minLength": 1, "description": self.description}


@dataclass(eq=False, repr=False)
class Ledger(PathText):
    """A ledger path, or a PostgreSQL URL kept as text (never with a password: specs are shared and committed; put
    credentials in DPCLI_LEDGER, --ledger or a .pgpass file)."""

    def load(self, path: str, raw: Any) -> str:
        if isinstance(raw, str) and is_ledger_url(raw):
            from urllib.parse import urlsplit

            try:
                has_password = urlsplit(raw).password is not None
            except ValueError:
                raise SpecError(path, "not a valid PostgreSQL URL") from None
            if has_password or "password=" in raw:
                raise SpecError(path, "a ledger URL in a spec must not carry a password (use DPCLI_LEDGER or .pgpass)")
            return raw
        return super().load(path, raw)


def _no_replacement_character(path: str, key: str) -> None:
    """A data cell that is not valid UTF-8 is read with U+FFFD in place of the bad bytes, and any cell holding U+FFFD
    is missing (docs/spec.md): a key with one could never match, and would hide that rule."""
    if "\ufffd" in key:
        raise SpecError(path, "contains U+FFFD (the replacement character), which a data cell is never read as")


OPEN = "open"  # `categories: open`

CATEGORY_VALUE = {
    "description": "a category key: YAML may type it as a number or boolean; dpcli compares its text",
    "anyOf": [
        # never U+FFFD: a data cell holding it (as every cell that was not valid UTF-8 does) is missing
        {"type": "string", "minLength": 1, "not": {"pattern": "\\ufffd"}},
        {"type": "number"},
        {"type": "boolean"},
    ],
}


@dataclass(eq=False, repr=False)
class Key:
    """A category key (``impute``/``other`` of a category column); whether it is declared is a cross-field rule."""

    description: str = ""

    def load(self, path: str, raw: Any) -> str:
        key = text_value(path, raw)
        _no_replacement_character(path, key)
        return key

    def schema(self) -> Schema:
        return {**CATEGORY_VALUE, **({"description": self.description} if self.description else {})}


@dataclass(eq=False, repr=False)
class Keys:
    """A category column's declared keys: distinct texts, none empty; or ``open`` (``OPEN``): keys chosen from the
    data by private partition selection (dpcli.plan.model.Selection)."""

    def load(self, path: str, raw: Any) -> tuple[str, ...] | str:
        if raw == OPEN:
            return OPEN
        values: dict[str, None] = {}
        for i, v in enumerate(list_value(path, raw, min_len=1)):
            s = text_value(f"{path}[{i}]", v)
            if s == "":
                raise SpecError(f"{path}[{i}]", "empty category (an empty cell is a missing value)")
            _no_replacement_character(f"{path}[{i}]", s)
            if s in values:  # the schema's uniqueItems compares typed values: [1, "1"] passes it
                raise RuleError(f"{path}[{i}]", f"duplicate category '{s[:60]}'")
            values[s] = None
        return tuple(values)

    def schema(self) -> Schema:
        return {
            "anyOf": [
                {"type": "array", "minItems": 1, "uniqueItems": True, "items": CATEGORY_VALUE},
                {"const": OPEN, "description": "keys chosen from the data by partition selection (needs delta)"},
            ]
        }


@dataclass(eq=False, repr=False)
class Bounds:
    """[low, high] of a numeric column."""

    whole: bool

    def load(self, path: str, raw: Any) -> tuple[Fraction, Fraction]:
        pair = list_value(path, raw)
        if len(pair) != 2:
            raise SpecError(path, "expected exactly two numbers [low, high]")
        item = Number(bound=True)
        lo, hi = (item.load(f"{path}[{i}]", v) for i, v in enumerate(pair))
        if self.whole and (lo.denominator != 1 or hi.denominator != 1):
            raise RuleError(path, "an int column needs whole-number bounds", rule="text range")
        return lo, hi

    def schema(self) -> Schema:
        out = {"type": "array", "minItems": 2, "maxItems": 2, "items": Number(bound=True, whole=self.whole).schema()}
        if self.whole:
            out["description"] = "[low, high]: a-priori bounds written by a person, whole numbers, low < high"
        return out


@dataclass(eq=False, repr=False)
class Columns:
    """A list of column names (``by:``): whether they are declared, and suit, is a cross-field rule."""

    description: str
    reserved: tuple[str, ...] = ()  # names none of them may be (schema only, as Name's)

    def load(self, path: str, raw: Any) -> tuple[str, ...]:
        return tuple(text_value(f"{path}[{j}]", v) for j, v in enumerate(list_value(path, raw, min_len=1)))

    def schema(self) -> Schema:
        return {
            "type": "array", "minItems": 1, "uniqueItems": True,
            "items": Name("column name", reserved=self.reserved, reference=True).schema(),
            "description": self.description,
        }


@dataclass(eq=False, repr=False)
class Levels:
    """A quantile's levels ``q``: distinct numbers in (0, 1)."""

    def load(self, path: str, raw: Any) -> tuple[Fraction, ...]:
        items = list_value(path, raw, min_len=1)
        levels: list[Fraction] = []
        for i, v in enumerate(items):
            x = parse_number(f"{path}[{i}]", v)
            if not 0 < x < 1:
                raise RuleError(f"{path}[{i}]", f"a quantile level must be in (0, 1), got {short(x)}",
                                rule="text range")
            check_limits(f"{path}[{i}]", v, x)
            if x in levels:
                raise RuleError(f"{path}[{i}]", f"level {format_exact(x)} is listed twice")
            levels.append(x)
        return tuple(levels)

    def schema(self) -> Schema:
        return {
            "type": "array", "minItems": 1,
            "items": {"anyOf": [{"type": "number", "minimum": TINY, "exclusiveMaximum": 1}, NUMBER_TEXT]},
            "description": "quantile levels in (0, 1), e.g. [0.25, 0.5, 0.9]",
        }


# ---------------------------------------------------------------------------------------------------------------
# Sections: mappings of fields


@dataclass(eq=False, repr=False)
class Section:
    """A mapping: its fields in the order the messages list them, the required ones, and pairs that exclude each
    other (``(key, others, message)``: ``key`` may not appear with any of ``others``)."""

    fields: dict[str, Any]
    required: tuple[str, ...] = ()
    exclusive: tuple[tuple[str, tuple[str, ...], str], ...] = ()
    description: str = ""

    def keys(self, path: str, raw: Any, errors: list[SpecError] | None = None) -> Loaded:
        """``raw`` as a mapping of its known keys. Each unknown or missing key is an error: the first is raised, or
        with ``errors`` every one is appended there (and a missing required key raised after them)."""
        if not isinstance(raw, dict):
            raise SpecError(path, "expected a mapping")
        found = [
            SpecError(join(path, key), suggested(f"unknown field (allowed: {', '.join(self.fields)})",
                                                 did_you_mean(str(key), self.fields)))
            for key in raw
            if key not in self.fields
        ]
        missing = [SpecError(join(path, key), "required field is missing") for key in self.required if key not in raw]
        if found or missing:
            if errors is None:
                raise (found + missing)[0]
            errors.extend(found)
            if missing:
                errors.extend(missing[1:])
                raise missing[0]
        return {k: v for k, v in raw.items() if k in self.fields}

    def load(self, path: str, raw: Any, errors: list[SpecError] | None = None) -> Loaded:
        """The loaded fields. With ``errors``, field errors are appended there and the field left out (so every bad
        field is reported); without, the first one is raised."""
        body = self.keys(path, raw, errors)
        out: Schema = {}
        for key, kind in self.fields.items():
            if key not in body:
                continue
            try:
                out[key] = kind.load(join(path, key), body[key])
            except SpecError as exc:
                if errors is None:
                    raise
                errors.append(exc)
        self.check_exclusive(path, out)
        return out

    def check_exclusive(self, path: str, present: Loaded) -> None:
        for key, others, message in self.exclusive:
            other = next((o for o in others if o in present), None)
            if key in present and other is not None:
                raise SpecError(join(path, key), message.format(other=other))

    def schema(self) -> Schema:
        out: Schema = {"type": "object"}
        if self.description:
            out["description"] = self.description
        out["properties"] = {k: v.schema() for k, v in self.fields.items()}
        if self.required:
            out["required"] = list(self.required)
        out["additionalProperties"] = False
        for key, others, _ in self.exclusive:
            out.setdefault("dependentSchemas", {})[key] = {"not": {"anyOf": [{"required": [o]} for o in others]}}
        return out


@dataclass(eq=False, repr=False)
class Variant:
    """One member of a tagged union (a column type, a statistic kind): the fields it allows beyond the common ones'
    union are refused with ``forbidden``'s message, the ones it requires with ``required``'s."""

    tag: str
    allowed: tuple[str, ...]
    required: dict[str, str] = field(default_factory=dict)  # key -> message when missing
    forbidden: dict[str, str] = field(default_factory=dict)  # key -> message when present (default: generic)
    overrides: dict[str, Any] = field(default_factory=dict)  # key -> this variant's field type


@dataclass(eq=False, repr=False)
class Union:
    """A tagged union of sections: ``section`` holds every field of any variant (its order is the messages'),
    ``tag`` names the field that picks the variant."""

    section: Section
    tag: str
    variants: tuple[Variant, ...]
    forbidden_message: Callable[[str], str]

    def variant(self, tag: str) -> Variant:
        return next(v for v in self.variants if v.tag == tag)

    def load(self, path: str, raw: Any, errors: list[SpecError] | None = None) -> tuple[str, Loaded]:
        """(tag, loaded fields). The tag's field is loaded first; then the variant's own rules."""
        body = self.section.keys(path, raw, errors)
        tag = self.section.fields[self.tag].load(join(path, self.tag), body[self.tag])
        v = self.variant(tag)
        for key in self.section.fields:
            if key in body and key not in v.allowed:
                raise SpecError(join(path, key), v.forbidden.get(key) or self.forbidden_message(tag))
        section = Section({**self.section.fields, **v.overrides}, self.section.required, self.section.exclusive)
        loaded = section.load(path, dict(body), errors)
        for key, message in v.required.items():
            if key not in body:
                raise SpecError(join(path, key), message.format(tag=tag))
        return tag, loaded

    def schema(self) -> Schema:
        branches = []
        for v in self.variants:
            fields = {**self.section.fields, **v.overrides, self.tag: Choice((v.tag,), "")}
            sub = Section(
                {k: fields[k] for k in v.allowed},
                tuple(k for k in self.section.required if k in v.allowed) + tuple(v.required),
                tuple(e for e in self.section.exclusive if e[0] in v.allowed),
            )
            branches.append(sub.schema())
        return {"type": "object", "required": list(self.section.required), "oneOf": branches}


