"""A renewing cap (issue 26) under `dpcli randomize`: its release id is the period's key, as a release's is. Without
--release-id it is refused before the input is read (a random id would name a period nobody declared); with one it
charges that period, and a re-run under the id writes the stored file again, spending nothing. In process."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import run_in_process

SPEC = """\
version: 1
dataset: survey
input: people.csv
privacy: {unit: row, neighbours: replace, epsilon: 1}
columns:
  colour: {type: category, categories: [red, green, blue]}
randomize:
  columns: [colour]
"""


def test_randomize_charges_the_period_its_release_id_names(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC)
    ledger = tmp_path / "L.jsonl"
    assert run_in_process("budget", "set", "survey", "--epsilon", "1.5", "--per", "period",
                          "--ledger", ledger).returncode == 0

    def randomize(*extra: object) -> tuple[int, str]:
        r = run_in_process("randomize", tmp_path / "spec.yaml", "--output", tmp_path / "out.csv", "--ledger", ledger,
                           *extra, cwd=tmp_path)
        return r.returncode, r.stderr.decode()

    code, err = randomize()  # people.csv does not exist yet: were it read, exit 3
    assert code == 2, err
    assert "renews per declared period" in err, err
    (tmp_path / "people.csv").write_text("colour\nred\nblue\ngreen\n")
    code, err = randomize("--release-id", "week-1")
    assert code == 0, err
    assert "left 0.5 of 1.5 in period 'week-1'" in err, err
    first = (tmp_path / "out.csv").read_bytes()
    code, err = randomize("--release-id", "week-1")
    assert code == 0, err
    assert "nothing spent" in err, err
    assert (tmp_path / "out.csv").read_bytes() == first
    code, err = randomize("--release-id", "week-2")
    assert code == 0, err
    assert "in period 'week-2'" in err, err
    spends = [json.loads(x) for x in ledger.read_text().splitlines() if '"spend"' in x]
    assert [s["period"] for s in spends] == ["week-1", "week-2"]
