"""The hostile-input battery's shared parts (tests/hostile/): the spec and data every case starts from (with a canary
cell that must never appear in any message), and the runs and checks each case uses."""

from __future__ import annotations

import contextlib
import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path

from dpcli.cli.app import main
from dpcli.engine import aggregate
from tests.helpers import run_dpcli

CANARY = "4815162342"  # a cell value that must never appear in any message


SPEC = """\
version: 1
dataset: toy
privacy: {unit: row, neighbours: add_remove, epsilon: 1}
columns:
  age:    {type: int, bounds: [0, 100]}
  income: {type: float, bounds: [0, 1000], precision: 0.01}
  sex:    {type: category, categories: [F, M]}
statistics:
  - {name: n, kind: count}
  - {name: by_sex, kind: count, by: [sex]}
  - {name: ages, kind: histogram, column: age, bins: [0, 18, 65, 101]}
  - {name: mean_income, kind: mean, column: income, by: [sex]}
"""

DATA = f"age,income,sex,note\n34,120.5,F,{CANARY}\n71,990,M,x\n{CANARY},n/a,M,{CANARY}\n45,{CANARY},X,y\n"


@dataclass
class Run:
    code: int
    out: bytes
    err: bytes

    @property
    def text(self) -> str:
        return self.out.decode("utf-8", "replace") + self.err.decode("utf-8", "replace")


def cli(*args: str) -> Run:
    """``dpcli ARGS`` in this process: main() with stdout/stderr captured as bytes."""
    out, err = io.BytesIO(), io.BytesIO()
    so = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    se = io.TextIOWrapper(err, encoding="utf-8", write_through=True)
    code = None
    with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code
    return Run(code, out.getvalue(), err.getvalue())


def dpcli(*args: str, **kw) -> Run:
    """The real command in a subprocess."""
    r = run_dpcli(*args, **kw)
    return Run(r.returncode, r.stdout, r.stderr)


def ledger_state(work: Path) -> bytes:
    head = work / "ledger.jsonl.head"
    return (work / "ledger.jsonl").read_bytes() + b"\0" + (head.read_bytes() if head.exists() else b"")


def no_output(directory: Path, name: str = "out.csv") -> None:
    left = [p.name for p in directory.iterdir() if p.name.startswith((name, f".{name}"))]
    assert left == [], f"output left behind: {left}"


def clean_failure(r: Run, code: int, fragment: str = "") -> str:
    """Exit ``code``; one message line on stderr starting 'dpcli: error:'; no traceback; no canary; stdout empty."""
    err = r.err.decode("utf-8", "replace")
    assert r.code == code, err
    assert "Traceback" not in r.text
    assert CANARY not in r.text
    assert r.out == b""
    assert err.startswith("dpcli: error: "), err
    assert err.endswith("\n"), err
    assert err.count("\n") == 1, err
    assert fragment in err, err
    return err


def refused(work: Path, code: int, fragment: str, *args: str) -> str:
    """A release that must fail before anything is spent."""
    before = ledger_state(work)
    r = cli("release", *args, "--ledger", work / "ledger.jsonl")
    message = clean_failure(r, code, fragment)
    assert ledger_state(work) == before, "the ledger changed although nothing was released"
    no_output(work)
    return message


def released(work: Path, *args: str, spec: str = "spec.yaml") -> list[dict[str, str]]:
    r = cli("release", work / spec, *args, "--ledger", work / "ledger.jsonl", "--no-reuse", "-o", "-", "--quiet")
    assert r.code == 0, r.err
    assert "Traceback" not in r.text
    assert CANARY not in r.err.decode()
    rows = list(csv.DictReader(io.StringIO(r.out.decode())))
    for row in rows:
        for key in ("value", "ci_low", "ci_high"):
            assert re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", row[key]), row  # finite, exact decimal text
    return rows


def exacts(plan, path: Path) -> list:
    return [(e.counts.tolist(), None if e.sums is None else e.sums.tolist()) for e in aggregate(plan, path)]


def _without_dac(cmd: list[str]) -> list[str]:
    """Run as root without the capabilities that bypass file permissions, so a mode-000 file raises EACCES."""
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}", *cmd]
