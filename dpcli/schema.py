"""JSON Schema (draft 2020-12) of release spec version 1, printed by ``dpcli schema``.

Editors (e.g. VS Code's YAML extension: ``# yaml-language-server: $schema=spec-v1.schema.json``) and CI validators
check a YAML spec against it. It describes the document *as YAML tools see it* under YAML 1.2's core schema:
``epsilon: 0.5`` is a number there, while dpcli's own loader reads every plain scalar as text and parses numbers
exactly (``dpcli.spec``). So wherever the loader takes a number, the schema accepts a JSON number (with the
loader's range) *or* a numeric string in the loader's grammar (``"0.5"``, ``1e-3`` under YAML 1.1, ``1/3``).

The loader and this schema agree in one direction, checked by ``tests/test_schema.py``: a spec the loader accepts
validates (bar the rare forms listed under "stricter" below), and a document the schema accepts is accepted by the
loader *provided* it also meets the loader's cross-field rules, which JSON Schema cannot express:

- ``statistics[].column`` and ``by:`` name declared columns, of a type that suits the statistic (sum/mean of a
  numeric column; ``by:`` over category/bool columns; ``bins:`` exactly for histograms of numeric columns), and a
  ``by:`` column is not the histogrammed column; statistic names are unique;
- budget: every statistic names its ``epsilon`` (or ``rho``) or none does, and the named shares add up to at most
  ``privacy.epsilon`` (or ``rho``); a ``mechanism: gaussian`` statistic needs a zCDP budget (``privacy.rho``, or
  ``epsilon`` with ``delta``), and ``privacy.delta`` with ``epsilon`` needs a gaussian statistic; the exact sum of
  the weights (or of the named shares) has at most 150 digits in numerator and denominator;
- bounds: low < high; a float column's bounds/precision span 2 to 2^53 grid steps; ``impute`` lies within the
  bounds or is a declared key; ``other`` is a declared category;
- bins: edges strictly increasing; a grid's ``stop > start`` and a whole number of steps; at most 10^7 cells per
  statistic;
- numbers written as *strings* are checked for their form only (a pattern cannot check a range); category values
  must differ as text (the schema's ``uniqueItems`` compares typed values, so ``[1, "1"]`` passes it);
- the planner's limit (a noise scale of at most 2^40 grid steps: bounds too wide for the epsilon) is checked by
  ``dpcli check`` and ``dpcli plan``, after the loader.

Stricter than the loader (rare; quote the value to satisfy both): names and paths that YAML reads as another type
(``name: true``, ``output: 2020``, ``dataset: 1e5``) and numbers with surrounding spaces inside quotes. Numbers near
the loader's limits (40 significant digits, 1e-40 <= |x| < 1e40, p/q of 40 digits each): as text the schema takes
20 digits before and 20 after the point with an exponent within ±19, or one digit and 19 decimals with an exponent
from -40 to 39 (``NUMBER_PATTERN``); as a JSON number at most 1e39 in magnitude. Gaps the other way:
``version: 1.0`` passes the schema (its ``const: 1`` equals 1.0) while the loader wants the text ``1``, and a
number written with more than 17 significant digits is a double to YAML 1.2 tools, so the schema checks the double
while the loader counts the digits written. YAML 1.1 tools read ``yes``/``no`` as booleans; the schema follows
YAML 1.2.
"""

from __future__ import annotations

import json
from typing import Any

from dpcli.spec import (
    MAX_ABS_BOUND,
    MAX_CELLS,
    MAX_DELTA,
    MAX_RELEASE_EPSILON,
    MAX_RHO,
    MECHANISMS,
    MIN_EPSILON,
    MIN_RHO,
    NEIGHBOURS,
    OUTPUT_COLUMNS,
    STATISTIC_KINDS,
)

SCHEMA_ID = "https://dpcli.invalid/schema/spec-v1.json"

# The loader's number grammar (dpcli.accounting.parse_exact) within its limits (dpcli.spec.MAX_NUMBER_DIGITS: at most
# 40 significant digits and 1e-40 <= |x| < 1e40, or p/q of at most 40 digits each), as a pattern that accepts only
# texts the loader accepts: (a) up to 20 digits before and 20 after the point, an exponent within ±19 (so
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
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.\-]{0,127}$"
DATASET_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$"


def _num(
    minimum: float | None = None, maximum: float | None = None, exclusiveMinimum: float | None = None  # noqa: N803
) -> dict:
    """A number as YAML tools see it: a JSON number within the limits (as branches: positive, 0, negative, each within
    TINY <= |x| <= HUGE), or a numeric string (form only)."""
    exclusive = exclusiveMinimum is not None
    low_key = "exclusiveMinimum" if exclusive else "minimum"
    lo = exclusiveMinimum if exclusive else (-HUGE if minimum is None else max(minimum, -HUGE))
    hi = HUGE if maximum is None else min(maximum, HUGE)
    branches: list[dict] = []
    if hi >= TINY:
        branches.append({"type": "number", **({low_key: lo} if lo >= TINY else {"minimum": TINY}), "maximum": hi})
    if (lo < 0 or (lo == 0 and not exclusive)) and hi >= 0:
        branches.append({"const": 0})
    if lo <= -TINY:
        branches.append({"type": "number", low_key: lo, "maximum": min(hi, -TINY)})
    return {"anyOf": [*branches, {"$ref": "#/$defs/number_text"}]}


def _f(x: Any) -> float | int:
    """A limit as a JSON number (ints stay exact)."""
    return int(x) if x.denominator == 1 else float(x)


def spec_schema() -> dict:
    """The schema as a dict (fresh each call)."""
    bound = {"minimum": -_f(MAX_ABS_BOUND), "maximum": _f(MAX_ABS_BOUND)}
    category_value = {
        "description": "a category key: YAML may type it as a number or boolean; dpcli compares its text",
        "anyOf": [
            # never U+FFFD: a data cell holding it (as every cell that was not valid UTF-8 does) is missing
            {"type": "string", "minLength": 1, "not": {"pattern": "\\ufffd"}},
            {"type": "number"},
            {"type": "boolean"},
        ],
    }
    int_column = {
        "type": "object",
        "properties": {
            "type": {"const": "int"},
            "bounds": {
                "type": "array", "minItems": 2, "maxItems": 2,
                "items": {"anyOf": [{"type": "integer", **bound}, {"$ref": "#/$defs/number_text"}]},
                "description": "[low, high]: a-priori bounds written by a person, whole numbers, low < high",
            },
            "impute": _num(**bound),
        },
        "required": ["type", "bounds"],
        "additionalProperties": False,
    }
    float_column = {
        "type": "object",
        "properties": {
            "type": {"const": "float"},
            "bounds": {"type": "array", "minItems": 2, "maxItems": 2, "items": _num(**bound)},
            "precision": _num(exclusiveMinimum=0),
            "impute": _num(**bound),
        },
        "required": ["type", "bounds"],
        "additionalProperties": False,
    }
    category_column = {
        "type": "object",
        "properties": {
            "type": {"const": "category"},
            "categories": {"type": "array", "minItems": 1, "uniqueItems": True, "items": category_value},
            "impute": category_value,
            "other": {
                **category_value,
                "description": "a declared key that undeclared non-empty values count under (else they are dropped)",
            },
        },
        "required": ["type", "categories"],
        "additionalProperties": False,
    }
    bool_column = {
        "type": "object",
        "properties": {"type": {"const": "bool"}, "impute": {"enum": [True, False, "true", "false"]}},
        "required": ["type"],
        "additionalProperties": False,
    }
    statistic = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "pattern": NAME_PATTERN},
            "kind": {"enum": list(STATISTIC_KINDS)},
            "column": {"type": "string", "pattern": NAME_PATTERN, "description": "a declared column"},
            "by": {
                "type": "array", "minItems": 1, "uniqueItems": True,
                "items": {"type": "string", "pattern": NAME_PATTERN, "not": {"enum": list(OUTPUT_COLUMNS)}},
                "description": "declared category or bool columns",
            },
            "bins": {
                "oneOf": [
                    {"type": "array", "minItems": 2, "items": _num(), "description": "increasing edges; bin i is [e_i, e_i+1)"},
                    {
                        "type": "object",
                        "properties": {"start": _num(), "stop": _num(), "step": _num(exclusiveMinimum=0)},
                        "required": ["start", "stop", "step"],
                        "additionalProperties": False,
                        "description": f"an even grid of at most {MAX_CELLS} bins",
                    },
                ]
            },
            "weight": _num(exclusiveMinimum=0),
            "epsilon": _num(minimum=_f(MIN_EPSILON), maximum=_f(MAX_RELEASE_EPSILON)),
            "rho": _num(minimum=_f(MIN_RHO), maximum=_f(MAX_RHO)),
            "mechanism": {"enum": list(MECHANISMS)},
        },
        "required": ["name", "kind"],
        "additionalProperties": False,
        "dependentSchemas": {
            "weight": {"not": {"anyOf": [{"required": ["epsilon"]}, {"required": ["rho"]}]}},
            "epsilon": {"not": {"required": ["rho"]}},
        },
        "allOf": [
            {
                "if": {"properties": {"kind": {"const": "count"}}},
                "then": {"not": {"anyOf": [{"required": ["column"]}, {"required": ["bins"]}]}},
                "else": {"required": ["column"]},
            },
            {
                "if": {"properties": {"kind": {"enum": ["sum", "mean"]}}},
                "then": {"not": {"required": ["bins"]}},
            },
            {
                "if": {"properties": {"kind": {"const": "histogram"}}},
                "then": {"properties": {"column": {"not": {"enum": list(OUTPUT_COLUMNS)}}}},
            },
        ],
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "dpcli release spec, version 1",
        "description": (
            "A differentially private release: columns with a-priori bounds, statistics, and the privacy budget. "
            "Cross-field rules (declared columns, budget sums, bounds order, bin order) are checked by "
            "`dpcli check`, not by this schema."
        ),
        "type": "object",
        "properties": {
            "version": {"anyOf": [{"const": 1}, {"const": "1"}]},
            "dataset": {
                "description": "the ledger key whose budget this release spends",
                "anyOf": [
                    {"type": "string", "pattern": DATASET_PATTERN},
                    {"type": "integer", "minimum": 0, "maximum": 10**18},
                ],
            },
            "input": {"type": "string", "minLength": 1, "description": "CSV path relative to this file, or -"},
            "output": {"type": "string", "minLength": 1, "description": "output path relative to this file, or -"},
            "ledger": {"type": "string", "minLength": 1, "description": "ledger path relative to this file"},
            "csv": {
                "type": "object",
                "description": "how the input's records are delimited",
                "properties": {
                    "quoted_line_breaks": {
                        "enum": [True, False, "true", "false"],
                        "description": (
                            "true: the file comes from a correct RFC 4180 writer and quoted fields may hold line "
                            "breaks; the guarantee then assumes that writer. Default false: one line is one record"
                        ),
                    },
                },
                "additionalProperties": False,
            },
            "privacy": {
                "type": "object",
                "properties": {
                    "unit": {"const": "row"},
                    "neighbours": {"enum": list(NEIGHBOURS)},
                    "epsilon": _num(minimum=_f(MIN_EPSILON), maximum=_f(MAX_RELEASE_EPSILON)),
                    "delta": _num(exclusiveMinimum=0, maximum=_f(MAX_DELTA)),
                    "rho": _num(minimum=_f(MIN_RHO), maximum=_f(MAX_RHO)),
                },
                "additionalProperties": False,
                "not": {"required": ["epsilon", "rho"]},
            },
            "columns": {
                "type": "object",
                "minProperties": 1,
                "propertyNames": {"pattern": NAME_PATTERN},
                "additionalProperties": {"$ref": "#/$defs/column"},
            },
            "statistics": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/statistic"}},
        },
        "required": ["version", "dataset", "privacy", "columns", "statistics"],
        "additionalProperties": False,
        "$defs": {
            "number_text": {
                "type": "string",
                "pattern": NUMBER_PATTERN,
                "description": "a number written as text, read exactly: 0.5, 1e-3, 1/3 (no nan, inf, hex or _)",
            },
            "column": {
                "type": "object",
                "required": ["type"],
                "oneOf": [int_column, float_column, category_column, bool_column],
            },
            "statistic": statistic,
        },
    }


def schema_json() -> str:
    return json.dumps(spec_schema(), indent=2, ensure_ascii=False) + "\n"
