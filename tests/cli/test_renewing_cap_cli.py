"""`dpcli budget set DATASET --epsilon E --per period` (issue 26) through the command line: a release names its
period with --release-id (refused without one, before the input is read), two releases in one period share its
cap, another period starts fresh, caps are never mixed, and budget set/show, plan and the sidecar say what such a cap
means. In process (tests/helpers.py run_in_process)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import jsonschema

from dpcli.cli.documents import SCHEMAS
from dpcli.publish.sidecar import SIDECAR_SCHEMA
from tests.helpers import TOY_SPEC, run_in_process

DATA = "age\n34\n71\n15\n52\n"


def renewing(make_work: Callable[..., Path]) -> Path:
    work = make_work(TOY_SPEC, DATA)
    r = run_in_process("budget", "set", "toy", "--epsilon", "0.4", "--per", "period", "--ledger", work / "L.jsonl")
    assert r.returncode == 0, r.stderr
    assert b"per period" in r.stderr
    assert "k·ε".encode() in r.stderr
    return work


def release(
    work: Path, *extra: object, spec: str = "spec.yaml", out: str = "out.csv"
) -> subprocess.CompletedProcess[bytes]:
    return run_in_process("release", work / spec, "--input", work / "data.csv", "--output", work / out,
                          "--ledger", work / "L.jsonl", *extra)


def test_a_release_without_a_release_id_is_refused_before_its_input_is_read(make_work: Callable[..., Path]) -> None:
    work = renewing(make_work)
    (work / "data.csv").unlink()  # were the input read, this would be exit 3
    r = release(work)
    assert r.returncode == 2, r.stderr
    assert b"renews per declared period" in r.stderr
    assert b"--release-id" in r.stderr
    assert [json.loads(x)["type"] for x in (work / "L.jsonl").read_text().splitlines()] == ["cap"]


def test_releases_in_one_period_share_its_cap_and_a_new_period_starts_fresh(make_work: Callable[..., Path]) -> None:
    work = renewing(make_work)
    (work / "other.yaml").write_text("name: other\n" + TOY_SPEC)
    first = release(work, "--release-id", "2027-01-01")
    assert first.returncode == 0, first.stderr
    assert b"left 0.15 of 0.4 in period '2027-01-01'" in first.stderr
    assert run_in_process("release", work / "spec.yaml", "--input", work / "data.csv", "--output", work / "again.csv",
                          "--ledger", work / "L.jsonl", "--release-id", "2027-01-01").returncode == 0  # a re-run
    second = release(work, "--release-id", "2027-01-01", spec="other.yaml", out="other.csv")
    assert second.returncode == 4, second.stderr
    assert b"in period '2027-01-01': requested" in second.stderr
    fresh = release(work, "--release-id", "2027-01-02", "--json", spec="other.yaml", out="other.csv")
    assert fresh.returncode == 0, fresh.stderr
    summary = json.loads(fresh.stderr)
    jsonschema.validate(summary, SCHEMAS["release"])
    assert (summary["period"], summary["epsilon_remaining"], summary["epsilon_cap"]) == ("2027-01-02", "0.15", "0.4")
    meta = json.loads((work / "other.csv.meta.json").read_text())
    jsonschema.validate(meta, json.loads(SIDECAR_SCHEMA.read_text()))
    assert meta["ledger"]["period"] == "2027-01-02"
    assert "k·ε" in meta["ledger"]["cap_note"]
    page = run_in_process("report", work / "other.csv", "-o", work / "report.html", "--ledger", work / "L.jsonl",
                          "--summary-md", work / "summary.md")
    assert page.returncode == 0, page.stderr
    html = (work / "report.html").read_text()
    assert "per declared period" in html
    assert "in period <b>2027-01-02</b>" in html
    assert "k·ε" in html
    assert "in period '2027-01-02'" in (work / "summary.md").read_text()
    spends = [json.loads(x) for x in (work / "L.jsonl").read_text().splitlines() if '"spend"' in x]
    assert [s["period"] for s in spends] == ["2027-01-01", "2027-01-02"]  # the re-run spent nothing

    shown = run_in_process("budget", "show", "--json", "--ledger", work / "L.jsonl")
    doc = json.loads(shown.stdout)
    jsonschema.validate(doc, SCHEMAS["budget show"])
    (toy,) = doc
    assert (toy["per"], toy["cap"], toy["remaining"], toy["periods_seen"]) == ("period", "0.4", None, 2)
    assert [(p["period"], p["spent"], p["remaining"], p["releases"]) for p in toy["periods"]] == [
        ("2027-01-01", "0.25", "0.15", 1), ("2027-01-02", "0.25", "0.15", 1)]
    text = run_in_process("budget", "show", "--ledger", work / "L.jsonl").stdout.decode()
    assert "0.4 per period" in text
    assert "2027-01-02" in text
    assert "k·ε" in text

    plan = run_in_process("plan", work / "spec.yaml", "--ledger", work / "L.jsonl", "--release-id", "2027-01-02",
                          "--json")
    outlook = json.loads(plan.stdout)["ledger"]
    assert (outlook["period"], outlook["spent"], outlook["remaining_after"]) == ("2027-01-02", "0.25", "-0.1")
    assert "would be refused" in run_in_process(
        "plan", work / "spec.yaml", "--ledger", work / "L.jsonl", "--release-id", "2027-01-02").stdout.decode()
    new = run_in_process("plan", work / "spec.yaml", "--ledger", work / "L.jsonl").stdout.decode()
    assert "in a period not charged yet" in new
    assert "left ε=0.15" in new
    assert "k·ε" in new


def test_budget_set_never_mixes_a_lifetime_and_a_renewing_cap(make_work: Callable[..., Path]) -> None:
    work = make_work(TOY_SPEC, DATA, cap="1")
    r = run_in_process("budget", "set", "toy", "--epsilon", "1", "--per", "period", "--ledger", work / "L.jsonl")
    assert r.returncode == 2
    assert b"lifetime cap" in r.stderr
    assert b"new dataset name" in r.stderr
    r = run_in_process("budget", "set", "ward", "--epsilon", "1", "--per", "period", "--ledger", work / "L.jsonl",
                       "--json")
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMAS["budget set"])
    assert (doc["per"], doc["remaining"], doc["periods_seen"]) == ("period", "1", 0)
    assert "k·ε" in doc["note"]
    r = run_in_process("budget", "set", "ward", "--epsilon", "2", "--ledger", work / "L.jsonl")
    assert r.returncode == 2
    assert b"renews per declared period" in r.stderr
    assert b"new dataset name" in r.stderr
