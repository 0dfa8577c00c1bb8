"""Helpful refusals of an input's header (issue 25, "Helpful refusals"; docs/spec.md, "CSV dialects"): a header
joined by another delimiter names ``csv: {delimiter: ...}``, one that is not UTF-8 names ``csv: {encoding: ...}``,
a declared column the header lacks names the header's close names; a ``.tsv`` or ``.tab`` input is tab-separated
by default. Every hint comes from the header line alone, and no message carries a data value."""

from __future__ import annotations

import gzip
from dataclasses import replace
from pathlib import Path

import pytest

from dpcli.engine import aggregate, input_format
from dpcli.errors import InputError
from dpcli.plan.model import make_plan
from dpcli.specs.load import parse_spec
from dpcli.specs.model import CsvDialect
from tests.engine.test_aggregate import plan_for, write
from tests.helpers import run_in_process
from tests.spec_builder import spec_text

CANARY = "CANARY4417"
COLUMNS = "  c: {type: category, categories: [a, b]}\n  x: {type: int, bounds: [0, 100]}\n"
STATS = "  - {name: n, kind: count, by: [c]}\n  - {name: s, kind: sum, column: x}\n"
ENCODINGS = "utf-8, latin-1, iso-8859-15, cp1252, cp1250, ascii, utf-16, utf-16-le, utf-16-be"


def refusal(path: Path, columns: str = COLUMNS) -> str:
    """The engine's InputError (exit 3) for ``path``: one line, no data value."""
    with pytest.raises(InputError) as info:
        aggregate(plan_for(columns, STATS), path)
    assert info.value.exit_code == 3
    message = str(info.value)
    assert CANARY not in message
    assert "\n" not in message
    return message


@pytest.mark.parametrize(("sep", "spelled"), [(";", "';'"), ("\t", "tab"), ("|", "'|'")])
def test_a_header_joined_by_another_delimiter_names_it(tmp_path, sep, spelled):
    path = write(tmp_path, f"c{sep}x\na{sep}{CANARY}\n")
    assert refusal(path) == (
        f"input {path}: declared column(s) missing from the header: c, x; split at {spelled} the header holds them: "
        f"declare csv: {{delimiter: {spelled}}}"
    )


def test_a_header_that_holds_some_of_the_declared_columns_joined_otherwise_says_how_many(tmp_path):
    path = write(tmp_path, f"c;y\na;{CANARY}\n")
    assert refusal(path) == (
        f"input {path}: declared column(s) missing from the header: c, x; split at ';' the header holds 1 of the 2 "
        "declared columns: declare csv: {delimiter: ';'}"
    )


def test_a_comma_file_read_with_a_declared_semicolon_names_the_comma(tmp_path):
    path = write(tmp_path, f"c,x\na,{CANARY}\n")
    plan = plan_for(COLUMNS, STATS)
    with pytest.raises(InputError) as info:
        aggregate(replace(plan, spec=replace(plan.spec, csv=CsvDialect(delimiter=";"))), path)
    assert str(info.value) == (
        f"input {path}: declared column(s) missing from the header: c, x; split at ',' the header holds them: "
        "declare csv: {delimiter: ','}"
    )


def test_the_delimiter_hint_comes_from_the_header_line_alone(tmp_path):
    """Data lines joined by ';' never make a hint: only the header's names are split again."""
    path = write(tmp_path, f"q\na;1;{CANARY}\nb;2;{CANARY}\n")
    assert refusal(path) == f"input {path}: declared column(s) missing from the header: c, x"


def test_a_declared_column_the_header_lacks_names_its_close_header_names(tmp_path):
    columns = "  hours_per_week: {type: int, bounds: [0, 99]}\n  sex: {type: category, categories: [F, M]}\n"
    path = write(tmp_path, f"hours-per-week,sex,{CANARY}\n1,F,{CANARY}\n")
    with pytest.raises(InputError) as info:
        aggregate(plan_for(columns, "  - {name: h, kind: sum, column: hours_per_week}\n"), path)
    assert str(info.value) == (
        f"input {path}: declared column(s) missing from the header: hours_per_week (did you mean 'hours-per-week'?)"
    )
    path = write(tmp_path, f"C,X,{CANARY}\na,1,2\n", "upper.csv")  # nothing close enough: no suggestion
    assert refusal(path) == f"input {path}: declared column(s) missing from the header: c, x"


def test_a_first_line_without_a_declared_name_is_never_quoted(tmp_path):
    # a file without a header line that does not say so: its first record is read as the header, and a field of it
    # close to a declared name (a person's value, here hours-per-week's neighbour) is not offered back
    columns = "  hours_per_week: {type: int, bounds: [0, 99]}\n  sex: {type: category, categories: [F, M]}\n"
    path = write(tmp_path, "hours_per_wek,F\n40,M\n", "headless.csv")
    with pytest.raises(InputError) as info:
        aggregate(plan_for(columns, "  - {name: h, kind: sum, column: hours_per_week}\n"), path)
    assert str(info.value) == f"input {path}: declared column(s) missing from the header: hours_per_week, sex"


def test_a_header_that_is_not_utf8_names_the_encodings(tmp_path):
    path = write(tmp_path, f"c,x\xe9\na,{CANARY}\n".encode("latin-1"))
    assert refusal(path) == (
        f"input {path} is not UTF-8 text: declare its encoding, csv: {{encoding: ...}} (one of: {ENCODINGS})"
    )


def test_a_utf16_file_names_utf16(tmp_path):
    path = write(tmp_path, f"c,x\na,{CANARY}\n".encode("utf-16"))
    assert refusal(path) == (
        f"input {path} is not UTF-8 text: it starts with a UTF-16 byte-order mark: declare csv: {{encoding: utf-16}}"
    )
    for codec in ("utf-16-le", "utf-16-be"):
        path = write(tmp_path, f"c,x\na,{CANARY}\n".encode(codec), f"{codec}.csv")
        assert refusal(path) == (
            f"input {path} has NUL bytes in its header: it is not a text CSV, or UTF-16 without a byte-order mark: "
            f"declare csv: {{encoding: {codec}}}"
        )


def test_a_tsv_or_tab_input_is_tab_separated_by_default(tmp_path):
    plan = plan_for(COLUMNS, STATS)
    expected = [(e.counts.tolist(), e.sums) for e in aggregate(plan, write(tmp_path, "c,x\na,5\nb,7\na,1\n"))]
    tsv = "c\tx\na\t5\nb\t7\na\t1\n"
    for name in ("data.tsv", "data.TAB"):
        got = aggregate(plan, write(tmp_path, tsv, name))
        assert [(e.counts.tolist(), e.sums) for e in got] == expected
    gz = tmp_path / "data.tsv.gz"
    gz.write_bytes(gzip.compress(tsv.encode()))
    assert input_format(gz) == "csv.gz"
    assert [(e.counts.tolist(), e.sums) for e in aggregate(plan, gz)] == expected
    from dpcli.engine.source import input_delimiter  # here: new, so the test above fails (not its import) before

    assert [input_delimiter(n) for n in ("a.tsv", "a.tab.zst", "a.csv", "a.txt", None)] == ["\t", "\t", ",", ",", ","]
    assert input_delimiter("a.tsv", ";") == ";"  # a declared delimiter wins


def release(tmp_path: Path, name: str, data: str) -> tuple[int, str, bytes, bool]:
    """``dpcli release`` of a count by c over ``data`` (in a file ``name``): exit code, stderr, the ledger after, and
    whether a table was written."""
    (tmp_path / name).write_text(data)
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text({"c": "{type: category, categories: [a, b]}"}, ["{name: n, kind: count, by: [c]}"]))
    ledger = tmp_path / "l.jsonl"
    assert run_in_process("budget", "set", "toy", "--epsilon", "5", "--ledger", ledger).returncode == 0
    before = ledger.read_bytes()
    done = run_in_process("release", spec, "--input", tmp_path / name, "--ledger", ledger, "-o", tmp_path / "o.csv")
    return done.returncode, done.stderr.decode(), before, (tmp_path / "o.csv").exists()


def test_the_cli_refuses_a_semicolon_file_with_the_hint_before_the_spend(tmp_path):
    code, stderr, before, written = release(tmp_path, "data.csv", f"c;q\na;{CANARY}\n")
    assert code == 3
    assert stderr == (
        f"dpcli: error: input {tmp_path / 'data.csv'}: declared column(s) missing from the header: c; split at ';' "
        "the header holds them: declare csv: {delimiter: ';'}\n"
    )
    assert (tmp_path / "l.jsonl").read_bytes() == before
    assert not written


def test_the_cli_releases_a_tsv_input(tmp_path):
    code, stderr, _, written = release(tmp_path, "data.tsv", "c\tq\na\t1\nb\t2\n")
    assert code == 0, stderr
    assert written


def test_a_declared_column_a_parquet_schema_lacks_names_its_close_schema_names(tmp_path):
    import polars as pl

    path = tmp_path / "data.parquet"
    pl.DataFrame({"C": ["a"], "x-val": [1]}).write_parquet(path)
    columns = "  c: {type: category, categories: [a, b]}\n  x_val: {type: int, bounds: [0, 100]}\n"
    with pytest.raises(InputError) as info:
        aggregate(plan_for(columns, "  - {name: s, kind: sum, column: x_val}\n"), path)
    assert str(info.value) == (
        f"input {path}: declared column(s) missing from the schema: c, x_val (did you mean 'x-val'?)"
    )


def test_init_reads_a_tsv_header_at_tabs(tmp_path):
    (tmp_path / "data.tsv").write_text(f"age\tsex\n{CANARY}\tF\n")
    done = run_in_process("init", tmp_path / "data.tsv", cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    declared = [line.split(":")[0] for line in lines if line.startswith("  ") and not line.startswith("  #")]
    assert [name for name in declared if name.strip()] == ["  age", "  sex"]


def test_a_person_id_field_the_header_lacks_names_its_close_header_names(tmp_path):
    path = write(tmp_path, f"p_id,c,x\n{CANARY},a,1\n")
    spec = spec_text({"c": "{type: category, categories: [a, b]}"}, ["{name: n, kind: count}"],
                     privacy="{unit: {id: pid, max_rows: 1, missing_id: drop}, neighbours: add_remove, epsilon: 1}")
    with pytest.raises(InputError) as info:
        aggregate(make_plan(parse_spec(spec)), path)
    assert str(info.value) == (
        f"input {path}: the person id field pid (privacy.unit.id) is missing from the header (did you mean 'p_id'?)"
    )
