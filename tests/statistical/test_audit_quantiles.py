"""The empirical privacy audit (dpcli.audit.release_audit) of quantiles (issue 13): correct plans are within their
claim, halved scales are flagged, and an interval's count is audited while its draws are said not to be. Error
budget as in tests/statistical/test_audit.py (no seeds, no retries): three "within claim" audits (3e-8) and one
"flagged" assertion on the noise, the halved median's, whose guaranteed bound g (1.56 against a claim of 1) is
computed from permute-and-flip's exact law over the searched pair's utilities (quantile_best_event), so the audit
misses it with probability <= 2Q = 2e-8."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest

from dpcli.audit.release_audit import StatisticAudit
from dpcli.plan.model import Plan, make_plan
from dpcli.specs.load import parse_spec
from tests.pf_law import permute_and_flip_law
from tests.statistical.test_audit import assert_within, by_name, guaranteed, only, run, scaled_laplace, spec_text

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
    median = stats_["median_hours"]
    assert quantile_best_event(broken, median) > median.claimed_epsilon  # so a miss below has probability <= 2Q
    assert median.epsilon_lower_bound > median.claimed_epsilon
    assert not report.ok


def quantile_best_event(plan: Plan, s: StatisticAudit) -> float:
    """The largest guaranteed ε_lb (test_audit.guaranteed) over the events of a one-cell quantile level's target.

    Z is the drawn candidate's log-likelihood ratio, computed here from permute-and-flip's exact law
    (tests/pf_law.py) at the level's scale over the searched pair's utilities under D and D'. Each event is taken a
    little smaller under the favoured dataset and a little larger under the other (margin 1e-6, far above the
    audit's Z_TOLERANCE), so the audit's own event lies between the two."""
    (cell,) = s.noised
    assert cell.utilities is not None
    rate = 1 / plan.statistics[cell.index].component(cell.component).scale
    p_d, p_dp = (np.array([float(x) for x in permute_and_flip_law(list(u), rate)]) for u in cell.utilities)
    llr = np.log(p_dp) - np.log(p_d)
    assert np.allclose(llr, cell.llr, rtol=0, atol=1e-9)  # the audit's ratios are the exact law's
    best = -math.inf
    for e in s.events:
        margin = 1e-6 * max(1.0, abs(e.threshold))
        if e.direction == "up":  # favours D'
            favoured, other = p_dp[llr >= e.threshold + margin].sum(), p_d[llr >= e.threshold - margin].sum()
        else:
            favoured, other = p_d[llr <= -e.threshold - margin].sum(), p_dp[llr <= -e.threshold + margin].sum()
        if favoured > 0:
            best = max(best, guaranteed(float(favoured), float(other), s))
    return best


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
