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
  ``epsilon`` with ``delta``), and ``privacy.delta`` with ``epsilon`` needs a gaussian statistic;
- bounds: low < high; a float column's bounds/precision span 2 to 2^53 grid steps; ``impute`` lies within the
  bounds or is a declared key; ``other`` is a declared category;
- bins: edges strictly increasing; a grid's ``stop > start`` and a whole number of steps; at most 10^7 cells per
  statistic;
- numbers written as *strings* are checked for their form only (a pattern cannot check a range); category values
  must differ as text (the schema's ``uniqueItems`` compares typed values, so ``[1, "1"]`` passes it);
- the planner's limit (a noise scale of at most 2^40 grid steps: bounds too wide for the epsilon) is checked by
  ``dpcli check`` and ``dpcli plan``, after the loader.

Stricter than the loader (rare; quote the value to satisfy both): names and paths that YAML reads as another type
(``name: true``, ``output: 2020``, ``dataset: 1e5``) and numbers with surrounding spaces inside quotes. One more
gap the other way: ``version: 1.0`` passes the schema (its ``const: 1`` equals 1.0) while the loader wants the
text ``1``. YAML 1.1 tools read ``yes``/``no`` as booleans; the schema follows YAML 1.2.
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

# The loader's number grammar (dpcli.accounting.parse_exact): decimal or scientific notation with ASCII digits and
# an exponent of at most 400, or an exact fraction p/q; no leading zeros (see below). Spelled with [0-9] (not \d, which is Unicode in Python).
# No leading zero in the integer part (``010`` is octal 8 to YAML 1.1 tools: the loader refuses it).
NUMBER_PATTERN = (
    r"^(?:[+-]?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?0*(?:[0-9]{1,2}|[1-3][0-9]{2}|400))?"
    r"|[+-]?(?:0|[1-9][0-9]*)/[1-9][0-9]*)$"
)
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.\-]{0,127}$"
DATASET_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$"


def _num(**limits: Any) -> dict:
    """A number as YAML tools see it: a JSON number within ``limits``, or a numeric string (form only)."""
    return {"anyOf": [{"type": "number", **limits}, {"$ref": "#/$defs/number_text"}]}


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
