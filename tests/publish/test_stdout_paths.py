"""``-o /dev/stdout`` (and /dev/fd/1, /proc/self/fd/1) is refused before the spend, pointing to ``-o -`` (issue 25,
"Helpful refusals"): dpcli writes a new file and renames it over the output's name, which it cannot do there."""

from __future__ import annotations

import pytest

from tests.helpers import run_in_process
from tests.spec_builder import spec_text

NAMES = ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"]
REFUSAL = (
    "dpcli: error: output {name} is standard output by a device name: dpcli writes a new file and renames it over the "
    "name, which it cannot do there; use -o - for standard output\n"
)


@pytest.fixture
def work(tmp_path):
    (tmp_path / "data.csv").write_text("age\n30\n41\n")
    (tmp_path / "spec.yaml").write_text(spec_text(input="data.csv"))
    assert run_in_process("budget", "set", "toy", "--epsilon", "5", "--ledger", tmp_path / "l.jsonl").returncode == 0
    return tmp_path


@pytest.mark.parametrize("name", NAMES)
def test_release_to_a_device_name_of_stdout_points_to_dash_before_the_spend(work, name):
    before = (work / "l.jsonl").read_bytes()
    done = run_in_process("release", work / "spec.yaml", "--ledger", work / "l.jsonl", "-o", name, cwd=work)
    assert done.returncode == 2
    assert done.stderr.decode() == REFUSAL.format(name=name)
    assert done.stdout == b""
    assert (work / "l.jsonl").read_bytes() == before


def test_init_and_check_say_the_same(work):
    done = run_in_process("init", work / "data.csv", "-o", "/dev/stdout", cwd=work)
    assert (done.returncode, done.stderr.decode()) == (2, REFUSAL.format(name="/dev/stdout"))
    done = run_in_process("check", work / "spec.yaml", "-o", "/dev/fd/1", cwd=work)
    assert (done.returncode, done.stderr.decode()) == (2, REFUSAL.format(name="/dev/fd/1"))


def test_dash_writes_standard_output(work):
    done = run_in_process("release", work / "spec.yaml", "--ledger", work / "l.jsonl", "-o", "-", cwd=work)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.startswith(b"statistic,")
