"""The hostile-input battery, cell values: items 14-18 of the list in tests/hostile/test_spec_and_csv.py. Each case
asserts exit 0 and that the exact aggregates equal those of the *cleaned* file the documented policy describes
(docs/spec.md), which makes the released distribution identical (the noise depends on the plan only)."""

from __future__ import annotations

import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from dpcli.core.accounting import Cap
from dpcli.ledger import open_ledger
from dpcli.plan.model import make_plan
from dpcli.specs.load import parse_spec
from tests.hostile.battery import (
    CANARY,
    SPEC,
    exacts,
    released,
)

# ---------------------------------------------------------------------------------------------------------------
# Cell values (exit 0, the declared policy, the distribution of the cleaned data): items 14-18

NUMERIC_SPEC = """\
version: 1
dataset: toy
privacy: {epsilon: 1}
columns:
  x: {type: int, bounds: [0, 10]IMPUTE}
  f: {type: float, bounds: [-1, 1], precision: 0.25IMPUTE}
statistics:
  - {name: n, kind: count}
  - {name: sx, kind: sum, column: x}
  - {name: mf, kind: mean, column: f}
  - {name: hx, kind: histogram, column: x, bins: [0, 3, 11]}
  - {name: hf, kind: histogram, column: f, bins: {start: -1, stop: 1.25, step: 0.25}}
"""

# 15. Which texts are numbers (docs/spec.md): an optional sign and ASCII digits (int); decimal or scientific
# notation (float). Everything else is missing, then the null policy applies.
NOT_NUMBERS = ["", "nan", "NaN", "inf", "-inf", "Infinity", "1e309", "-1e309", "١٢٣", "1_000", " 7 ", "7 ", "0x10",
               "1,5", "½", "seven", CANARY + "x"]


@pytest.mark.parametrize("impute", [False, True], ids=["drop", "impute"])
@pytest.mark.parametrize("value", NOT_NUMBERS)
def test_a_cell_that_is_not_a_number_follows_the_null_policy(work: Path, value: str, impute: bool) -> None:
    text = NUMERIC_SPEC.replace("IMPUTE", ", impute: 1" if impute else "")
    (work / "num.yaml").write_text(text)
    quoted = '"' + value.replace('"', '""') + '"'
    (work / "hostile.csv").write_text(f"x,f\n{quoted},{quoted}\n4,0.5\n")
    (work / "clean.csv").write_text(f"x,f\n{'1,1' if impute else ','}\n4,0.5\n")
    plan = make_plan(parse_spec(text))
    assert exacts(plan, work / "hostile.csv") == exacts(plan, work / "clean.csv")
    rows = released(work, "-i", work / "hostile.csv", spec="num.yaml")
    assert all(-1 <= Fraction(r["value"]) <= 1 for r in rows if r["statistic"] == "mf")


@pytest.mark.parametrize(
    ("x", "f", "x_clean", "f_clean"),
    [
        ("-5", "-3.5", "0", "-1"),
        ("11", "1.01", "10", "1"),
        (CANARY, "1e300", "10", "1"),
        ("-" + CANARY, "-1e300", "0", "-1"),
        ("99999999999999999999", "0.1", "", "0.0"),
        ("10", "0.3", "10", "0.25"),
        ("0", "0.375", "0", "0.5"),
    ],
)
def test_out_of_bounds_values_are_clamped(work: Path, x: str, f: str, x_clean: str, f_clean: str) -> None:
    """14. Clamped to the bounds (floats rounded to the grid, half to even); a value beyond 64 bits is missing."""
    text = NUMERIC_SPEC.replace("IMPUTE", "")
    (work / "num.yaml").write_text(text)
    (work / "hostile.csv").write_text(f"x,f\n{x},{f}\n")
    (work / "clean.csv").write_text(f"x,f\n{x_clean},{f_clean}\n")
    plan = make_plan(parse_spec(text))
    assert exacts(plan, work / "hostile.csv") == exacts(plan, work / "clean.csv")
    released(work, "-i", work / "hostile.csv", spec="num.yaml")


CATEGORY_SPEC = """\
version: 1
dataset: toy
privacy: {epsilon: 1}
columns:
  sex: {type: category, categories: [Female, Male, Other]OTHER}
statistics:
  - {name: by_sex, kind: count, by: [sex]}
  - {name: n, kind: count}
"""

# 16/17. Byte-exact matching after CSV unquoting: no case folding, trimming or Unicode normalisation.
UNDECLARED = ["female", "MALE", " Male", "Male ", "Маle", "Ｍale", "Male\u200b", "Mal\u0065\u0301", "X", CANARY,
              "Female,", '"Female"']


@pytest.mark.parametrize("value", UNDECLARED)
def test_an_undeclared_category_is_dropped_never_a_new_key(work: Path, value: str) -> None:
    text = CATEGORY_SPEC.replace("OTHER", "")
    (work / "cat.yaml").write_text(text)
    cell = '"' + value.replace('"', '""') + '"'
    (work / "hostile.csv").write_text(f"sex\nMale\n{cell}\n")
    (work / "clean.csv").write_text("sex\nMale\n\n")
    plan = make_plan(parse_spec(text))
    assert exacts(plan, work / "hostile.csv") == exacts(plan, work / "clean.csv") == [([0, 1, 0], None), ([2], None)]
    rows = released(work, "-i", work / "hostile.csv", spec="cat.yaml")
    assert [r["sex"] for r in rows] == ["Female", "Male", "Other", ""]


@pytest.mark.parametrize("value", UNDECLARED)
def test_an_undeclared_category_maps_to_the_declared_other_key(work: Path, value: str) -> None:
    text = CATEGORY_SPEC.replace("OTHER", ", other: Other")
    (work / "cat.yaml").write_text(text)
    cell = '"' + value.replace('"', '""') + '"'
    (work / "hostile.csv").write_text(f"sex\nMale\n{cell}\n\n")  # the empty cell stays missing
    (work / "clean.csv").write_text("sex\nMale\nOther\n\n")
    plan = make_plan(parse_spec(text))
    assert exacts(plan, work / "hostile.csv") == exacts(plan, work / "clean.csv") == [([0, 1, 1], None), ([3], None)]
    rows = released(work, "-i", work / "hostile.csv", spec="cat.yaml")
    assert [r["sex"] for r in rows] == ["Female", "Male", "Other", ""]


def test_other_and_impute_together(work: Path) -> None:
    text = CATEGORY_SPEC.replace("OTHER", ", other: Other, impute: Female")
    (work / "cat.yaml").write_text(text)
    (work / "hostile.csv").write_text('sex\nMale\nmale\n\n""\n')
    plan = make_plan(parse_spec(text))
    assert exacts(plan, work / "hostile.csv")[0] == ([2, 1, 1], None)


def test_header_only_csv_is_a_normal_noisy_release(work: Path) -> None:
    """18. Every declared cell is released (zeros plus noise); means fall back to the midpoint when the noisy
    count is <= 0 (checked on the post-processing with chosen noisy values, since the noise is random)."""
    (work / "header.csv").write_text("age,income,sex\n")
    rows = released(work, "-i", work / "header.csv")
    assert [(r["statistic"], r["sex"], r["age"]) for r in rows] == [
        ("n", "", ""), ("by_sex", "F", ""), ("by_sex", "M", ""), ("ages", "", "[0..18)"), ("ages", "", "[18..65)"),
        ("ages", "", "[65..101)"), ("mean_income", "F", ""), ("mean_income", "M", ""),
    ]
    from dpcli.mechanisms.noisy import Noisy
    from dpcli.publish.table import build_table

    plan = make_plan(parse_spec(SPEC))
    noisy = [Noisy(np.array([0]), None), Noisy(np.array([0, 0]), None), Noisy(np.array([0, 0, 0]), None),
             Noisy(np.array([0, -4]), np.array([123, -77], dtype=object))]
    table = build_table(plan, noisy)
    mean = table.blocks[3]
    assert list(mean.value) == ["500", "500"]  # the midpoint of [0, 1000]
    assert list(mean.ci_low) == ["0", "0"]
    assert list(mean.ci_high) == ["1000", "1000"]


@pytest.mark.slow  # a soak test (many processes, or 10^7 values): make test-slow and .ci/run run it
def test_ten_million_distinct_values_in_an_unused_column_do_not_blow_up_memory(tmp_path: Path) -> None:
    """19. 10^7 rows, every one with a distinct value in a column the spec does not use (a 179 MB file), against
    the same file with one repeated value: peak RSS is the same (nothing is kept per distinct value) and stays
    within twice the file size over a tiny file's run (polars' streaming CSV reader buffers the file itself)."""
    import polars as pl
    n = 10_000_000
    ages = np.random.default_rng(7).integers(0, 100, n)
    frame = pl.DataFrame({"age": ages}).with_columns(
        uid=pl.lit("id") + pl.int_range(10**11, 10**11 + n).cast(pl.String)
    )
    frame.write_csv(tmp_path / "distinct.csv")
    frame.with_columns(uid=pl.lit(f"id{10**11}")).write_csv(tmp_path / "constant.csv")
    del frame
    (tmp_path / "tiny.csv").write_text("age,uid\n1,a\n")
    size = (tmp_path / "distinct.csv").stat().st_size
    assert size == (tmp_path / "constant.csv").stat().st_size
    (tmp_path / "spec.yaml").write_text(
        "version: 1\ndataset: mem\nprivacy: {epsilon: 1}\ncolumns:\n  age: {type: int, bounds: [0, 100]}\n"
        "statistics:\n  - {name: n, kind: count}\n"
        "  - {name: h, kind: histogram, column: age, bins: {start: 0, stop: 100, step: 10}}\n"
        "  - {name: m, kind: mean, column: age}\n"
    )
    open_ledger(tmp_path / "ledger.jsonl").set_cap("mem", Cap(Fraction(100), Fraction(0)), False)

    def peak_kib(data: str) -> int:
        probe = (
            "import resource, subprocess, sys\n"
            "r = subprocess.run(sys.argv[1:], capture_output=True)\n"
            "assert r.returncode == 0, r.stderr\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        )
        cmd = [sys.executable, "-c", probe, sys.executable, "-m", "dpcli", "release", str(tmp_path / "spec.yaml"),
               "-i", str(tmp_path / data), "-o", str(tmp_path / "out.csv"), "--ledger", str(tmp_path / "ledger.jsonl"),
               "--no-reuse", "--quiet"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("DPCLI_")}
        return int(subprocess.run(cmd, capture_output=True, check=True, timeout=120, env=env).stdout)

    tiny, constant, distinct = peak_kib("tiny.csv"), peak_kib("constant.csv"), peak_kib("distinct.csv")
    print(f"peak RSS KiB: tiny {tiny}, constant {constant}, distinct {distinct}; file {size // 1024} KiB")
    for name in ("distinct.csv", "constant.csv"):
        (tmp_path / name).unlink()
    assert distinct <= constant * 1.2 + 20_000, (tiny, constant, distinct)
    assert (distinct - tiny) * 1024 <= 2 * size, (tiny, constant, distinct, size)
