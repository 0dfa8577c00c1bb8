"""The ``--json`` documents: each command's one JSON object, its format version and exit code, and the JSON Schema
of each (docs/json.md is generated from ``SCHEMAS``; tests/cli/test_json.py validates every command's output against
it).

Every object carries ``format`` (``dpcli.COMMAND/1``; ``budget set`` is ``dpcli.budget-set/1``) and ``exit_code``
(the process's). An error is an object with ``error`` (``code``, ``kind``, ``message`` and the numbers the message
states as fields, dpcli/errors.py ``fields()``), under the command's own format. ``budget show`` and ``ledger show``
print JSON arrays since 0.1: they stay arrays (a script indexing them keeps working), so only their errors carry a
format. Fields are only ever added within a format version; a renamed or retyped field is a new version.
"""

from __future__ import annotations

from typing import Any

# the commands whose --json document goes to standard output; release and randomize write theirs on stderr, since
# their stdout may be the table (`-o -`)
STDOUT_COMMANDS = frozenset({
    "check", "plan", "audit", "report", "init", "budget set", "budget show", "ledger show", "ledger verify",
})
COMMANDS = ("release", "randomize", "synth", *sorted(STDOUT_COMMANDS))
VERSION = 1


def format_name(command: str | None) -> str:
    """The ``format`` of a command's documents: ``dpcli.check/1``; ``dpcli/1`` when no command was recognised."""
    return f"dpcli.{command.replace(' ', '-')}/{VERSION}" if command else f"dpcli/{VERSION}"


def command_of(argv: list[str]) -> str | None:
    """The command an argument list runs (``budget set`` for a sub-command), or None."""
    words = [a for a in argv if not a.startswith("-")][:2]
    for n in (2, 1):
        name = " ".join(words[:n])
        if len(words) >= n and name in COMMANDS:
            return name
    return None


def stamped(command: str, doc: dict[str, Any], exit_code: int = 0) -> dict[str, Any]:
    """``doc`` with its format and exit code first."""
    return {"format": format_name(command), "exit_code": exit_code, **doc}


def error_fields(code: int, kind: str, message: str, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """An error's ``error`` member: the old three fields, then the ones its class states (None values left out)."""
    out: dict[str, Any] = {"code": code, "kind": kind, "message": message}
    out.update({k: v for k, v in (fields or {}).items() if v is not None})
    return out


# -- the schemas (JSON Schema draft 2020-12) ---------------------------------------------------------------------

EXACT = {"type": "string", "description": "an exact number's text: `0.25`, `7`, `1/7`"}
EXACT_OR_NULL = {"type": ["string", "null"], "description": EXACT["description"]}
TEXT_OR_NULL = {"type": ["string", "null"]}
KINDS = ["usage", "spec", "input", "budget", "ledger", "spent_then_failed", "audit", "interrupted", "resource",
         "internal"]

PROBLEM: dict[str, Any] = {
    "type": "object",
    "required": ["code", "kind", "message"],
    "properties": {
        "code": {"type": "integer", "description": "the exit code this problem alone gives"},
        "kind": {"enum": KINDS},
        "message": {"type": "string", "description": "the `dpcli: error:` line's text, without the prefix"},
        "file": {"type": ["string", "null"], "description": "spec: the spec file"},
        "path": {"type": "string", "description": "spec: the YAML path of the field (`statistics[2].column`)"},
        "dataset": {"type": "string", "description": "budget: the dataset"},
        "ledger": {"type": "string", "description": "budget: the ledger (a URL without its password)"},
        "requested": {**EXACT, "description": "budget: the ε the release charges"},
        "remaining": {**EXACT, "description": "budget: the ε the cap has left"},
        "cap": {**EXACT, "description": "budget: the dataset's ε cap"},
        "short_by": {**EXACT, "description": "budget: requested − remaining"},
        "requested_delta": {**EXACT, "description": "budget: the δ partition selections charge"},
        "remaining_delta": {**EXACT, "description": "budget: the cap's δ left"},
        "cap_delta": {**EXACT, "description": "budget: the cap's δ"},
        "record": {"type": "integer", "description": "budget: the record that set the cap; ledger, "
                   "spent_then_failed: the spend record that paid"},
        "period": {"type": "string", "description": "budget: a renewing cap's declared period that refused"},
        "release_id": {"type": "string", "description": "spent_then_failed: the release id paid for"},
        "stored": {"type": "boolean",
                   "description": "spent_then_failed: whether the result is stored (the release id writes it)"},
    },
}


def _format(command: str) -> dict[str, Any]:
    return {"const": format_name(command)}


EXIT_CODE = {"type": "integer", "description": "the process's exit status"}


def _error(command: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["format", "exit_code", "error"],
        "properties": {"format": _format(command), "exit_code": EXIT_CODE, "error": PROBLEM},
    }


def _document(command: str, required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    """A command's schema: its result or its error (an object with ``error``)."""
    result = {
        "type": "object",
        "required": ["format", "exit_code", *required],
        "properties": {"format": _format(command), "exit_code": EXIT_CODE, **properties},
        "not": {"required": ["error"]},
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"dpcli {command} --json",
        "oneOf": [result, _error(command)],
    }


def _legacy_array(command: str, item: dict[str, Any]) -> dict[str, Any]:
    """budget show and ledger show: the array they print since 0.1, or their error object."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"dpcli {command} --json",
        "oneOf": [{"type": "array", "items": item}, _error(command)],
    }


PER = {"const": "period", "description": "present for a cap that renews per declared period (`budget set --per "
       "period`: cap, cap_delta bound each period); a lifetime cap's object has none of the per-period fields"}
PERIOD = {
    "type": "object", "required": ["period", "spent", "remaining", "releases"],
    "properties": {"period": {"type": "string", "description": "the declared period's key (a release id)"},
                   "spent": EXACT, "remaining": EXACT_OR_NULL, "releases": {"type": "integer"},
                   "spent_rho": EXACT, "spent_delta": EXACT},
}

RELEASE = {
    "dataset": {"type": "string"}, "statistics": {"type": "integer", "description": "how many statistics"},
    "rows": {"type": "integer"}, "epsilon_spent": EXACT, "rho_spent": EXACT, "epsilon_remaining": EXACT_OR_NULL,
    "epsilon_cap": EXACT_OR_NULL, "output": {"type": "string", "description": "`-`: standard output"},
    "ledger": {"type": "string"}, "ledger_record": {"type": "integer"}, "ledger_head": {"type": "string"},
    "release_id": {"type": "string"}, "reused": {"type": "boolean"},
    "warnings": {"type": "array", "items": {"type": "string"}},
    "report": {**TEXT_OR_NULL, "description": "with --report or --summary-md: the report's path"},
    "period": {"type": "string", "description": "a renewing cap (`budget set --per period`): the declared period "
               "charged (the release id); epsilon_remaining and epsilon_cap are that period's"},
    "cap_note": {"type": "string", "description": "with period: what a renewing cap means (k periods: k·ε)"},
    "series_period": {"type": "integer", "description": "a series: the period released"},
    "series_charged": {"type": "boolean", "description": "a series: this run made the series' one charge"},
}

SCHEMAS: dict[str, dict[str, Any]] = {
    "release": _document("release", ["dataset", "epsilon_spent", "ledger_record", "release_id", "reused"], RELEASE),
    "randomize": _document("randomize", ["dataset", "epsilon_spent", "ledger_record", "release_id", "reused"], {
        "dataset": {"type": "string"}, "columns": {"type": "array", "items": {"type": "string"}},
        "rows": {"type": "integer"}, "epsilon_spent": EXACT, "epsilon_remaining": EXACT_OR_NULL,
        "output": {"type": "string"}, "output_sha256": {"type": "string"}, "ledger": {"type": "string"},
        "ledger_record": {"type": "integer"}, "release_id": {"type": "string"}, "reused": {"type": "boolean"},
        "period": RELEASE["period"], "cap_note": RELEASE["cap_note"],
    }),
    "synth": _document("synth", ["dataset", "rho_spent", "ledger_record", "release_id", "reused"], {
        "dataset": {"type": "string"}, "method": {"type": "string"},
        "columns": {"type": "array", "items": {"type": "string"}},
        "selected": {"type": "array", "items": {"type": "array", "items": {"type": "string"}},
                     "description": "the pairs the tree selected, in selection order"},
        "rows": {"type": "integer", "description": "synthetic rows written: declared, or from the noisy total"},
        "rho_spent": EXACT, "epsilon_remaining": EXACT_OR_NULL, "epsilon_cap": EXACT_OR_NULL,
        "output": {"type": "string"}, "marginals": TEXT_OR_NULL, "sidecar": TEXT_OR_NULL, "report": TEXT_OR_NULL,
        "ledger": {"type": "string"}, "ledger_record": {"type": "integer"}, "release_id": {"type": "string"},
        "reused": {"type": "boolean"}, "period": RELEASE["period"], "cap_note": RELEASE["cap_note"],
    }),
    "check": _document("check", ["valid", "spec", "problems"], {
        "valid": {"type": "boolean"}, "spec": {"type": "string"},
        "problems": {"type": "array", "items": PROBLEM,
                     "description": "every problem found: each error of the spec, the ledger's, the input header's"},
        "randomize": {"type": "boolean"},
        "synth": {"type": "boolean", "description": "a synth spec (checked: its spec, plan and input header)"},
        "statistics": {"type": ["integer", "null"]},
        "size": {**TEXT_OR_NULL, "description": "cells and memory estimate, in words"},
        "cost": {**TEXT_OR_NULL, "description": "what the release charges, in words"},
        "input_checked": {**TEXT_OR_NULL, "description": "the input whose header has every declared column"},
        "ledger": {**TEXT_OR_NULL, "description": "the ledger checked (with --ledger)"},
        "release_id": TEXT_OR_NULL,
        "paid_record": {"type": ["integer", "null"],
                        "description": "the spend record that already paid for --release-id: release would write its "
                        "stored table again, spending nothing"},
    }),
    "plan": _document("plan", ["dataset"], {
        "dataset": {"type": "string"}, "epsilon": EXACT,
        "statistics": {"type": "array", "items": {"type": "object"}},
        "columns": {"type": "array", "items": {"type": "object"}, "description": "a randomize spec's plan"},
        "synth": {"type": "object", "description": "a synth spec's plan: its domain, rho per step, sigma^2 per "
                  "marginal, the selection's epsilon and the derivations"},
        "series": {"type": "object", "description": "a series: its charge, horizon, design, derivation, errors at "
                   "chosen periods and the periods (with an input template, the files) each run reads"},
    }),
    "audit": _document("audit", ["dataset"], {
        "dataset": {"type": "string"}, "ok": {"type": "boolean"},
        "statistics": {"type": "array", "items": {"type": "object"}},
    }),
    "report": _document("report", ["report", "table"], {
        "report": {"type": "string", "description": "the HTML report written"},
        "table": {"type": "string"}, "summary_md": {**TEXT_OR_NULL, "description": "the Markdown summary appended to"},
    }),
    "init": _document("init", ["output", "header_columns"], {
        "output": {**TEXT_OR_NULL, "description": "the spec file written; null: the skeleton is in `spec`"},
        "spec": {"type": "string", "description": "the skeleton's YAML, when no -o was given"},
        "header_columns": {"type": "integer", "description": "how many columns the header has"},
    }),
    "budget set": _document("budget set", ["dataset", "cap", "spent", "remaining", "record"], {
        "dataset": {"type": "string"}, "cap": EXACT, "cap_delta": EXACT, "raised": {"type": "boolean"},
        "spent": {**EXACT, "description": "a renewing cap: the sum of its periods' spends"},
        "remaining": {**EXACT, "description": "a renewing cap: what a period not charged yet has (the cap)"},
        "record": {"type": "integer", "description": "the cap record written"},
        "per": PER, "periods_seen": {"type": "integer", "description": "the periods a renewing cap has charged"},
        "note": {"type": "string", "description": "a renewing cap: what it means (k periods: k·ε)"},
        "warnings": {"type": "array", "items": {"type": "string"}},
    }),
    "ledger verify": _document("ledger verify", ["ok", "records", "head", "keyed"], {
        "ok": {"const": True}, "records": {"type": "integer"},
        "head": {"type": "string"}, "keyed": {"type": "boolean"},
        "against": {"type": "array", "items": {"type": "string"},
                    "description": "the --against items given (each head found in the chain: else the error)"},
    }),
    "budget show": _legacy_array("budget show", {
        "type": "object", "required": ["dataset", "cap", "spent", "remaining", "releases"],
        "properties": {"dataset": {"type": "string"}, "cap": EXACT_OR_NULL, "spent": EXACT,
                       "remaining": EXACT_OR_NULL, "releases": {"type": "integer"}, "per": PER,
                       "periods_seen": {"type": "integer", "description": "per period: the periods charged"},
                       "periods": {"type": "array", "items": PERIOD,
                                   "description": "per period: every period charged, in the order first charged"},
                       "note": {"type": "string", "description": "per period: what the cap means"},
                       "series": {"type": "array", "items": {"type": "object"},
                                  "description": "the series the dataset hosts and how far each has gone"}},
    }),
    "ledger show": _legacy_array("ledger show", {
        "type": "object", "required": ["seq", "type"],
        "properties": {"seq": {"type": "integer"}, "type": {"type": "string"}},
    }),
}
