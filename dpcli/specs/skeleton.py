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
# For each column you use: type (int, float, category, bool) and its a-priori bounds or categories, from
# documentation or domain knowledge -- never from the data. Delete the columns you do not use.
# privacy.neighbours: add_remove (one person's row added or removed) or replace (one row changed).
"""


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
        "privacy": {"unit": "row", "neighbours": "add_remove", "epsilon": "1.0"},
        "columns": {name: _Flow(type="TODO", bounds=["TODO", "TODO"]) for name in usable},
        "statistics": [{"name": "rows", "kind": "count"}],
    }
    body = yaml.dump(doc, Dumper=_SkeletonDumper, sort_keys=False, allow_unicode=True, default_flow_style=None,
                     width=1_000_000)
    return SKELETON_HEAD + unusable + body


class _Flow(dict[str, object]):
    """A mapping written on one line, ``age: {type: TODO, bounds: [TODO, TODO]}``: one column per line."""


class _SkeletonDumper(yaml.SafeDumper):
    """PyYAML's safe emitter, writing a ``_Flow`` in flow style."""


def _represent_flow(dumper: yaml.SafeDumper, data: _Flow) -> yaml.Node:
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=True)


_SkeletonDumper.add_representer(_Flow, _represent_flow)
