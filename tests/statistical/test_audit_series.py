"""`dpcli audit` of a series (issue 26), noise drawn: correct series are within their claims, and a broken series plan
(a replace sensitivity of 1 instead of 2; each block of the tree drawn at the whole ε instead of ε/h) is flagged by
the search (its pair's exact loss is twice the claim) and by the noise (ε lower bound above the claim).

Error budget (no seeds, no retries), as in tests/statistical/test_audit.py, whose helpers this file uses: each audit
runs at confidence 1 - ALPHA (ALPHA = 1e-8), so each "within claim" assertion fails by chance with probability at
most 1e-8 (four here: 4e-8); each "flagged" assertion takes the event Z >= L of the audit's own event set, computes
the ε lower bound it guarantees with probability >= 1 - 2Q (Q = 1e-8) from its exact probabilities, checks that this
exceeds the claim, then that the audit's does (three here, "n" once and "n" and "(series)" once: 6e-8). In all at
most 1e-7.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest

from dpcli.audit.release_audit import audit
from dpcli.audit.series import layout_of
from dpcli.plan.series import SeriesPlan, make_series_plan
from dpcli.specs.load import parse_spec
from tests.spec_builder import spec_text
from tests.statistical.test_audit import CONFIDENCE, TRIALS, by_name, laplace_top_event

pytestmark = pytest.mark.slow

COLUMNS = {"ward": "{type: category, categories: [a, b]}", "stay": "{type: int, bounds: [0, 10]}"}
DATED = "series: {periods: %d, period: {column: admitted, start: 2027-01-01, every: 1 day}%s}\n"


def series_plan(privacy: str, statistics: list[str], series: str) -> SeriesPlan:
    return make_series_plan(parse_spec(spec_text(COLUMNS, statistics, privacy=privacy, extra=series)))


CORRECT = {
    "per_period, replace, Laplace": series_plan(
        "unit: row, neighbours: replace, epsilon: 1",
        ["{name: n, kind: count}", "{name: m, kind: mean, column: stay, by: [ward]}"], DATED % (365, "")),
    "running totals, add_remove, Laplace": series_plan(
        "unit: row, neighbours: add_remove, epsilon: 1",
        ["{name: w, kind: histogram, column: ward}"], DATED % (5, ", design: running_totals")),
    "both, replace, zCDP: Gaussian and Laplace": series_plan(
        "unit: row, neighbours: replace, rho: 0.5, delta: 0.000001",
        ["{name: s, kind: sum, column: stay, mechanism: gaussian}", "{name: n, kind: count}"],
        DATED % (4, ", design: both")),
    "running totals by factorisation, add_remove, Gaussian": series_plan(
        "unit: row, neighbours: add_remove, rho: 0.5, delta: 0.000001",
        ["{name: n, kind: count, by: [ward], mechanism: gaussian}"],
        DATED % (8, ", design: running_totals, method: factorization")),
}


@pytest.mark.parametrize("name", list(CORRECT))
def test_a_correct_series_is_within_its_claims(name: str) -> None:
    report = audit(CORRECT[name], trials=TRIALS, confidence=CONFIDENCE)
    for s in report.statistics:
        assert s.within_claim, (s.statistic, s.epsilon_lower_bound, s.claimed_epsilon, s.pair_loss, s.neighbour)
    assert report.statistics[-1].statistic == "(series)"


def halved(plan):  # type: ignore[no-untyped-def]
    """Every Laplace scale of the plan halved: a sensitivity taken at half its value (or a share twice too big)."""
    return dataclasses.replace(plan, statistics=tuple(
        dataclasses.replace(sp, components=tuple(dataclasses.replace(c, scale=c.scale / 2) for c in sp.components))
        for sp in plan.statistics))


def assert_twice_flagged(broken: SeriesPlan, labels: tuple[str, ...]) -> None:
    report = audit(broken, trials=TRIALS, confidence=CONFIDENCE)
    plan = layout_of(broken)[0].plan  # the audit's own layout of the series (deterministic)
    found = by_name(report)
    for label in labels:
        s = found[label]
        assert s.pair_loss == 2 * s.claimed_loss, label
        assert laplace_top_event(plan, s) > s.claimed_epsilon, label
        assert s.epsilon_lower_bound > s.claimed_epsilon, (label, s.epsilon_lower_bound, s.claimed_epsilon)
    assert not report.ok


def test_a_replace_sensitivity_of_1_instead_of_2_is_flagged() -> None:
    """A per-period count under replace planned with L1 1 (no by:[period]): a row moving between two periods spends
    2ε."""
    splan = series_plan("unit: row, neighbours: replace, epsilon: 1", ["{name: n, kind: count}"], DATED % (365, ""))
    assert splan.per_period is not None
    assert_twice_flagged(dataclasses.replace(splan, per_period=halved(splan.per_period)), ("n",))


def test_a_per_block_share_of_the_whole_epsilon_is_flagged() -> None:
    """Running totals over T = 3 (h = 2) with each block drawn at ε instead of ε/2: a row changes one block per
    level, 2ε in all."""
    splan = series_plan("unit: row, neighbours: add_remove, epsilon: 1", ["{name: n, kind: count}"],
                        DATED % (3, ", design: running_totals"))
    assert splan.blocks is not None
    assert splan.levels == 2
    assert_twice_flagged(dataclasses.replace(splan, blocks=halved(splan.blocks)), ("n", "(series)"))


def test_the_plans_share_is_what_the_audit_holds() -> None:
    """The broken share above is the one a plan without the 1/h would have: make_plan at the whole budget."""
    splan = CORRECT["running totals, add_remove, Laplace"]
    assert splan.blocks is not None
    assert splan.blocks.statistics[0].components[0].scale == Fraction(splan.levels)
