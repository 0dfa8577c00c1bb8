"""Issue 23 (11, 14, 15): the refusals the docs promise, made before the spend and seen through the command line.

Each case runs `dpcli release` against a ledger with a cap and checks the exit code, the one line said, and that
the ledger holds no spend afterwards (the budget is untouched)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpcli.publish.report_data import KNOWN_COLUMNS
from dpcli.publish.table import Table
from dpcli.specs.v1 import OUTPUT_COLUMNS
from tests.helpers import run_in_process

CSV = "pid,other,age,sex,flag,quantile,a,b\np1,a,30,F,true,x,a1,b1\n,b,41,M,false,y,a2,b2\np2,,50,F,,,,\n"

SPEC = """\
version: 1
dataset: people
privacy: {{epsilon: 1, neighbours: add_remove{unit}}}
columns:
  age: {{type: int, bounds: [0, 100]}}
  sex: {{type: category, categories: [F, M]}}
{columns}{top}statistics:
{statistics}"""
COUNT = "  - {name: n, kind: count}\n"
PERSON = ", unit: {{id: pid, max_rows: {k}, missing_id: person}}"


def spec(statistics: str = COUNT, columns: str = "", unit: str = "", top: str = "") -> str:
    return SPEC.format(unit=unit, columns=columns, top=top, statistics=statistics)


def _big_keys(name: str, n: int) -> str:
    return f"  {name}: {{type: category, categories: [{', '.join(f'{name}{i}' for i in range(n))}]}}\n"


def _spends(ledger: Path) -> int:
    return ledger.read_text().count('"type":"spend"')


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.jsonl"
    done = run_in_process("budget", "set", "people", "--epsilon", "10", "--ledger", path)
    assert done.returncode == 0, done.stderr
    return path


def release(tmp_path: Path, ledger: Path, text: str, *extra: object):
    (tmp_path / "spec.yaml").write_text(text)
    (tmp_path / "in.csv").write_text(CSV)
    return run_in_process(
        "release", tmp_path / "spec.yaml", "-i", tmp_path / "in.csv", "-o", tmp_path / "out.csv", "--ledger", ledger,
        *extra,
    )


REFUSED = {
    # a statistic asking for consistency over more than 10^6 cells, though no other statistic shares its rows
    "finest_table_alone": (
        spec("  - {name: ab, kind: count, by: [a, b], postprocess: {consistent: true}}\n",
             _big_keys("a", 1001) + _big_keys("b", 1000)),
        "the finest table of ab has 1001000 cells; at most 1000000 are made consistent",
    ),
    # ... and beside a coarser count that does not count the same rows (b has no impute:), so no group forms
    "finest_table_no_group": (
        spec("  - {name: a, kind: count, by: [a]}\n  - {name: ab, kind: count, by: [a, b]}\n",
             _big_keys("a", 1001) + _big_keys("b", 1000), top="postprocess: {consistent: true}\n"),
        "the finest table of ab has 1001000 cells",
    ),
    "duplicate_name": (
        spec("  - {name: n, kind: count}\n  - {name: n, kind: count, by: [sex]}\n"),
        "statistics[1].name: duplicate statistic name 'n'",
    ),
    "dimension_flag": (
        spec("  - {name: n, kind: count, by: [flag]}\n", "  flag: {type: bool}\n",
             top="postprocess: {small_cells: {max_relative_width: 1, action: flag}}\n"),
        "statistics[0].by[0]: 'flag' cannot be an output dimension",
    ),
    "dimension_quantile": (
        spec("  - {name: n, kind: count, by: [quantile]}\n  - {name: m, kind: median, column: age}\n",
             "  quantile: {type: category, categories: [x, y]}\n"),
        "statistics[0].by[0]: 'quantile' cannot be an output dimension",
    ),
    "histogram_of_quantile": (
        spec("  - {name: m, kind: quantile, column: age, q: [0.5]}\n"
             "  - {name: n, kind: histogram, column: quantile}\n", "  quantile: {type: bool}\n"),
        "statistics[1].column: 'quantile' cannot be an output dimension",
    ),
    "histogram_of_flag": (
        spec("  - {name: n, kind: histogram, column: flag, postprocess: {small_cells: {max_relative_width: 1, "
             "action: suppress}}}\n", "  flag: {type: bool}\n"),
        "statistics[0].column: 'flag' cannot be an output dimension",
    ),
    "max_rows_exponent": (
        spec(unit=PERSON.format(k="1e3")),
        "privacy.unit.max_rows: '1e3' is not written as an integer: an integer field takes digits only (1000)",
    ),
    "max_rows_quoted_exponent": (spec(unit=PERSON.format(k="'1e3'")), "'1e3' is not written as an integer"),
    "max_rows_point": (spec(unit=PERSON.format(k="2.0")), "'2.0' is not written as an integer"),
    "max_rows_fraction": (spec(unit=PERSON.format(k="4/2")), "'4/2' is not written as an integer"),
    "top_k_k_exponent": (
        spec("  - {name: t, kind: top_k, column: sex, k: 1e0}\n"), "statistics[0].k: '1e0' is not written as an integer"
    ),
    "digits_point": (
        spec("  - {name: s, kind: sum, column: age, postprocess: {digits: 1.0}}\n"),
        "'1.0' is not written as an integer",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_before_the_spend(tmp_path: Path, ledger: Path, case: str) -> None:
    text, message = REFUSED[case]
    done = release(tmp_path, ledger, text)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr.decode()
    assert _spends(ledger) == 0
    assert not (tmp_path / "out.csv").exists()


def test_an_integer_field_in_digits_is_accepted_quoted_or_not(tmp_path: Path, ledger: Path) -> None:
    for k in ("1000", "'2'"):
        done = release(tmp_path, ledger, spec(unit=PERSON.format(k=k)))
        assert done.returncode == 0, done.stderr
    assert _spends(ledger) == 2


def test_a_pinned_person_id_field_refuses_another(tmp_path: Path) -> None:
    """A dataset pinned to ``unit: {id: other}`` (budget set --unit person:other --neighbours ...) refuses a release
    whose person is told by another id field, before the spend."""
    path = tmp_path / "ledger.jsonl"
    pin = run_in_process("budget", "set", "people", "--epsilon", "10", "--unit", "person:other", "--neighbours",
                         "add_remove", "--ledger", path)
    assert pin.returncode == 0, pin.stderr
    done = release(tmp_path, path, spec(unit=PERSON.format(k=2)))
    assert done.returncode == 2
    said = done.stderr.decode()
    assert "accounted under unit 'person:other'" in said
    assert "this asks for unit 'person:pid'" in said
    assert "write the spec with the unit {id: other, ...}" in said
    assert _spends(path) == 0
    ok = release(tmp_path, path, spec(unit=PERSON.format(k=2).replace("id: pid", "id: other")))
    assert ok.returncode == 0, ok.stderr


def test_budget_set_unit_without_neighbours_is_refused(tmp_path: Path) -> None:
    """``--unit`` alone pinned nothing, without a word: it is refused (exit 2) and no cap is written."""
    path = tmp_path / "ledger.jsonl"
    done = run_in_process("budget", "set", "people", "--epsilon", "10", "--unit", "person:other", "--ledger", path)
    assert done.returncode == 2
    assert "--unit pins the dataset's unit together with its neighbour relation: give --neighbours too" in (
        done.stderr.decode()
    )
    assert not path.exists() or '"type":"cap"' not in path.read_text()


@pytest.mark.parametrize("seconds", ["inf", "nan", "-1", "1e7", "-inf"])
def test_a_lock_timeout_that_is_no_deadline_is_refused(tmp_path: Path, ledger: Path, seconds: str) -> None:
    for done in (
        release(tmp_path, ledger, spec(), "--lock-timeout", seconds),
        run_in_process("budget", "set", "people", "--epsilon", "5", "--ledger", ledger, "--lock-timeout", seconds),
    ):
        assert done.returncode == 2, done.stderr
        assert "--lock-timeout: must be between 0 and 1000000 seconds" in done.stderr.decode()
    assert _spends(ledger) == 0
    assert ledger.read_text().count('"type":"cap"') == 1


def test_a_flag_or_quantile_dimension_is_fine_where_the_table_has_no_such_column(tmp_path: Path, ledger: Path) -> None:
    columns = "  flag: {type: bool}\n  quantile: {type: category, categories: [x, y]}\n"
    done = release(tmp_path, ledger, spec("  - {name: n, kind: count, by: [flag, quantile]}\n", columns))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.csv").read_text().splitlines()[0] == "statistic,kind,column,flag,quantile,value,ci_low," \
        "ci_high,epsilon"


def test_one_list_of_the_tables_columns() -> None:
    """Every column the table can have besides the dimensions is a reserved name, and the report knows the same."""
    # a series' period table leads its dimensions with `period` and `span` (dpcli/run/series.py)
    table = Table(dimensions=("period", "span", "d", "quantile"), blocks=(), with_rho=True, with_bins=True,
                  with_flag=True)
    assert set(table.columns) - {"d"} == set(OUTPUT_COLUMNS)
    assert frozenset(OUTPUT_COLUMNS) == KNOWN_COLUMNS
