"""A spec's unknown field, or a statistic's column that is not declared, is refused (exit 2) with the closest names,
as the command line suggests its own commands (issue 25, "Helpful refusals")."""

from __future__ import annotations

import pytest

from dpcli.errors import SpecError
from dpcli.specs.load import parse_spec
from dpcli.specs.randomize import parse_randomize_spec
from tests.helpers import run_in_process
from tests.spec_builder import spec_text

COLUMNS = {
    "hours_per_week": "{type: int, bounds: [0, 99]}",
    "sex": "{type: category, categories: [F, M]}",
    "race": "{type: category, categories: [a, b]}",
}


def refusal(text: str) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(text)
    assert info.value.exit_code == 2
    return str(info.value)


def test_a_statistics_column_that_is_not_declared_names_the_closest_declared_one():
    text = spec_text(COLUMNS, ["{name: h, kind: mean, column: hours_per_wek}"])
    assert refusal(text) == (
        "statistics[0].column: 'hours_per_wek' is not a declared column; did you mean 'hours_per_week'?"
    )


def test_a_by_that_is_not_declared_names_the_closest_declared_one():
    text = spec_text(COLUMNS, ["{name: n, kind: count, by: [sexe]}"])
    assert refusal(text) == "statistics[0].by[0]: 'sexe' is not a declared column; did you mean 'sex'?"


def test_no_suggestion_when_nothing_is_close():
    text = spec_text(COLUMNS, ["{name: n, kind: count, by: [postcode]}"])
    assert refusal(text) == "statistics[0].by[0]: 'postcode' is not a declared column"


def test_an_unknown_field_names_the_closest_allowed_one():
    text = spec_text(COLUMNS, ["{name: h, kind: mean, colum: hours_per_week}"])
    message = refusal(text)
    assert message.startswith("statistics[0].colum: unknown field (allowed: ")
    assert message.endswith("); did you mean 'column' or 'clamp'?")
    top = spec_text(COLUMNS, extra="statistic:\n  - {name: n, kind: count}\n")
    assert refusal(top).endswith("); did you mean 'statistics'?")
    privacy = spec_text(COLUMNS, privacy="unit: row, neighbours: add_remove, epsilom: 1")
    assert refusal(privacy) == (
        "privacy.epsilom: unknown field (allowed: unit, neighbours, epsilon, delta, rho); did you mean 'epsilon'?"
    )


def test_a_randomize_column_that_is_not_declared_names_the_closest_declared_one():
    text = (
        "version: 1\ndataset: s\nprivacy: {unit: row, neighbours: replace, epsilon: 1}\n"
        "columns:\n  colour: {type: category, categories: [red, blue]}\nrandomize:\n  columns: [color]\n"
    )
    with pytest.raises(SpecError) as info:
        parse_randomize_spec(text)
    assert str(info.value) == "randomize.columns[0]: 'color' is not a declared column; did you mean 'colour'?"


def test_the_cli_says_it_on_one_line_with_exit_2(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(COLUMNS, ["{name: h, kind: mean, column: hours_per_wek}"]))
    result = run_in_process("check", spec)
    assert result.returncode == 2
    assert result.stderr.decode() == (
        f"dpcli: error: {spec}: statistics[0].column: 'hours_per_wek' is not a declared column; "
        "did you mean 'hours_per_week'?\n"
    )
