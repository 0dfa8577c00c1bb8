"""Every validation rule of dpcli/specs/rules.py: a good case and a bad case, with the full one-line message."""

from __future__ import annotations

import dataclasses
import tracemalloc
from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.errors import SpecError, UsageError
from dpcli.plan.budget import split_budget
from dpcli.plan.model import make_plan
from dpcli.specs.load import MAX_SPEC_BYTES, load_spec, parse_spec

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
    "(allowed: version, dataset, name, input, output, ledger, input_format, engine, csv, privacy, columns, statistics, "
    "confidence, expected_rows, postprocess, series, synth)"
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
        (text(extra="noise_seed: 1\n"), f"noise_seed: unknown field {TOP_ALLOWED}"),
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
        (
            stat("{name: n, kind: count, cap: 3}"),
            f"statistics[0].cap: unknown field {STAT_ALLOWED}; did you mean 'clamp'?",
        ),
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
