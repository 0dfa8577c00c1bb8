"""``dpcli release --period N --report R --summary-md S`` (issue 26): a series' period writes its HTML report and
appends its Markdown summary as a plain release does (a re-run too, spending nothing); on a dataset whose cap renews
per declared period the run's lines name the period charged and what such a cap means (k periods: k·ε)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_series_cli import release, work  # noqa: F401
from tests.helpers import clean_env, run_in_process


def test_a_period_writes_its_report_and_summary(work: Path) -> None:  # noqa: F811
    first = release(work, "--period", "1", "-o", "p1.csv", "--report", "p1.html", "--summary-md", "summary.md")
    assert first.returncode == 0, first.stderr
    assert b"wrote the report to p1.html" in first.stderr
    html = (work / "p1.html").read_text()
    assert "<html" in html.lower()
    assert "admissions" in html
    summary = (work / "summary.md").read_text()
    assert re.search(r"\(series period 1 of \d+, ledger record 1\)", summary)
    again = release(work, "--period", "1", "-o", "again.csv", "--summary-md", "summary.md")
    assert again.returncode == 0, again.stderr
    assert (work / "summary.md").read_text() == summary  # once per period: a re-run appends nothing
    second = release(work, "--period", "2", "-o", "p2.csv", "--summary-md", "summary.md", "--report", "p2.html")
    assert second.returncode == 0, second.stderr
    page = (work / "p2.html").read_text()
    # drawn in its series, as `dpcli report --ledger` draws it: period 1 read from the ledger's frozen table
    assert 'id="series-facts"' in page
    assert "periods are released (1-2)" in page
    assert re.search(r"\(series period 2 of \d+, ledger record 1\)", (work / "summary.md").read_text())

def test_a_renewing_caps_period_names_its_period_and_k_epsilon(work: Path) -> None:  # noqa: F811
    (work / "series.yaml").write_text((work / "series.yaml").read_text().replace("dataset: admissions",
                                                                                 "dataset: ward"))
    cap = run_in_process("budget", "set", "ward", "--epsilon", "1", "--per", "period", "--ledger",
                         work / "ledger.jsonl")
    assert cap.returncode == 0, cap.stderr
    plan = run_in_process("plan", work / "series.yaml", "--ledger", work / "ledger.jsonl", cwd=work)
    assert "each period charged ε=1 to its own period's cap".encode() in plan.stdout
    for t in (2, 1):
        done = release(work, "--period", str(t), "-o", f"p{t}.csv", "--summary-md", "s.md",
                       *(("--report", "p.html") if t == 2 else ()))
        assert done.returncode == 0, done.stderr
        assert f"charged this period ε=1; ε left 0 of 1 in period '2027-01-0{t}'".encode() in done.stderr
        assert "a person present in k periods has k·ε".encode() in done.stderr
    assert "a person present in k periods has k·ε" in (work / "p.html").read_text()
    assert (work / "s.md").read_text().count("a person present in k periods has k·ε") == 2


@pytest.mark.slow
@pytest.mark.parametrize("periods", [(1, 1), (1, 2), (1, 2, 3)])
def test_processes_at_once_on_a_renewing_cap_charge_each_period_once(work: Path, periods: tuple[int, ...]) -> None:  # noqa: F811
    """Runs racing for the series' first charge: the losers of another period pay their own period's spend (the
    republish path), those of the same period spend nothing; every piece drawn once, paid by its period's spend."""
    (work / "series.yaml").write_text((work / "series.yaml").read_text().replace("dataset: admissions",
                                                                                 "dataset: ward"))
    cap = run_in_process("budget", "set", "ward", "--epsilon", "1", "--per", "period", "--ledger",
                         work / "ledger.jsonl")
    assert cap.returncode == 0, cap.stderr
    procs = [
        subprocess.Popen([sys.executable, "-m", "dpcli", "release", str(work / "series.yaml"), "--period", str(t),
                          "--allow-unfinished", "-q", "-o", str(work / f"out{i}.csv")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(), cwd=work)
        for i, t in enumerate(periods)
    ]
    for p in procs:
        _out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    records = [json.loads(line) for line in (work / "ledger.jsonl").read_text().splitlines()]
    spends = {r["seq"]: r for r in records if r["type"] == "spend"}
    assert sorted(s["period"] for s in spends.values()) == [f"2027-01-0{t}" for t in sorted(set(periods))]
    drawn = [(p["id"], r["charge"]) for r in records if r["type"] == "pieces" for p in r["pieces"]]
    assert sorted(piece for piece, _charge in drawn) == [f"p{t}" for t in sorted(set(periods))]
    assert all(spends[charge]["period"] == f"2027-01-0{piece[1:]}" for piece, charge in drawn)
