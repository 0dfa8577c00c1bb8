"""``dpcli plan`` and ``dpcli check`` of a synth spec (issue 27): the domain, rho per step, sigma^2 per marginal,
the selection's epsilon and every derivation, from the spec alone (docs/spec.md, "Synthetic data")."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import run_in_process

SPEC = """\
version: 1
dataset: adult
input: adult.csv
privacy: {unit: row, neighbours: replace, rho: 1/2}
columns:
  age: {type: int, bounds: [17, 90]}
  sex: {type: category, categories: [Female, Male]}
  income: {type: category, categories: ["<=50K", ">50K"]}
synth:
  method: mst
  rows: 1000
  shares: {one_way: 1/4, select: 1/2, measure: 1/4}
  columns:
    age: {bins: {start: 10, stop: 100, step: 30}, values: mid}
    sex: {}
    income: {missing: keep}
"""

PLAN = """\
plan for dataset 'adult': a synthetic CSV by MST over 3 columns (replace neighbours), output rows: 1,000; no \
data read
charge: ρ=0.5 zCDP of the spec's ρ=0.5
domain (codes per column):
  age: 3 codes: [10..40), [40..70), [70..100)
  sex: 2 codes: Female, Male
  income: 3 codes: <=50K, >50K, (missing)
ρ per step:
  one-way marginals: 3 × 0.04166666667 = 0.125, σ²=24 each
  selection: 2 draws × ε_sel²/8, ε_sel=1 (Δ_u=2, rate 1/4) = 0.25
  measured pairs: 2 of 3 candidates × 0.0625 = 0.125, σ²=16 each
derivations:
  domain: age 3 × sex 2 × income 3 codes; 3 candidate pairs, the largest age×income with 9 cells (limit \
1,000,000)
  ρ = 0.5 (privacy.rho), shared one_way 0.25, select 0.5, measure 0.25
  replace one row: it can leave one cell of a marginal and join another (L2² 1 + 1)
  one-way marginals: ρ·0.25 / 3 = 0.04166666667 each; σ² = 2/(2·ρ_i) = 24 (rounded up)
  selection: 2 exponential-mechanism draws (Kruskal rounds) at ε_sel = 1 each, rounded down so that \
2·ε_sel²/8 ≤ ρ·0.5 = 0.25; charged by the bounded-range bound, ε_sel²/8 each (Cesar & Rogers 2021): 0.25
  score sensitivity Δ_u = 2: replace one row changes a pair's exact counts in two cells, so its score by at \
most 2 (the model's counts are rounded to integers before the score); each draw's rate ε_sel/(2·Δ_u) = 1/4
  measured pairs: ρ·0.25 / 2 = 0.0625 each; σ² = 2/(2·ρ_i) = 16 (rounded up)
  charge: ρ = 0.125 + 0.25 + 0.125 = 0.5 ≤ 0.5
"""


def test_plan_prints_the_domain_the_steps_and_the_derivations(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SPEC)
    run = run_in_process("plan", "s.yaml", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.decode() == PLAN


def test_plan_json(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SPEC)
    run = run_in_process("plan", "s.yaml", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["format"] == "dpcli.plan/1"
    synth = doc["synth"]
    assert (synth["rho"], synth["charge_rho"]) == ("0.5", "0.5")
    assert synth["domain"][0] == {"column": "age", "codes": 3, "labels": ["[10..40)", "[40..70)", "[70..100)"],
                                  "missing": "drop", "values": "mid"}
    assert synth["domain"][2]["labels"] == ["<=50K", ">50K", ""]
    assert synth["one_way"] == {"marginals": 3, "rho_each": "1/24", "rho": "0.125", "sigma2": "24",
                                "l2_squared": 2}
    assert synth["selection"] == {"draws": 2, "epsilon_each": "1", "rho": "0.25", "score_sensitivity": 2,
                                  "rate": "1/4", "accounting": "bounded range: epsilon^2/8 zCDP per draw (Cesar & "
                                  "Rogers 2021)"}
    assert synth["pairs"] == {"marginals": 2, "rho_each": "0.0625", "rho": "0.125", "sigma2": "16", "l2_squared": 2}


def test_check_reads_the_header_only_and_refuses_a_missing_column(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SPEC)
    (tmp_path / "adult.csv").write_text("age,sex,income\n30,Male,>50K\n")
    ok = run_in_process("check", "s.yaml", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert ok.stderr.decode() == ("dpcli: s.yaml is valid: a synthetic CSV of 3 columns by MST, 3 candidate pairs, "
                                  "charging ρ=0.5 zCDP; adult.csv has every declared column\n")
    (tmp_path / "adult.csv").write_text("age,sex\n30,Male\n")
    missing = run_in_process("check", "s.yaml", cwd=tmp_path)
    assert missing.returncode == 3, missing.stderr
    assert "income" in missing.stderr.decode()


def test_a_refused_domain_is_exit_2_naming_the_figure(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SPEC.replace("  rows: 1000\n", "  max_cells: 8\n"))
    for command in ("plan", "check"):
        run = run_in_process(command, "s.yaml", cwd=tmp_path)
        assert run.returncode == 2, run.stderr
        assert ("s.yaml: synth.columns: marginal age×income has 9 cells (3 × 3 codes), over synth.max_cells = 8"
                in run.stderr.decode())


def test_release_refuses_a_synth_spec_before_reading_anything(tmp_path: Path) -> None:
    # its statistics are none: release would otherwise publish an empty table under the synth spec's meaning (dpcli
    # audit audits a synth spec's steps: tests/audit/test_synth_audit.py)
    (tmp_path / "s.yaml").write_text(SPEC)
    run = run_in_process("release", "s.yaml", "-o", "out.csv", cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert "s.yaml: synth: a synth spec's synthetic CSV is written by `dpcli synth SPEC`" in run.stderr.decode()
    assert not (tmp_path / "out.csv").exists()
