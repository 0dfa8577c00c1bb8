"""Every validation rule of dpcli/spec/model.py: a good case and a bad case, with the full one-line message."""

from __future__ import annotations

import dataclasses
import tracemalloc
from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.errors import SpecError, UsageError
from dpcli.plan.model import make_plan, split_budget
from dpcli.spec.model import (
    MAX_SPEC_BYTES,
    EdgeBins,
    GridBins,
    default_precision,
    load_spec,
    parse_spec,
)

COLUMNS = """\
  age: {type: int, bounds: [17, 90]}
  gain: {type: float, bounds: [0, 99999], precision: 1}
  sex: {type: category, categories: [Female, Male]}
  flag: {type: bool}
"""
STATS = "  - {name: n, kind: count}\n"
PRIVACY = "{unit: row, neighbours: add_remove, epsilon: 1}"


def text(
    columns: str = COLUMNS,
    statistics: str = STATS,
    privacy: str = PRIVACY,
    head: str = "version: 1\ndataset: adult\n",
    extra: str = "",
) -> str:
    return f"{head}privacy: {privacy}\ncolumns:\n{columns}statistics:\n{statistics}{extra}"


def col(body: str) -> str:
    """A spec whose only column is x, declared with ``body``."""
    return text(columns=f"  x: {body}\n")


def stat(*lines: str, privacy: str = PRIVACY) -> str:
    return text(statistics="".join(f"  - {line}\n" for line in lines), privacy=privacy)


def error(spec_text: str, planned: bool = False) -> str:
    """The one-line error of a spec (``planned``: refused by planning, after the loader accepted it)."""
    with pytest.raises(SpecError) as info:
        make_plan(parse_spec(spec_text)) if planned else parse_spec(spec_text)
    exc = info.value
    assert exc.exit_code == 2
    assert isinstance(exc, UsageError)
    message = str(exc)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------------------------------------------------
# The good case everything else varies


def test_base_spec_is_valid_and_typed():
    spec = parse_spec(text())
    assert spec.version == "1"
    assert spec.dataset == "adult"
    assert spec.privacy.unit == "row"
    assert spec.privacy.neighbours == "add_remove"
    assert spec.privacy.epsilon == Fraction(1)
    assert list(spec.columns) == ["age", "gain", "sex", "flag"]
    age = spec.columns["age"]
    assert (age.type, age.bounds, age.precision, age.categories, age.impute) == (
        "int", (Fraction(17), Fraction(90)), Fraction(1), None, None
    )
    assert age.grid_bounds == (17, 90)
    assert spec.columns["gain"].precision == Fraction(1)
    assert spec.columns["sex"].keys == ("Female", "Male")
    assert spec.columns["flag"].keys == ("false", "true")
    assert spec.statistics[0].name == "n"
    assert spec.statistics[0].kind == "count"
    assert split_budget(spec).shares == (Fraction(1),)
    assert spec.input is None
    assert spec.output is None
    assert spec.ledger is None


def test_defaults_for_unit_and_neighbours():
    spec = parse_spec(text(privacy="{epsilon: 0.5}"))
    assert spec.privacy.unit == "row"
    assert spec.privacy.neighbours == "add_remove"
    assert spec.privacy.epsilon == Fraction(1, 2)


def test_paths_are_relative_to_the_spec_directory(tmp_path):
    spec = parse_spec(text(extra="input: data/a.csv\noutput: '-'\nledger: l.jsonl\n"), base_dir=tmp_path)
    assert spec.input == tmp_path / "data" / "a.csv"
    assert spec.output == Path("-")
    assert spec.ledger == tmp_path / "l.jsonl"
    assert error(text(extra="input: ''\n")) == "input: empty path"


# ---------------------------------------------------------------------------------------------------------------
# Unknown and missing fields


TOP_ALLOWED = (
    "(allowed: version, dataset, input, output, ledger, input_format, engine, csv, privacy, columns, statistics, "
    "confidence, expected_rows, postprocess)"
)
STAT_ALLOWED = (
    "(allowed: name, kind, column, by, bins, weight, epsilon, rho, mechanism, of, clamp, delta, q, step, k, "
    "randomized, interval, target, expected_rows, postprocess)"
)
PRIVACY_ALLOWED = "(allowed: unit, neighbours, epsilon, delta, rho)"
COLUMN_ALLOWED = "(allowed: type, bounds, precision, categories, impute, other, max_length)"


@pytest.mark.parametrize(
    ("spec_text", "message"),
    [
        (text(extra="seed: 1\n"), f"seed: unknown field {TOP_ALLOWED}"),
        (text(extra="sensitivity: 1\n"), f"sensitivity: unknown field {TOP_ALLOWED}"),
        (text(privacy="{epsilon: 1, scale: 2}"), f"privacy.scale: unknown field {PRIVACY_ALLOWED}"),
        (text(privacy="{epsilon: 1, seed: 7}"), f"privacy.seed: unknown field {PRIVACY_ALLOWED}"),
        (
            col("{type: int, bounds: [0, 9], cap: 3}"),
            f"columns.x.cap: unknown field {COLUMN_ALLOWED}",
        ),
        (
            col("{type: int, bounds: [0, 9], sensitivity: 3}"),
            f"columns.x.sensitivity: unknown field {COLUMN_ALLOWED}",
        ),
        (stat("{name: n, kind: count, sensitivity: 1}"), f"statistics[0].sensitivity: unknown field {STAT_ALLOWED}"),
        (
            stat("{name: n, kind: count}", "{name: m, kind: count, seed: 42}"),
            f"statistics[1].seed: unknown field {STAT_ALLOWED}",
        ),
        (stat("{name: n, kind: count, scale: 3}"), f"statistics[0].scale: unknown field {STAT_ALLOWED}"),
        (stat("{name: n, kind: count, cap: 3}"), f"statistics[0].cap: unknown field {STAT_ALLOWED}"),
        (
            stat("{name: h, kind: histogram, column: age, bins: {start: 0, stop: 100, step: 1, scale: 2}}"),
            "statistics[0].bins.scale: unknown field (allowed: start, stop, step)",
        ),
        # a merge key is not special: it is an unknown field like any other
        (text(extra="x: {<<: {a: 1}}\n"), f"x: unknown field {TOP_ALLOWED}"),
    ],
)
def test_unknown_fields_at_every_level(spec_text, message):
    assert error(spec_text) == message


@pytest.mark.parametrize(
    ("spec_text", "message"),
    [
        (text(head="dataset: adult\n"), "version: required field is missing"),
        (text(head="version: 1\n"), "dataset: required field is missing"),
        (
            "version: 1\ndataset: a\ncolumns:\n" + COLUMNS + "statistics:\n" + STATS,
            "privacy: required field is missing",
        ),
        (
            "version: 1\ndataset: a\nprivacy: " + PRIVACY + "\nstatistics:\n" + STATS,
            "columns: required field is missing",
        ),
        (
            "version: 1\ndataset: a\nprivacy: " + PRIVACY + "\ncolumns:\n" + COLUMNS,
            "statistics: required field is missing",
        ),
        ("", "version: required field is missing"),
        (
            text(privacy="{unit: row}"),
            "privacy.epsilon: required field is missing (or give every statistic its own epsilon)",
        ),
        (col("{bounds: [0, 1]}"), "columns.x.type: required field is missing"),
        (stat("{kind: count}"), "statistics[0].name: required field is missing"),
        (stat("{name: n}"), "statistics[0].kind: required field is missing"),
        (
            stat("{name: h, kind: histogram, column: age, bins: {start: 0, stop: 100}}"),
            "statistics[0].bins.step: required field is missing",
        ),
    ],
)
def test_missing_required_fields(spec_text, message):
    assert error(spec_text) == message


@pytest.mark.parametrize(
    ("spec_text", "message"),
    [
        ("- 1\n", "expected a mapping"),
        ("hello\n", "expected a mapping"),
        (text(privacy="[1]"), "privacy: expected a mapping"),
        (text(columns="  []\n"), "columns: expected a mapping of at least one column"),
        (text(columns="  {}\n"), "columns: expected a mapping of at least one column"),
        (col("[int]"), "columns.x: expected a mapping"),
        (stat("n"), "statistics[0]: expected a mapping"),
        (text(statistics="  {name: n}\n"), "statistics: expected a list"),
        (text(head="version: 1\ndataset: [a]\n"), "dataset: expected a single value, not a list or mapping"),
    ],
)
def test_shapes(spec_text, message):
    assert error(spec_text) == message


# ---------------------------------------------------------------------------------------------------------------
# version, dataset, privacy


@pytest.mark.parametrize("version", ["1", "'1'", '"1"'])
def test_version_1_accepted(version):
    assert parse_spec(text(head=f"version: {version}\ndataset: a\n")).version == "1"


@pytest.mark.parametrize("version", ["2", "1.0", "01", "v1"])
def test_other_versions_refused(version):
    expected = f"version: unsupported spec version '{version}' (this dpcli reads version 1)"
    assert error(text(head=f"version: {version}\ndataset: a\n")) == expected


@pytest.mark.parametrize("name", ["adult", "a", "0day", "census_2020.v-1", "_x", "a" * 128])
def test_dataset_name_ok(name):
    assert parse_spec(text(head=f"version: 1\ndataset: '{name}'\n")).dataset == name


@pytest.mark.parametrize("name", ["a b", "", "../x", ".hidden", "-x", "a/b", "é", "a" * 129])
def test_dataset_name_refused(name):
    expected = f"dataset: '{name[:60]}' is not a valid dataset name (letters, digits, _ . -)"
    assert error(text(head=f"version: 1\ndataset: '{name}'\n")) == expected


def test_neighbours():
    assert parse_spec(text(privacy="{neighbours: replace, epsilon: 1}")).privacy.neighbours == "replace"
    assert parse_spec(text(privacy="{neighbours: add_remove, epsilon: 1}")).privacy.neighbours == "add_remove"
    assert error(text(privacy="{neighbours: swap, epsilon: 1}")) == (
        "privacy.neighbours: 'swap' is not one of: add_remove, replace"
    )
    assert error(text(privacy="{neighbours: Replace, epsilon: 1}")) == (
        "privacy.neighbours: 'Replace' is not one of: add_remove, replace"
    )


def test_unit():
    assert parse_spec(text(privacy="{unit: row, epsilon: 1}")).privacy.unit == "row"
    assert error(text(privacy="{unit: user, epsilon: 1}")) == (
        "privacy.unit: 'user' is not a unit: row, or a person unit {id: FIELD, max_rows: K, missing_id: drop or person}"
    )


NOT_A_NUMBER = "is not a number (write a plain decimal such as 1, 0.5 or 1e-3)"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "privacy.epsilon: epsilon must be in [0.000001, 100], got 0"),
        ("-1", "privacy.epsilon: epsilon must be in [0.000001, 100], got -1"),
        ("-0.5", "privacy.epsilon: epsilon must be in [0.000001, 100], got -0.5"),
        ("1e-7", "privacy.epsilon: epsilon must be in [0.000001, 100], got 0.0000001"),
        ("101", "privacy.epsilon: epsilon must be in [0.000001, 100], got 101"),
        ("100.0000001", "privacy.epsilon: epsilon must be in [0.000001, 100], got 100.0000001"),
        ("nan", f"privacy.epsilon: 'nan' {NOT_A_NUMBER}"),
        ("NaN", f"privacy.epsilon: 'NaN' {NOT_A_NUMBER}"),
        ("inf", f"privacy.epsilon: 'inf' {NOT_A_NUMBER}"),
        (".inf", f"privacy.epsilon: '.inf' {NOT_A_NUMBER}"),
        ("abc", f"privacy.epsilon: 'abc' {NOT_A_NUMBER}"),
        ("1_0", f"privacy.epsilon: '1_0' {NOT_A_NUMBER}"),
        ("0x1", f"privacy.epsilon: '0x1' {NOT_A_NUMBER}"),
        ("1e999999", f"privacy.epsilon: '1e999999' {NOT_A_NUMBER}"),
        ("''", f"privacy.epsilon: '' {NOT_A_NUMBER}"),
        # huge and tiny values are named in short scientific form (this used to overflow a float: exit 1)
        ("1e400", "privacy.epsilon: epsilon must be in [0.000001, 100], got 1e+400"),
        ("-1e400", "privacy.epsilon: epsilon must be in [0.000001, 100], got -1e+400"),
        ("1e-400", "privacy.epsilon: epsilon must be in [0.000001, 100], got 1e-400"),
        (
            "123456789012345678901234567890123456789012345",
            "privacy.epsilon: epsilon must be in [0.000001, 100], got 1.23457e+44",
        ),
        ("[1]", "privacy.epsilon: expected a single value, not a list or mapping"),
    ],
)
def test_epsilon_refused(value, message):
    assert error(text(privacy=f"{{epsilon: {value}}}")) == message


@pytest.mark.parametrize(
    ("value", "exact"),
    [
        ("100", Fraction(100)),
        ("1e-6", Fraction(1, 10**6)),
        ("0.000001", Fraction(1, 10**6)),
        ("0.1", Fraction(1, 10)),
        ("1e2", Fraction(100)),
        ("1/3", Fraction(1, 3)),
        ("'0.3'", Fraction(3, 10)),
    ],
)
def test_epsilon_accepted_exactly(value, exact):
    assert parse_spec(text(privacy=f"{{epsilon: {value}}}")).privacy.epsilon == exact


# ---------------------------------------------------------------------------------------------------------------
# Strict YAML


def test_yaml_anchor_refused():
    assert error(text(extra="x: &a 1\ny: *a\n")) == "line 11: YAML anchors are not allowed in a spec"


def test_yaml_anchor_on_a_statistic_refused():
    spec_text = stat("&s {name: n, kind: count}", "*s")
    assert error(spec_text) == "line 10: YAML anchors are not allowed in a spec"


def test_yaml_alias_refused():
    # an alias with no anchor in the document is still refused as an alias (never resolved)
    assert error(text(extra="y: *a\n")) == "line 11: YAML aliases are not allowed in a spec"


def test_billion_laughs_refused_without_expanding_it():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(9)
    )
    tracemalloc.start()
    try:
        assert error(bomb) == "line 1: YAML anchors are not allowed in a spec"
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # refused at the first anchor (~10 KB measured): the expansion holds 9 * 4**9 = 2.4 million items (>= 19 MB)
    assert peak < 1_000_000, peak


def test_duplicate_keys_refused():
    assert error(text(extra="dataset: other\n")) == "line 11: duplicate key 'dataset'"
    assert error(col("{type: int, bounds: [0, 9], bounds: [1, 2]}")) == "line 5: duplicate key 'bounds'"
    assert error(text(privacy="{epsilon: 1, epsilon: 2}")) == "line 3: duplicate key 'epsilon'"


@pytest.mark.parametrize(
    "spec_text",
    [
        text(head="version: 1\ndataset: !!python/object:os.system adult\n"),
        text(head="version: 1\ndataset: !!python/object/apply:os.system [echo]\n"),
        text(privacy="{epsilon: !!float 1}"),
        text(privacy="{epsilon: !!int 1}"),
        text(head="version: 1\ndataset: !custom adult\n"),
        text(head="version: 1\ndataset: !!binary YWR1bHQ=\n"),
    ],
)
def test_explicit_tags_refused(spec_text):
    line = 3 if "epsilon: !!" in spec_text else 2
    assert error(spec_text) == f"line {line}: explicit YAML tags are not allowed in a spec"


def test_standard_str_tag_is_harmless():
    assert parse_spec(text(head="version: 1\ndataset: !!str adult\n")).dataset == "adult"


def test_yaml_11_surprises_exact():
    spec = parse_spec(col("{type: category, categories: [yes, no, on, off, 010, 1:30]}"))
    keys = spec.columns["x"].categories
    assert keys == ("yes", "no", "on", "off", "010", "1:30")
    assert all(type(k) is str for k in keys)
    spec = parse_spec(col("{type: category, categories: [1.0, 01, ~, null, True, 0o7, 1e3]}"))
    assert spec.columns["x"].categories == ("1.0", "01", "~", "null", "True", "0o7", "1e3")


def test_invalid_yaml_is_a_spec_error():
    assert error(text() + "  - {name: x\n") == "line 12: invalid YAML: expected ',' or '}', but got '<stream end>'"


def test_non_scalar_mapping_key_refused():
    assert error(text(extra="? [a]\n: 1\n")) == "line 11: mapping keys must be plain names"


# ---------------------------------------------------------------------------------------------------------------
# Files


def test_load_spec_ok_and_hash(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(text(extra="input: data.csv\n"), encoding="utf-8")
    spec = load_spec(p)
    import hashlib

    assert spec.sha256 == hashlib.sha256(p.read_bytes()).hexdigest()
    assert spec.source == str(p)
    assert spec.input == tmp_path / "data.csv"


def test_load_spec_with_bom(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_bytes(b"\xef\xbb\xbf" + text().encode())
    assert load_spec(p).dataset == "adult"


def test_spec_file_of_exactly_1_mib_accepted_and_one_byte_more_refused(tmp_path):
    body = text().encode()
    p = tmp_path / "s.yaml"
    p.write_bytes(body + b"#" * (MAX_SPEC_BYTES - len(body)))
    assert p.stat().st_size == MAX_SPEC_BYTES == 1 << 20
    assert load_spec(p).dataset == "adult"
    p.write_bytes(body + b"#" * (MAX_SPEC_BYTES - len(body) + 1))
    with pytest.raises(SpecError) as info:
        load_spec(p)
    assert str(info.value) == f"{p}: the spec is larger than 1024 KiB"
    assert info.value.exit_code == 2


def test_parse_spec_text_over_1_mib_refused():
    assert error(text() + "#" * MAX_SPEC_BYTES) == "the spec is larger than 1024 KiB"


def test_spec_not_utf8(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_bytes(text(extra="# caf\xe9\n").encode("latin-1"))
    with pytest.raises(SpecError) as info:
        load_spec(p)
    assert str(info.value) == f"{p}: the spec is not UTF-8 text"
    assert info.value.exit_code == 2


def test_spec_is_a_directory_or_missing(tmp_path):
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path)
    assert str(info.value) == f"{tmp_path}: is a directory, not a spec file"
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "nope.yaml")
    assert str(info.value) == f"{tmp_path / 'nope.yaml'}: cannot read the spec: No such file or directory"


# ---------------------------------------------------------------------------------------------------------------
# Columns: type, name, bounds, precision


def test_column_type_and_name():
    assert (
        error(col("{type: str}")) == "columns.x.type: 'str' is not a column type (one of: int, float, category, bool)"
    )
    assert error(text(columns="  1x: {type: bool}\n")) == (
        "columns.1x: '1x' is not a valid column name (letters, digits, _ . -; starting with a letter or _)"
    )
    spec = parse_spec(text(columns="  capital-gain.2: {type: bool}\n"))
    assert list(spec.columns) == ["capital-gain.2"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{type: int, bounds: [90, 17]}", "columns.x.bounds: low must be less than high"),
        ("{type: int, bounds: [17, 17]}", "columns.x.bounds: low must be less than high"),
        ("{type: float, bounds: [1.5, 1.5]}", "columns.x.bounds: low must be less than high"),
        ("{type: int, bounds: [17]}", "columns.x.bounds: expected exactly two numbers [low, high]"),
        ("{type: int, bounds: [1, 2, 3]}", "columns.x.bounds: expected exactly two numbers [low, high]"),
        ("{type: int, bounds: []}", "columns.x.bounds: expected exactly two numbers [low, high]"),
        ("{type: int, bounds: 17}", "columns.x.bounds: expected a list"),
        ("{type: int, bounds: [nan, 17]}", f"columns.x.bounds[0]: 'nan' {NOT_A_NUMBER}"),
        ("{type: float, bounds: [0, inf]}", f"columns.x.bounds[1]: 'inf' {NOT_A_NUMBER}"),
        ("{type: float, bounds: [-inf, 0]}", f"columns.x.bounds[0]: '-inf' {NOT_A_NUMBER}"),
        (
            "{type: int}",
            "columns.x.bounds: required: numeric columns need a-priori bounds [low, high] written by a person "
            "(never from the data)",
        ),
        (
            "{type: float}",
            "columns.x.bounds: required: numeric columns need a-priori bounds [low, high] written by a person "
            "(never from the data)",
        ),
        ("{type: int, bounds: [0.5, 17]}", "columns.x.bounds: an int column needs whole-number bounds"),
        ("{type: int, bounds: [0, 1e-1]}", "columns.x.bounds: an int column needs whole-number bounds"),
        ("{type: int, bounds: [0, 1e16]}", "columns.x.bounds[1]: bounds are limited to ±1000000000000000"),
        ("{type: int, bounds: [0, 1000000000000001]}", "columns.x.bounds[1]: bounds are limited to ±1000000000000000"),
        (
            "{type: float, bounds: [-1000000000000000.5, 0]}",
            "columns.x.bounds[0]: bounds are limited to ±1000000000000000",
        ),
        ("{type: int, bounds: [0, 9], precision: 1}", "columns.x.precision: not allowed for an int column"),
        ("{type: int, bounds: [0, 9], categories: [a]}", "columns.x.categories: not allowed for an int column"),
        ("{type: float, bounds: [0, 9], categories: [a]}", "columns.x.categories: not allowed for a float column"),
    ],
)
def test_bounds_refused(body, message):
    assert error(col(body)) == message


def test_bounds_accepted_up_to_1e15():
    spec = parse_spec(col("{type: int, bounds: [-1e15, 1e15]}"))
    assert spec.columns["x"].bounds == (Fraction(-(10**15)), Fraction(10**15))
    spec = parse_spec(col("{type: int, bounds: [-5, '2.0']}"))
    assert spec.columns["x"].bounds == (Fraction(-5), Fraction(2))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "{type: float, bounds: [0, 1], precision: 2}",
            "columns.x.precision: precision is too coarse: the bounds hold fewer than two grid points",
        ),
        (
            "{type: float, bounds: [0, 1], precision: 1.5}",
            "columns.x.precision: precision is too coarse: the bounds hold fewer than two grid points",
        ),
        (
            "{type: float, bounds: [0.1, 0.9], precision: 1}",
            "columns.x.precision: precision is too coarse: the bounds hold fewer than two grid points",
        ),
        (
            "{type: float, bounds: [0, 1], precision: 1e-16}",
            "columns.x.precision: bounds/precision exceed 2^53 grid steps: use a coarser precision "
            "(now 0.0000000000000001)",
        ),
        (
            "{type: float, bounds: [0, 1e15], precision: 0.1}",
            "columns.x.precision: bounds/precision exceed 2^53 grid steps: use a coarser precision (now 0.1)",
        ),
        ("{type: float, bounds: [0, 1], precision: 0}", "columns.x.precision: must be positive, got 0"),
        ("{type: float, bounds: [0, 1], precision: -0.1}", "columns.x.precision: must be positive, got -0.1"),
        ("{type: float, bounds: [0, 1], precision: fine}", f"columns.x.precision: 'fine' {NOT_A_NUMBER}"),
    ],
)
def test_precision_refused(body, message):
    assert error(col(body)) == message


def test_precision_accepted_at_the_limits():
    # exactly two grid points
    spec = parse_spec(col("{type: float, bounds: [0, 1], precision: 1}"))
    assert spec.columns["x"].grid_bounds == (0, 1)
    # 2^53 grid units exactly is fine, one step more is not (bounds are at most 1e15, so use a fine precision)
    spec = parse_spec(col(f"{{type: float, bounds: [0, {2**49}], precision: 0.0625}}"))
    assert spec.columns["x"].grid_bounds == (0, 2**53)
    spec = parse_spec(col(f"{{type: float, bounds: [-{2**49}, 0], precision: 0.0625}}"))
    assert spec.columns["x"].grid_bounds == (-(2**53), 0)
    assert error(col(f"{{type: float, bounds: [0, {2**49 + 1}], precision: 0.0625}}")) == (
        "columns.x.precision: bounds/precision exceed 2^53 grid steps: use a coarser precision (now 0.0625)"
    )


def test_grid_bounds_are_inside_the_bounds():
    spec = parse_spec(col("{type: float, bounds: [0.05, 1.01], precision: 0.1}"))
    assert spec.columns["x"].grid_bounds == (1, 10)
    spec = parse_spec(col("{type: float, bounds: [-1.05, -0.01], precision: 0.1}"))
    assert spec.columns["x"].grid_bounds == (-10, -1)


@pytest.mark.parametrize(
    ("lo", "hi", "precision"),
    [
        ("0", "99999", Fraction(1, 100)),
        ("0", "1", Fraction(1, 10**6)),
        ("0", "9.99", Fraction(1, 10**6)),
        ("0", "10", Fraction(1, 10**5)),
        ("17", "90", Fraction(1, 10**5)),
        ("-5", "5", Fraction(1, 10**5)),
        ("0", "1e15", Fraction(10**9)),
        ("0", "1e-5", Fraction(1, 10**11)),
        ("0", "0.5", Fraction(1, 10**7)),
    ],
)
def test_default_precision_power_of_ten_with_1e6_to_1e7_steps(lo, hi, precision):
    spec = parse_spec(col(f"{{type: float, bounds: [{lo}, {hi}]}}"))
    p = spec.columns["x"].precision
    assert p == precision
    assert default_precision(Fraction(lo), Fraction(hi)) == precision
    steps = (Fraction(hi) - Fraction(lo)) / p
    assert 10**6 <= steps < 10**7
    assert p in {Fraction(10) ** k for k in range(-20, 20)}  # a power of ten


# ---------------------------------------------------------------------------------------------------------------
# Categories and impute


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{type: category}", "columns.x.categories: required: list the category keys (public, written by a person)"),
        ("{type: category, categories: []}", "columns.x.categories: expected at least 1 item"),
        ("{type: category, categories: a}", "columns.x.categories: expected a list"),
        ("{type: category, categories: [a, b, a]}", "columns.x.categories[2]: duplicate category 'a'"),
        (
            "{type: category, categories: [a, '']}",
            "columns.x.categories[1]: empty category (an empty cell is a missing value)",
        ),
        (
            "{type: category, categories: [a, [b]]}",
            "columns.x.categories[1]: expected a single value, not a list or mapping",
        ),
        ("{type: category, categories: [a], bounds: [0, 1]}", "columns.x.bounds: not allowed for a category column"),
        ("{type: category, categories: [a], precision: 1}", "columns.x.precision: not allowed for a category column"),
        ("{type: bool, categories: [a]}", "columns.x.categories: not allowed for a bool column"),
        ("{type: bool, bounds: [0, 1]}", "columns.x.bounds: not allowed for a bool column"),
    ],
)
def test_categories_refused(body, message):
    assert error(col(body)) == message


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{type: category, categories: [a, \"b\\ufffd\"]}", "columns.x.categories[1]"),
        ("{type: category, categories: [\"\\ufffd\"]}", "columns.x.categories[0]"),
        ("{type: category, categories: [a], impute: \"\\ufffd\"}", "columns.x.impute"),
        ("{type: category, categories: [a], other: \"a\\ufffd\"}", "columns.x.other"),
    ],
)
def test_keys_holding_the_replacement_character_refused(body, message):
    """A cell that is not valid UTF-8 is read with U+FFFD and is missing, so no declared key may hold U+FFFD."""
    assert (
        error(col(body))
        == f"{message}: contains U+FFFD (the replacement character), which a data cell is never read as"
    )


def test_categories_accepted_in_declared_order():
    spec = parse_spec(col("{type: category, categories: [b, a, ' a', A]}"))
    assert spec.columns["x"].keys == ("b", "a", " a", "A")


@pytest.mark.parametrize(
    ("body", "impute"),
    [
        ("{type: int, bounds: [0, 10], impute: 5}", Fraction(5)),
        ("{type: int, bounds: [0, 10], impute: 0}", Fraction(0)),
        ("{type: int, bounds: [0, 10], impute: 10}", Fraction(10)),
        ("{type: float, bounds: [0, 1], precision: 0.01, impute: 0.25}", Fraction(1, 4)),
        ("{type: category, categories: [a, b], impute: b}", "b"),
        ("{type: bool, impute: 'false'}", "false"),
        ("{type: bool, impute: true}", "true"),
    ],
)
def test_impute_accepted(body, impute):
    assert parse_spec(col(body)).columns["x"].impute == impute


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{type: int, bounds: [0, 10], impute: 11}", "columns.x.impute: must lie within the column's bounds"),
        ("{type: int, bounds: [0, 10], impute: -1}", "columns.x.impute: must lie within the column's bounds"),
        ("{type: float, bounds: [0, 1], impute: 1.0001}", "columns.x.impute: must lie within the column's bounds"),
        (
            "{type: int, bounds: [0, 10], impute: 5.5}",
            "columns.x.impute: an int column needs a whole-number impute value",
        ),
        ("{type: int, bounds: [0, 10], impute: nan}", f"columns.x.impute: 'nan' {NOT_A_NUMBER}"),
        ("{type: category, categories: [a, b], impute: c}", "columns.x.impute: 'c' is not one of the declared keys"),
        ("{type: category, categories: [a, b], impute: A}", "columns.x.impute: 'A' is not one of the declared keys"),
        ("{type: bool, impute: yes}", "columns.x.impute: 'yes' is not one of the declared keys"),
        ("{type: bool, impute: 'True'}", "columns.x.impute: 'True' is not one of the declared keys"),
    ],
)
def test_impute_refused(body, message):
    assert error(col(body)) == message


# ---------------------------------------------------------------------------------------------------------------
# Statistics


def test_statistics_accepted():
    spec = parse_spec(
        stat(
            "{name: people, kind: count}",
            "{name: by_sex, kind: count, by: [sex, flag]}",
            "{name: age_hist, kind: histogram, column: age, bins: [17, 25, 91]}",
            "{name: age_grid, kind: histogram, column: age, bins: {start: 0, stop: 100, step: 2.5}, by: [sex]}",
            "{name: sex_hist, kind: histogram, column: sex}",
            "{name: total, kind: sum, column: gain, mechanism: laplace}",
            "{name: mean_age, kind: mean, column: age, by: [sex]}",
        )
    )
    s = spec.statistics
    assert [x.name for x in s] == ["people", "by_sex", "age_hist", "age_grid", "sex_hist", "total", "mean_age"]
    assert s[1].by == ("sex", "flag")
    assert s[1].column is None
    assert s[1].bins is None
    assert s[2].bins == EdgeBins((Fraction(17), Fraction(25), Fraction(91)))
    assert s[2].bins.count == 2
    assert s[3].bins == GridBins(Fraction(0), Fraction(100), Fraction(5, 2))
    assert s[3].bins.count == 40
    assert s[3].bins.edge(3) == Fraction(15, 2)
    assert s[3].dimensions == ("sex", "age")
    assert s[4].bins is None
    assert s[4].dimensions == ("sex",)
    assert s[5].mechanism == "laplace"
    assert spec.dimensions == ("sex", "flag", "age")


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            ["{name: a, kind: count}", "{name: a, kind: sum, column: age}"],
            "statistics[1].name: duplicate statistic name 'a'",
        ),
        (
            ["{name: 'a b', kind: count}"],
            "statistics[0].name: 'a b' is not a valid statistic name "
            "(letters, digits, _ . -; starting with a letter or _)",
        ),
        (
            ["{name: a, kind: percentile, column: age}"],
            "statistics[0].kind: 'percentile' is not a statistic kind (one of: count, histogram, sum, mean, quantile, "
            "median, top_k, mode, variance, std, frequency)",
        ),
        (["{name: a, kind: count, column: age}"], "statistics[0].column: a count counts rows: use by: to split it"),
        (["{name: a, kind: sum}"], "statistics[0].column: required for a sum"),
        (["{name: a, kind: mean}"], "statistics[0].column: required for a mean"),
        (["{name: a, kind: histogram}"], "statistics[0].column: required for a histogram"),
        (
            ["{name: a, kind: count}", "{name: b, kind: count}", "{name: c, kind: sum, column: incme}"],
            "statistics[2].column: 'incme' is not a declared column",
        ),
        (
            ["{name: a, kind: sum, column: sex}"],
            "statistics[0].column: a sum needs a numeric column; 'sex' is category",
        ),
        (
            ["{name: a, kind: mean, column: flag}"],
            "statistics[0].column: a mean needs a numeric column; 'flag' is bool",
        ),
        (
            ["{name: a, kind: count, by: [age]}"],
            "statistics[0].by[0]: 'age' is numeric: group by category or bool columns, or use a histogram with bins",
        ),
        (
            ["{name: a, kind: sum, column: age, by: [sex, gain]}"],
            "statistics[0].by[1]: 'gain' is numeric: group by category or bool columns, or use a histogram with bins",
        ),
        (["{name: a, kind: count, by: [sex, sex]}"], "statistics[0].by[1]: 'sex' is used twice"),
        (["{name: a, kind: histogram, column: sex, by: [sex]}"], "statistics[0].by[0]: 'sex' is used twice"),
        (["{name: a, kind: count, by: [race]}"], "statistics[0].by[0]: 'race' is not a declared column"),
        (["{name: a, kind: count, by: []}"], "statistics[0].by: expected at least 1 item"),
        (["{name: a, kind: count, by: sex}"], "statistics[0].by: expected a list"),
        (
            ["{name: a, kind: histogram, column: age}"],
            "statistics[0].bins: required for a histogram of a numeric column (edges or {start, stop, step})",
        ),
        (
            ["{name: a, kind: histogram, column: sex, bins: [0, 1]}"],
            "statistics[0].bins: a histogram of a category or bool column has one bin per declared key",
        ),
        (
            ["{name: a, kind: histogram, column: flag, bins: [0, 1]}"],
            "statistics[0].bins: a histogram of a category or bool column has one bin per declared key",
        ),
        (["{name: a, kind: sum, column: age, bins: [1, 2]}"], "statistics[0].bins: not allowed for a sum"),
        (["{name: a, kind: count, bins: [1, 2]}"], "statistics[0].bins: not allowed for a count (use a histogram)"),
        (
            ["{name: a, kind: count, mechanism: exponential}"],
            "statistics[0].mechanism: 'exponential' is not available (one of: laplace, gaussian)",
        ),
        (["{name: a, kind: count, weight: 0}"], "statistics[0].weight: must be positive, got 0"),
        (["{name: a, kind: count, weight: -1}"], "statistics[0].weight: must be positive, got -1"),
        (["{name: a, kind: count, weight: lots}"], f"statistics[0].weight: 'lots' {NOT_A_NUMBER}"),
    ],
)
def test_statistics_refused(lines, message):
    assert error(stat(*lines)) == message


def test_statistics_empty_list():
    assert error(text(statistics="  []\n")) == "statistics: expected at least 1 item"


@pytest.mark.parametrize(
    ("bins", "message"),
    [
        ("[17, 30, 25, 91]", "statistics[0].bins[2]: bin edges must be increasing"),
        ("[17, 25, 25, 91]", "statistics[0].bins[2]: duplicate bin edge"),
        ("[17]", "statistics[0].bins: expected at least 2 items"),
        ("[17, x]", f"statistics[0].bins[1]: 'x' {NOT_A_NUMBER}"),
        ("{start: 0, stop: 100, step: 3}", "statistics[0].bins.step: (stop - start) must be a whole number of steps"),
        ("{start: 0, stop: 1, step: 0.3}", "statistics[0].bins.step: (stop - start) must be a whole number of steps"),
        ("{start: 100, stop: 0, step: 1}", "statistics[0].bins.stop: must be greater than start"),
        ("{start: 5, stop: 5, step: 1}", "statistics[0].bins.stop: must be greater than start"),
        ("{start: 0, stop: 100, step: 0}", "statistics[0].bins.step: must be positive, got 0"),
        ("{start: 0, stop: 100, step: -1}", "statistics[0].bins.step: must be positive, got -1"),
        ("{start: 0, stop: inf, step: 1}", f"statistics[0].bins.stop: 'inf' {NOT_A_NUMBER}"),
        ("17", "statistics[0].bins: expected a mapping"),
    ],
)
def test_bins_refused(bins, message):
    assert error(stat(f"{{name: h, kind: histogram, column: age, bins: {bins}}}")) == message


def test_bins_accepted():
    spec = parse_spec(stat("{name: h, kind: histogram, column: age, bins: {start: 0, stop: 1, step: 0.1}}"))
    assert spec.statistics[0].bins.count == 10  # exact: 0.1 is 1/10, not a float
    spec = parse_spec(stat("{name: h, kind: histogram, column: age, bins: [-1e3, 0.5, 17, 1e4]}"))
    assert spec.statistics[0].bins.edges == (Fraction(-1000), Fraction(1, 2), Fraction(17), Fraction(10000))


def test_grid_over_ten_million_bins_refused():
    spec_text = stat("{name: h, kind: histogram, column: gain, bins: {start: 0, stop: 100000, step: 0.001}}")
    assert error(spec_text) == "statistics[0].bins.step: 100000000 bins is over the limit of 10000000"


def test_too_many_cells_refused():
    # 5,000,001 bins x 2 sexes
    spec_text = stat("{name: h, kind: histogram, column: gain, by: [sex], bins: {start: 0, stop: 5000001, step: 1}}")
    assert error(spec_text) == "statistics[0]: 10000002 cells is over the limit of 10000000 per statistic"
    spec_text = stat("{name: h, kind: histogram, column: gain, by: [sex], bins: {start: 0, stop: 5000000, step: 1}}")
    assert parse_spec(spec_text).statistics[0].bins.count == 5_000_000


def test_ten_million_bins_accepted():
    spec_text = stat("{name: h, kind: histogram, column: gain, bins: {start: 0, stop: 100000, step: 0.01}}")
    assert parse_spec(spec_text).statistics[0].bins.count == 10_000_000


def test_million_cell_grid_accepted_without_building_it():
    spec_text = stat("{name: h, kind: histogram, column: gain, bins: {start: 0, stop: 1000000, step: 1}}")
    tracemalloc.start()
    try:
        spec = parse_spec(spec_text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert spec.statistics[0].bins.count == 1_000_000
    # the bins are counted, not listed (~50 KB measured): a million edges take 8 MB as float64, more as objects
    assert peak < 1_000_000, peak


@pytest.mark.parametrize(
    "name", ["value", "statistic", "ci_low", "ci_high", "epsilon", "rho", "kind", "column", "bin_low", "bin_high"]
)
def test_dimension_named_like_an_output_column_refused(name):
    # rho is the last column of a zCDP release's table; it is refused in a pure release too, so a spec does not
    # become invalid when its budget changes form
    columns = f"  {name}: {{type: category, categories: [a, b]}}\n  n: {{type: int, bounds: [0, 9]}}\n"
    reserved = (
        f"'{name}' cannot be an output dimension: the table already has a column of that name "
        "(statistic, value, ci_low, ci_high, epsilon, rho, kind, column, bin_low, bin_high; quantile in a release "
        "with a quantile (the level); flag in a release with a small-cell policy (postprocess: small_cells))"
    )
    by = text(columns=columns, statistics=f"  - {{name: s, kind: count, by: [{name}]}}\n")
    assert error(by) == f"statistics[0].by[0]: {reserved}"
    hist = text(columns=columns, statistics=f"  - {{name: s, kind: histogram, column: {name}}}\n")
    assert error(hist) == f"statistics[0].column: {reserved}"
    # a numeric column of that name may still be summed: it is not a dimension
    numeric = f"  {name}: {{type: int, bounds: [0, 9]}}\n"
    spec = parse_spec(text(columns=numeric, statistics=f"  - {{name: s, kind: sum, column: {name}}}\n"))
    assert spec.dimensions == ()


# ---------------------------------------------------------------------------------------------------------------
# The epsilon split


def test_weights_split_exactly():
    spec = parse_spec(
        stat("{name: a, kind: count, weight: 1}", "{name: b, kind: count, weight: 2}", privacy="{epsilon: 1}")
    )
    assert split_budget(spec).shares == (Fraction(1, 3), Fraction(2, 3))
    assert all(type(s) is Fraction for s in split_budget(spec).shares)
    assert sum(split_budget(spec).shares) == Fraction(1)
    assert spec.privacy.epsilon == Fraction(1)


def test_default_weight_is_one():
    spec = parse_spec(
        stat(
            "{name: a, kind: count}",
            "{name: b, kind: count, weight: 0.5}",
            "{name: c, kind: count}",
            privacy="{epsilon: 0.5}",
        )
    )
    assert split_budget(spec).shares == (Fraction(1, 5), Fraction(1, 10), Fraction(1, 5))
    assert sum(split_budget(spec).shares) == Fraction(1, 2)


def test_explicit_epsilons_add_up_exactly():
    spec = parse_spec(
        stat("{name: a, kind: count, epsilon: 0.1}", "{name: b, kind: count, epsilon: 0.2}", privacy="{epsilon: 0.3}")
    )
    assert split_budget(spec).shares == (Fraction(1, 10), Fraction(1, 5))
    assert sum(split_budget(spec).shares) == Fraction(3, 10)
    assert spec.privacy.epsilon == Fraction(3, 10)


def test_explicit_epsilons_over_the_release_epsilon_refused():
    spec_text = stat(
        "{name: a, kind: count, epsilon: 0.1}", "{name: b, kind: count, epsilon: 0.2000001}", privacy="{epsilon: 0.3}"
    )
    assert (
        error(spec_text, planned=True)
        == "statistics: the statistics' epsilons add up to 0.3000001, more than privacy.epsilon = 0.3"
    )


def test_explicit_epsilons_plus_a_tiny_one_refused():
    spec_text = stat(
        "{name: a, kind: count, epsilon: 0.1}",
        "{name: b, kind: count, epsilon: 0.2}",
        "{name: c, kind: count, epsilon: 0.0000001}",
        privacy="{epsilon: 0.3}",
    )
    # refused on its own already: a share below the minimum epsilon
    assert error(spec_text) == "statistics[2].epsilon: epsilon must be in [0.000001, 100], got 0.0000001"
    spec_text = stat(
        "{name: a, kind: count, epsilon: 0.1}",
        "{name: b, kind: count, epsilon: 0.2}",
        "{name: c, kind: count, epsilon: 0.000001}",
        privacy="{epsilon: 0.3}",
    )
    assert (
        error(spec_text, planned=True)
        == "statistics: the statistics' epsilons add up to 0.300001, more than privacy.epsilon = 0.3"
    )


def test_explicit_epsilons_with_a_long_exact_total_are_named_briefly():
    spec_text = stat(
        "{name: a, kind: count, epsilon: 1/3}",
        "{name: b, kind: count, epsilon: "
        "10000000000000000000000000000000000001/10000000000000000000000000000000000000000000}",
        privacy="{epsilon: 0.3}",
    )
    assert (
        error(spec_text, planned=True)
        == "statistics: the statistics' epsilons add up to 0.333334, more than privacy.epsilon = 0.3"
    )


def test_explicit_epsilons_under_the_release_epsilon_charge_their_sum():
    spec = parse_spec(
        stat("{name: a, kind: count, epsilon: 0.1}", "{name: b, kind: count, epsilon: 0.1}", privacy="{epsilon: 0.3}")
    )
    assert sum(split_budget(spec).shares) == Fraction(1, 5)


def test_explicit_epsilons_without_a_release_epsilon():
    spec = parse_spec(
        stat("{name: a, kind: count, epsilon: 0.1}", "{name: b, kind: count, epsilon: 0.2}", privacy="{unit: row}")
    )
    assert spec.privacy.epsilon is None
    assert split_budget(spec).total == Fraction(3, 10)
    assert sum(split_budget(spec).shares) == Fraction(3, 10)
    spec_text = stat(
        "{name: a, kind: count, epsilon: 60}", "{name: b, kind: count, epsilon: 50}", privacy="{unit: row}"
    )
    assert (
        error(spec_text, planned=True) == "statistics: the statistics' epsilons add up to 110, over the maximum of 100"
    )


def test_mixed_explicit_and_weighted_refused():
    assert error(stat("{name: a, kind: count, epsilon: 0.5}", "{name: b, kind: count}")) == (
        "statistics[1].epsilon: either every statistic names its epsilon, or none does (use weight)"
    )
    assert error(stat("{name: a, kind: count}", "{name: b, kind: count, epsilon: 0.5}")) == (
        "statistics[0].epsilon: either every statistic names its epsilon, or none does (use weight)"
    )


def test_weight_and_epsilon_on_one_statistic_refused():
    assert error(stat("{name: a, kind: count, weight: 1, epsilon: 0.5}")) == (
        "statistics[0].weight: give either weight or epsilon, not both"
    )


def test_statistic_epsilon_range():
    assert (
        error(stat("{name: a, kind: count, epsilon: 0}"))
        == "statistics[0].epsilon: epsilon must be in [0.000001, 100], got 0"
    )
    assert error(stat("{name: a, kind: count, epsilon: nan}")) == f"statistics[0].epsilon: 'nan' {NOT_A_NUMBER}"


# ---------------------------------------------------------------------------------------------------------------
# Frozen


def test_spec_is_frozen():
    spec = parse_spec(text())
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.dataset = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.privacy.epsilon = Fraction(100)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.columns["age"].bounds = (Fraction(0), Fraction(1000))  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.statistics[0].kind = "sum"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.columns["evil"] = spec.columns["age"]  # type: ignore[index]
    with pytest.raises(TypeError):
        spec.statistics[0] = spec.statistics[0]  # type: ignore[index]
    with pytest.raises(AttributeError):
        split_budget(spec).shares.append(Fraction(1))  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        split_budget(spec).total = Fraction(100)  # type: ignore[misc]
    assert spec.dataset == "adult"
    assert spec.privacy.epsilon == Fraction(1)


# ---------------------------------------------------------------------------------------------------------------
# csv: how records are delimited


def test_csv_quoted_line_breaks_defaults_to_false():
    assert parse_spec(text()).quoted_line_breaks is False
    assert parse_spec(text(extra="csv: {}\n")).quoted_line_breaks is False


@pytest.mark.parametrize(
    ("value", "expected"), [("true", True), ("false", False), ("'true'", True), ('"false"', False)]
)
def test_csv_quoted_line_breaks_accepted(value, expected):
    assert parse_spec(text(extra=f"csv: {{quoted_line_breaks: {value}}}\n")).quoted_line_breaks is expected


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("csv: {quoted_line_breaks: yes}\n", "csv.quoted_line_breaks: 'yes' is not a boolean (true or false)"),
        ("csv: {quoted_line_breaks: True}\n", "csv.quoted_line_breaks: 'True' is not a boolean (true or false)"),
        ("csv: {quoted_line_breaks: 1}\n", "csv.quoted_line_breaks: '1' is not a boolean (true or false)"),
        (
            "csv: {quoted_line_breaks: [true]}\n",
            "csv.quoted_line_breaks: expected a single value, not a list or mapping",
        ),
        (
            "csv: {separator: ';'}\n",
            "csv.separator: unknown field (allowed: delimiter, encoding, header, line_end, max_record_bytes, "
            "quoted_line_breaks)",
        ),
        (
            "csv: {quoted_line_breaks: true, encoding: klingon}\n",
            "csv.encoding: 'klingon' is not an accepted encoding (one of: utf-8, latin-1, iso-8859-15, cp1252, "
            "cp1250, ascii, utf-16, utf-16-le, utf-16-be)",
        ),
        ("csv: {delimiter: ':'}\n", "csv.delimiter: ':' is not an accepted delimiter (one of: , ; | tab)"),
        ("csv: {header: maybe}\n", "csv.header: 'maybe' is not true, false or a list of field names"),
        ("csv: {header: [a, a]}\n", "csv.header[1]: duplicate field name 'a'"),
        ("csv: {line_end: crlf}\n", "csv.line_end: 'crlf' is not one of: lf, cr"),
        ("csv: {max_record_bytes: 100}\n", "csv.max_record_bytes: the value must be in [1024, 1073741824], got 100"),
        (
            "input_format: xlsx\n",
            "input_format: 'xlsx' is not an input format (one of: csv, csv.gz, csv.zst, parquet, arrow)",
        ),
        ("engine: duckdb\n", "engine: 'duckdb' is not an engine (one of: polars, spark)"),
        ("csv: true\n", "csv: expected a mapping"),
        ("csv: [quoted_line_breaks]\n", "csv: expected a mapping"),
    ],
)
def test_csv_refused(extra, message):
    assert error(text(extra=extra)) == message
