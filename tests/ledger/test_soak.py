"""Soak tests of the ledger (issue 9): many real `dpcli` processes spending through several names of one file ledger,
or several URLs of one PostgreSQL ledger, never overspend and leave one consistent chain."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dpcli.ledger import JsonlLedger
from dpcli.ledger.base import budgets
from tests.helpers import clean_env, run_dpcli
from tests.ledger.test_hardening import names_of
from tests.ledger.test_postgres import pg_url  # noqa: F401 - a schema on the throwaway server (tests/conftest.py)


def soak_calls(spec: Path, data: Path, out: Path, names: list[str]) -> list[list[str]]:
    """40 commands in a fixed shuffled order, each through one of the names: 24 releases of 0.25 (4 of them under
    one release id), 6 cap changes between 0.75 and 2 (some lower the cap below what is spent), 5 budget shows and
    5 verifies."""
    import random

    wait = ["--lock-timeout", "240"]
    calls: list[list[str]] = []
    for i in range(24):
        rid = ["--release-id", "soak-shared"] if i < 4 else ["--no-reuse"]
        calls.append(["release", str(spec), "-i", str(data), "-o", str(out / f"o{i}.csv"), "--quiet", *wait, *rid])
    calls += [
        ["budget", "set", "toy", "--epsilon", eps, "--raise", *wait]
        for eps in ("1", "1.5", "0.75", "2", "1.25", "1.75")
    ]
    calls += [["budget", "show", "--json"]] * 5 + [["ledger", "verify"]] * 5
    random.Random(9).shuffle(calls)
    return [[*c, "--ledger", names[i % len(names)]] for i, c in enumerate(calls)]


def run_soak(calls: list[list[str]], cwd: Path, env: dict | None = None) -> list[tuple[list[str], int, str]]:
    procs = [(c, subprocess.Popen([sys.executable, "-m", "dpcli", *c], cwd=cwd, env=clean_env(env),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)) for c in calls]
    done = []
    for c, p in procs:
        _, err = p.communicate(timeout=600)
        done.append((c, p.returncode, err.decode()))
    return done


def check_soak(done: list[tuple[list[str], int, str]], records: list, out: Path) -> None:
    for c, code, err in done:
        allowed = (0, 4) if c[0] == "release" else (0,)
        assert code in allowed, (c, code, err)
        assert "Traceback" not in err
    # never overspent: replayed record by record, every spend fit the cap in force when it was appended
    for i, rec in enumerate(records):
        if rec.type == "spend":
            status = budgets(records[: i + 1], "soak")["toy"]
            assert status.cap is not None, (i, status)
            assert status.spent <= status.cap, (i, status)
    spends = [r for r in records if r.type == "spend"]
    released = {r.get("release_key") for r in records if r.type == "released"}
    for s in spends:  # every spend well-formed, and released (no run failed after its spend)
        f = s.fields
        assert (f["dataset"], f["epsilon"], f["unit"], f["neighbours"], f["statistics"]) == (
            "toy", "0.25", "row", "add_remove", ["n"])
        assert isinstance(f["release_id"], str)
        assert len(f["release_key"]) == 40
        assert len(f["spec_sha256"]) == 64
        assert f["release_key"] in released
    assert len({s.get("release_key") for s in spends}) == len(spends)  # the shared id was paid once
    # the caps allow at most 8 spends of 0.25 (the shared id's 3 other runs reuse its table): the rest were refused
    assert 1 <= len(spends) <= 8
    assert sum(code == 4 for c, code, _ in done if c[0] == "release") >= 24 - 8 - 3
    shared = [c for c, code, _ in done if c[0] == "release" and "soak-shared" in c and code == 0]
    fresh_ok = [c for c, code, _ in done if c[0] == "release" and "soak-shared" not in c and code == 0]
    assert len(spends) == len(fresh_ok) + (1 if shared else 0)
    assert len(list(out.glob("o*.csv"))) == len(fresh_ok) + len(shared)


@pytest.mark.slow
def test_soak_file_ledger_through_four_names(work: Path) -> None:
    led, names = names_of(work)
    assert run_dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", led).returncode == 0
    (work / "out").mkdir()
    done = run_soak(soak_calls(work / "spec.yaml", work / "data.csv", work / "out", names), work)
    for name in names:
        assert run_dpcli("ledger", "verify", "--ledger", name, cwd=work).returncode == 0
    check_soak(done, JsonlLedger(led).records(), work / "out")
    assert sorted(p.name for p in (work / "real").iterdir()) == ["L.jsonl", "L.jsonl.head", "L.jsonl.releases"]


@pytest.mark.slow
@pytest.mark.postgres
def test_soak_postgres_ledger_through_four_urls(pg_server, pg_url: str, work: Path) -> None:  # noqa: F811
    from dpcli.ledger.postgres import PostgresLedger

    db, query = pg_url.split("/")[-1].split("?")
    names = [
        pg_url,
        pg_url.replace("postgresql://", "postgres://", 1),
        pg_url.replace("@127.0.0.1:", "@localhost:", 1),
        f"postgresql://{pg_server.user}@/{db}?host={pg_server.dir}&port={pg_server.port}&{query}",  # the unix socket
    ]
    assert run_dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", pg_url).returncode == 0
    (work / "out").mkdir()
    done = run_soak(soak_calls(work / "spec.yaml", work / "data.csv", work / "out", names), work)
    for name in names:
        assert run_dpcli("ledger", "verify", "--ledger", name).returncode == 0
    book = PostgresLedger(pg_url)
    try:
        check_soak(done, book.records(), work / "out")
    finally:
        book.close()
