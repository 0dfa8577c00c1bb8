"""Issue 25 (8): what `release --report` and `dpcli report` say when they succeed: one line naming what was written,
none with --quiet."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.helpers import run_in_process
from tests.spec_builder import spec_text

SPEC = spec_text(statistics=["{name: n, kind: count}"])
DATA = "age\n34\n71\n15\n"


def test_release_report_and_dpcli_report_each_say_what_they_wrote(make_work: Callable[..., Path]) -> None:
    work = make_work(SPEC, DATA, cap="10")
    args = ("release", work / "spec.yaml", "-i", work / "data.csv", "--ledger", work / "L.jsonl", "-o", work / "o.csv")
    r = run_in_process(*args, "--report", work / "r.html", "--release-id", "a")
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode().splitlines()[-1] == f"dpcli: wrote the report to {work / 'r.html'}"
    assert (work / "r.html").is_file()

    r = run_in_process("report", work / "o.csv", "-o", work / "again.html", "--summary-md", work / "s.md")
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode() == (
        f"dpcli: wrote the report to {work / 'again.html'}; appended the summary to {work / 's.md'}\n"
    )
    assert r.stdout == b""


def test_quiet_keeps_them_silent(make_work: Callable[..., Path]) -> None:
    work = make_work(SPEC, DATA, cap="10")
    args = ("release", work / "spec.yaml", "-i", work / "data.csv", "--ledger", work / "L.jsonl", "-o", work / "o.csv")
    r = run_in_process(*args, "--report", work / "r.html", "--quiet")
    assert (r.returncode, r.stderr) == (0, b"")
    r = run_in_process("report", work / "o.csv", "-o", work / "again.html", "--quiet")
    assert (r.returncode, r.stderr, r.stdout) == (0, b"", b"")
    assert (work / "again.html").is_file()
