"""``dpcli audit`` of a synth spec (issue 27): MST's measurements and selection, each against its claim.

The default suite runs the command once on a correct spec (its report, JSON, exit 0, nothing read or spent: a
correct plan fails with probability below the command's 1 - confidence = 1e-9). The slow tests: the same spec under
replace with many trials, and a wrong plan (the selection's rate doubled), which the audit must catch twice, by
the searched pair's exact loss (no noise) and by the empirical bound (see
test_a_doubled_selection_rate_is_caught_by_the_draws for why it misses with probability far below 1e-6).
"""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.audit.synth_audit import SELECTION, audit_synth
from dpcli.plan.synth import make_synth_plan
from dpcli.specs.load import parse_spec
from tests.helpers import run_in_process

SPEC = """\
version: 1
dataset: town
input: does-not-exist/people.csv
ledger: no-ledger-here.jsonl
privacy: {unit: row, neighbours: NEIGHBOURS, rho: 0.5}
columns:
  age:      {type: int, bounds: [18, 90]}
  sex:      {type: category, categories: [F, M]}
  employed: {type: bool}
synth:
  method: mst
  columns:
    age:      {bins: [18, 30, 45, 65, 91], values: uniform}
    sex:      {}
    employed: {missing: keep}
"""


def _spec(tmp_path: Path, neighbours: str = "add_remove") -> Path:
    path = tmp_path / "synth.yaml"
    path.write_text(SPEC.replace("NEIGHBOURS", neighbours), encoding="utf-8")
    return path


def _targets(doc: dict) -> dict[str, dict]:
    return {s["statistic"]: s for s in doc["statistics"]}


def test_audit_of_a_synth_spec_covers_every_marginal_the_measurement_and_the_selection(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    done = run_in_process("audit", spec, "--trials", "1000", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    doc = json.loads(done.stdout)
    assert (doc["ok"], doc["data_read"], doc["spent"], doc["exit_code"]) == (True, False, False, 0)
    plan = make_synth_plan(parse_spec(SPEC.replace("NEIGHBOURS", "add_remove")))
    targets = _targets(doc)
    marginals = [f"one_way:{c}" for c in plan.columns] + [
        f"pair:{plan.columns[i]}:{plan.columns[j]}" for i, j in plan.candidates]
    assert list(targets) == [*marginals, "(measurement)", SELECTION]
    for name in marginals:  # each against its own rho, and the search found a pair that moves it
        rho = plan.one_way_rho if name.startswith("one_way") else plan.pair_rho
        assert Fraction(targets[name]["claimed_loss"]) == rho
        assert Fraction(targets[name]["pair_loss"]) == rho  # one row moves one cell by 1: L2² 1 / (2σ²) = ρ here
    measurement = targets["(measurement)"]
    assert Fraction(measurement["claimed_loss"]) == plan.rho_one_way + plan.rho_measure
    selection = targets[SELECTION]
    assert (selection["mechanism"], selection["loss_unit"], selection["delta"]) == ("exponential", "epsilon", "0")
    assert Fraction(selection["claimed_epsilon"]) == plan.epsilon_select
    # the searched pair moves the draw's law (a loss the audit can show), within ε_sel
    assert 0 < Fraction(selection["pair_loss"]) <= plan.epsilon_select
    assert selection["row_d_prime"] is not None
    notes = " ".join(doc["notes"])
    assert "ε_sel²/8" in notes
    assert "bounded-range" in notes
    assert not (tmp_path / "no-ledger-here.jsonl").exists()


@pytest.mark.slow  # ~4 s of CPU: make test-slow
def test_a_correct_synth_plan_under_replace_is_within_every_claim(tmp_path: Path) -> None:
    done = run_in_process("audit", _spec(tmp_path, "replace"), "--trials", "20000", cwd=tmp_path)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    text = done.stdout.decode()
    assert "(selection)" in text
    assert "(measurement)" in text
    assert "result: every statistic is within its claim" in text


@pytest.mark.slow  # ~3 s of CPU: make test-slow
def test_a_doubled_selection_rate_is_caught_by_the_draws(tmp_path: Path) -> None:
    """A wrong plan: the draw's rate doubled, its claim ε_sel unchanged. The search's pair loss exceeds the claim
    exactly (a violation without any draw), and the empirical bound exceeds it too. On this spec the drawn pair's
    strongest event has P[E|D] ≈ 0.19 against P[E|D'] ≈ 0.042 (a ratio e^1.47); at 20,000 trials each binomial's
    standard deviation is below 0.003, and the bound could fall to ε_sel = 0.8165 (a ratio of 2.26) only if the two
    frequencies moved by more than 20 standard deviations together: a chance far below 1e-6."""
    plan = make_synth_plan(parse_spec(SPEC.replace("NEIGHBOURS", "add_remove")))
    wrong = replace(plan, rate=(2 * plan.rate[0], plan.rate[1]))
    report = audit_synth(wrong, trials=20_000)
    selection = next(s for s in report.statistics if s.statistic == SELECTION)
    assert not report.ok
    assert not selection.pair_within_claim
    assert selection.epsilon_lower_bound > plan.epsilon_select, selection.worst_event
    # the measurements are untouched by the wrong rate
    assert all(s.within_claim for s in report.statistics if s.statistic != SELECTION)
