"""`postprocess:` through the spec, the plan and the table (dpcli.postprocess.consistency, dpcli.publish.policies)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from dpcli.cli.render_plan import print_plan
from dpcli.engine import aggregate
from dpcli.errors import SpecError
from dpcli.mechanisms.noise import exact_noisy
from dpcli.mechanisms.noisy import Noisy
from dpcli.plan.model import make_plan
from dpcli.postprocess.consistency import consistency_groups, plan_notes, sidecar_blocks
from dpcli.publish.store import decode_table, encode_table
from dpcli.publish.table import Table, build_table
from dpcli.publish.writers import HashingWriter, write_csv, write_json
from dpcli.specs.load import parse_spec
from tests.helpers import run_in_process

COLUMNS = """
columns:
  sex: {type: category, categories: [F, M], impute: F}
  race: {type: category, categories: [a, b, c], impute: c}
  city: {type: category, categories: [x, y]}
  age: {type: int, bounds: [0, 99], impute: 40}
"""
STATS = """
statistics:
  - {name: total, kind: count}
  - {name: by_sex, kind: count, by: [sex]}
  - {name: by_sex_race, kind: count, by: [sex, race]}
  - {name: by_city, kind: count, by: [city]}
  - {name: income, kind: sum, column: age, by: [sex]}
"""


def spec(postprocess: str = "", stats: str = STATS, privacy: str = "{epsilon: 1}") -> str:
    return f"version: 1\ndataset: d\nprivacy: {privacy}\n{postprocess}\n{COLUMNS}{stats}"


def text(table: Table, fmt: str = "csv") -> str:
    buf = io.BytesIO()
    sink = HashingWriter(buf)
    (write_json if fmt == "json" else write_csv)(table, sink)
    sink.flush()
    return buf.getvalue().decode()


def rows_of(table: Table) -> list[dict]:
    return [dict(zip(table.columns, row, strict=True)) for row in table.rows()]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pp") / "d.csv"
    lines = ["sex,race,city,age"] + [
        f"{'FM'[i % 2]},{'abc'[i % 3] if i % 7 else ''},{'xy'[i % 2] if i % 5 else ''},{i % 90}" for i in range(300)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_exact_path_gives_back_the_exact_table(data: Path) -> None:
    plain = make_plan(parse_spec(spec()))
    post = make_plan(parse_spec(spec("postprocess: {consistent: true, nonnegative: true, digits: 0, "
                                     "small_cells: {max_relative_width: 0.5, action: flag}}")))
    a = build_table(plain, exact_noisy(aggregate(plain, data)))
    b = build_table(post, exact_noisy(aggregate(post, data)))
    assert b.columns == (*a.columns, "flag")
    assert [r[:-1] for r in b.rows()] == list(a.rows())
    flags = {(r["statistic"], r["sex"], r["race"]): r["flag"] for r in rows_of(b)}
    assert flags[("total", None, None)] == ""  # 300 ± 15
    assert flags[("by_sex_race", "F", "a")] == "flagged"  # ~43 ± 15 is wider than 0.5 x 43


def test_noisy_counts_come_out_adding_up() -> None:
    plan = make_plan(parse_spec(spec("postprocess: {consistent: true}")))
    rng = np.random.default_rng(3)
    exact = [np.array([300]), np.array([150, 150]), np.array([40, 50, 60, 45, 55, 50]), np.array([120, 120])]
    noisy = [Noisy(e + rng.integers(-9, 10, e.shape), None) for e in exact]
    noisy.append(Noisy(np.array([100, 100]), np.array([4000, 4100])))
    table = build_table(plan, noisy)
    values: dict[str, list[int]] = {}
    for r in rows_of(table):
        values.setdefault(r["statistic"], []).append(int(r["value"]))
    fine = np.array(values["by_sex_race"]).reshape(2, 3)
    assert values["by_sex"] == fine.sum(axis=1).tolist()
    assert values["total"] == [fine.sum()]
    assert values["by_city"] == noisy[3].counts.tolist()  # city has no impute: not the same rows, left alone
    assert "flag" not in table.columns


def test_suppressed_cells_keep_their_rows_and_survive_the_store() -> None:
    plan = make_plan(parse_spec(spec("postprocess: {small_cells: {max_relative_width: 1, action: suppress}}")))
    noisy = [Noisy(np.array([300]), None), Noisy(np.array([150, 3]), None), Noisy(np.arange(6) * 40, None),
             Noisy(np.array([120, -2]), None), Noisy(np.array([100, 100]), np.array([4000, 4100]))]
    table = build_table(plan, noisy)
    csv_text = text(table)
    lines = csv_text.splitlines()
    assert lines[0].endswith(",epsilon,flag")
    assert "by_sex,count,,M,,,,,,0.2,suppressed" in lines  # value 3 ± 15: its row stays, value and interval empty
    assert "by_sex,count,,F,,,150,135,165,0.2," in lines
    assert "by_city,count,,,,y,,,,0.2,suppressed" in lines
    doc = json.loads(text(table, "json"))
    hidden = [r for r in doc if r["flag"] == "suppressed"]
    assert hidden
    assert all(r["value"] is None and r["ci_low"] is None and r["ci_high"] is None for r in hidden)
    again = decode_table(encode_table(table))
    assert text(again) == csv_text
    assert text(again, "json") == text(table, "json")


def test_nonnegative_and_digits() -> None:
    stats = STATS.replace("{name: income, kind: sum, column: age, by: [sex]}",
                          "{name: income, kind: sum, column: age, by: [sex], postprocess: {digits: 0}}")
    plan = make_plan(parse_spec(spec("postprocess: {nonnegative: true}", stats)))
    noisy = [Noisy(np.array([-5]), None), Noisy(np.array([150, -3]), None), Noisy(np.arange(6), None),
             Noisy(np.array([1, 2]), None), Noisy(np.array([10, 10]), np.array([-400, 4100]))]
    rows = rows_of(build_table(plan, noisy))
    total = next(r for r in rows if r["statistic"] == "total")
    assert (total["value"], total["ci_low"], total["ci_high"]) == ("0", "0", "10")
    incomes = [(r["value"], r["ci_low"]) for r in rows if r["statistic"] == "income"]
    assert incomes[0][0] == "0"
    assert incomes[1][0] == "4100"


def test_spec_refusals() -> None:
    own = "column: age, by: [sex], postprocess: {consistent: true}}"
    consistent_sum = STATS.replace("column: age, by: [sex]}", own)
    with pytest.raises(SpecError, match=r"statistics\[4\].postprocess.consistent: applies to counts and histograms"):
        parse_spec(spec(stats=consistent_sum))
    with pytest.raises(SpecError, match=r"postprocess.small_cells.action: 'hide' is not one of: flag, suppress"):
        parse_spec(spec("postprocess: {small_cells: {max_relative_width: 1, action: hide}}"))
    with pytest.raises(SpecError, match=r"postprocess.round: unknown field"):
        parse_spec(spec("postprocess: {round: true}"))
    quantile = STATS + "  - {name: q, kind: median, column: age, postprocess: {nonnegative: true}}\n"
    with pytest.raises(SpecError, match=r"statistics\[5\].postprocess: not allowed for a median"):
        parse_spec(spec(stats=quantile))


def test_groups_notes_and_the_plan() -> None:
    plan = make_plan(parse_spec(spec("postprocess: {consistent: true}")))
    groups, notes = consistency_groups(plan)
    assert [(g.finest, g.members) for g in groups] == [(2, (0, 1, 2))]
    # city has no impute: its rows with a missing city are not counted there, so by_city stands alone
    assert notes == {3: "not made consistent: no other statistic with consistent: true shares its rows"}
    lines = plan_notes(plan)
    assert lines[0] == "consistent with by_sex, by_sex_race (least squares, rounded keeping the total)"
    assert lines[4] is None  # a sum: consistency is for counts
    out = io.StringIO()
    print_plan(plan, out)
    assert "post-processing (reads the noisy values only: spends nothing):" in out.getvalue()
    assert sidecar_blocks(plan)["by_sex"]["consistent"]["with"] == ["total", "by_sex_race"]


def test_a_person_unit_is_not_made_consistent() -> None:
    privacy = "{epsilon: 1, unit: {id: pid, max_rows: 1, missing_id: drop}}"
    stats = STATS.replace("column: age, by: [sex]}", "column: age, by: [sex], clamp: row}")
    plan = make_plan(parse_spec(spec("postprocess: {consistent: true}", stats, privacy=privacy)))
    groups, notes = consistency_groups(plan)
    assert groups == []
    assert notes[0].startswith("not made consistent: under a person unit")


def test_plan_and_check_refuse_a_finest_table_too_large_to_make_consistent(tmp_path: Path) -> None:
    spec_file = tmp_path / "s.yaml"
    spec_file.write_text(
        "version: 1\ndataset: d\nprivacy: {epsilon: 1}\npostprocess: {consistent: true}\n"
        "columns:\n  x: {type: int, bounds: [0, 1999999], impute: 0}\n"
        "statistics:\n  - {name: total, kind: count}\n"
        "  - {name: h, kind: histogram, column: x, bins: {start: 0, stop: 2000000, step: 1}}\n"
    )
    for command in ("plan", "check"):
        r = run_in_process(command, spec_file)
        assert (r.returncode, r.stdout) == (2, b"")
        assert r.stderr.decode() == (
            "dpcli: error: postprocess.consistent: the finest table of total, h has 2000000 cells; at most 1000000 "
            "are made consistent\n"
        )


def test_the_small_cell_test_on_integer_columns_is_the_exact_one() -> None:
    """The vectorised test (integer columns on one grid, as counts and most sums are) marks exactly the cells the
    exact Fraction test marks, near the boundary and past int64 included."""
    from fractions import Fraction

    from dpcli.postprocess.consistency import small_cells
    from dpcli.publish.policies import _small_on_grid

    rng = np.random.default_rng(14)
    for width in (Fraction(1, 2), Fraction(1), Fraction(3, 7), Fraction(10**18 + 1, 10**18)):
        value = rng.integers(-50, 50, 2000)
        half = rng.integers(0, 40, 2000)
        arrays = [value, value - half, value + half]
        expected = small_cells(*[[Fraction(int(x)) for x in a] for a in arrays], width)
        assert _small_on_grid(arrays, width).tolist() == expected
