"""The empirical privacy audit (dpcli.audit.release_audit) of quantiles (issue 13): correct plans are within their
claim, halved scales are flagged, and an interval's count is audited while its draws are said not to be. Error
budget as in tests/statistical/test_audit.py (no seeds, no retries)."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest

from dpcli.plan.model import Plan, make_plan
from dpcli.specs.load import parse_spec
from tests.statistical.test_audit import assert_within, by_name, only, run, scaled_laplace, spec_text

# ----------------------------------------------------------------------------------------------------------------
# quantiles (issue 13): the exponential mechanism, audited on the exact log-likelihood ratio of the drawn candidate

QUANTILE_STATISTICS = """\
statistics:
  - {name: median_hours,  kind: median, column: hours,                        epsilon: 1}
  - {name: age_levels,    kind: quantile, column: age, q: [0.25, 0.9], by: [sex], step: 5, epsilon: 1}
  - {name: n,             kind: count,                                        epsilon: 1}
"""


def quantile_plan(neighbours: str) -> Plan:
    return make_plan(parse_spec(spec_text(neighbours, "epsilon: 3", QUANTILE_STATISTICS)))


@pytest.mark.slow
@pytest.mark.parametrize("neighbours", ["add_remove", "replace"])
def test_quantiles_within_claim(neighbours):
    plan = quantile_plan(neighbours)
    report = run(plan)
    assert_within(report)
    stats_ = by_name(report)
    for label in ("median_hours", "age_levels", "age_levels/q=0.25", "age_levels/q=0.9"):
        s = stats_[label]
        assert s.mechanism == "exponential", label
        assert s.cells >= 1, label
        assert s.events, label
        # the search reaches each level's sensitivity: the pair loss is the claim (2 Δ / t = ε per level)
        assert s.pair_loss == s.claimed_loss, (label, s.pair_loss, s.claimed_loss)
    if neighbours == "replace":
        assert stats_["age_levels/q=0.9"].cells == 2  # a row moves between the cells of by: sex
    assert stats_["(release)"].claimed_epsilon == 3


@pytest.mark.slow  # statistical, ~5 s: make test-slow (issue 28: the default suite's budget)
def test_halved_quantile_scales_are_flagged():
    names = ("median_hours", "age_levels")
    broken = scaled_laplace(only(quantile_plan("add_remove"), names), names, Fraction(1, 2))
    report = run(broken)
    stats_ = by_name(report)
    for label in ("median_hours", "age_levels", "age_levels/q=0.25", "age_levels/q=0.9"):
        s = stats_[label]
        # twice the claimed loss, found by the search without noise
        assert s.pair_loss == 2 * s.claimed_loss, (label, s.pair_loss, s.claimed_loss)
        assert not s.within_claim, label
    # and shown by the noise: a candidate far from the quantile is drawn more often under one dataset than e^ε allows
    assert stats_["median_hours"].epsilon_lower_bound > stats_["median_hours"].claimed_epsilon
    assert not report.ok


# a quantile's value-unit interval (interval: {share: S}): its count is audited like a count; its draws (at levels
# computed from the noisy count) are not, and the report says so, leaving their epsilon out of every claim

INTERVAL_STATISTICS = """\
statistics:
  - {name: median_hours, kind: median, column: hours, by: [sex], interval: {share: 0.5}, epsilon: 1}
"""


@pytest.mark.slow  # statistical, ~3 s: make test-slow (issue 28: the default suite's budget)
def test_quantile_interval_count_is_audited_and_its_draws_are_said_not_to_be():
    plan = make_plan(parse_spec(spec_text("add_remove", "epsilon: 1", INTERVAL_STATISTICS)))
    report = run(plan)
    assert_within(report)
    stats_ = by_name(report)
    count = stats_["median_hours/interval n"]
    assert count.mechanism == "discrete_laplace"
    assert count.pair_loss == count.claimed_loss == Fraction(1, 6)
    assert "median_hours/q=0.5 low" not in stats_
    assert "median_hours/q=0.5 high" not in stats_
    assert stats_["median_hours"].claimed_epsilon == Fraction(2, 3)  # the level's 1/2 and the count's 1/6
    assert any(n.startswith("NOT AUDITED: the interval draws of median_hours") for n in report.notes)
    # half the count's noise: flagged
    sp = plan.statistics[0]
    comps = tuple(dataclasses.replace(c, scale=c.scale / 2) if c.role == "interval n" else c for c in sp.components)
    broken = run(dataclasses.replace(plan, statistics=(dataclasses.replace(sp, components=comps),)))
    s = by_name(broken)["median_hours/interval n"]
    assert s.pair_loss == 2 * s.claimed_loss
    assert not s.within_claim
    assert not broken.ok
