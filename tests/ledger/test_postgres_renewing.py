"""A renewing cap (issue 26, `budget set --per period`) on the PostgreSQL ledger backend, through the real `dpcli`
command against a real throwaway server (tests/pg_server.py, started by tests/conftest.py's pg_server; the other
fixtures are test_postgres.py's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import TOY_SPEC
from tests.ledger.test_postgres import budget_json, dpcli, ok, pg_url, release, rows, work  # noqa: F401

pytestmark = pytest.mark.postgres


def test_a_renewing_cap_on_postgresql_bounds_each_period(pg_url: str, work: Path) -> None:  # noqa: F811
    set_cap = ok(dpcli("budget", "set", "toy", "--epsilon", "0.4", "--per", "period", "--ledger", pg_url))
    assert "per period" in set_cap.stderr
    assert "k·ε" in set_cap.stderr
    refused = release(work, pg_url, "a.csv")
    assert refused.returncode == 2
    assert "renews per declared period" in refused.stderr
    ok(release(work, pg_url, "a.csv", "--release-id", "d1"))
    ok(release(work, pg_url, "a.csv", "--release-id", "d1"))  # a re-run: nothing spent
    (work / "other.yaml").write_text("name: other\n" + TOY_SPEC)
    other = dpcli("release", str(work / "other.yaml"), "--input", str(work / "data.csv"), "--output",
                  str(work / "b.csv"), "--ledger", pg_url, "--release-id", "d1")
    assert other.returncode == 4
    assert "in period 'd1'" in other.stderr
    ok(release(work, pg_url, "c.csv", "--release-id", "d2"))
    toy = budget_json(pg_url)["toy"]
    assert (toy["per"], toy["periods_seen"]) == ("period", 2)
    assert [(p["period"], p["spent"], p["remaining"]) for p in toy["periods"]] == [
        ("d1", "0.25", "0.15"), ("d2", "0.25", "0.15")]
    spends = [json.loads(text) for _seq, text, _hash in rows(pg_url) if '"spend"' in text]
    assert [s["period"] for s in spends] == ["d1", "d2"]
    mixed = dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", pg_url)
    assert mixed.returncode == 2
    assert "new dataset name" in mixed.stderr
