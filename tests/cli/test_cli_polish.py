"""The command line's surface (issue 10): -h, completion, metavars and choices, examples in the help, one error style
(JSON with --json), one number encoding in every JSON output, refused output formats, `init` through a YAML
emitter, the warning for a dataset split across ledgers, and a plan table that reads at 80 columns. In process."""

from __future__ import annotations

import io
import json
import re
from fractions import Fraction
from pathlib import Path

import pytest

import dpcli
from dpcli.core.accounting import parse_exact
from tests.helpers import TOY_SPEC, run_in_process
from tests.spec_builder import spec_text

dpcli_run = run_in_process
ROOT = Path(__file__).resolve().parents[2]

COMMANDS = [
    [], ["budget"], ["ledger"], ["release"], ["plan"], ["audit"], ["check"], ["init"], ["schema"],
    ["budget", "set"], ["budget", "show"], ["ledger", "show"], ["ledger", "verify"],
]


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    """The toy spec with a small CSV beside it, its cap of 1 set in ledger.jsonl."""
    (tmp_path / "spec.yaml").write_text(TOY_SPEC)
    (tmp_path / "data.csv").write_text("age\n30\n40\n")
    r = dpcli_run("budget", "set", "toy", "--epsilon", "1", "--ledger", tmp_path / "ledger.jsonl")
    assert r.returncode == 0, r.stderr
    return tmp_path


# -- help, metavars, choices, completion, version ---------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "dpcli")
def test_short_help_metavars_and_an_example_on_every_command(command: list[str]) -> None:
    short, long = dpcli_run(*command, "-h"), dpcli_run(*command, "--help")
    assert short.returncode == long.returncode == 0
    assert short.stdout == long.stdout
    assert short.stderr == long.stderr == b""
    text = short.stdout.decode()
    usage = text.splitlines()[0]
    path = " ".join(["dpcli", *command])
    assert usage.startswith(f"Usage: {path} [OPTIONS]")
    assert "{" not in text
    assert "<str>" not in text
    assert "<path>" not in text
    assert "<float" not in text
    assert f"Example:\n    $ {path}" in text


def test_usage_lines_name_their_arguments() -> None:
    firsts = {" ".join(c): dpcli_run(*c, "-h").stdout.decode().splitlines()[0] for c in COMMANDS if c}
    assert firsts["release"] == "Usage: dpcli release [OPTIONS] SPEC"
    assert firsts["init"] == "Usage: dpcli init [OPTIONS] CSV"
    assert firsts["budget set"] == "Usage: dpcli budget set [OPTIONS] DATASET"
    release = dpcli_run("release", "-h").stdout.decode()
    for shown in ("-i, --input PATH", "-o, --output PATH", "--ledger PATH|URL", "--format [csv|json]",
                  "--max-input-bytes N", "--release-id ID", "--input-timeout SECONDS"):
        assert shown.replace("[", "<").replace("]", ">") in release or shown in release, shown
    assert "--trials N" in dpcli_run("audit", "-h").stdout.decode()
    assert "--neighbours <add_remove|replace>" in dpcli_run("budget", "set", "-h").stdout.decode()


def test_root_help_has_h_and_completion() -> None:
    r = dpcli_run("-h")
    assert r.returncode == 0
    assert "--install-completion" in r.stdout.decode()
    assert "--show-completion" in r.stdout.decode()


def test_version_comes_from_the_one_source() -> None:
    r = dpcli_run("--version")
    assert (r.returncode, r.stdout, r.stderr) == (0, f"dpcli {dpcli.__version__}\n".encode(), b"")
    assert 'version = {attr = "dpcli.core.version.__version__"}' in (ROOT / "pyproject.toml").read_text()
    from importlib.metadata import version

    assert version("dpcli") == dpcli.__version__  # the installed package says the same


def test_completion_script_and_completions() -> None:
    """The script for a named shell (the README's form: `_DPCLI_COMPLETE=source_bash dpcli`, whatever shell runs
    the tests; --show-completion detects the calling shell, which under make is sh), then the script's protocol,
    answered by the command itself."""
    r = dpcli_run(env={"_DPCLI_COMPLETE": "source_bash"})
    assert r.returncode == 0
    script = r.stdout.decode()
    assert "_DPCLI_COMPLETE=complete_bash" in script
    assert "complete -o default -F _dpcli_completion dpcli" in script
    # --show-completion writes the same script (Typer's own switch turns shell detection off)
    shown = dpcli_run("--show-completion", "bash", env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert (shown.returncode, shown.stdout.strip()) == (0, r.stdout.strip())
    assert b"#compdef dpcli" in dpcli_run(env={"_DPCLI_COMPLETE": "source_zsh"}).stdout
    done = dpcli_run(env={"_DPCLI_COMPLETE": "complete_bash", "COMP_WORDS": "dpcli bud", "COMP_CWORD": "1"})
    assert (done.returncode, done.stdout) == (0, b"budget\n")
    done = dpcli_run(env={"_DPCLI_COMPLETE": "complete_bash", "COMP_WORDS": "dpcli release s.yaml --format ",
                          "COMP_CWORD": "4"})
    assert done.stdout.split() == [b"csv", b"json"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["release", "s.yaml", "--format", "xml"],
         "Invalid value for '--format': 'xml' is not one of 'csv', 'json'. (see 'dpcli release --help')"),
        (["budget", "set", "toy", "--epsilon", "1", "--neighbours", "some"],
         "Invalid value for '--neighbours': 'some' is not one of 'add_remove', 'replace'. "
         "(see 'dpcli budget set --help')"),
    ],
)
def test_choices_are_usage_errors_in_the_one_error_style(args: list[str], message: str) -> None:
    r = dpcli_run(*args)
    assert (r.returncode, r.stdout, r.stderr.decode()) == (2, b"", f"dpcli: error: {message}\n")


def test_format_choice_is_case_insensitive(toy: Path) -> None:
    r = dpcli_run("release", toy / "spec.yaml", "-i", toy / "data.csv", "-o", "-", "--format", "JSON", "--quiet",
                  "--ledger", toy / "ledger.jsonl")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["statistic"] == "n"


# -- --json errors -----------------------------------------------------------------------------------------------


def json_error(r) -> dict:
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    doc = json.loads(lines[0])
    # since issue 25 the object carries its format and exit code, and an error its facts as fields (docs/json.md)
    assert set(doc) == {"format", "exit_code", "error"}
    assert {"code", "kind", "message"} <= set(doc["error"])
    assert doc["error"]["code"] == doc["exit_code"] == r.returncode
    return {k: doc["error"][k] for k in ("code", "kind", "message")}


def test_json_errors_are_one_object_with_the_same_message(tmp_path: Path, toy: Path) -> None:
    missing = tmp_path / "missing.yaml"
    plain = dpcli_run("plan", missing)
    assert plain.returncode == 2
    error = json_error(dpcli_run("plan", missing, "--json"))
    assert error == {"code": 2, "kind": "spec", "message": plain.stderr.decode()[len("dpcli: error: "):-1]}
    assert json_error(dpcli_run("plan", "--json", "--bogus")) == {
        "code": 2, "kind": "usage", "message": "No such option: --bogus (see 'dpcli plan --help')"
    }
    other = toy / "other.jsonl"
    error = json_error(dpcli_run("release", toy / "spec.yaml", "-i", toy / "data.csv", "--ledger", other, "--json"))
    assert error["kind"] == "budget"
    assert error["code"] == 4
    assert "no budget cap for dataset 'toy'" in error["message"]
    (toy / "ledger.jsonl").write_text((toy / "ledger.jsonl").read_text().replace('"epsilon":"1"', '"epsilon":"9"'))
    error = json_error(dpcli_run("budget", "show", "--json", "--ledger", toy / "ledger.jsonl"))
    assert error["kind"] == "ledger"
    assert error["code"] == 5
    assert "record 0 has been altered" in error["message"]


def test_json_after_double_dash_is_not_the_option(tmp_path: Path) -> None:
    r = dpcli_run("plan", "--", "--json")
    assert r.returncode == 2
    assert r.stderr.decode().startswith("dpcli: error: --json: cannot read the spec")


# -- numbers in JSON ---------------------------------------------------------------------------------------------

# The documented encoding (README "Commands"): an exact quantity (ε, δ, ρ, a scale, a variance, an error bound, a
# budget) is always a string with its exact text, even when whole; a count of things is a JSON integer; only
# estimates computed in floating point (the audit's) are JSON floats.
FLOAT_FIELDS = {"epsilon_lower_bound", "confidence", "alpha_per_bound"}
EXACT_FIELDS = {
    "epsilon", "rho", "delta", "epsilon_at_delta", "scale", "variance", "error95", "sensitivity_unit",
    "epsilon_spent", "rho_spent", "epsilon_remaining", "epsilon_cap", "cap", "spent", "remaining", "cap_delta",
    "spent_delta",
    "spent_pure_epsilon", "spent_rho", "claimed_epsilon", "pair_loss", "claimed_loss", "exact_d", "exact_d_prime",
    "requested", "short_by", "requested_delta", "remaining_delta",
}
INTEGER_FIELDS = {
    "cells", "memory_mb_estimate", "max_cells", "max_memory_mb", "sensitivity", "l2_sensitivity_squared",
    "statistics", "rows", "ledger_record", "releases", "seq", "trials", "events", "noised_cells", "pairs_searched",
    "datasets_aggregated", "exit_code", "code", "record", "paid_record", "header_columns",
}


def check_numbers(doc: object, seen: set[str], key: str = "") -> None:
    if isinstance(doc, dict):
        for k, v in doc.items():
            check_numbers(v, seen, k)
        return
    if isinstance(doc, list):
        for v in doc:
            check_numbers(v, seen, key)
        return
    if isinstance(doc, bool):  # audit's "spent": false is a flag, not budget's "spent" amount
        return
    seen.add(key)
    if isinstance(doc, float):
        assert key in FLOAT_FIELDS, key
    elif isinstance(doc, int):
        assert key in INTEGER_FIELDS, key
    if key in EXACT_FIELDS and doc is not None:
        assert isinstance(doc, str), (key, doc)
        parse_exact(doc) if "/" not in doc else Fraction(doc)  # exact text: a decimal or p/q


GAUSSIAN_SPEC = spec_text(
    statistics=["{name: n, kind: count}", "{name: ages, kind: sum, column: age, mechanism: gaussian}"],
    privacy="unit: row, neighbours: add_remove, epsilon: 1, delta: 1e-6",
)


def test_every_json_output_uses_one_number_encoding(toy: Path) -> None:
    (toy / "gauss.yaml").write_text(GAUSSIAN_SPEC)
    ledger = toy / "ledger.jsonl"
    seen: set[str] = set()
    release = dpcli_run("release", toy / "spec.yaml", "-i", toy / "data.csv", "-o", toy / "o.csv",
                        "--ledger", ledger, "--json")
    assert release.returncode == 0, release.stderr
    outputs = [
        json.loads(release.stderr),
        json.loads(dpcli_run("plan", toy / "spec.yaml", "--json").stdout),
        json.loads(dpcli_run("plan", toy / "gauss.yaml", "--json").stdout),
        json.loads(dpcli_run("budget", "show", "--json", "--ledger", ledger).stdout),
        json.loads(dpcli_run("ledger", "show", "--json", "--ledger", ledger).stdout),
        json.loads(dpcli_run("audit", toy / "spec.yaml", "--trials", "1000", "--json").stdout),
    ]
    for doc in outputs:
        check_numbers(doc, seen)
    # the walk met every kind of field: a rule that is never exercised proves nothing
    assert {"epsilon", "rho", "variance", "scale", "epsilon_spent", "cap", "claimed_epsilon"} <= seen
    assert {"sensitivity", "l2_sensitivity_squared", "ledger_record", "seq", "trials"} <= seen
    assert {"epsilon_lower_bound", "confidence"} <= seen
    assert outputs[1]["statistics"][0]["scale"] == "4"
    assert outputs[0]["epsilon_spent"] == "0.25"


# -- output formats ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["out.parquet", "out.XLSX", "out.feather", "out.arrow", "out.avro", "out.orc",
                                  "out.xls", "out.tsv", "out.csv.gz"])
def test_output_in_a_format_dpcli_does_not_write_is_refused_before_anything(toy: Path, name: str) -> None:
    before = (toy / "ledger.jsonl").read_bytes()
    for extra in ([], ["--format", "csv"]):
        r = dpcli_run("release", toy / "spec.yaml", "-i", toy / "missing.csv", "-o", toy / name,
                      "--ledger", toy / "ledger.jsonl", *extra)
        suffix = Path(name).suffix.lower()[1:]
        assert r.returncode == 2, r.stderr
        assert r.stderr.decode() == (
            f"dpcli: error: output {toy / name}: dpcli does not write {suffix} files; name a .csv or .json file "
            f"({'--format csv' if extra else 'CSV or JSON'}), or - for standard output\n"
        )  # exit 2, not the missing input's exit 3: nothing was read
    assert (toy / "ledger.jsonl").read_bytes() == before
    assert not (toy / name).exists()


def test_spec_output_in_a_foreign_format_is_refused(toy: Path) -> None:
    (toy / "s.yaml").write_text(TOY_SPEC.replace("dataset: toy\n", "dataset: toy\noutput: table.parquet\n"))
    r = dpcli_run("release", toy / "s.yaml", "-i", toy / "data.csv", "--ledger", toy / "ledger.jsonl")
    assert r.returncode == 2
    assert "dpcli does not write parquet files" in r.stderr.decode()


@pytest.mark.parametrize(
    ("name", "fmt"), [("out", "csv"), ("out.csv", "csv"), ("out.txt", "csv"), ("out.json", "json")]
)
def test_csv_unless_json(toy: Path, name: str, fmt: str) -> None:
    r = dpcli_run("release", toy / "spec.yaml", "-i", toy / "data.csv", "-o", toy / name, "--quiet",
                  "--ledger", toy / "ledger.jsonl")
    assert r.returncode == 0, r.stderr
    text = (toy / name).read_text()
    assert text.startswith("statistic,") if fmt == "csv" else json.loads(text)[0]["statistic"] == "n"


# -- init --------------------------------------------------------------------------------------------------------

# names YAML would read as something else, or that need quotes; the loader accepts them all as column names
DECLARABLE = ["age", "yes", "null", "No", "True", "on", "_", "a.b-c", "x.", "inf", "_1e3", "x.y.z"]
# header names no spec can declare: listed in a comment, one line each
UNDECLARABLE = ["a b: c # d", "-x", 'q"t', "'single", "1", "[x]", "{y}", "&anchor", "*alias", "!tag", "%p",
                "ünï cödé", "y:", "z#"]
AWKWARD = DECLARABLE[:6] + UNDECLARABLE + DECLARABLE[6:]


def fill(skeleton: str) -> str:
    return skeleton.replace("{type: TODO}", "{type: int, bounds: [0, 9]}")


@pytest.mark.parametrize("where", ["beside", "elsewhere"])
def test_init_round_trips_awkward_names_and_paths(tmp_path: Path, where: str) -> None:
    from dpcli.specs.load import load_spec

    data_dir = tmp_path / "raw data: #1 'q'"
    data_dir.mkdir()
    csv_path = data_dir / "my file: #2.csv"
    quoted = ('"' + name.replace('"', '""') + '"' for name in AWKWARD)
    csv_path.write_text(",".join(quoted) + "\n" + ",".join("0" * len(AWKWARD)) + "\n")
    spec_dir = data_dir if where == "beside" else tmp_path / "specs # here"
    spec_dir.mkdir(exist_ok=True)
    out = spec_dir / "spec: one.yaml"
    r = dpcli_run("init", csv_path, "-o", out, cwd=tmp_path)  # cwd is neither: input: must be relative to the spec
    assert r.returncode == 0, r.stderr
    assert r.stdout == b""
    assert r.stderr.decode() == f"dpcli: wrote {out}: fill in the TODOs, then `dpcli check {out}`\n"
    out.write_text(fill(out.read_text()))
    spec = load_spec(out)
    assert list(spec.columns) == DECLARABLE
    for name in UNDECLARABLE:
        assert f"\n#   {json.dumps(name)}\n" in out.read_text()
    assert Path(spec.input).resolve() == csv_path.resolve()
    assert spec.dataset == "my_file___2"
    r = dpcli_run("check", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_init_to_stdout_is_relative_to_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.csv").write_text("age\n1\n")
    r = dpcli_run("init", tmp_path / "d" / "x.csv", cwd=tmp_path)
    assert r.returncode == 0
    assert "\ninput: d/x.csv\n" in r.stdout.decode()


def test_init_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("age\n1\n")
    out = tmp_path / "spec.yaml"
    out.write_text("mine\n")
    r = dpcli_run("init", tmp_path / "x.csv", "-o", out)
    assert (r.returncode, r.stderr.decode()) == (
        2, f"dpcli: error: {out} exists: give --force to overwrite it, or another -o\n"
    )
    assert out.read_text() == "mine\n"
    assert dpcli_run("init", tmp_path / "x.csv", "-o", out, "--force").returncode == 0
    assert "age: {type: TODO" in out.read_text()
    r = dpcli_run("init", tmp_path / "missing.csv", "-o", tmp_path / "new.yaml")
    assert r.returncode == 3
    assert not (tmp_path / "new.yaml").exists()


# -- a dataset split across ledgers ------------------------------------------------------------------------------


def test_warning_when_a_dataset_first_appears_in_another_ledger_than_the_spec_names(toy: Path) -> None:
    (toy / "s.yaml").write_text(TOY_SPEC.replace("dataset: toy\n", "dataset: toy\nledger: spec-ledger.jsonl\n"))
    args = ["release", toy / "s.yaml", "-i", toy / "data.csv", "-o", toy / "o.csv", "--ledger", toy / "ledger.jsonl"]
    first = dpcli_run(*args)
    assert first.returncode == 0, first.stderr
    assert first.stderr.decode().splitlines()[0] == (
        f"dpcli: warning: first release of dataset 'toy' in ledger {toy / 'ledger.jsonl'} (from --ledger), while "
        f"the spec's ledger: names ledger {toy / 'spec-ledger.jsonl'}: each ledger keeps its own budget; use one "
        "ledger per dataset"
    )
    again = dpcli_run(*args)
    # only where the dataset first appears
    assert again.returncode == 0
    assert "dpcli: warning" not in again.stderr.decode()
    # no cap in the ledger used, while the spec names another: said before the refusal
    refused = dpcli_run("release", toy / "s.yaml", "-i", toy / "data.csv", "--ledger", toy / "new.jsonl")
    lines = refused.stderr.decode().splitlines()
    assert refused.returncode == 4
    assert len(lines) == 2
    assert lines[0].startswith(f"dpcli: warning: no cap or spend for dataset 'toy' in ledger {toy / 'new.jsonl'}")
    assert lines[1].startswith("dpcli: error: no budget cap for dataset 'toy'")


def test_no_warning_when_every_name_is_the_same_ledger(toy: Path) -> None:
    (toy / "s.yaml").write_text(TOY_SPEC.replace("dataset: toy\n", "dataset: toy\nledger: ./ledger.jsonl\n"))
    r = dpcli_run("release", "s.yaml", "-i", "data.csv", "-o", "o.csv", "--ledger", "ledger.jsonl", cwd=toy,
                  env={"DPCLI_LEDGER": str(toy / "ledger.jsonl")})
    assert r.returncode == 0
    assert "dpcli: warning" not in r.stderr.decode()


def test_json_summary_carries_the_warning_instead(toy: Path) -> None:
    r = dpcli_run("release", toy / "spec.yaml", "-i", toy / "data.csv", "-o", toy / "o.csv", "--json",
                  "--ledger", toy / "ledger.jsonl", env={"DPCLI_LEDGER": str(toy / "env.jsonl")})
    assert r.returncode == 0
    summary = json.loads(r.stderr)  # one object: no warning line before it
    assert summary["warnings"] == [
        f"first release of dataset 'toy' in ledger {toy / 'ledger.jsonl'} (from --ledger), while $DPCLI_LEDGER "
        f"names ledger {toy / 'env.jsonl'}: each ledger keeps its own budget; use one ledger per dataset"
    ]


def test_budget_set_warns_when_the_environment_names_another_ledger(tmp_path: Path) -> None:
    env = {"DPCLI_LEDGER": str(tmp_path / "env.jsonl")}
    args = ["budget", "set", "toy", "--epsilon", "1", "--ledger", tmp_path / "cli.jsonl"]
    first = dpcli_run(*args, env=env)
    assert first.returncode == 0
    assert first.stderr.decode().splitlines()[1] == (
        f"dpcli: warning: dataset 'toy' first appears in ledger {tmp_path / 'cli.jsonl'} (from --ledger), while "
        f"$DPCLI_LEDGER names ledger {tmp_path / 'env.jsonl'}: releases that use {tmp_path / 'env.jsonl'} will not "
        "see this cap; use one ledger per dataset"
    )
    assert "dpcli: warning" not in dpcli_run(*args, env=env).stderr.decode()  # the dataset is there now
    assert "dpcli: warning" not in dpcli_run("budget", "set", "other", "--epsilon", "1", "--ledger",
                                      tmp_path / "cli.jsonl").stderr.decode()  # nothing else named


# -- the plan table at 80 columns --------------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


LONG_NAMES = spec_text(
    {"hours_worked_per_week_reported": "{type: int, bounds: [0, 99]}",
     "income": "{type: float, bounds: [0, 1000], precision: 0.01}"},
    ["{name: mean_hours_worked_per_week_by_nothing, kind: mean, column: hours_worked_per_week_reported}",
     "{name: total_income_in_the_whole_population, kind: sum, column: income}"],
)


@pytest.mark.parametrize("spec", ["example", "long names"])
@pytest.mark.parametrize("width", [80, 60, 200])
def test_plan_table_fits_the_terminal_without_breaking_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              spec: str, width: int) -> None:
    from dpcli.cli import render_plan
    from dpcli.plan.model import make_plan
    from dpcli.specs.load import load_spec

    if spec == "example":
        path = ROOT / "configs" / "example.yaml"
    else:
        path = tmp_path / "long.yaml"
        path.write_text(LONG_NAMES)
    plan = make_plan(load_spec(path))
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.delenv("NO_COLOR", raising=False)
    plain, terminal = io.StringIO(), Terminal()
    render_plan.print_plan(plan, plain)
    render_plan.print_plan(plan, terminal)
    shown = re.sub(r"\x1b\[[0-9;]*m", "", terminal.getvalue())
    lines = shown.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width
    words = set(shown.split())
    for row in render_plan.plan_rows(plan):  # every word of every cell and every derivation is on the screen whole
        for text in (row["statistic"], row["mechanism"], row["_param"], row["_budget"], row["derivation"]):
            for word in text.split():
                assert word in words or any(word in w for w in words if w.strip(";:,") == word.strip(";:,")), word
    if width == 200:  # wide enough: a real table, its header on one line
        assert any(line.split()[:2] == ["statistic", "part"] for line in lines)
    # a pipe keeps the aligned form, one line per row, whatever $COLUMNS says
    rows = [line for line in plain.getvalue().splitlines() if "discrete_laplace" in line]
    assert len(rows) == len(render_plan.plan_rows(plan))


def test_check_reports_every_spec_error_one_line_each(tmp_path: Path) -> None:
    """`dpcli check` lists every error it finds (field rules in document order, then cross-field rules), each line
    `dpcli: error: FILE: PATH: MESSAGE`, and exits 2; `dpcli plan` still stops at the first."""
    spec = tmp_path / "bad.yaml"
    spec.write_text(
        "version: 1\ndataset: d\nprivacy: {epsilon: 0}\ncolumns:\n"
        "  x: {type: float, bounds: [5, 1]}\n  c: {type: category, categories: []}\n"
        "statistics:\n  - {name: n, kind: count, by: [nope]}\n  - {name: s, kind: sum, column: zz}\n"
    )
    r = run_in_process("check", spec)
    assert r.returncode == 2
    assert r.stdout == b""
    assert r.stderr.decode().splitlines() == [
        f"dpcli: error: {spec}: privacy.epsilon: epsilon must be in [0.000001, 100], got 0",
        f"dpcli: error: {spec}: columns.c.categories: expected at least 1 item",
        f"dpcli: error: {spec}: columns.x.bounds: low must be less than high",
        f"dpcli: error: {spec}: statistics[0].by[0]: 'nope' is not a declared column",
        f"dpcli: error: {spec}: statistics[1].column: 'zz' is not a declared column",
    ]
    first = run_in_process("plan", spec)
    assert first.returncode == 2
    assert first.stderr.decode().count("\n") == 1
