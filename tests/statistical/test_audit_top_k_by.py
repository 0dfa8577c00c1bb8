"""`dpcli audit` of top_k and mode with by: (one ranking per cell of by:): within the claim for correct plans, under
add/remove and replace, unit row and a person unit whose rows span cells; and a top_k with by: whose temperature is
halved is flagged by the searched pair's exact loss (the cells that differ, summed).

Error budget (no seeds, no retries), as in test_audit.py: each audit runs at confidence 1 - 1e-8, so a correct target is
reported outside its claim with probability <= 1e-8; four "within claim" audits here: 4e-8. The flagged plan is
flagged by the pair's exact loss (float64 likelihoods, no noise): deterministic.
"""

from __future__ import annotations

import dataclasses

import pytest

from dpcli.audit.release_audit import audit
from dpcli.plan.model import Plan, make_plan
from dpcli.specs.load import parse_spec
from tests.statistical.test_audit import ALPHA, TRIALS

SPEC = """\
version: 1
dataset: audit_top_k_by
input: /nonexistent/never-read.csv
privacy: {{unit: {unit}, neighbours: {neighbours}, epsilon: {epsilon}}}
columns:
  job: {{type: category, categories: [a, b, c]}}
  grp: {{type: category, categories: [u, v]}}
statistics:
{statistics}"""

STATISTICS = (
    "  - {name: top, kind: top_k, column: job, k: 2, by: [grp]}\n  - {name: m, kind: mode, column: grp, by: [job]}\n"
)


def plan_of(neighbours: str, unit: str = "row", epsilon: str = "2") -> Plan:
    return make_plan(parse_spec(SPEC.format(unit=unit, neighbours=neighbours, epsilon=epsilon, statistics=STATISTICS)))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("neighbours", "unit"),
    [
        ("add_remove", "row"),
        ("replace", "row"),
        ("add_remove", "{id: pid, max_rows: 3, max_rows_per_group: 2, missing_id: drop}"),
        ("replace", "{id: pid, max_rows: 2, missing_id: drop}"),
    ],
)
def test_top_k_and_mode_with_by_are_within_their_claims(neighbours: str, unit: str) -> None:
    report = audit(plan_of(neighbours, unit), trials=TRIALS, confidence=1 - ALPHA)
    for s in report.statistics:
        assert s.mechanism == "exponential"
        assert s.pair_loss > 0, s.statistic  # the search moved every target
    assert report.ok, [(s.statistic, s.pair_loss, s.epsilon_lower_bound, s.claimed_epsilon) for s in report.violations]


@pytest.mark.slow
@pytest.mark.parametrize("neighbours", ["add_remove", "replace"])
def test_a_top_k_with_by_at_half_its_temperature_is_flagged(neighbours: str) -> None:
    plan = plan_of(neighbours, unit="{id: pid, max_rows: 2, missing_id: drop}", epsilon="1")
    sp = plan.statistics[0]
    comp = sp.component("choice")
    halved = dataclasses.replace(sp, components=(dataclasses.replace(comp, scale=comp.scale / 2),))
    report = audit(dataclasses.replace(plan, statistics=(halved, plan.statistics[1])), trials=TRIALS,
                   confidence=1 - ALPHA)
    s = next(x for x in report.statistics if x.statistic == "top")
    assert s.pair_loss > s.claimed_loss  # the searched pair's exact loss, over the cells of by: that differ
    assert not s.within_claim
