"""Planning that answers "how much ε?": the spec's confidence, plan --epsilon, targets, a mean's error given expected
rows, plan --ledger (dpcli.plan.what_if; docs/spec.md, "Planning: confidence, targets and what-if budgets")."""

from __future__ import annotations

import itertools
import json
from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.core.accounting import epsilon_delta_to_rho, format_exact
from dpcli.errors import SpecError, UsageError
from dpcli.plan.model import make_plan
from dpcli.plan.scales import laplace_halfwidth
from dpcli.plan.what_if import EPSILON_GRID, expected_error, find_epsilon, plan_at, targets_of
from dpcli.run.prepare import ledger_outlook
from dpcli.specs.load import parse_spec
from dpcli.specs.model import Target
from tests.helpers import run_in_process

ADULT = Path(__file__).resolve().parents[1] / "data" / "adult.csv"

SPEC = """\
version: 1
dataset: toy
{top}
privacy: {{unit: row, neighbours: add_remove, {privacy}}}
columns:
  age: {{type: int, bounds: [17, 91]}}
  sex: {{type: category, categories: [Female, Male]}}
statistics:
  - {{name: people, kind: count{people}}}
  - {{name: by_sex, kind: count, by: [sex], weight: 2}}
  - {{name: mean_age, kind: mean, column: age{mean}}}
  - {{name: age_sum, kind: sum, column: age, by: [sex]}}
"""


def spec_text(top: str = "", privacy: str = "epsilon: 1", people: str = "", mean: str = "") -> str:
    return SPEC.format(top=top, privacy=privacy, people=people, mean=mean)


def plan_of(**kw: str):
    return make_plan(parse_spec(spec_text(**kw)))


def error(text: str) -> str:
    with pytest.raises(SpecError) as exc:
        parse_spec(text)
    return str(exc.value)


# -- the spec's fields ----------------------------------------------------------------------------------------------


def test_confidence_defaults_to_95_and_is_read_exactly():
    assert plan_of().confidence == Fraction(95, 100)
    assert plan_of(top="confidence: 0.9").confidence == Fraction(9, 10)
    assert plan_of(top="confidence: 0.5").confidence == Fraction(1, 2)


@pytest.mark.parametrize("value", ["0.4", "1", "1.5"])
def test_confidence_out_of_range_is_refused(value):
    assert error(spec_text(top=f"confidence: {value}")) == (
        f"confidence: confidence must be in [0.5, 0.999999], got {value}"
    )


def test_target_and_expected_rows_are_loaded():
    plan = plan_of(top="expected_rows: 1000", people=", target: {error95: 20}", mean=", expected_rows: 300")
    people, _, mean, _ = (sp.statistic for sp in plan.statistics)
    assert people.target == Target(Fraction(20), Fraction(95, 100))
    assert mean.expected_rows == 300
    assert plan.spec.expected_rows == 1000


def test_target_needs_error95_and_is_refused_on_a_quantile():
    assert error(spec_text(people=", target: {}")) == "statistics[0].target.error95: required field is missing"
    text = spec_text().replace(
        "  - {name: age_sum", "  - {name: med, kind: median, column: age, target: {error95: 2}}\n  - {name: age_sum"
    )
    assert error(text) == "statistics[3].target: not allowed for a median"


# -- the confidence reaches the intervals ----------------------------------------------------------------------------


def test_the_tables_intervals_use_the_spec_confidence():
    """Exact no-noise path: a count's interval is value -/+ the half-width at the spec's confidence."""
    from dpcli.engine import aggregate
    from dpcli.mechanisms.noise import exact_noisy
    from dpcli.publish.table import build_table

    text = """\
version: 1
dataset: adult
confidence: 0.8
privacy: {unit: row, neighbours: add_remove, epsilon: 1}
columns:
  sex: {type: category, categories: [Female, Male]}
statistics:
  - {name: people, kind: count}
"""
    plan = make_plan(parse_spec(text))
    table = build_table(plan, exact_noisy(aggregate(plan, ADULT)))
    (row,) = [dict(zip(table.columns, r, strict=True)) for r in table.rows()]
    k = laplace_halfwidth(plan.statistics[0].component("count").scale, 0.8)
    assert k < laplace_halfwidth(plan.statistics[0].component("count").scale, 0.95)  # the level matters
    assert (row["value"], row["ci_low"], row["ci_high"]) == ("48842", str(48842 - k), str(48842 + k))


# -- other budgets ----------------------------------------------------------------------------------------------------


def test_plan_at_scales_every_share_by_one_factor():
    plan = plan_of(privacy="epsilon: 1")
    doubled = plan_at(plan, plan.epsilon * 2)
    assert doubled.epsilon == 2 * plan.epsilon
    assert [sp.epsilon for sp in doubled.statistics] == [2 * sp.epsilon for sp in plan.statistics]


def test_plan_at_a_zcdp_spec_takes_epsilon_at_its_delta():
    plan = plan_of(privacy="epsilon: 1, delta: 1e-6", mean=", mechanism: gaussian")
    assert plan.rho > 0
    at = plan_at(plan, Fraction(2))
    assert at.rho == epsilon_delta_to_rho(Fraction(2), Fraction(1, 10**6))
    assert [sp.rho / at.rho for sp in at.statistics] == [sp.rho / plan.rho for sp in plan.statistics]


def test_a_zcdp_spec_with_rho_only_cannot_compare_epsilons():
    plan = plan_of(privacy="rho: 0.5", mean=", mechanism: gaussian")
    with pytest.raises(UsageError, match=r"add privacy\.delta"):
        plan_at(plan, Fraction(1))


# -- a mean's error ---------------------------------------------------------------------------------------------------


def test_a_mean_error_needs_expected_rows_and_falls_with_rows_and_epsilon():
    assert expected_error(plan_of(), plan_of().statistics[2], Fraction(95, 100)) is None
    errors = {}
    for rows, eps in itertools.product((200, 2000), (1, 4)):
        plan = plan_of(top=f"expected_rows: {rows}", privacy=f"epsilon: {eps}")
        errors[rows, eps] = expected_error(plan, plan.statistics[2], Fraction(95, 100))
    assert errors[2000, 1] < errors[200, 1]
    assert errors[200, 4] < errors[200, 1]
    # too few rows for the count's noise: no bound at all
    plan = plan_of(top="expected_rows: 3", privacy="epsilon: 0.01")
    assert expected_error(plan, plan.statistics[2], Fraction(95, 100)) is None


def test_the_mean_bound_covers_every_worst_case_within_the_parts_halfwidths():
    """|(S + a)/(N + b) - S/N| over the corners |a| <= e_S, |b| <= e_N, |S| <= B N never exceeds the bound."""
    plan = plan_of(top="expected_rows: 400")
    sp = plan.statistics[2]
    bound = expected_error(plan, sp, Fraction(95, 100))
    s, c = sp.component("sum"), sp.component("count")
    e_s, e_n = s.halfwidth(0.975), c.halfwidth(0.975)
    lo, hi = plan.spec.columns["age"].grid_bounds
    big = max(abs(lo - s.offset), abs(hi - s.offset))
    n = 400
    worst = max(
        abs(Fraction(S + a, n + b) - Fraction(S, n))
        for S in (-big * n, 0, big * n) for a in (-e_s, e_s) for b in (-e_n, e_n)
    )
    assert bound is not None
    assert worst <= bound
    assert worst * 2 > bound  # and not loose by more than a factor of two


# -- targets ----------------------------------------------------------------------------------------------------------


def test_the_smallest_epsilon_meets_every_target_and_one_grid_step_less_does_not():
    plan = plan_of(top="expected_rows: 500", people=", target: {error95: 10}")
    targets = targets_of(plan, {"mean_age": Fraction(3)})
    answer = find_epsilon(plan, targets)
    assert answer.epsilon is not None
    assert answer.epsilon.denominator <= 1000

    def meets(p) -> bool:
        return all(expected_error(p, sp, targets[sp.statistic.name].confidence) <= targets[sp.statistic.name].error
                   for sp in p.statistics if sp.statistic.name in targets)

    assert meets(plan_at(plan, answer.epsilon))
    assert not meets(plan_at(plan, answer.epsilon - EPSILON_GRID))


def test_an_unreachable_target_says_so():
    """At ε = 100 the sum's share is 20 and its scale 91/20 grid steps: a ±1 at 95% is out of reach."""
    plan = plan_of()
    assert find_epsilon(plan, targets_of(plan, {"age_sum": Fraction(1)})).epsilon is None


def test_a_mean_target_without_expected_rows_is_refused():
    plan = plan_of(mean=", target: {error95: 1}")
    with pytest.raises(SpecError, match="needs expected_rows"):
        targets_of(plan, {})


# -- the ledger -------------------------------------------------------------------------------------------------------


def test_plan_ledger_reads_and_never_writes(tmp_path):
    ledger = tmp_path / "L.jsonl"
    assert run_in_process("budget", "set", "toy", "--epsilon", "3", "--ledger", ledger).returncode == 0
    before = ledger.read_bytes()
    outlook = ledger_outlook(plan_of(privacy="epsilon: 1"), ledger)
    assert (outlook.cap, outlook.spent, outlook.left, outlook.refused) == (3, 0, 2, None)
    short = ledger_outlook(plan_of(privacy="epsilon: 4"), ledger)
    assert short.refused == "budget refused for dataset 'toy': requested ε=4, remaining ε=3, short by 1"
    assert ledger.read_bytes() == before


# -- the command line -------------------------------------------------------------------------------------------------


def test_plan_epsilon_prints_errors_side_by_side(tmp_path):
    (tmp_path / "s.yaml").write_text(spec_text(top="confidence: 0.9\nexpected_rows: 500"))
    r = run_in_process("plan", tmp_path / "s.yaml", "--epsilon", "0.5,1,2")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "±error 90%" in out
    header = next(line for line in out.splitlines() if line.startswith("statistic ") and "ε=0.5" in line)
    assert header.split() == ["statistic", "ε=0.5", "ε=1", "ε=2"]
    doc = json.loads(run_in_process("plan", tmp_path / "s.yaml", "--epsilon", "0.5,1,2", "--json").stdout)
    assert doc["confidence"] == "0.9"
    assert doc["what_if"]["epsilons"] == ["0.5", "1", "2"]
    people = next(e for e in doc["what_if"]["errors"] if e["statistic"] == "people")
    plan = plan_of(top="confidence: 0.9")
    assert people["error"] == [str(laplace_halfwidth(plan_at(plan, Fraction(e)).statistics[0].components[0].scale,
                                                     0.9)) for e in ("0.5", "1", "2")]


@pytest.mark.parametrize(("args", "message"), [
    (("--epsilon", "0,1"), "dpcli: error: --epsilon: give 1 to 12 numbers in (0, 100], comma-separated"),
    (("--epsilon", "x"), "dpcli: error: --epsilon: 'x' is not a number"),
    (("--target", "people"), "dpcli: error: --target: 'people' is not NAME=ERROR"),
    (("--target", "nope=2"), "dpcli: error: --target: 'nope' is not a statistic of the spec"),
])
def test_plan_option_errors(tmp_path, args, message):
    (tmp_path / "s.yaml").write_text(spec_text())
    r = run_in_process("plan", tmp_path / "s.yaml", *args)
    assert r.returncode == 2
    assert r.stderr.decode().strip() == message


def test_plan_target_prints_the_smallest_epsilon(tmp_path):
    (tmp_path / "s.yaml").write_text(spec_text(people=", target: {error95: 10}"))
    doc = json.loads(run_in_process("plan", tmp_path / "s.yaml", "--json").stdout)
    plan = plan_of(people=", target: {error95: 10}")
    assert doc["target"]["epsilon"] == format_exact(find_epsilon(plan, targets_of(plan, {})).epsilon)
    text = run_in_process("plan", tmp_path / "s.yaml").stdout.decode()
    assert f"smallest total ε={doc['target']['epsilon']} (rounded up to a multiple of 0.001)" in text


def test_a_frequency_only_release_has_no_epsilon_to_compare():
    from dpcli.specs.load import load_spec

    plan = make_plan(load_spec(Path(__file__).resolve().parents[2] / "configs" / "frequency.yaml"))
    with pytest.raises(UsageError, match="spends nothing"):
        plan_at(plan, Fraction(1))


def test_the_sidecar_states_the_confidence_as_exact_text(make_work):
    spec = spec_text(top="confidence: 0.9").replace("dataset: toy", "dataset: toy\ninput: data.csv")
    work = make_work(spec, "age,sex\n30,Female\n41,Male\n", cap="1")
    r = run_in_process("release", work / "spec.yaml", "--ledger", work / "L.jsonl", "-o", work / "out.csv")
    assert r.returncode == 0, r.stderr.decode()
    assert json.loads((work / "out.csv.meta.json").read_text())["confidence"] == "0.9"
