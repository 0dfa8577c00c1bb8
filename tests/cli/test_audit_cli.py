"""`dpcli audit` end to end: exit codes, the JSON report, and that it reads no data and spends nothing.

Each run's false-failure probability is below the command's default 1 - confidence = 1e-9 (a union bound over every
Clopper-Pearson bound of the report, see dpcli/audit/release_audit.py; the search's pair check is exact and never fails
by
chance); this file audits a correct spec four times (4e-9), and a broken one once, whose empirical bound it misses with
probability below 2e-8 (derivation in test_a_violated_claim_exits_6).
"""

from __future__ import annotations

import json
from fractions import Fraction

from tests.helpers import run_in_process

SPEC = """\
version: 1
dataset: toy
input: does-not-exist/people.csv
ledger: no-ledger-here.jsonl
privacy: {unit: row, neighbours: add_remove, epsilon: 2}
columns:
  age:    {type: int, bounds: [0, 100]}
  income: {type: float, bounds: [0, 1000], precision: 0.01}
  sex:    {type: category, categories: [F, M]}
statistics:
  - {name: n, kind: count}
  - {name: ages, kind: histogram, column: age, bins: [0, 18, 65, 101]}
  - {name: mean_income, kind: mean, column: income, by: [sex]}
  - {name: total_income, kind: sum, column: income}
"""

dpcli = run_in_process


def test_audit_json_reads_no_data_and_spends_nothing(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    ledger = tmp_path / "env-ledger.jsonl"
    before = sorted(p.name for p in tmp_path.iterdir())
    result = dpcli("audit", str(spec), "--trials", "20000", "--json", cwd=tmp_path, env={"DPCLI_LEDGER": str(ledger)})
    assert result.returncode == 0, result.stderr.decode()
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["data_read"] is False
    assert report["spent"] is False
    assert report["dataset"] == "toy"
    assert report["neighbours"] == "add_remove"
    assert report["accounting"] == "pure"
    assert report["trials"] == 20000
    assert 0 < report["confidence"] < 1
    assert report["datasets_aggregated"] > 1
    # every statistic, each part of the mean on its own, then the release as a whole
    assert [s["statistic"] for s in report["statistics"]] == [
        "n", "ages", "mean_income", "mean_income/sum", "mean_income/count", "total_income", "(release)"
    ]
    assert [s["scope"] for s in report["statistics"]] == ["statistic"] * 3 + ["component"] * 2 + [
        "statistic",
        "release",
    ]
    for s in report["statistics"]:
        assert set(s) >= {
            "statistic", "scope", "kind", "mechanism", "claimed_epsilon", "delta", "epsilon_lower_bound",
            "within_claim", "pair_loss", "claimed_loss", "loss_unit", "pair_within_claim", "pairs_searched", "trials",
            "events", "alpha_per_bound", "noised_cells", "neighbour", "row_d", "row_d_prime", "differing_cells",
            "worst_event",
        }
        assert s["within_claim"] is True
        assert s["mechanism"] == "discrete_laplace"
        assert s["delta"] == "0"
        assert 0 <= s["epsilon_lower_bound"] <= float(s["claimed_epsilon"])
        assert s["pair_within_claim"] is True
        assert s["loss_unit"] == "epsilon"
        assert 0 < Fraction(s["pair_loss"]) <= Fraction(s["claimed_loss"]) == Fraction(s["claimed_epsilon"])
        assert s["trials"] == 20000
        assert s["events"] > 0
        assert s["noised_cells"] == len(s["differing_cells"]) >= 1
        assert s["row_d"] is None
        assert set(s["row_d_prime"]) == {"age", "income", "sex"}  # add_remove: D' = D + 1 row
    release = report["statistics"][-1]
    assert release["claimed_epsilon"] == "2"
    assert release["noised_cells"] == 5  # one row in every statistic's cell
    assert any("not a proof" in n for n in report["notes"])
    # the nonexistent input was never needed, and no ledger (from the spec or $DPCLI_LEDGER) was created or read
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not ledger.exists()
    assert not (tmp_path / "no-ledger-here.jsonl").exists()


PERSON_SPEC = """\
version: 1
dataset: panel
input: does-not-exist/panel.csv
privacy:
  epsilon: 2
  delta: 1e-6
  unit: {id: person_id, max_rows: 2, max_groups: 2, missing_id: drop}
columns:
  amount:  {type: int, bounds: [0, 10]}
  country: {type: category, categories: open, max_length: 4}
statistics:
  - {name: people, kind: count, of: persons}
  - {name: by_country, kind: count, by: [country]}
  - {name: spend, kind: sum, column: amount, clamp: person}
"""


def test_audit_of_a_person_unit_with_open_keys(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(PERSON_SPEC)
    result = dpcli("audit", str(spec), "--trials", "20000", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["data_read"] is False
    stats = {s["statistic"]: s for s in report["statistics"]}
    assert list(stats) == ["people", "by_country", "by_country/selection", "spend", "(release)"]
    # neighbours are whole persons: every row of D' carries the candidate's id, one person of several rows
    for s in report["statistics"]:
        assert s["rows_d"] is None
        assert s["row_d"] is None
        assert {r["person_id"] for r in s["rows_d_prime"]} == {"dpcli-audit-person"}
        assert s["row_d_prime"] == s["rows_d_prime"][0]
    # the open-key statistic claims ε at its selection's δ; the selection's own target compares the chance that
    # a key only the added person holds is released with that δ, and its events include "such a key is released"
    sel = stats["by_country/selection"]
    assert sel["loss_unit"] == "delta"
    assert sel["delta"] == sel["claimed_loss"] == stats["by_country"]["delta"]
    assert 0 < Fraction(sel["pair_loss"]) <= Fraction(sel["claimed_loss"])
    one_sided = [c for c in sel["differing_cells"] if "only_in" in c]
    assert one_sided
    assert all(c["only_in"] == "D'" and 0 < c["release_probability"] < 1e-6 for c in one_sided)
    assert len(sel["rows_d_prime"]) >= 2  # a person bringing several new keys
    assert stats["(release)"]["delta"] == stats["by_country"]["delta"]  # pure ε, δ of the one selection
    assert Fraction(stats["by_country"]["pair_loss"]) == Fraction(stats["by_country"]["claimed_loss"])
    text = dpcli("audit", str(spec), "--trials", "5000", cwd=tmp_path).stdout.decode()
    assert "by_country/selection" in text
    assert "D' = D + 1 person of" in text
    assert "P[a key one dataset lacks is released]" in text


def test_audit_text_report_and_usage_errors(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    result = dpcli("audit", str(spec), "--trials", "5000", cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    out = result.stdout.decode()
    assert "no input read, nothing spent" in out
    assert "not a proof" in out
    assert "within claim" in out
    assert "VIOLATION" not in out

    assert dpcli("audit", str(spec), "--trials", "10", cwd=tmp_path).returncode == 2  # below the minimum
    assert dpcli("audit", str(tmp_path / "missing.yaml"), cwd=tmp_path).returncode == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(SPEC.replace("epsilon: 2", "epsilon: 2, seed: 1"))
    result = dpcli("audit", str(bad), cwd=tmp_path)
    assert result.returncode == 2
    assert b"privacy.seed" in result.stderr


def test_a_violated_claim_exits_6(tmp_path, monkeypatch, capsys):
    """In process, with the audit fed a deliberately broken plan (Laplace scale halved: true ε = 2 against a claim of
    1). The search's pair (one added row) already shows it without noise: its loss is 2. The noise shows it too,
    as derived in tests/statistical/test_audit.py: on the event E = {Z >= 2} (the noisy count at or above D''s),
    p_fav = P[noise >= 0] = 1/(1+q) and p_oth = P[noise >= 1] = q/(1+q), q = e^-2; the audit's counts are at least
    binom.ppf(1e-8) and at most binom.isf(1e-8) respectively with probability >= 1 - 2e-8, and the Clopper-Pearson
    bounds at the report's own per-bound level then give ε_lb >= g, which the test checks exceeds the claim.
    (The broken plan reaches the command through a patched dpcli.audit.release_audit.audit: no spec can make a correct
    dpcli
    produce one.)"""
    import dataclasses
    import math

    import pytest
    from scipy import stats

    import dpcli.audit.release_audit
    from dpcli.cli.app import main
    from dpcli.plan.model import make_plan
    from dpcli.specs.load import load_spec

    spec = tmp_path / "spec.yaml"
    spec.write_text(
        SPEC.replace("epsilon: 2", "epsilon: 1").split("statistics:")[0] + "statistics:\n  - {name: n, kind: count}\n"
    )
    real = dpcli.audit.release_audit.audit

    def broken(path, **kwargs):
        plan = make_plan(load_spec(path))
        sp = plan.statistics[0]
        comps = tuple(dataclasses.replace(c, scale=c.scale / 2) for c in sp.components)
        return real(dataclasses.replace(plan, statistics=(dataclasses.replace(sp, components=comps),)), **kwargs)

    monkeypatch.setattr(dpcli.audit.release_audit, "audit", broken)
    with pytest.raises(SystemExit) as exc:
        main(["audit", str(spec), "--json"])
    assert exc.value.code == 6
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["ok"] is False
    assert report["statistics"][0]["within_claim"] is False
    assert "does not deliver its claim" in captured.err
    assert "'n'" in captured.err

    st = report["statistics"][0]
    n, q = st["trials"], math.exp(-2)
    k_fav, k_oth = int(stats.binom.ppf(1e-8, n, 1 / (1 + q))), int(stats.binom.isf(1e-8, n, q / (1 + q)))
    lo = dpcli.audit.release_audit.clopper_pearson(k_fav, n, st["alpha_per_bound"])[0]
    hi = dpcli.audit.release_audit.clopper_pearson(k_oth, n, st["alpha_per_bound"])[1]
    assert math.log(lo / hi) > float(st["claimed_epsilon"]) == 1
    assert st["epsilon_lower_bound"] > 1
    assert Fraction(st["pair_loss"]) == 2
    assert st["pair_within_claim"] is False


SERIES = """\
version: 1
dataset: admissions
input: does-not-exist/admissions.csv
privacy: {unit: row, neighbours: replace, epsilon: 1}
columns:
  ward: {type: category, categories: [a, b]}
statistics:
  - {name: n, kind: count}
series: {periods: 365, period: {column: admitted, start: 2027-01-01, every: 1 day}}
"""


def test_audit_of_a_series_covers_every_period_against_its_one_charge(tmp_path):
    """A series (issue 26): candidate rows carry the period field; the count's pair is a row moving between two
    periods (the by:[period] derivation's L1 2), and the series is audited against its one charge."""
    spec = tmp_path / "series.yaml"
    spec.write_text(SERIES)
    result = dpcli("audit", str(spec), "--trials", "1000", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["data_read"] is False
    assert report["spent"] is False
    assert [s["statistic"] for s in report["statistics"]] == ["n", "(series)"]
    n, whole = report["statistics"]
    assert Fraction(n["claimed_epsilon"]) == 1 == Fraction(whole["claimed_epsilon"]) == Fraction(n["pair_loss"])
    assert n["row_d"]["admitted"] != n["row_d_prime"]["admitted"]  # it moved between periods
    assert sorted(c["cell"].split()[0] for c in n["differing_cells"]) == ["period", "period"]
    assert any("series: T = 365 periods" in note for note in report["notes"])


def test_the_audit_of_a_person_unit_series_audits_one_period_against_one_periods_cap(tmp_path):
    """A person-unit series runs on a renewing cap, each period a person-level release of its own rows charged to its
    own period's cap: `dpcli audit` audits period 1's release against the per-period budget, neighbours differing by
    one person whose rows lie in that period and in others, and says that a person present in k periods has k·ε."""
    spec = tmp_path / "series.yaml"
    # an index field keeps it quick (a dated field's candidates: tests/audit/test_series_audit.py, slow)
    spec.write_text(SERIES.replace("unit: row", "unit: {id: pid, max_rows: 2, missing_id: drop}")
                    .replace("neighbours: replace", "neighbours: add_remove")
                    .replace("periods: 365, period: {column: admitted, start: 2027-01-01, every: 1 day}",
                             "periods: 3, period: {column: day}"))
    result = dpcli("audit", str(spec), "--trials", "1000", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["spent"] is False
    assert [s["statistic"] for s in report["statistics"]] == ["n", "(period 1)"]
    n, period = report["statistics"]
    assert Fraction(n["claimed_epsilon"]) == 1 == Fraction(period["claimed_epsilon"]) == Fraction(n["pair_loss"])
    assert {r["pid"] for r in n["rows_d_prime"]} == {"dpcli-audit-person"}
    assert [c["cell"] for c in n["differing_cells"]] == ["period 1"]
    note = next(x for x in report["notes"] if x.startswith("series under a person unit"))
    assert "k periods at k times the per-period budget (k·ε: the renewing cap)" in note
