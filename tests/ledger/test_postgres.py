"""The PostgreSQL ledger backend against a real, throwaway PostgreSQL server, through the real `dpcli` command.

The server is started once per session (tests/pg_server.py: initdb into a temporary directory, loopback port,
password over TCP); every test gets a fresh, empty schema of one database. Without PostgreSQL's server tools or
psycopg the tests skip with the reason (.ci/run installs Debian's postgresql package when initdb is missing).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import TOY_SPEC, clean_env
from tests.pg_server import PgServer

# a real PostgreSQL server (tests/pg_server.py): `-m "not postgres"` leaves these out where none can start
pytestmark = pytest.mark.postgres

SPEC = TOY_SPEC

DATA = "age\n34\n71\n15\n52\n"


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """A fresh, empty ledger location: its own schema (``?options=-csearch_path%3DtN`` in the URL)."""
    return pg_server.create_schema()


@pytest.fixture
def work(make_work: Callable[..., Path]) -> Path:
    return make_work(SPEC, DATA)


def _env(env: dict | None) -> dict:
    full = {k: v for k, v in os.environ.items() if not k.startswith("DPCLI_")}
    full.update(env or {})
    return full


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # every dpcli runs in the test's directory: were a URL ever taken for a file path, the file lands there
    monkeypatch.chdir(tmp_path)


def dpcli(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dpcli", *args], capture_output=True, text=True, env=_env(env), cwd=cwd, timeout=120
    )


def dpcli_all(*calls: tuple) -> list[subprocess.CompletedProcess]:
    """Independent `dpcli` runs at once (each call: a tuple of arguments, optionally ending with an env dict)."""
    procs = []
    for call in calls:
        env = call[-1] if call and isinstance(call[-1], dict) else None
        args = [str(a) for a in (call[:-1] if env is not None else call)]
        procs.append(
            (args, subprocess.Popen([sys.executable, "-m", "dpcli", *args], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=_env(env)))
        )
    done = []
    for args, p in procs:
        out, err = p.communicate(timeout=120)
        done.append(subprocess.CompletedProcess(args, p.returncode, out, err))
    return done


def release_args(work: Path, url: str, out: str, *extra: str) -> tuple:
    return ("release", work / "spec.yaml", "--input", work / "data.csv", "--output", work / out, "--ledger", url,
            "--quiet", *extra)


def release(
    work: Path, url: str, out: str, *extra: str, env: dict | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    return dpcli(*(str(a) for a in release_args(work, url, out, *extra)), env=env, cwd=cwd)


def ok(r: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr}"
    return r


def sql(url: str, query: str, params: tuple = ()) -> list[tuple]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def rows(url: str) -> list[tuple]:
    assert sql(url, "SELECT to_regclass('dpcli_ledger') IS NOT NULL") == [(True,)], (
        "dpcli wrote no ledger table in PostgreSQL: was the --ledger URL taken for a file path?"
    )
    return sql(url, "SELECT seq, record, hash FROM dpcli_ledger ORDER BY seq")


def budget_json(url: str, env: dict | None = None) -> dict[str, dict]:
    doc = json.loads(ok(dpcli("budget", "show", "--json", "--ledger", url, env=env)).stdout)
    return {d["dataset"]: d for d in doc}


# -- 1. concurrency: the cap holds across 20 simultaneous releases -----------------------------------------------


@pytest.mark.slow  # a soak test (many processes, or 10^7 values): make test-slow and .ci/run run it
def test_twenty_concurrent_releases_spend_exactly_the_cap(pg_url: str, work: Path) -> None:
    """20 releases at once against room for 5. The writers' lock is held by the test until all 20 have passed the
    read-only pre-check and wait inside ``spend``: the 15 refusals must come from the binding check under the lock."""
    import psycopg

    ok(dpcli("budget", "set", "toy", "--epsilon", "1.25", "--ledger", pg_url))
    cmd = [sys.executable, "-m", "dpcli", "release", str(work / "spec.yaml"), "--input", str(work / "data.csv"),
           "--ledger", pg_url, "--no-reuse", "--quiet", "--lock-timeout", "90"]
    started = time.monotonic()
    waiting = 0
    with psycopg.connect(pg_url) as gate:
        gate.execute("LOCK TABLE dpcli_ledger_head IN EXCLUSIVE MODE")
        procs = [
            subprocess.Popen([*cmd, "--output", str(work / f"out{i}.csv")], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=_env(None))
            for i in range(20)
        ]
        with psycopg.connect(pg_url, autocommit=True) as watch:
            while time.monotonic() - started < 90 and any(p.poll() is None for p in procs):
                waiting = watch.execute(
                    "SELECT count(*) FROM pg_locks WHERE relation = 'dpcli_ledger_head'::regclass AND NOT granted"
                ).fetchone()[0]
                if waiting == 20:
                    break
                time.sleep(0.1)
        gate.rollback()  # open the gate: 20 writers race for the lock
    errors = [p.communicate(timeout=120)[1] for p in procs]
    results = [(p.returncode, err) for p, err in zip(procs, errors, strict=True)]
    codes = sorted(code for code, _ in results)
    assert codes == [0] * 5 + [4] * 15, (codes, [e for c, e in results if c not in (0, 4)], time.monotonic() - started)
    assert waiting == 20, f"only {waiting} of the 20 releases reached the spend together"
    for code, err in results:
        if code == 4:
            assert "budget refused" in err, err
            assert "requested ε=0.25" in err, err
            assert "remaining ε=0" in err, err
    written = sorted(p.name for p in work.glob("out*.csv"))
    assert len(written) == 5
    verify, budget, show = dpcli_all(
        ("ledger", "verify", "--ledger", pg_url),
        ("budget", "show", "--json", "--ledger", pg_url),
        ("ledger", "show", "--json", "--ledger", pg_url),
    )
    assert ok(verify).stdout.startswith("ledger OK: 11 record(s)")
    toy = {d["dataset"]: d for d in json.loads(ok(budget).stdout)}["toy"]
    assert (toy["cap"], toy["spent"], toy["remaining"], toy["releases"]) == ("1.25", "1.25", "0", 5)
    recs = json.loads(ok(show).stdout)
    assert [r["seq"] for r in recs] == list(range(11))
    assert sum(r["type"] == "spend" for r in recs) == 5
    assert sum(r["type"] == "released" for r in recs) == 5


# -- 2. tampering through SQL is detected, and nothing is spent on a broken ledger -------------------------------


def _edit_epsilon(url: str) -> None:
    seq, text, _h = next(r for r in rows(url) if json.loads(r[1])["type"] == "spend")
    fields = json.loads(text)
    fields["epsilon"] = "0.01"  # make a past release look cheaper, keep its hash
    sql(url, "UPDATE dpcli_ledger SET record = %s WHERE seq = %s", (json.dumps(fields, sort_keys=True), seq))


def _delete_middle(url: str) -> None:
    sql(url, "DELETE FROM dpcli_ledger WHERE seq = 1")


def _delete_last(url: str) -> None:
    # the shorter chain is valid on its own: only the head row tells
    sql(url, "DELETE FROM dpcli_ledger WHERE seq = (SELECT max(seq) FROM dpcli_ledger)")


def _delete_and_renumber(url: str) -> None:
    # delete a spend and its released record, and renumber the later ones with their record's seq updated too
    sql(url, "DELETE FROM dpcli_ledger WHERE seq IN (1, 2)")
    for seq, text, _ in rows(url):
        if seq > 2:
            fields = json.loads(text)
            fields["seq"] = seq - 2
            sql(url, "UPDATE dpcli_ledger SET seq = %s, record = %s WHERE seq = %s",
                (seq - 2, json.dumps(fields, sort_keys=True, separators=(",", ":")), seq))
    sql(url, "UPDATE dpcli_ledger_head SET seq = seq - 2")


def _swap_seq(url: str) -> None:
    sql(url, "UPDATE dpcli_ledger SET seq = 1000 WHERE seq = 1")
    sql(url, "UPDATE dpcli_ledger SET seq = 1 WHERE seq = 3")
    sql(url, "UPDATE dpcli_ledger SET seq = 3 WHERE seq = 1000")


def _drop_table(url: str) -> None:
    # the whole chain gone (a wiped ledger must not read as a fresh one with every budget unspent)
    sql(url, "DROP TABLE dpcli_ledger")


TAMPERING = {
    "drop_table": _drop_table,
    "edit_epsilon": _edit_epsilon,
    "delete_middle": _delete_middle,
    "delete_last": _delete_last,
    "delete_and_renumber": _delete_and_renumber,
    "swap_seq": _swap_seq,
}


@pytest.fixture(scope="module")
def released_twice(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A template database: cap 10, two releases (cap, spend, released, spend, released)."""
    work = tmp_path_factory.mktemp("template")
    (work / "spec.yaml").write_text(SPEC)
    (work / "data.csv").write_text(DATA)
    url = pg_server.create_schema()
    ok(dpcli("budget", "set", "toy", "--epsilon", "10", "--ledger", url, cwd=work))
    ok(release(work, url, "a.csv", "--no-reuse", cwd=work))
    ok(release(work, url, "b.csv", "--no-reuse", cwd=work))
    assert len(rows(url)) == 5
    return url


def copy_ledger(source: str, target: str) -> None:
    """Copy the dpcli tables of one schema into another (both URLs name the same database)."""
    src, dst = source.rsplit("%3D", 1)[1], target.rsplit("%3D", 1)[1]
    for table in ("dpcli_ledger", "dpcli_ledger_head", "dpcli_release_store"):
        sql(target, f"CREATE TABLE {dst}.{table} (LIKE {src}.{table} INCLUDING ALL)")
        sql(target, f"INSERT INTO {dst}.{table} SELECT * FROM {src}.{table}")


@pytest.mark.parametrize("tamper", sorted(TAMPERING))
def test_tampering_via_sql_is_refused(pg_url: str, released_twice: str, work: Path, tamper: str) -> None:
    url = pg_url
    copy_ledger(released_twice, url)
    assert len(rows(url)) == 5
    TAMPERING[tamper](url)
    before = rows(url) if tamper != "drop_table" else []
    store = sql(url, "SELECT * FROM dpcli_release_store ORDER BY release_id")

    calls = [
        ("ledger", "verify", "--ledger", url),
        release_args(work, url, "c.csv", "--no-reuse"),
        ("budget", "set", "toy", "--epsilon", "5", "--ledger", url),
    ]
    if tamper == "edit_epsilon":  # the read-only commands verify too (once is enough: each run costs ~1 s)
        calls += [("budget", "show", "--ledger", url), ("ledger", "show", "--json", "--ledger", url)]
    for r in dpcli_all(*calls):
        assert r.returncode == 5, (r.args, r.returncode, r.stdout, r.stderr)
        assert "ledger" in r.stderr
        assert "Traceback" not in r.stderr
    assert not (work / "c.csv").exists()
    if tamper != "drop_table":
        assert rows(url) == before  # nothing spent, nothing appended
    else:  # and nothing re-created behind the user's back
        assert sql(url, "SELECT to_regclass('dpcli_ledger') IS NULL") == [(True,)]
    assert sql(url, "SELECT * FROM dpcli_release_store ORDER BY release_id") == store


# -- 3. caps: lowering, raising with --raise, per dataset; the audit trail -----------------------------------------


def test_caps_budget_show_and_ledger_show(pg_url: str, work: Path) -> None:
    ok(dpcli("budget", "set", "toy", "--epsilon", "2", "--ledger", pg_url))
    ok(dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", pg_url))  # lowering: always allowed
    refused = dpcli("budget", "set", "toy", "--epsilon", "3", "--ledger", pg_url)
    assert refused.returncode == 2
    assert "--raise" in refused.stderr
    ok(dpcli("budget", "set", "toy", "--epsilon", "3", "--raise", "--ledger", pg_url))
    ok(dpcli("budget", "set", "other", "--epsilon", "1/3", "--ledger", pg_url))
    ok(release(work, pg_url, "a.csv"))

    bj, bh, lj, lh = dpcli_all(
        ("budget", "show", "--json", "--ledger", pg_url),
        ("budget", "show", "--ledger", pg_url),
        ("ledger", "show", "--json", "--ledger", pg_url),
        ("ledger", "show", "--ledger", pg_url),
    )
    shown = {d["dataset"]: d for d in json.loads(ok(bj).stdout)}
    assert set(shown) == {"toy", "other"}
    assert (shown["toy"]["cap"], shown["toy"]["spent"], shown["toy"]["remaining"]) == ("3", "0.25", "2.75")
    assert (shown["other"]["cap"], shown["other"]["spent"], shown["other"]["releases"]) == ("1/3", "0", 0)
    assert "toy" in ok(bh).stdout
    assert "other" in bh.stdout
    assert "toy" in ok(lh).stdout
    assert "spend" in lh.stdout

    recs = json.loads(ok(lj).stdout)
    assert [r["type"] for r in recs] == ["cap", "cap", "cap", "cap", "spend", "released"]
    assert [r["seq"] for r in recs] == list(range(6))
    assert [r.get("raise") for r in recs[:4]] == [None, None, True, None]
    assert recs[4]["epsilon"] == "0.25"
    assert recs[4]["dataset"] == "toy"
    assert recs[5]["release_id"] == recs[4]["release_id"]
    assert all(r["prev"] == p["hash"] for p, r in itertools.pairwise(recs))
    # stored byte for byte as the canonical text the hash covers
    assert [(s, t) for s, t, _ in rows(pg_url)] == [
        (r["seq"], json.dumps({k: v for k, v in r.items() if k != "hash"}, sort_keys=True, separators=(",", ":"),
                              ensure_ascii=False))
        for r in recs
    ]
    meta = json.loads((work / "a.csv.meta.json").read_text())
    assert meta["ledger"]["head"] == recs[4]["hash"]


# -- 4. idempotent re-runs through PostgreSQL ----------------------------------------------------------------------


def test_rerun_under_a_release_id_reissues_without_spending(pg_url: str, work: Path) -> None:
    ok(dpcli("budget", "set", "toy", "--epsilon", "10", "--ledger", pg_url))
    ok(release(work, pg_url, "first.csv", "--release-id", "2026-11-23"))
    (work / "data.csv").write_text(DATA.replace("71", "72"))  # changed data: the id still names the first release
    again = ok(release(work, pg_url, "second.csv", "--release-id", "2026-11-23"))
    assert "nothing spent" in again.stderr
    assert (work / "first.csv").read_bytes() == (work / "second.csv").read_bytes()
    assert [json.loads(t)["type"] for _, t, _ in rows(pg_url)] == ["cap", "spend", "released"]
    assert sql(pg_url, "SELECT count(*) FROM dpcli_release_store") == [(1,)]

    ok(release(work, pg_url, "third.csv"))  # no id: a new release, whatever the data
    assert [json.loads(t)["type"] for _, t, _ in rows(pg_url)] == ["cap", "spend", "released", "spend", "released"]
    assert budget_json(pg_url)["toy"]["spent"] == "0.5"


def test_concurrent_runs_under_one_id_spend_once(pg_url: str, work: Path) -> None:
    ok(dpcli("budget", "set", "toy", "--epsilon", "10", "--ledger", pg_url))
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "dpcli", *map(str, release_args(work, pg_url, f"o{i}.csv", "--release-id", "ci-7",
                                                                    "--lock-timeout", "90"))],
            env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        for i in range(6)
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]  # read to the end and closed (no ResourceWarning)
    assert [p.returncode for p in procs] == [0] * 6, errors
    assert [json.loads(t)["type"] for _, t, _ in rows(pg_url)] == ["cap", "spend", "released"]
    assert len({(work / f"o{i}.csv").read_bytes() for i in range(6)}) == 1


def test_edited_release_store_is_not_served(pg_url: str, work: Path) -> None:
    ok(dpcli("budget", "set", "toy", "--epsilon", "10", "--ledger", pg_url))
    ok(release(work, pg_url, "first.csv", "--release-id", "r1"))
    sql(pg_url, "UPDATE dpcli_release_store SET table_json = table_json || '\\x20'::bytea")
    r = release(work, pg_url, "second.csv", "--release-id", "r1")
    assert r.returncode == 5
    assert "does not match" in r.stderr
    assert not (work / "second.csv").exists()


# -- 5. HMAC-keyed ledger ------------------------------------------------------------------------------------------


KEY = {"DPCLI_LEDGER_KEY": "a-secret-ledger-key"}


def test_keyed_ledger(pg_url: str, work: Path) -> None:
    ok(dpcli("budget", "set", "toy", "--epsilon", "10", "--ledger", pg_url, env=KEY))
    ok(release(work, pg_url, "a.csv", env=KEY))
    v, lj, unkeyed, rel, wrong = dpcli_all(
        ("ledger", "verify", "--ledger", pg_url, KEY),
        ("ledger", "show", "--json", "--ledger", pg_url, KEY),
        ("ledger", "verify", "--ledger", pg_url),
        release_args(work, pg_url, "b.csv", "--no-reuse"),
        ("ledger", "verify", "--ledger", pg_url, {"DPCLI_LEDGER_KEY": "another-key"}),
    )
    assert "authenticated with the ledger key" in ok(v).stdout
    assert all(r["mac"] == "hmac-sha256" for r in json.loads(ok(lj).stdout))
    assert unkeyed.returncode == 5
    assert "DPCLI_LEDGER_KEY" in unkeyed.stderr
    assert rel.returncode == 5
    assert not (work / "b.csv").exists()
    assert wrong.returncode == 5
    assert "altered" in wrong.stderr

    # someone with SQL access but not the key rewrites the last spend cheaper and recomputes a plain sha256
    seq, text, _ = [r for r in rows(pg_url) if json.loads(r[1])["type"] == "spend"][-1]
    fields = json.loads(text)
    fields["epsilon"] = "0.000001"
    forged = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    sql(pg_url, "UPDATE dpcli_ledger SET record = %s, hash = encode(sha256(convert_to(%s, 'UTF8')), 'hex') "
                "WHERE seq = %s", (forged, forged, seq))
    before = rows(pg_url)
    v, r = dpcli_all(
        ("ledger", "verify", "--ledger", pg_url, KEY), (*release_args(work, pg_url, "c.csv", "--no-reuse"), KEY)
    )
    assert v.returncode == 5
    assert "altered" in v.stderr
    assert r.returncode == 5
    assert not (work / "c.csv").exists()
    assert rows(pg_url) == before


def test_keyed_ledger_stripped_of_its_macs(pg_url: str, work: Path) -> None:
    ok(dpcli("budget", "set", "toy", "--epsilon", "10", "--ledger", pg_url, env=KEY))
    # re-hash the only record without the key and without its mac marker, as an attacker would
    ((_, text, _),) = rows(pg_url)
    fields = json.loads(text)
    del fields["mac"]
    plain = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    sql(pg_url, "UPDATE dpcli_ledger SET record = %s, hash = encode(sha256(convert_to(%s, 'UTF8')), 'hex')",
        (plain, plain))
    sql(pg_url, "UPDATE dpcli_ledger_head SET hash = (SELECT hash FROM dpcli_ledger WHERE seq = 0)")
    v = dpcli("ledger", "verify", "--ledger", pg_url, env=KEY)
    assert v.returncode == 5
    assert "not authenticated" in v.stderr


# -- connection problems: exit 5, and the password never shows -----------------------------------------------------


def test_connection_failures_are_exit_5_without_the_password(pg_server: PgServer, pg_url: str, work: Path) -> None:
    secret = "hunter2-" + pg_server.password[-6:]
    urls = (
        pg_url.replace(pg_server.password, secret),  # wrong password
        f"postgresql://postgres:{secret}@127.0.0.1:1/postgres",  # nothing listening
        f"postgres://postgres:{pg_server.password}@127.0.0.1:{pg_server.port}/no_such_db",
    )
    calls: list[tuple] = [("ledger", "verify", "--ledger", url) for url in urls]
    calls.append(("budget", "set", "toy", "--epsilon", "1", "--ledger", urls[0]))
    calls.append(("release", work / "spec.yaml", "--input", work / "data.csv", "--output", work / "x.csv",
                  {"DPCLI_LEDGER": urls[0]}))
    for r in dpcli_all(*calls):
        assert r.returncode == 5, (r.args, r.returncode, r.stderr)
        assert secret not in r.stdout + r.stderr
        assert pg_server.password not in r.stdout + r.stderr
        assert "Traceback" not in r.stderr
        assert "cannot connect" in r.stderr
        assert "***" in r.stderr
    assert not (work / "x.csv").exists()

    # a working URL with a password: the sidecar and the summary name the ledger without it
    ok(dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", pg_url))
    r = ok(dpcli("release", str(work / "spec.yaml"), "--input", str(work / "data.csv"), "--output",
                 str(work / "a.csv"), "--json", env={"DPCLI_LEDGER": pg_url}))
    assert pg_server.password not in r.stderr + (work / "a.csv.meta.json").read_text()


def test_lock_timeout_is_exit_5_and_readers_are_not_blocked(pg_url: str) -> None:
    import psycopg

    ok(dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", pg_url))
    with psycopg.connect(pg_url) as holder:  # another writer, stuck inside its transaction
        holder.execute("LOCK TABLE dpcli_ledger_head IN EXCLUSIVE MODE")
        write, read = dpcli_all(
            ("budget", "set", "toy", "--epsilon", "0.5", "--lock-timeout", "1", "--ledger", pg_url),
            ("ledger", "verify", "--ledger", pg_url),
        )
        assert write.returncode == 5
        assert "could not lock ledger" in write.stderr
        assert "--lock-timeout" in write.stderr
        assert ok(read).stdout.startswith("ledger OK: 1 record(s)")
        holder.rollback()
    assert len(rows(pg_url)) == 1


def one_line(r: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    assert r.returncode == code, (r.args, r.returncode, r.stderr)
    assert r.stderr.startswith("dpcli: error: "), (r.args, r.stderr)
    assert r.stderr.count("\n") == 1, (r.args, r.stderr)
    for needle in needles:
        assert needle in r.stderr, (r.args, r.stderr)


@pytest.mark.parametrize("locked", ["dpcli_ledger", "dpcli_ledger_head", "dpcli_release_store"])
def test_every_command_honours_the_lock_timeout_against_an_access_exclusive_lock(
    pg_url: str, work: Path, locked: str
) -> None:
    """Issue 23: with a client holding ACCESS EXCLUSIVE on a ledger table, `release --lock-timeout 3` hung past 60 s
    (a read had no lock_timeout), and `budget show`, `ledger verify`, `ledger show`, `plan --ledger` and `report
    --ledger` had no --lock-timeout. Now every command that reads the ledger takes it, and each ends with one line
    and exit 5, nothing spent. (No timed assertion: the subprocesses' own timeout is only a safety net.)"""
    import psycopg

    ok(dpcli("budget", "set", "toy", "--epsilon", "10", "--ledger", pg_url))
    ok(release(work, pg_url, "first.csv", "--release-id", "r1"))
    before = rows(pg_url)
    wait = ("--lock-timeout", "1")
    calls: list[tuple] = [
        release_args(work, pg_url, "paid.csv", "--release-id", "r1", *wait),  # the re-issue reads the store
        ("ledger", "verify", "--ledger", pg_url, *wait),
        ("report", work / "first.csv", "-o", work / "report.html", "--ledger", pg_url, *wait),
    ]
    if locked != "dpcli_release_store":  # a locked store is met only after a new release's spend (exit 5, paid)
        calls += [
            release_args(work, pg_url, "new.csv", *wait),
            ("budget", "show", "--ledger", pg_url, *wait),
            ("budget", "set", "toy", "--epsilon", "9", "--ledger", pg_url, *wait),
            ("ledger", "show", "--ledger", pg_url, *wait),
            ("plan", work / "spec.yaml", "--ledger", pg_url, *wait),
        ]
    with psycopg.connect(pg_url) as holder:
        holder.execute(f"LOCK TABLE {locked} IN ACCESS EXCLUSIVE MODE")
        done = dpcli_all(*calls)
        holder.rollback()
    for r in done:
        if locked == "dpcli_release_store" and r.args[0] != "release":
            ok(r)  # they never read the store
            continue
        one_line(r, 5, "could not lock ledger", "--lock-timeout")
    assert rows(pg_url) == before
    assert not (work / "paid.csv").exists()
    assert not (work / "new.csv").exists()


def test_a_short_password_is_masked_in_the_url_only(pg_server: PgServer, pg_url: str, work: Path) -> None:
    """Issue 23: the password was masked wherever its text occurred, so password "e" turned every "e" of the message
    into "***" (`cannot conn***ct to l***dg***r`), which showed its letters. Now the URL's password component alone
    is masked; and `plan --ledger` named the ledger by the URL as given, password and all, in its refusal."""
    url = f"postgresql://postgres:e@127.0.0.1:{pg_server.port}/postgres"  # a wrong password: the server refuses it
    r = dpcli("ledger", "verify", "--ledger", url)
    one_line(r, 5, f"cannot connect to ledger postgresql://postgres:***@127.0.0.1:{pg_server.port}/postgres: ",
             "password authentication failed for user")
    assert r.stderr.count("***") == 1
    p = ok(dpcli("plan", str(work / "spec.yaml"), "--ledger", pg_url))  # no cap yet: the plan says it would refuse
    assert "no budget cap" in p.stdout
    assert pg_server.password not in p.stdout + p.stderr


def test_reading_an_empty_database_creates_nothing(pg_url: str, tmp_path: Path) -> None:
    v = ok(dpcli("ledger", "verify", "--ledger", pg_url))
    assert v.stdout.startswith("ledger OK: 0 record(s)")
    assert sql(pg_url, "SELECT to_regclass('dpcli_ledger') IS NULL") == [(True,)]
    # the first write creates the tables, in PostgreSQL and nowhere else
    ok(dpcli("budget", "set", "toy", "--epsilon", "1", "--ledger", pg_url))
    assert len(rows(pg_url)) == 1
    assert sql(pg_url, "SELECT seq, hash = (SELECT hash FROM dpcli_ledger) FROM dpcli_ledger_head") == [(0, True)]
    assert list(tmp_path.iterdir()) == []
