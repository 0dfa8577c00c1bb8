"""--json on every command (issue 25, finding 5): one JSON object per run, success or error, with its format, its
exit code and the error's numbers as fields, each validated against the command's documented schema
(dpcli/cli/documents.py SCHEMAS, docs/json.md). In process, except where noted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import typer

from dpcli.cli.app import app
from dpcli.cli.documents import COMMANDS, SCHEMAS
from tests.helpers import clean_env, run_in_process
from tests.spec_builder import spec_text

dpcli_run = run_in_process
ROOT = Path(__file__).resolve().parents[2]
SPEC = spec_text(privacy="unit: row, neighbours: add_remove, epsilon: 0.25")


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    """The toy spec and a small CSV; the cap of dataset toy set to 0.3 in ledger.jsonl (room for one release)."""
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "data.csv").write_text("age\n30\n40\n")
    assert dpcli_run("budget", "set", "toy", "--epsilon", "0.3", "--ledger", tmp_path / "ledger.jsonl").returncode == 0
    return tmp_path


def stdout_doc(command: str, r: subprocess.CompletedProcess) -> dict[str, Any]:
    """The one JSON object on stdout, valid against ``command``'s schema, with the run's exit code."""
    text = r.stdout.decode()
    doc = json.loads(text)  # one document: json.loads refuses anything after it
    jsonschema.validate(doc, SCHEMAS[command])
    assert doc["exit_code"] == r.returncode
    assert doc["format"] == f"dpcli.{command.replace(' ', '-')}/1"
    return doc


def stderr_error(command: str, r: subprocess.CompletedProcess) -> dict[str, Any]:
    """The one error object on stderr (as before issue 25), valid against ``command``'s schema."""
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    doc = json.loads(lines[0])
    jsonschema.validate(doc, SCHEMAS[command])
    assert doc["exit_code"] == doc["error"]["code"] == r.returncode
    return doc["error"]


def test_every_command_but_schema_takes_json_and_has_a_schema() -> None:
    group: Any = typer.main.get_command(app)  # a click Group (Typer vendors click from 0.20 on: matched by shape)
    found = set()
    for name, command in group.commands.items():
        subcommands = command.commands.items() if hasattr(command, "commands") else [("", command)]
        for sub, leaf in subcommands:
            full = f"{name} {sub}".strip()
            if full == "schema":  # its output is a JSON Schema already
                continue
            assert any("--json" in p.opts for p in leaf.params), f"dpcli {full} has no --json"
            found.add(full)
    assert found == set(COMMANDS) == set(SCHEMAS)


def test_check_json_lists_every_problem_of_the_spec_and_the_ledger(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text({"age": "{type: integr, bounds: [0, 100]}"}, ["{name: n, kind: count, by: [sexx]}"]))
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text("not a record\n")
    r = dpcli_run("check", spec, "--ledger", ledger, "--json")
    doc = stdout_doc("check", r)
    assert r.returncode == 2  # the spec's, as release would stop there first
    assert doc["valid"] is False
    kinds = [(p["kind"], p.get("path")) for p in doc["problems"]]
    assert kinds == [("spec", "columns.age.type"), ("spec", "statistics[0].by[0]"), ("ledger", None)]
    assert doc["problems"][0]["file"] == str(spec)
    assert stderr_error("check", r) == doc["problems"][0]


def test_check_json_of_a_valid_spec_and_a_budget_refusal(toy: Path) -> None:
    ok = dpcli_run("check", toy / "spec.yaml", "-i", toy / "data.csv", "--ledger", toy / "ledger.jsonl", "--json")
    doc = stdout_doc("check", ok)
    assert (ok.returncode, doc["valid"], doc["problems"], doc["statistics"]) == (0, True, [], 1)
    assert doc["input_checked"] == str(toy / "data.csv")
    assert ok.stderr == b""
    (toy / "spec.yaml").write_text(SPEC.replace("epsilon: 0.25", "epsilon: 0.5"))
    (toy / "other.csv").write_text("height\n170\n")
    refused = dpcli_run("check", toy / "spec.yaml", "-i", toy / "other.csv", "--ledger", toy / "ledger.jsonl",
                        "--json")
    doc = stdout_doc("check", refused)
    assert refused.returncode == 4  # the ledger's refusal comes first, as in release
    problem, header = doc["problems"]  # the input's header is checked too: both problems in one run
    assert (header["kind"], header["code"]) == ("input", 3)
    assert {k: problem[k] for k in ("kind", "dataset", "requested", "remaining", "cap", "short_by", "record")} == {
        "kind": "budget", "dataset": "toy", "requested": "0.5", "remaining": "0.3", "cap": "0.3",
        "short_by": "0.2", "record": 0,
    }


def test_a_budget_refusal_carries_its_numbers_as_fields(toy: Path) -> None:
    first = dpcli_run("release", toy / "spec.yaml", "-i", toy / "data.csv", "-o", toy / "o.csv", "--ledger",
                      toy / "ledger.jsonl", "--json")
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stderr)
    jsonschema.validate(summary, SCHEMAS["release"])
    assert (summary["format"], summary["exit_code"], summary["epsilon_spent"]) == ("dpcli.release/1", 0, "0.25")
    again = dpcli_run("release", toy / "spec.yaml", "-i", toy / "data.csv", "-o", toy / "p.csv", "--ledger",
                      toy / "ledger.jsonl", "--json")
    error = stderr_error("release", again)
    assert again.stdout == b""  # release's stdout is the table's: its error stays on stderr
    assert {k: error.get(k) for k in ("kind", "requested", "remaining", "cap", "short_by", "record", "ledger")} == {
        "kind": "budget", "requested": "0.25", "remaining": "0.05", "cap": "0.3", "short_by": "0.2", "record": 0,
        "ledger": str(toy / "ledger.jsonl"),
    }


def test_budget_set_json(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    r = dpcli_run("budget", "set", "toy", "--epsilon", "1/3", "--ledger", ledger, "--json")
    doc = stdout_doc("budget set", r)
    assert r.stderr == b""
    assert {k: doc[k] for k in ("dataset", "cap", "spent", "remaining", "record", "raised")} == {
        "dataset": "toy", "cap": "1/3", "spent": "0", "remaining": "1/3", "record": 0, "raised": False,
    }
    refused = dpcli_run("budget", "set", "toy", "--epsilon", "2", "--ledger", ledger, "--json")
    doc = stdout_doc("budget set", refused)
    assert (refused.returncode, doc["error"]["kind"]) == (2, "usage")
    assert stderr_error("budget set", refused) == doc["error"]


def test_ledger_verify_json(toy: Path) -> None:
    ledger = toy / "ledger.jsonl"
    r = dpcli_run("ledger", "verify", "--ledger", ledger, "--json")
    doc = stdout_doc("ledger verify", r)
    assert (doc["ok"], doc["records"], doc["keyed"]) == (True, 1, False)
    assert r.stderr == b""
    ledger.write_text(ledger.read_text().replace('"epsilon":"0.3"', '"epsilon":"9"'))
    broken = dpcli_run("ledger", "verify", "--ledger", ledger, "--json")
    doc = stdout_doc("ledger verify", broken)
    assert (broken.returncode, doc["error"]["kind"]) == (5, "ledger")
    assert "has been altered" in doc["error"]["message"]


def test_init_json(tmp_path: Path) -> None:
    (tmp_path / "people.csv").write_text("age,sex\n30,F\n")
    printed = dpcli_run("init", tmp_path / "people.csv", "--json", cwd=tmp_path)
    doc = stdout_doc("init", printed)
    assert (doc["output"], doc["header_columns"]) == (None, 2)
    assert "age:" in doc["spec"]
    written = dpcli_run("init", tmp_path / "people.csv", "-o", tmp_path / "spec.yaml", "--json")
    doc = stdout_doc("init", written)
    assert doc["output"] == str(tmp_path / "spec.yaml")
    assert "spec" not in doc
    assert written.stderr == b""
    missing = dpcli_run("init", tmp_path / "missing.csv", "--json")
    doc = stdout_doc("init", missing)
    assert (missing.returncode, doc["error"]["kind"]) == (3, "input")


def test_report_json(toy: Path) -> None:
    released = dpcli_run("release", toy / "spec.yaml", "-i", toy / "data.csv", "-o", toy / "o.csv", "--ledger",
                         toy / "ledger.jsonl", "--quiet")
    assert released.returncode == 0, released.stderr
    r = dpcli_run("report", toy / "o.csv", "-o", toy / "r.html", "--json")
    doc = stdout_doc("report", r)
    assert (doc["report"], doc["table"], doc["summary_md"]) == (str(toy / "r.html"), str(toy / "o.csv"), None)
    assert (toy / "r.html").is_file()
    missing = dpcli_run("report", toy / "missing.csv", "-o", toy / "s.html", "--json")
    doc = stdout_doc("report", missing)
    assert (missing.returncode, doc["error"]["kind"]) == (2, "usage")


def test_the_older_json_outputs_keep_their_fields_and_gain_format_and_exit_code(toy: Path) -> None:
    plan = stdout_doc("plan", dpcli_run("plan", toy / "spec.yaml", "--json"))
    assert (plan["dataset"], plan["epsilon"]) == ("toy", "0.25")
    randomize_plan = stdout_doc("plan", dpcli_run("plan", ROOT / "configs" / "randomize.yaml", "--json"))
    assert randomize_plan["command"] == "randomize"
    (toy / "rr.yaml").write_text(
        "version: 1\ndataset: rr\nprivacy: {unit: row, neighbours: replace, epsilon: 1}\n"
        "columns:\n  sex: {type: category, categories: [F, M]}\nrandomize: {columns: [sex]}\n"
    )
    (toy / "rr.csv").write_text("sex\nF\nM\n")
    assert dpcli_run("budget", "set", "rr", "--epsilon", "1", "--ledger", toy / "ledger.jsonl").returncode == 0
    randomized = dpcli_run("randomize", toy / "rr.yaml", "-i", toy / "rr.csv", "-o", toy / "rr-out.csv",
                           "--ledger", toy / "ledger.jsonl", "--json")
    summary = json.loads(randomized.stderr)
    jsonschema.validate(summary, SCHEMAS["randomize"])
    assert (summary["format"], summary["exit_code"], summary["rows"]) == ("dpcli.randomize/1", 0, 2)
    for command in ("budget show", "ledger show"):  # arrays since 0.1: unchanged
        r = dpcli_run(*command.split(), "--ledger", toy / "ledger.jsonl", "--json")
        doc = json.loads(r.stdout)
        jsonschema.validate(doc, SCHEMAS[command])
        assert isinstance(doc, list)
    missing = dpcli_run("plan", toy / "missing.yaml", "--json")
    doc = stdout_doc("plan", missing)
    assert (missing.returncode, doc["error"]["kind"]) == (2, "spec")
    assert stderr_error("plan", missing) == doc["error"]
    broken = toy / "ledger.jsonl"
    broken.write_text("not a record\n")
    error = dpcli_run("budget", "show", "--ledger", broken, "--json")
    doc = json.loads(error.stdout)
    jsonschema.validate(doc, SCHEMAS["budget show"])
    assert (doc["format"], doc["exit_code"], doc["error"]["kind"]) == ("dpcli.budget-show/1", 5, "ledger")


@pytest.mark.slow  # a child process with a fault injected (tests/fault_driver.py)
def test_a_failure_after_the_spend_names_its_record_as_fields(toy: Path) -> None:
    driver = ROOT / "tests" / "fault_driver.py"
    args = ["release", toy / "spec.yaml", "-i", toy / "data.csv", "-o", toy / "o.csv", "--ledger",
            toy / "ledger.jsonl", "--release-id", "r1", "--json"]
    r = subprocess.run([sys.executable, driver, "rename-before", "oserror", "--", *map(str, args)],
                       capture_output=True, env=clean_env(), timeout=120)
    error = stderr_error("release", r)
    assert {k: error.get(k) for k in ("kind", "record", "release_id", "stored")} == {
        "kind": "spent_then_failed", "record": 1, "release_id": "r1", "stored": True,
    }


@pytest.mark.slow  # ~1.5 s: the audit's search and draws
def test_audit_json_has_format_and_exit_code(toy: Path) -> None:
    audit = stdout_doc("audit", dpcli_run("audit", toy / "spec.yaml", "--trials", "1000", "--json"))
    assert (audit["dataset"], audit["exit_code"]) == ("toy", 0)


def test_docs_json_md_holds_every_schema() -> None:
    text = (ROOT / "docs" / "json.md").read_text(encoding="utf-8")
    for command, schema in SCHEMAS.items():
        assert f"## `dpcli {command} --json`" in text
        assert json.dumps(schema, indent=2, ensure_ascii=False) in text
