"""Issue 25 (8): `dpcli plan --expected-rows` gives a mean's error in its column's units (not only its sum's and
count's parts) and lets `--target` name a mean, exactly as `expected_rows:` in the spec would."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import run_in_process
from tests.spec_builder import spec_text

COLUMNS = {"hours": "{type: int, bounds: [0, 99]}", "sex": "{type: category, categories: [F, M]}"}
STATS = ["{name: n, kind: count}", "{name: hours_by_sex, kind: mean, column: hours, by: [sex]}"]


def write(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / f"spec{len(extra)}.yaml"
    path.write_text(spec_text(COLUMNS, STATS, extra=extra))
    return path


def plan(*args: object) -> tuple[int, str, str]:
    r = run_in_process("plan", *args)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def test_the_flag_gives_the_mean_its_error_in_its_units_as_the_spec_field_does(tmp_path: Path) -> None:
    bare, declared = write(tmp_path), write(tmp_path, "expected_rows: 500\n")
    code, out, err = plan(bare)
    assert code == 0, err
    assert "hours_by_sex: its error in hours's units needs the rows with a value per cell: give `dpcli plan " \
           "--expected-rows N`" in out
    code, flagged, err = plan(bare, "--expected-rows", "500")
    assert code == 0, err
    line = next(x for x in flagged.splitlines() if x.startswith("hours_by_sex: ±"))
    assert line.startswith("hours_by_sex: ±")
    assert "in hours's units at 95% for 500 rows" in line
    assert flagged == plan(declared)[1]
    assert plan(bare, "--expected-rows", "hours_by_sex=500")[1] == flagged
    doc = json.loads(plan(bare, "--expected-rows", "hours_by_sex=500", "--json")[1])
    error = doc["mean_errors"][0]
    assert (error["statistic"], error["column"], error["expected_rows"]) == ("hours_by_sex", "hours", 500)
    assert json.loads(plan(declared, "--json")[1])["mean_errors"] == doc["mean_errors"]
    assert json.loads(plan(bare, "--json")[1])["mean_errors"][0]["error"] is None


def test_a_target_on_a_mean_takes_the_flag(tmp_path: Path) -> None:
    bare, declared = write(tmp_path), write(tmp_path, "expected_rows: 500\n")
    code, _, err = plan(bare, "--target", "hours_by_sex=2", "--json")
    assert code == 2
    assert "a mean's target needs expected_rows" in err
    assert "--expected-rows" in err
    code, out, err = plan(bare, "--target", "hours_by_sex=2", "--expected-rows", "hours_by_sex=500", "--json")
    assert code == 0, err
    answer = json.loads(out)["target"]
    assert answer["epsilon"] is not None
    assert answer == json.loads(plan(declared, "--target", "hours_by_sex=2", "--json")[1])["target"]


def test_refusals(tmp_path: Path) -> None:
    bare = write(tmp_path)
    assert plan(bare, "--expected-rows", "n=5")[2] == (
        "dpcli: error: --expected-rows: 'n' is not a mean of the spec (expected rows are a mean's)\n"
    )
    assert plan(bare, "--expected-rows", "nope=5")[0] == 2
    assert plan(bare, "--expected-rows", "many")[2] == (
        "dpcli: error: --expected-rows: 'many' is not N or NAME=N (N a whole number of rows)\n"
    )
    assert plan(bare, "--expected-rows", "0")[0] == 2
