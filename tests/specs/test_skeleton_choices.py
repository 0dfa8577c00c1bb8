"""Issue 25 (8): `dpcli init`'s skeleton offers each column its choice of type as commented lines (no bounds TODO
forced on a text column; no type guessed, not even from the header's names), and writes epsilon as a number."""

from __future__ import annotations

from pathlib import Path

from dpcli.specs.load import parse_spec
from dpcli.specs.skeleton import spec_skeleton

HEADER = ["age", "sex", "yes", "a.b-c"]


def test_each_column_has_a_todo_line_and_its_commented_choices(tmp_path: Path) -> None:
    text = spec_skeleton(tmp_path / "people.csv", HEADER, tmp_path)
    assert "bounds: [TODO" not in text
    assert "\nprivacy: {unit: row, neighbours: add_remove, epsilon: 1.0}\n" in text  # a number, not '1.0'
    lines = text.splitlines()
    for name, key in zip(HEADER, ["age", "sex", "'yes'", "a.b-c"], strict=True):
        at = lines.index(f"  {key}: {{type: TODO}}")
        assert lines[at + 1 : at + 5] == [
            f"  # {key}: {{type: int, bounds: [LOW, HIGH]}}",
            f"  # {key}: {{type: float, bounds: [LOW, HIGH], precision: 0.01}}",
            f"  # {key}: {{type: category, categories: [A, B, C]}}",
            f"  # {key}: {{type: bool}}",
        ], name


def test_a_chosen_line_uncommented_makes_a_valid_spec(tmp_path: Path) -> None:
    text = spec_skeleton(tmp_path / "people.csv", HEADER, tmp_path)
    chosen = {
        "age": "  # age: {type: int, bounds: [LOW, HIGH]}",
        "sex": "  # sex: {type: category, categories: [A, B, C]}",
        "'yes'": "  # 'yes': {type: bool}",
        "a.b-c": "  # a.b-c: {type: float, bounds: [LOW, HIGH], precision: 0.01}",
    }
    for key, line in chosen.items():
        text = text.replace(f"  {key}: {{type: TODO}}\n", "").replace(line, "  " + line[4:])
    spec = parse_spec(text.replace("LOW", "0").replace("HIGH", "9"))
    assert {name: c.type for name, c in spec.columns.items()} == {
        "age": "int", "sex": "category", "yes": "bool", "a.b-c": "float"
    }
    assert spec.privacy.epsilon == 1
