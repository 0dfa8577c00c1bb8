"""`dpcli audit` of top_k and mode (report-noisy-max): within the claim for correct plans, and a mode whose
temperature is halved (twice its claimed ε per draw) is flagged, by the searched pair's exact loss and by the noise.

Error budget (no seeds, no retries), as in test_audit.py: each audit runs at confidence 1 - 1e-8, so a correct target is
reported outside its claim with probability <= 1e-8; three "within claim" audits here: 3e-8. The flagged mode: its event
Z >= L (L the pair's largest log-likelihood ratio, for k = 1 the event "the added row's key is drawn") has exact
probabilities under D' and D from permute-and-flip's law (tests/pf_law.py); the test
asserts the guaranteed bound g (binomial quantiles at Q = 1e-8, test_audit.guaranteed) exceeds the claim, and the audit
misses with probability <= 2Q: 3e-8 + 2e-8 here. With the other audit files' (test_audit.py's docstring sums them)
the statistical audit tests stay below 8.7e-7 < 1e-6.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from dpcli.audit.neighbours import find_neighbours
from dpcli.audit.release_audit import audit
from dpcli.plan.model import Plan, make_plan
from dpcli.specs.load import parse_spec
from tests.pf_law import permute_and_flip_law
from tests.statistical.test_audit import ALPHA, TRIALS, guaranteed

SPEC = """\
version: 1
dataset: audit_top_k
input: /nonexistent/never-read.csv
privacy: {{unit: {unit}, neighbours: {neighbours}, epsilon: {epsilon}}}
columns:
  job: {{type: category, categories: [a, b, c, d]}}
  x:   {{type: int, bounds: [0, 10]}}
statistics:
{statistics}"""


def plan_of(statistics: str, neighbours: str = "add_remove", epsilon: str = "2", unit: str = "row") -> Plan:
    return make_plan(parse_spec(SPEC.format(unit=unit, neighbours=neighbours, epsilon=epsilon, statistics=statistics)))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("neighbours", "unit"),
    [
        ("add_remove", "row"),
        ("replace", "row"),
        ("add_remove", "{id: pid, max_rows: 3, max_rows_per_group: 2, missing_id: drop}"),
    ],
)
def test_top_k_and_mode_are_within_their_claims(neighbours: str, unit: str) -> None:
    clamp = ", clamp: row" if unit != "row" else ""
    plan = plan_of(
        "  - {name: top, kind: top_k, column: job, k: 2}\n  - {name: m, kind: mode, column: job}\n"
        f"  - {{name: s, kind: sum, column: x{clamp}}}\n",
        neighbours, unit=unit,
    )
    report = audit(plan, trials=TRIALS, confidence=1 - ALPHA)
    labels = {s.statistic: s for s in report.statistics}
    assert labels["top"].mechanism == labels["m"].mechanism == "exponential"
    for s in report.statistics:
        assert s.pair_loss > 0, s.statistic  # the search moved every target
    assert report.ok, [(s.statistic, s.pair_loss, s.epsilon_lower_bound, s.claimed_epsilon) for s in report.violations]


@pytest.mark.slow
def test_a_mode_with_half_its_temperature_is_flagged(tmp_path: Path) -> None:
    plan = plan_of("  - {name: m, kind: mode, column: job}\n", epsilon="0.5")  # events of moderate probability
    sp = plan.statistics[0]
    comp = sp.component("choice")
    broken = dataclasses.replace(
        plan, statistics=(dataclasses.replace(sp, components=(dataclasses.replace(comp, scale=comp.scale / 2),)),)
    )
    report = audit(broken, trials=TRIALS, confidence=1 - ALPHA)
    s = next(x for x in report.statistics if x.statistic == "m")
    assert s.pair_loss > s.claimed_loss  # the searched pair, exactly (no noise)
    # the same (deterministic) search's pair, with its whole count vectors; the audit's event at |Z| = L is a set of
    # keys drawn (k = 1): its probabilities by the closed form
    (nb,) = [n for n in find_neighbours(broken, tmp_path)[0] if n.target.label == "m"]
    ((_, d, d_prime),) = nb.choices
    t = comp.scale / 2

    def law(counts: dict) -> list[float]:
        return [float(p) for p in permute_and_flip_law([counts[i] for i in range(len(counts))], 1 / t)]

    p, q = law(d), law(d_prime)
    ratios = [math.log(b / a) for a, b in zip(p, q, strict=True)]
    # the pair's loss is the largest |Z|: the event Z >= L (favours D') or Z <= -L (favours D) on the keys there
    up = max(ratios) >= -min(ratios)
    loss = max(ratios) if up else -min(ratios)
    assert math.isclose(loss, float(s.pair_loss), rel_tol=1e-9)
    event = [i for i, r in enumerate(ratios) if math.isclose(r, loss if up else -loss, rel_tol=1e-9)]
    p_event, q_event = sum(p[i] for i in event), sum(q[i] for i in event)
    favoured, other = (q_event, p_event) if up else (p_event, q_event)
    assert guaranteed(favoured, other, s) > float(s.claimed_epsilon)
    assert s.epsilon_lower_bound > s.claimed_epsilon
    assert not s.within_claim
    assert not report.ok
