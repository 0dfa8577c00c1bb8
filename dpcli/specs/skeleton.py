"""A spec skeleton from a CSV header (``dpcli init``): the header's names only; a person fills in types, bounds and
categories from documentation, never from the data."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import yaml  # only init writes YAML: this module is imported by it alone, so no other command pays for yaml

from dpcli.specs.fields import NAME_PATTERN

SKELETON_HEAD = """\
# A dpcli spec skeleton: fill in every TODO, then `dpcli check` it.
# For each column you use, replace its `type: TODO` line by the commented line of its type (int, float, category,
# bool) with its a-priori bounds or categories filled in, from documentation or domain knowledge -- never from the
# data. Delete the columns you do not use.
# privacy.neighbours: add_remove (one person's row added or removed) or replace (one row changed).
"""

# A column's choices, written under its TODO line as comments: dpcli never guesses a type (not even from the name)
CHOICES = (
    "{type: int, bounds: [LOW, HIGH]}",
    "{type: float, bounds: [LOW, HIGH], precision: 0.01}",
    "{type: category, categories: [A, B, C]}",
    "{type: bool}",
)


def spec_skeleton(csv: Path, header: list[str], spec_dir: Path) -> str:
    """The skeleton's YAML, through PyYAML's emitter (it quotes what needs quoting: names and paths with spaces,
    colons, '#', quotes or leading dashes round-trip through the loader). ``input:`` is relative to ``spec_dir``."""
    dataset = (re.sub(r"[^A-Za-z0-9_.-]", "_", csv.stem).lstrip(".-") or "dataset")[:128]
    usable = [name for name in header if re.fullmatch(NAME_PATTERN, name)]
    # a header name the spec cannot declare is listed in a comment, escaped to one line of ASCII (json.dumps)
    unusable = "".join(f"#   {json.dumps(name)}\n" for name in header if name not in usable)
    if unusable:
        unusable = (
            "# These header names cannot be declared (a column name is letters, digits, _ . -, starting with a "
            "letter or _):\n" + unusable
        )
    doc = {
        "version": 1,
        "dataset": dataset,
        "input": os.path.relpath(csv.absolute(), spec_dir),
        "privacy": {"unit": "row", "neighbours": "add_remove", "epsilon": 1.0},  # a number, as a person writes it
    }
    # the columns are written by hand between the emitter's two parts: each is followed by comment lines
    columns = "columns:\n" + "".join(_column_lines(name) for name in usable) if usable else "columns: {}\n"
    statistics = _dump({"statistics": [{"name": "rows", "kind": "count"}]})
    return SKELETON_HEAD + unusable + _dump(doc) + columns + statistics


def _dump(doc: object) -> str:
    return yaml.dump(doc, Dumper=_SkeletonDumper, sort_keys=False, allow_unicode=True, default_flow_style=None,
                     width=1_000_000)


def _column_lines(name: str) -> str:
    """A column's TODO line, then one commented line per type to choose from (its name quoted as YAML needs)."""
    key = yaml.dump({name: 0}, Dumper=_SkeletonDumper, allow_unicode=True, default_flow_style=False,
                    width=1_000_000)[: -len(": 0\n")]
    return f"  {key}: {{type: TODO}}\n" + "".join(f"  # {key}: {choice}\n" for choice in CHOICES)


class _Flow(dict[str, object]):
    """A mapping written on one line, ``privacy: {unit: row, ...}``."""


class _SkeletonDumper(yaml.SafeDumper):
    """PyYAML's safe emitter, writing a ``_Flow`` in flow style."""


def _represent_flow(dumper: yaml.SafeDumper, data: _Flow) -> yaml.Node:
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=True)


_SkeletonDumper.add_representer(_Flow, _represent_flow)
