"""End-to-end runs of the `dpcli` command: exit codes, streams, files, and what messages may contain.

In process (dpcli.cli.app.main with captured streams) except where only a child process can show it: standard input,
a pipe closed early, the umask."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from tests.helpers import clean_env, run_dpcli, run_in_process
from tests.spec_builder import spec_text

CANARY = "987654321"  # a cell value that must never appear in any message
ROOT = Path(__file__).resolve().parents[2]

SPEC = spec_text(
    {"age": "{type: int, bounds: [0, 100]}", "income": "{type: float, bounds: [0, 1000], precision: 0.01}",
     "sex": "{type: category, categories: [F, M]}"},
    ["{name: n, kind: count}", "{name: by_sex, kind: count, by: [sex]}",
     "{name: ages, kind: histogram, column: age, bins: [0, 18, 65, 101]}",
     "{name: mean_income, kind: mean, column: income, by: [sex]}", "{name: total_income, kind: sum, column: income}"],
)

ROWS = [
    ("34", "120.50", "F"),
    ("71", "990", "M"),
    ("15", "", "F"),
    (CANARY, "n/a", "M"),  # out of bounds age, unparseable income
    ("45", CANARY, "X"),  # out of bounds income, undeclared category
]


dpcli = run_in_process


def no_data_in(result: subprocess.CompletedProcess) -> None:
    text = result.stdout.decode("utf-8", "replace") + result.stderr.decode("utf-8", "replace")
    assert CANARY not in text
    assert "Traceback" not in text


def set_cap(work: Path, eps: str = "10") -> None:
    r = dpcli("budget", "set", "toy", "--epsilon", eps, "--ledger", str(work / "ledger.jsonl"))
    assert r.returncode == 0, r.stderr


def read_table(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


# -- exit 0 --------------------------------------------------------------------------------------------------------


def test_release_writes_table_sidecar_and_spends(work: Path) -> None:
    set_cap(work, "3")
    out = work / "out.csv"
    r = dpcli("release", str(work / "spec.yaml"), "--input", str(work / "data.csv"), "--output", str(out),
              "--ledger", str(work / "ledger.jsonl"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == b""
    assert "spent ε=1; ε left 2 of 3" in r.stderr.decode()
    rows = read_table(out.read_text())
    assert list(rows[0].keys()) == [
        "statistic", "kind", "column", "sex", "age", "bin_low", "bin_high", "value", "ci_low", "ci_high", "epsilon"
    ]
    assert [(x["statistic"], x["sex"], x["age"]) for x in rows] == [
        ("n", "", ""),
        ("by_sex", "F", ""),
        ("by_sex", "M", ""),
        ("ages", "", "[0..18)"),
        ("ages", "", "[18..65)"),
        ("ages", "", "[65..101)"),
        ("mean_income", "F", ""),
        ("mean_income", "M", ""),
        ("total_income", "", ""),
    ]
    for x in rows:
        assert Fraction(x["epsilon"]) == Fraction(1, 5)
        assert Fraction(x["ci_low"]) <= Fraction(x["value"]) <= Fraction(x["ci_high"])
        if x["statistic"] in ("n", "by_sex", "ages"):
            int(x["value"])  # counts are integers
    for x in rows:
        if x["statistic"] == "mean_income":
            assert 0 <= Fraction(x["value"]) <= 1000  # clipped to the bounds
    meta = json.loads((work / "out.csv.meta.json").read_text())
    assert meta["epsilon"] == "1"
    assert meta["dataset"] == "toy"
    assert [s["mechanism"] for s in meta["statistics"]] == ["discrete_laplace"] * 5
    assert meta["ledger"]["record"] == 1
    ledger = [json.loads(line) for line in (work / "ledger.jsonl").read_text().splitlines()]
    assert [x["type"] for x in ledger] == ["cap", "spend", "released"]
    assert ledger[1]["epsilon"] == "1"
    assert ledger[1]["hash"] == meta["ledger"]["head"]
    assert ledger[2]["release_key"] == ledger[1]["release_key"]
    no_data_in(r)


def test_stdin_to_stdout_pipe(work: Path) -> None:
    set_cap(work)
    data = (work / "data.csv").read_bytes()
    r = run_dpcli("release", str(work / "spec.yaml"), "--input", "-", "--output", "-", "--ledger",
                  str(work / "ledger.jsonl"), "--quiet", stdin=data)
    assert r.returncode == 0, r.stderr
    assert r.stderr == b""
    rows = read_table(r.stdout.decode())
    assert len(rows) == 9
    assert rows[0]["statistic"] == "n"


def test_json_output_by_extension(work: Path) -> None:
    set_cap(work)
    out = work / "out.json"
    r = dpcli("release", str(work / "spec.yaml"), "-i", str(work / "data.csv"), "-o", str(out),
              "--ledger", str(work / "ledger.jsonl"), "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())
    assert rows[0]["statistic"] == "n"
    assert rows[0]["sex"] is None
    assert isinstance(rows[0]["value"], int)
    summary = json.loads(r.stderr.decode())
    assert summary["epsilon_spent"] == "1"
    assert summary["epsilon_remaining"] == "9"


def test_ledger_from_environment_and_spec_input_relative_to_spec(work: Path) -> None:
    spec = SPEC.replace("dataset: toy\n", "dataset: toy\ninput: data.csv\n")
    (work / "spec2.yaml").write_text(spec)
    env = {"DPCLI_LEDGER": str(work / "ledger.jsonl")}
    assert dpcli("budget", "set", "toy", "--epsilon", "2", env=env).returncode == 0
    r = dpcli("release", str(work / "spec2.yaml"), "--quiet", env=env, cwd=Path("/"))
    assert r.returncode == 0, r.stderr
    assert len(read_table(r.stdout.decode())) == 9


def test_plan_reads_no_data(work: Path) -> None:
    spec = SPEC.replace("dataset: toy\n", "dataset: toy\ninput: does-not-exist.csv\n")
    (work / "spec2.yaml").write_text(spec)
    r = dpcli("plan", str(work / "spec2.yaml"))
    assert r.returncode == 0, r.stderr
    text = r.stdout.decode()
    assert "discrete_laplace" in text
    assert "add/remove one row changes the sum by at most max(|L|, |U|)" in text
    j = dpcli("plan", str(work / "spec2.yaml"), "--json")
    doc = json.loads(j.stdout)
    total = next(s for s in doc["statistics"] if s["statistic"] == "total_income")
    assert total["sensitivity"] == 100000
    assert total["sensitivity_unit"] == "0.01"
    assert total["epsilon"] == "0.2"
    assert total["scale"] == "500000"


def test_check_and_init(work: Path) -> None:
    r = dpcli("check", str(work / "spec.yaml"), "--input", str(work / "data.csv"))
    assert r.returncode == 0, r.stderr
    assert "is valid: 5 statistic(s)" in r.stderr.decode()
    r = dpcli("init", str(work / "data.csv"))
    assert r.returncode == 0
    skeleton = r.stdout.decode()
    assert "  age: {type: TODO" in skeleton
    assert "unused" in skeleton
    no_data_in(r)
    # the skeleton is refused until a person fills it in
    (work / "skeleton.yaml").write_text(skeleton)
    r = dpcli("check", str(work / "skeleton.yaml"))
    assert r.returncode == 2
    # every column still TODO is reported, one line each, in header order
    assert r.stderr.decode() == "".join(
        f"dpcli: error: {work / 'skeleton.yaml'}: columns.{name}.type: 'TODO' is not a column type "
        "(one of: int, float, category, bool)\n"
        for name in ("age", "income", "sex", "unused")
    )


def test_budget_show_and_ledger_show_verify(work: Path) -> None:
    set_cap(work, "3")
    led = str(work / "ledger.jsonl")
    assert dpcli("release", str(work / "spec.yaml"), "-i", str(work / "data.csv"), "-o", str(work / "o.csv"),
                 "--ledger", led).returncode == 0
    r = dpcli("budget", "show", "--json", "--ledger", led)
    assert json.loads(r.stdout) == [{"dataset": "toy", "cap": "3", "spent": "1", "remaining": "2", "releases": 1,
                                     "cap_delta": "0", "spent_delta": "0",
                                     "spent_pure_epsilon": "1", "spent_rho": "0", "unit": "row",
                                     "neighbours": "add_remove"}]
    r = dpcli("ledger", "verify", "--ledger", led)
    assert r.returncode == 0
    assert r.stdout.decode().startswith("ledger OK: 3 record(s), head ")
    r = dpcli("ledger", "show", "--json", "--ledger", led)
    assert [x["type"] for x in json.loads(r.stdout)] == ["cap", "spend", "released"]


# -- exit 2 --------------------------------------------------------------------------------------------------------


def test_invalid_spec_exits_2_with_yaml_path(work: Path) -> None:
    (work / "bad.yaml").write_text(SPEC.replace("column: income}", "column: incme}", 1))
    r = dpcli("release", str(work / "bad.yaml"), "-i", str(work / "data.csv"), "--ledger", str(work / "l.jsonl"))
    assert r.returncode == 2
    assert (
        r.stderr.decode()
        == f"dpcli: error: {work / 'bad.yaml'}: statistics[4].column: 'incme' is not a declared column; "
        "did you mean 'income'?\n"
    )
    assert not (work / "l.jsonl").exists()


def test_usage_errors_exit_2(work: Path) -> None:
    assert dpcli("release").returncode == 2
    assert dpcli("release", str(work / "spec.yaml"), "--no-such-option").returncode == 2
    r = dpcli("release", str(work / "spec.yaml"), "-i", str(work / "data.csv"))
    assert r.returncode == 2
    assert "no ledger" in r.stderr.decode()


def test_output_equal_to_input_refused(work: Path) -> None:
    set_cap(work)
    before = (work / "ledger.jsonl").read_bytes()
    r = dpcli("release", str(work / "spec.yaml"), "-i", str(work / "data.csv"), "-o", str(work / "data.csv"),
              "--ledger", str(work / "ledger.jsonl"))
    assert r.returncode == 2
    assert "is the input file" in r.stderr.decode()
    assert (work / "ledger.jsonl").read_bytes() == before


# -- exit 3 --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"age,income\n1,2\n", "declared column(s) missing from the header: sex"),
        (b"age,income,sex,sex\n1,2,F,F\n", "declared column(s) appear more than once in the header: sex"),
        (b"", "is empty: a CSV needs at least a header line"),
        (b"age,inc\xffome,sex\n", "is not UTF-8 text"),
    ],
)
def test_structural_input_problems_exit_3_and_spend_nothing(work: Path, content: bytes, message: str) -> None:
    set_cap(work)
    before = (work / "ledger.jsonl").read_bytes()
    (work / "bad.csv").write_bytes(content)
    r = dpcli("release", str(work / "spec.yaml"), "-i", str(work / "bad.csv"), "-o", str(work / "out.csv"),
              "--ledger", str(work / "ledger.jsonl"))
    assert r.returncode == 3, r.stderr
    assert message in r.stderr.decode()
    assert (work / "ledger.jsonl").read_bytes() == before
    assert not (work / "out.csv").exists()


def test_missing_output_directory_exits_3_before_spending(work: Path) -> None:
    set_cap(work)
    before = (work / "ledger.jsonl").read_bytes()
    r = dpcli("release", str(work / "spec.yaml"), "-i", str(work / "data.csv"), "-o", str(work / "nope" / "o.csv"),
              "--ledger", str(work / "ledger.jsonl"))
    assert r.returncode == 3
    assert (work / "ledger.jsonl").read_bytes() == before


# -- exit 4 --------------------------------------------------------------------------------------------------------


def test_budget_runs_out_exactly(work: Path) -> None:
    set_cap(work, "3")
    led = str(work / "ledger.jsonl")
    args = ["release", str(work / "spec.yaml"), "-i", str(work / "data.csv"), "--ledger", led, "--quiet", "--no-reuse"]
    for _ in range(3):
        r = dpcli(*args, "-o", str(work / "o.csv"))
        assert r.returncode == 0, r.stderr
    before = (work / "ledger.jsonl").read_bytes()
    r = dpcli(*args, "-o", str(work / "refused.csv"))
    assert r.returncode == 4
    assert r.stderr.decode() == (
        "dpcli: error: budget refused for dataset 'toy': requested ε=1, remaining ε=0, short by 1\n"
    )
    assert r.stdout == b""
    assert not (work / "refused.csv").exists()
    assert (work / "ledger.jsonl").read_bytes() == before


def test_exact_budget_arithmetic_point_one_plus_point_two(work: Path) -> None:
    spec = SPEC.replace("epsilon: 1}", "epsilon: 0.1}")
    (work / "s.yaml").write_text(spec)
    led = str(work / "ledger.jsonl")
    assert dpcli("budget", "set", "toy", "--epsilon", "0.3", "--ledger", led).returncode == 0
    args = ["release", str(work / "s.yaml"), "-i", str(work / "data.csv"), "-o", str(work / "o.csv"), "--ledger", led,
            "--no-reuse"]
    assert [dpcli(*args).returncode for _ in range(4)] == [0, 0, 0, 4]


def test_no_cap_refused_with_how_to(work: Path) -> None:
    r = dpcli("release", str(work / "spec.yaml"), "-i", str(work / "data.csv"), "--ledger", str(work / "l.jsonl"))
    assert r.returncode == 4
    assert "no budget cap for dataset 'toy'" in r.stderr.decode()
    assert "dpcli budget set toy --epsilon E" in r.stderr.decode()


# -- exit 5 --------------------------------------------------------------------------------------------------------


def test_tampered_ledger_exits_5_and_release_refuses(work: Path) -> None:
    set_cap(work, "3")
    led = work / "ledger.jsonl"
    lines = led.read_text().splitlines()
    lines[0] = lines[0].replace('"epsilon":"3"', '"epsilon":"30"')
    led.write_text("\n".join(lines) + "\n")
    r = dpcli("ledger", "verify", "--ledger", str(led))
    assert r.returncode == 5
    assert "record 0 has been altered" in r.stderr.decode()
    r = dpcli("release", str(work / "spec.yaml"), "-i", str(work / "data.csv"), "-o", str(work / "o.csv"),
              "--ledger", str(led))
    assert r.returncode == 5
    assert not (work / "o.csv").exists()


# -- exit 1 --------------------------------------------------------------------------------------------------------


def test_internal_error_is_exit_1_without_traceback_or_data(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """A bug (any exception that is not a DpcliError) is reported as such, with no traceback and no message text."""
    import dpcli.run.release as rel
    from dpcli.cli.app import main

    def explode(*a, **k):
        raise ValueError(f"cell value {CANARY}")

    monkeypatch.setattr(rel, "release", explode)
    with pytest.raises(SystemExit) as exc:
        main(["release", "whatever.yaml", "--ledger", "x.jsonl"])
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert err == "dpcli: error: internal error (ValueError); this is a bug in dpcli, please report it\n"


# -- streams -------------------------------------------------------------------------------------------------------


def test_closed_stdout_is_quiet_and_spend_is_recorded(work: Path) -> None:
    set_cap(work)
    led = work / "ledger.jsonl"
    cmd = (f"{sys.executable} -m dpcli release {work / 'spec.yaml'} -i {work / 'data.csv'} -o - "
           f"--ledger {led} --quiet | head -1")
    r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, timeout=120,
                       env=clean_env())
    assert r.stdout.decode().startswith("statistic,")
    assert r.stderr == b""
    assert r.returncode == 0
    types = [json.loads(x)["type"] for x in led.read_text().splitlines()]
    assert types == ["cap", "spend", "released"]


def test_no_data_value_in_any_error_message(work: Path) -> None:
    """Every failing path, run over a file full of canaries: no message carries a cell."""
    set_cap(work, "1")
    led = str(work / "ledger.jsonl")
    (work / "canary_header.csv").write_text(f"age,income,{CANARY}\n1,2,3\n")
    (work / "canary_bytes.csv").write_bytes(b"age,income,sex\n" + CANARY.encode() + b"\xff,1,F\n")
    runs = [
        ("release", str(work / "spec.yaml"), "-i", str(work / "canary_header.csv"), "--ledger", led),
        ("check", str(work / "spec.yaml"), "-i", str(work / "canary_header.csv")),
        (
            "release",
            str(work / "spec.yaml"),
            "-i",
            str(work / "canary_bytes.csv"),
            "-o",
            str(work / "o.csv"),
            "--ledger",
            led,
        ),
        ("release", str(work / "spec.yaml"), "-i", str(work / "data.csv"), "-o", str(work / "o.csv"), "--ledger", led),
        (
            "release",
            str(work / "spec.yaml"),
            "-i",
            str(work / "data.csv"),
            "-o",
            str(work / "o.csv"),
            "--ledger",
            led,
            "--no-reuse",
        ),
    ]
    codes = []
    for args in runs:
        r = dpcli(*args)
        codes.append(r.returncode)
        no_data_in(r)
    assert codes[:2] == [3, 3]
    assert codes[4] == 4  # the budget of 1 is gone after one release (the third run may succeed: exit 0)


def test_output_file_mode_follows_the_umask(work: Path) -> None:
    set_cap(work)
    out = work / "out.csv"
    r = subprocess.run(["bash", "-c", f"umask 022 && {sys.executable} -m dpcli release {work / 'spec.yaml'} "
                        f"-i {work / 'data.csv'} -o {out} --ledger {work / 'ledger.jsonl'} --quiet"],
                       capture_output=True, timeout=120,
                       env=clean_env())
    assert r.returncode == 0, r.stderr
    assert out.stat().st_mode & 0o777 == 0o644
    assert (work / "out.csv.meta.json").stat().st_mode & 0o777 == 0o644


def test_verbose_names_phases_and_prints_only_the_total_time(work: Path) -> None:
    set_cap(work)
    r = dpcli("release", str(work / "spec.yaml"), "-i", str(work / "data.csv"), "-o", str(work / "o.csv"),
              "--ledger", str(work / "ledger.jsonl"), "--verbose")
    lines = r.stderr.decode().splitlines()
    timed = [line for line in lines if re.search(r"\d+\.\d+ s", line)]
    assert len(timed) == 1
    assert timed[0].startswith("dpcli: done in ")
    assert any("exact aggregates computed" in line for line in lines)
    no_data_in(r)


def test_epsilon_column_never_prints_less_than_was_spent(work: Path) -> None:
    """Finding 7: three equal shares of 1 used to print as 0.333333333333333 each (adding up to less than 1)."""
    set_cap(work)
    (work / "thirds.yaml").write_text(
        SPEC.split("statistics:")[0]
        + "statistics:\n  - {name: a, kind: count}\n  - {name: b, kind: count}\n  - {name: c, kind: count}\n"
    )
    r = dpcli("release", str(work / "thirds.yaml"), "-i", str(work / "data.csv"), "-o", "-",
              "--ledger", str(work / "ledger.jsonl"), "--quiet")
    assert r.returncode == 0, r.stderr
    rows = read_table(r.stdout.decode())
    assert [x["epsilon"] for x in rows] == ["0.333333333333334"] * 3
    assert sum(Fraction(x["epsilon"]) for x in rows) >= 1
