"""JSON Schema (draft 2020-12) of release spec version 1, printed by ``dpcli schema``: generated from the same
declaration the loader reads its fields through (``dpcli.specs.v1``), so the two cannot drift.

Editors (e.g. VS Code's YAML extension: ``# yaml-language-server: $schema=spec-v1.schema.json``) and CI validators
check a YAML spec against it. It describes the document *as YAML tools see it* under YAML 1.2's core schema:
``epsilon: 0.5`` is a number there, while dpcli's own loader reads every plain scalar as text and parses numbers
exactly (``dpcli.specs.load``). So wherever the loader takes a number, the schema accepts a JSON number (with the
loader's range) *or* a numeric string in the loader's grammar (``"0.5"``, ``1e-3`` under YAML 1.1, ``1/3``).

The loader and this schema agree in one direction, checked by ``tests/specs/test_schema.py``: a spec the loader accepts
validates (bar the rare forms listed under "stricter" below), and a document the schema accepts is accepted by the
loader *provided* it also meets the loader's cross-field rules, which JSON Schema cannot express (each raises
``dpcli.specs.fields.RuleError``, which tests/specs/test_schema.py checks):

- ``statistics[].column`` and ``by:`` name declared columns, of a type that suits the statistic (sum/mean of a
  numeric column; ``by:`` over category/bool columns; ``bins:`` exactly for histograms of numeric columns), and a
  ``by:`` column is not the histogrammed column; statistic names are unique;
- budget: every statistic names its ``epsilon`` (or ``rho``) or none does; a ``mechanism: gaussian`` statistic needs
  a zCDP budget (``privacy.rho``, or ``epsilon`` with ``delta``), and ``privacy.delta`` with ``epsilon`` needs a
  gaussian statistic or open keys; the exact sum of the weights (or of the named shares) has at most 150 digits in
  numerator and denominator; the named shares add up to at most ``privacy.epsilon`` (or ``rho``): checked when the
  budget is split (``dpcli.plan.budget.split_budget``, run by ``dpcli check``, ``plan`` and ``release``);
- person unit and open keys: ``privacy.unit.id`` is not a declared column (and is among ``csv.header``'s names
  without a header line); a count ``of: persons`` and ``clamp: person`` need a person unit, under which every sum
  and mean states its ``clamp``; an open column (``categories: open``) is a ``by:`` of a count or the column of a
  histogram, at most one per statistic, with ``mechanism: laplace``; ``max_length`` only on an open column; a
  release with open keys has ``privacy.delta``; a statistic's ``delta`` only with open keys, named by every
  open-key statistic or none (by every one in a zCDP release, leaving some of ``privacy.delta``), adding up to at
  most ``privacy.delta``;
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
``version: 1.0`` passes the schema (its ``const: 1`` equals 1.0) while the loader wants the text ``1``, as does an
integer field written ``1e3`` or ``1000.0`` (``max_rows``, ``k``, ``digits``: YAML 1.2 tools read a float whose value
is whole, which JSON Schema's ``integer`` takes) while the loader takes digits only, and a
number written with more than 17 significant digits is a double to YAML 1.2 tools, so the schema checks the double
while the loader counts the digits written. YAML 1.1 tools read ``yes``/``no`` as booleans; the schema follows
YAML 1.2.
"""

from __future__ import annotations

import json

from dpcli.specs.fields import NUMBER_PATTERN, Schema
from dpcli.specs.v1 import COLUMN, PUBLISHES, STATISTIC, TOP

SCHEMA_ID = "https://dpcli.invalid/schema/spec-v1.json"


def spec_schema() -> Schema:
    """The schema as a dict (fresh each call)."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "dpcli release spec, version 1",
        "description": (
            "A differentially private release: columns with a-priori bounds, statistics, and the privacy budget. "
            "Cross-field rules (declared columns, budget sums, bounds order, bin order) are checked by "
            "`dpcli check`, not by this schema."
        ),
        **TOP.schema(),
        # statistics: or synth:, never both (each branch lists every required key: a branch is a whole document)
        "oneOf": [{"required": [*TOP.required, key]} for key in PUBLISHES],
        "$defs": {
            "number_text": {
                "type": "string",
                "pattern": NUMBER_PATTERN,
                "description": "a number written as text, read exactly: 0.5, 1e-3, 1/3 (no nan, inf, hex or _)",
            },
            "column": COLUMN.schema(),
            "statistic": STATISTIC.schema(),
        },
    }


def schema_json() -> str:
    return json.dumps(spec_schema(), indent=2, ensure_ascii=False) + "\n"
