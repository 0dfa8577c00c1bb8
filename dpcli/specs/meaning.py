"""A spec's canonical meaning: what a re-run under a paid release id must ask for to be given the paid result.

It is the typed spec's fields that define the mechanisms and what they publish (release: the dataset, privacy, the
declared columns' types, bounds, grids, bins and keys, the statistics, their post-processing and the confidence, or
a synth spec's ``synth:`` section;
randomize: the dataset, privacy and the chosen columns), written as canonical JSON (keys sorted, numbers as exact
fractions ``p/q``, defaults filled in by the loader) and hashed. The spec's text is not in it: comments, whitespace,
key order and number spelling (``0.5``, ``1/2``, ``5e-1``) never change it, nor do the fields that say where things
are or how the input is read (input, output, ledger, csv, input format, engine) or what only planning reads
(``target``, ``expected_rows``). A function of the spec alone: never of the input.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from dpcli.errors import InternalError
from dpcli.specs.model import Spec, Statistic
from dpcli.specs.randomize import RandomizeSpec

__all__ = ["meaning_sha256", "randomize_meaning", "release_meaning"]

# The typed spec's fields that are no meaning: where things are, how the input is read, the spec's own text and its
# name (which is in the re-run key). Every other field is meaning, a field added later included: a re-run with a
# spec that differs in it is refused, never given a table paid for another question.
_NOT_MEANING = frozenset({
    "input", "output", "ledger", "source", "sha256", "csv", "quoted_line_breaks", "input_format", "engine", "name",
    "input_template",  # where a series' per-period files are
    "expected_rows",  # planning only (dpcli.plan.what_if)
})
# A statistic's fields that only planning reads (dpcli.plan.what_if): they change no mechanism and no output
_PLANNING_ONLY = ("target", "expected_rows")


def release_meaning(spec: Spec) -> str:
    """The sha256 of a release spec's canonical meaning (hex)."""
    fields = _meaning_fields(spec)
    if spec.synth is None:
        # a spec without synth: means what it meant before synth: existed (its paid release ids keep their meaning)
        del fields["synth"]
    return meaning_sha256({"command": "release", **fields, "statistics": [_statistic(s) for s in spec.statistics]})


def randomize_meaning(spec: RandomizeSpec) -> str:
    """The sha256 of a randomize spec's canonical meaning (hex): its privacy and the chosen columns in output order."""
    return meaning_sha256({"command": "randomize", **_meaning_fields(spec)})


def _meaning_fields(spec: Spec | RandomizeSpec) -> dict[str, Any]:
    return {f.name: canonical(getattr(spec, f.name)) for f in dataclasses.fields(spec) if f.name not in _NOT_MEANING}


def meaning_sha256(meaning: dict[str, Any]) -> str:
    text = json.dumps(meaning, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _statistic(stat: Statistic) -> dict[str, Any]:
    fields = {f.name: canonical(getattr(stat, f.name)) for f in dataclasses.fields(stat)}
    for name in _PLANNING_ONLY:
        fields.pop(name, None)
    return {**fields, "kind": stat.kind}  # a ClassVar on most kinds: not among the dataclass's fields


def canonical(value: Any) -> Any:
    """``value`` (a typed spec's part) as JSON-ready data, the same for every way of writing it: a Fraction as
    exact ``p/q`` text, a mapping with sorted keys (its order in the spec is no meaning), a tuple as a list (its
    order is)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, Fraction):
        return f"{value.numerator}/{value.denominator}"
    if isinstance(value, tuple):
        return [canonical(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): canonical(value[k]) for k in sorted(value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    raise InternalError(f"a spec's meaning has no canonical form for a {type(value).__name__}")
