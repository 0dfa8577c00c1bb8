"""The hostile-input battery, runs and paths: items 20-25 of the list in tests/hostile/test_spec_and_csv.py. Each case
asserts the contract's exit code, a one-line message, no data value in any message (a canary cell), and what the
ledger and the output directory hold afterwards; cases about processes run the real command in a subprocess."""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dpcli.engine import aggregate
from dpcli.plan.model import make_plan
from dpcli.specs.load import parse_spec
from tests.helpers import mounted_tmpfs
from tests.hostile.battery import (
    CANARY,
    SPEC,
    Run,
    _without_dac,
    clean_failure,
    cli,
    dpcli,
    ledger_state,
    no_output,
    refused,
)

# ---------------------------------------------------------------------------------------------------------------
# Runs and paths: items 20-25


def test_output_equal_to_input_or_ledger_or_a_symlink_exits_2(work: Path) -> None:
    base = [work / "spec.yaml", "-i", work / "data.csv"]
    refused(work, 2, "is the input file", *base, "-o", work / "data.csv")
    refused(work, 2, "is the ledger", *base, "-o", work / "ledger.jsonl")
    (work / "target.csv").write_text("keep\n")
    (work / "out.csv").symlink_to(work / "target.csv")
    before = ledger_state(work)
    r = cli("release", *base, "-o", work / "out.csv", "--ledger", work / "ledger.jsonl")
    clean_failure(r, 2, "is a symbolic link")
    assert ledger_state(work) == before
    assert (work / "target.csv").read_text() == "keep\n"
    (work / "out.csv").unlink()
    (work / "out.csv").symlink_to(work / "nowhere.csv")  # dangling
    r = cli("release", *base, "-o", work / "out.csv", "--ledger", work / "ledger.jsonl")
    clean_failure(r, 2, "is a symbolic link")
    assert not (work / "nowhere.csv").exists()
    (work / "out.csv").unlink()
    (work / "link_to_data.csv").symlink_to(work / "data.csv")
    r = cli("release", *base, "-o", work / "link_to_data.csv", "--ledger", work / "ledger.jsonl")
    clean_failure(r, 2, "")
    assert ledger_state(work) == before


def test_output_directory_missing_exits_3_before_spending(work: Path) -> None:
    refused(work, 3, "does not exist", work / "spec.yaml", "-i", work / "data.csv", "-o", work / "nope" / "out.csv")


def test_read_only_output_directory_exits_3_before_spending(work: Path) -> None:
    with mounted_tmpfs(work / "ro", "ro,size=64k") as ro:
        before = ledger_state(work)
        r = cli("release", work / "spec.yaml", "-i", work / "data.csv", "-o", ro / "out.csv",
                "--ledger", work / "ledger.jsonl")
        clean_failure(r, 3, "is not writable")
        assert ledger_state(work) == before
        assert list(ro.iterdir()) == []


def test_read_only_output_directory_by_permissions_exits_3(work: Path) -> None:
    if not shutil.which("setpriv") and os.geteuid() == 0:  # pragma: no cover
        pytest.skip("running as root without setpriv: permissions cannot be made to apply")
    (work / "locked").mkdir()
    (work / "locked").chmod(0o555)
    before = ledger_state(work)
    cmd = [sys.executable, "-m", "dpcli"]
    if os.geteuid() == 0:
        cmd = _without_dac(cmd)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPCLI_")}
    r = subprocess.run([*cmd, "release", work / "spec.yaml", "-i", work / "data.csv", "-o", work / "locked" / "out.csv",
                        "--ledger", work / "ledger.jsonl"], capture_output=True, timeout=60, env=env)
    clean_failure(Run(r.returncode, r.stdout, r.stderr), 3, "is not writable")
    assert ledger_state(work) == before


BIG_TABLE = SPEC.replace(
    "  - {name: n, kind: count}\n",
    "  - {name: n, kind: count}\n"
    "  - {name: fine, kind: histogram, column: income, bins: {start: 0, stop: 1000, step: 0.25}}\n",
)


def spent_but_not_released(work: Path, message: str) -> None:
    """The spend stays recorded and the message names it and the release id that writes its stored table again."""
    records = [json.loads(x) for x in (work / "ledger.jsonl").read_text().splitlines()]
    spend = [x for x in records if x["type"] == "spend"][-1]
    assert f"record {spend['seq']}" in message
    assert f"--release-id {spend['release_id']}" in message
    assert "no refund" in message
    assert cli("ledger", "verify", "--ledger", work / "ledger.jsonl").code == 0


def test_disk_full_while_writing_the_output_exits_5_keeps_the_spend_and_leaves_no_file(work: Path) -> None:
    """22. A real full disk: a 64 KiB tmpfs, a ~170 KiB table."""
    (work / "big.yaml").write_text(BIG_TABLE)
    with mounted_tmpfs(work / "small", "size=64k") as small:
        r = cli("release", work / "big.yaml", "-i", work / "data.csv", "-o", small / "out.csv",
                "--ledger", work / "ledger.jsonl")
        message = clean_failure(r, 5, "could not write the output")
        assert "No space left on device" in message
        spent_but_not_released(work, message)
        assert list(small.iterdir()) == []


def test_sidecar_write_failure_removes_the_table_too(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dpcli.run.release as rel

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(rel, "write_sidecar", full)
    r = cli("release", work / "spec.yaml", "-i", work / "data.csv", "-o", work / "out.csv",
            "--ledger", work / "ledger.jsonl")
    message = clean_failure(r, 5, "No space left on device")
    spent_but_not_released(work, message)
    no_output(work)


def test_standard_output_on_a_full_device_exits_5(work: Path) -> None:
    if not os.path.exists("/dev/full"):  # pragma: no cover
        pytest.skip("no /dev/full")
    (work / "big.yaml").write_text(BIG_TABLE)
    with open("/dev/full", "wb") as full:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DPCLI_")}
        r = subprocess.run([sys.executable, "-m", "dpcli", "release", work / "big.yaml", "-i", work / "data.csv",
                            "-o", "-", "--ledger", work / "ledger.jsonl"], stdout=full, stderr=subprocess.PIPE,
                           timeout=60, env=env)
    message = clean_failure(Run(r.returncode, b"", r.stderr), 5, "could not write the table to standard output")
    assert "discard it" in message
    spent_but_not_released(work, message)


def test_two_runs_without_a_release_id_draw_fresh_noise(work: Path) -> None:
    """23. No hidden seed: two processes, identical spec and input, no release id: different numbers."""
    (work / "many.yaml").write_text(SPEC.replace("bins: [0, 18, 65, 101]", "bins: {start: 0, stop: 100, step: 1}"))
    args = ["release", work / "many.yaml", "-i", work / "data.csv", "-o", "-", "--ledger", work / "ledger.jsonl",
            "--quiet"]
    first, second = dpcli(*args), dpcli(*args)
    assert first.code == second.code == 0
    a, b = (list(csv.DictReader(io.StringIO(r.out.decode()))) for r in (first, second))
    assert [r["statistic"] for r in a] == [r["statistic"] for r in b]
    assert [r["value"] for r in a] != [r["value"] for r in b]  # 107 cells: equal with probability < 1e-40
    # under a release id, a second run returns the first run's numbers and spends nothing
    named = dpcli(*args, "--release-id", "r1")
    assert named.code == 0
    assert dpcli(*args, "--release-id", "r1").out == named.out


def test_verbose_progress_carries_no_data(work: Path) -> None:
    """24. --verbose prints phase names and the total time only: the same lines (the total aside) for any data.

    The truths are looked for outside what changes from run to run and holds no data: the ledger head (16 hex digits
    of a hash that covers the record's time) and the working directory (pytest numbers it: pytest-1584 holds a
    truth). In the head, a 4-digit truth sits in one of 13 windows with probability 13/16^4 = 2e-4; the six here
    made the check fail 1.2e-3 a run (1.3e-3 measured over 200,000 random heads), twice a test; without the head
    the check is exact."""
    rows = 7919  # a row count, a true sum and a cell value that must not be printed
    small = "age,income,sex\n" + f"{CANARY},1,F\n"
    big = "age,income,sex\n" + "".join(f"{i % 90},{(i * 37) % 1000}.25,{'FM'[i % 2]}\n" for i in range(rows - 1))
    big += f"{CANARY},1,M\n"
    (work / "small.csv").write_text(small)
    (work / "big.csv").write_text(big)
    truths = {str(rows), CANARY}
    for ex in aggregate(make_plan(parse_spec(SPEC)), work / "big.csv"):
        truths |= {str(v) for v in ex.counts.tolist() if v > 9}
        if ex.sums is not None:
            truths |= {str(v) for v in ex.sums.tolist() if abs(v) > 99}
    lines = []
    for data in ("small.csv", "big.csv"):
        r = cli("release", work / "spec.yaml", "-i", work / data, "-o", work / f"{data}.out", "--ledger",
                work / "ledger.jsonl", "--verbose")
        assert r.code == 0, r.err
        err = r.err.decode()
        public = re.sub(r"head [0-9a-f]{16}", "head H", err).replace(str(work), "WORK")
        assert not any(t in public for t in truths), err
        progress = [x for x in err.splitlines() if x.startswith("dpcli: ") and not x.startswith("dpcli: released")]
        assert len(progress) >= 8
        assert progress[-1].startswith("dpcli: done in ")
        assert not any(re.search(r"\d\.\d+ s", x) for x in progress[:-1])  # no per-phase times
        lines.append([re.sub(r"done in [0-9.]+ s", "done", x).replace(data, "DATA") for x in progress])
    # identical but for the ledger record numbers (public, from the ledger)
    strip = [[re.sub(r"\d+ record\(s\)|record \d+", "N", x) for x in ls] for ls in lines]
    assert strip[0] == strip[1]
    assert "spend recorded" in " ".join(lines[0])
    assert "exact aggregates computed" in " ".join(lines[0])
    assert cli("release", work / "spec.yaml", "-i", work / "small.csv", "--ledger", work / "ledger.jsonl",
               "--verbose", "--quiet").code == 2


def test_closed_stdout_mid_table_exits_quietly_with_the_spend_recorded(work: Path) -> None:
    """25. `dpcli release ... | head -1` over a table far larger than a pipe buffer (~150 KiB)."""
    (work / "big.yaml").write_text(BIG_TABLE)
    led = work / "ledger.jsonl"
    cmd = (f"{sys.executable} -m dpcli release {work / 'big.yaml'} -i {work / 'data.csv'} -o - --ledger {led} "
           f"--quiet | head -1")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPCLI_")}
    r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, timeout=120, env=env)
    assert r.stdout.decode() == (
        "statistic,kind,column,income,sex,age,bin_low,bin_high,value,ci_low,ci_high,epsilon\n"
    )
    assert r.stderr == b""
    assert r.returncode == 0
    types = [json.loads(x)["type"] for x in led.read_text().splitlines()]
    assert types[-2:] == ["spend", "released"]
