"""The empirical privacy audit (dpcli.audit.release_audit): its search for worst-case neighbours, its verdicts on
correct plans,
and proof that it flags broken ones.

Error budget of this file (no seeds, no retries: each audit draws once from the real CSPRNG and decides):

* False failure of a correct target. Every audit here runs at ``confidence = 1 - ALPHA`` with ALPHA = 1e-8:
  dpcli.audit.release_audit splits ALPHA evenly over all the one-sided Clopper-Pearson bounds of the report (a union
  bound), so
  with probability >= 1 - ALPHA every bound holds, and then every (ε, δ)-DP target has ε_lb <= ε. The pair check
  (the searched pair's loss against the claim) is exact arithmetic and never fails by chance. This file asserts
  "within claim" on nine audits (9e-8); with test_audit_persons.py (six) and test_audit_quantiles.py (three),
  eighteen: 1.8e-7.
* Missed detection of a broken target. For each broken target we take events of the audit's own event set whose
  exact probabilities p_fav = P[E | favoured dataset] and p_oth = P[E | other dataset] we compute independently
  (closed forms for Laplace, exact sums over the discrete Gaussian's support). With K_fav ~ Bin(N, p_fav) and
  K_oth ~ Bin(N, p_oth) the audit's counts, let
      k_fav = binom.ppf(Q, N, p_fav)   (P[K_fav < k_fav] < Q)   and
      k_oth = binom.isf(Q, N, p_oth)   (P[K_oth > k_oth] <= Q).
  Clopper-Pearson bounds are increasing in the count, so with probability >= 1 - 2Q the audit's ε for E is at least
      g = log((CP_lo(k_fav) - δ) / CP_hi(k_oth))
  computed at the report's own per-bound level, and ε_lb (a maximum over events) is at least g. Each test picks the
  event with the largest g (a deterministic computation, done before looking at the audit's counts), asserts
  g > claimed ε, then that the audit's ε_lb exceeds the claim: a miss has probability <= 2Q. With Q = 1e-8: 19 such
  assertions here (8 of them on variance and std), 5 in test_audit_persons.py and 1 in test_audit_quantiles.py
  (a "not within claim" without an ε_lb assertion follows from the exact pair check and is not counted), 25 in all:
  <= 5e-7.
* In all, this file fails by chance with probability below 9e-8 + 3.8e-7 < 5e-7, and the three files together
  below 1.8e-7 + 5e-7 = 6.8e-7 < 1e-6. (test_audit_top_k.py, test_audit_top_k_by.py and test_audit_series.py add
  their own, stated in each: 3e-8 + 2e-8, 4e-8 and 4e-8 + 6e-8; all the audit files together, below 8.7e-7.)

Worked numbers for the hardest case (the pre-fix L2 sensitivity of a centred mean by sex under replace, its sum
part): x in [0, 10], centred span [-5, 5], the part's share ρ = 1 at δ = 0.01 claims ε = 4.34. The old formula gave
σ² = 2·5² / 2 = 25 where the same-cell pair L -> U needs (U - L)² / 2 = 50: the part is really 2-zCDP. On the
event Z >= μ²/2 + 1.5 μ of the search's same-cell pair (μ = 10/5 = 2), i.e. noise >= 8 under D' against noise >= 18
under D (P = 0.066 against 2.3e-4), N = 1 000 000 trials guarantee g = 4.78 > 4.34.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpcli.audit.bounds import clopper_pearson
from dpcli.audit.events import Z_TOLERANCE
from dpcli.audit.neighbours import Neighbours, find_neighbours
from dpcli.audit.release_audit import AuditReport, StatisticAudit, audit
from dpcli.plan.model import Plan, make_plan
from dpcli.plan.scales import conservative_variance
from dpcli.specs.load import parse_spec

ALPHA = 1e-8
CONFIDENCE = 1 - ALPHA
Q = 1e-8
TRIALS = 200_000

COLUMNS = """\
columns:
  age:      {type: int, bounds: [0, 100]}
  income:   {type: float, bounds: [0, 1000], precision: 0.01}
  sex:      {type: category, categories: [F, M]}
  employed: {type: bool}
  hours:    {type: int, bounds: [0, 10]}
"""

PURE_STATISTICS = """\
statistics:
  - {name: n,                  kind: count,                                     epsilon: 1}
  - {name: by_sex,             kind: count, by: [sex],                          epsilon: 1}
  - {name: ages,               kind: histogram, column: age, bins: [0, 18, 65, 101], epsilon: 1}
  - {name: employment,         kind: histogram, column: employed,               epsilon: 1}
  - {name: total_income,       kind: sum, column: income,                       epsilon: 1}
  - {name: income_by_sex,      kind: sum, column: income, by: [sex],            epsilon: 1}
  - {name: mean_hours,         kind: mean, column: hours,                       epsilon: 1}
  - {name: mean_income_by_sex, kind: mean, column: income, by: [sex],           epsilon: 1}
"""

GAUSSIAN_STATISTICS = """\
statistics:
  - {name: n,          kind: count, mechanism: gaussian,                                   rho: 0.5}
  - {name: ages,       kind: histogram, column: age, bins: [0, 18, 65, 101], mechanism: gaussian, rho: 0.5}
  - {name: total,      kind: sum, column: income, mechanism: gaussian,                     rho: 0.5}
  - {name: mean_hours, kind: mean, column: hours, mechanism: gaussian,                     rho: 0.5}
  - {name: n_laplace,  kind: count,                                                        rho: 0.5}
"""


def spec_text(neighbours: str, privacy: str, statistics: str, columns: str = COLUMNS) -> str:
    # the input points nowhere: the audit must never read it
    return (
        "version: 1\ndataset: audit_test\ninput: /nonexistent/never-read.csv\n"
        f"privacy: {{unit: row, neighbours: {neighbours}, {privacy}}}\n" + columns + statistics
    )


def pure(neighbours: str) -> Plan:
    return make_plan(parse_spec(spec_text(neighbours, "epsilon: 8", PURE_STATISTICS)))


def gaussian(neighbours: str) -> Plan:
    return make_plan(parse_spec(spec_text(neighbours, "rho: 2.5, delta: 0.001", GAUSSIAN_STATISTICS)))


def mean_by_sex(bounds: str, rho: str, delta: str) -> Plan:
    """A centred Gaussian mean with by: under replace, the statistic whose L2 sensitivity commit ac1ee73 fixed."""
    columns = f"columns:\n  x: {{type: int, bounds: {bounds}}}\n  sex: {{type: category, categories: [F, M]}}\n"
    statistics = "statistics:\n  - {name: m, kind: mean, column: x, by: [sex], mechanism: gaussian}\n"
    return make_plan(parse_spec(spec_text("replace", f"rho: {rho}, delta: {delta}", statistics, columns)))


def run(plan: Plan, trials: int = TRIALS) -> AuditReport:
    return audit(plan, trials=trials, confidence=CONFIDENCE)


def search(plan: Plan) -> dict[str, Neighbours]:
    with tempfile.TemporaryDirectory() as folder:
        found, _ = find_neighbours(plan, Path(folder))
    return {nb.target.label: nb for nb in found}


def by_name(report: AuditReport) -> dict[str, StatisticAudit]:
    return {s.statistic: s for s in report.statistics}


def assert_within(report: AuditReport) -> None:
    for s in report.statistics:
        assert s.within_claim, (s.statistic, s.epsilon_lower_bound, s.claimed_epsilon, s.pair_loss, s.worst_event)
    assert report.ok


def cell(row, plan: Plan, column: str) -> str:
    return row[list(plan.spec.columns).index(column)]


# ----------------------------------------------------------------------------------------------------------------
# the search


@pytest.mark.parametrize("bounds", ["[17, 90]", "[0, 10]"])
def test_search_finds_the_same_cell_pair_for_a_mean_by_under_replace(bounds):
    plan = mean_by_sex(bounds, "0.5", "0.001")
    comp = plan.statistics[0].component("sum")
    lo, hi = plan.spec.columns["x"].grid_bounds
    found = search(plan)

    # the sum part's worst pair: one row whose value goes from one bound to the other inside its cell, the pair the
    # old audit never built (it only moved rows between cells)
    nb = found["m/sum"]
    assert nb.row_d is not None
    assert cell(nb.row_d, plan, "sex") == cell(nb.row_d_prime, plan, "sex") in ("F", "M")
    assert {cell(nb.row_d, plan, "x"), cell(nb.row_d_prime, plan, "x")} == {str(lo), str(hi)}
    assert [(c.component, abs(c.exact_d_prime - c.exact_d)) for c in nb.noised] == [("sum", hi - lo)]
    # the fixed plan covers it exactly: (U - L)^2 / (2 sigma^2) is the part's whole share
    assert nb.pair_loss == Fraction((hi - lo) ** 2) / (2 * comp.variance) == comp.rho == nb.target.claimed_loss

    # the statistic as a whole is worst for a row moving between cells (its count part moves too)
    whole = found["m"]
    assert cell(whole.row_d, plan, "sex") != cell(whole.row_d_prime, plan, "sex")
    assert {c.component for c in whole.noised} == {"sum", "count"}
    assert whole.pair_loss <= whole.target.claimed_loss


@pytest.mark.slow
def test_search_reaches_every_sensitivity_the_plan_states():
    """The search is not told the plan's formulas; it must still find a pair as bad as each one the plan states,
    where one exists. Else a weak search would make every within-claim verdict vacuous."""
    # where the plan is knowingly conservative, no pair reaches its figure: a count without by: under replace (n
    # is fixed; the plan still noises it as if 1), and a mean without by: under replace (no row moves its count
    # and its sum at their worst together: missing -> value moves the sum by only half the width)
    slack = {"replace": {"n", "n_laplace", "mean_hours"}, "add_remove": set()}
    for neighbours in ("add_remove", "replace"):
        for plan in (pure(neighbours), gaussian(neighbours)):
            found = search(plan)
            release = found.pop("(release)")
            for label, nb in found.items():
                assert nb.pair_loss <= nb.target.claimed_loss, (neighbours, label)
                if label not in slack[neighbours]:
                    assert nb.pair_loss == nb.target.claimed_loss, (neighbours, label, nb.pair_loss)
            assert release.pair_loss <= release.target.claimed_loss
            statistics = [nb for nb in found.values() if nb.target.scope == "statistic"]
            if plan.spec.privacy.accounting == "pure":
                worst = [nb.pair_loss for nb in statistics]
            else:  # the release's ρ counts a Laplace statistic's ε as ε²/2
                worst = [nb.pair_loss if nb.target.loss_unit == "ρ" else nb.pair_loss**2 / 2 for nb in statistics]
            if neighbours == "add_remove":
                # one added row can hit every statistic at its worst at once, and the release's search finds it
                assert release.pair_loss == sum(worst) == release.target.claimed_loss
            else:
                assert release.pair_loss >= max(worst)


# ----------------------------------------------------------------------------------------------------------------
# correct mechanisms stay within their claims


@pytest.mark.slow
def test_pure_add_remove_every_kind_within_claim():
    plan = pure("add_remove")
    report = run(plan)
    assert_within(report)
    stats_ = by_name(report)
    assert {s.kind for s in report.statistics if s.scope == "statistic"} == {"count", "histogram", "sum", "mean"}
    for s in report.statistics:
        assert s.delta == 0
        assert s.events
        assert s.cells >= 1
    release = stats_["(release)"]
    assert release.scope == "release"
    assert release.claimed_epsilon == plan.epsilon == 8
    # one row is added, and it lands in one cell of every statistic (both parts of each mean)
    assert release.cells == sum(len(sp.components) for sp in plan.statistics)


@pytest.mark.slow
def test_pure_replace_every_kind_within_claim():
    report = run(pure("replace"))
    assert_within(report)
    stats_ = by_name(report)
    # replace moves a row between cells: two cells differ for a count by, a histogram and a sum by
    for name in ("by_sex", "ages", "employment", "income_by_sex"):
        assert stats_[name].cells == 2, name
    # replacing a row never changes the number of rows: nothing to test, and said so
    assert stats_["n"].cells == 0
    assert stats_["n"].epsilon_lower_bound == 0
    assert "nothing to test" in stats_["n"].neighbour


@pytest.mark.slow
@pytest.mark.parametrize("neighbours", ["add_remove", "replace"])
def test_zcdp_gaussian_within_claim(neighbours):
    plan = gaussian(neighbours)
    report = run(plan)
    assert_within(report)
    stats_ = by_name(report)
    for name in ("ages", "total", "mean_hours"):
        s = stats_[name]
        assert s.mechanism == "discrete_gaussian"
        assert s.delta == Fraction(1, 1000)
        assert 3.5 < float(s.claimed_epsilon) < 3.6  # zcdp_to_epsilon(1/2, 1e-3)
    assert stats_["n_laplace"].mechanism == "discrete_laplace"
    assert stats_["n_laplace"].delta == 0
    release = stats_["(release)"]
    assert release.mechanism == "mixed"
    assert release.delta == Fraction(1, 1000)
    assert release.claimed_epsilon == plan.epsilon_at_delta
    assert release.claimed_loss == plan.rho


def test_rho_without_delta_is_audited_at_an_assumed_delta():
    text = spec_text("add_remove", "rho: 0.5", "statistics:\n  - {name: n, kind: count, mechanism: gaussian}\n")
    report = audit(parse_spec(text), trials=2_000, confidence=CONFIDENCE)
    assert report.statistics[0].delta == Fraction(1, 10**6)
    assert any("without delta" in n for n in report.notes)
    assert report.ok


# ----------------------------------------------------------------------------------------------------------------
# broken mechanisms are caught


def guaranteed(p_fav: float, p_oth: float, s: StatisticAudit) -> float:
    """The ε_lb this event exceeds with probability >= 1 - 2Q (see the module docstring)."""
    k_fav = int(stats.binom.ppf(Q, s.trials, p_fav))
    k_oth = int(stats.binom.isf(Q, s.trials, p_oth))
    lo, _ = clopper_pearson(k_fav, s.trials, s.alpha_per_bound)
    _, hi = clopper_pearson(k_oth, s.trials, s.alpha_per_bound)
    if lo - float(s.delta) <= 0:
        return -math.inf
    return math.log((lo - float(s.delta)) / hi)


def laplace_top_event(plan: Plan, s: StatisticAudit) -> float:
    """Guaranteed ε_lb of the event Z >= L (L the pair's largest log-likelihood ratio) of a pure Laplace target.

    Z = L exactly when every noised cell is at or beyond D''s value, towards it: under D' each cell's noise is
    >= 0 in that direction, P = 1/(1+q); under D it is >= |Δ|, P = q^|Δ|/(1+q), with q = exp(-1/t)."""
    scales = [float(plan.statistics[c.index].component(c.component).scale) for c in s.noised]
    shifts = [abs(c.exact_d_prime - c.exact_d) for c in s.noised]
    top = sum(d / t for d, t in zip(shifts, scales, strict=True))
    # any other value of Z is at least 2/t below L: the audit's tolerance cannot let one in
    assert Z_TOLERANCE * max(1.0, top) + 1e-12 * top < 2 / max(scales)
    (_event,) = [e for e in s.events if e.direction == "up" and math.isclose(e.threshold, top, rel_tol=1e-12)]
    p_fav = math.prod(1 / (1 + math.exp(-1 / t)) for t in scales)
    p_oth = math.prod(math.exp(-d / t) / (1 + math.exp(-1 / t)) for d, t in zip(shifts, scales, strict=True))
    return guaranteed(p_fav, p_oth, s)


def gaussian_best_event(plan: Plan, s: StatisticAudit) -> float:
    """The largest guaranteed ε_lb over the "up" events of a Gaussian target with one or two noised cells.

    Exact sums over the discrete Gaussian's support (cut at 12 sigma: the rest weighs below e^-72). The event is
    taken a little smaller under the favoured dataset and a little larger under the other (margin 1e-6, far above
    the audit's Z_TOLERANCE and float rounding), so the audit's own event lies between the two."""
    assert 1 <= len(s.noised) <= 2
    z_d, z_dp, w = np.zeros(1), np.zeros(1), np.ones(1)
    for c in s.noised:
        v = float(plan.statistics[c.index].component(c.component).variance)
        shift = c.exact_d_prime - c.exact_d
        reach = int(12 * math.sqrt(v)) + abs(shift) + 2
        n = np.arange(-reach, reach + 1)
        weights = np.exp(-(n.astype(float) ** 2) / (2 * v))
        weights /= weights.sum()

        def llr(d: np.ndarray, shift: float = shift, v: float = v) -> np.ndarray:  # this cell's shift and variance
            return shift * (2.0 * d - shift) / (2 * v)

        # under D the offset from D's value is the noise n, under D' it is shift + n; same weights
        z_d = (z_d[:, None] + llr(n.astype(float))[None, :]).ravel()
        z_dp = (z_dp[:, None] + llr((n + shift).astype(float))[None, :]).ravel()
        w = (w[:, None] * weights[None, :]).ravel()
    best = -math.inf
    for e in s.events:
        if e.direction != "up":
            continue
        margin = 1e-6 * max(1.0, abs(e.threshold))
        p_fav = float(w[z_dp >= e.threshold + margin].sum())
        p_oth = float(w[z_d >= e.threshold - margin].sum())
        if p_fav > 0:
            best = max(best, guaranteed(p_fav, p_oth, s))
    return best


def scaled_laplace(plan: Plan, names: tuple[str, ...], factor: Fraction) -> Plan:
    """The plan with the Laplace scales of the named statistics multiplied by ``factor``, the rest unchanged."""
    out = []
    for sp in plan.statistics:
        if sp.statistic.name in names:
            comps = tuple(dataclasses.replace(c, scale=c.scale * factor) for c in sp.components)
            sp = dataclasses.replace(sp, components=comps)
        out.append(sp)
    return dataclasses.replace(plan, statistics=tuple(out))


def only(plan: Plan, names: tuple[str, ...]) -> Plan:
    return dataclasses.replace(plan, statistics=tuple(sp for sp in plan.statistics if sp.statistic.name in names))


# statistical, ~1 s (its replace twin stays in make test): make test-slow (issue 28: the default suite's budget)
@pytest.mark.slow
def test_halved_laplace_scales_are_flagged_add_remove():
    names = ("n", "total_income", "mean_hours")
    broken = scaled_laplace(only(pure("add_remove"), names), names, Fraction(1, 2))
    # every statistic and each part of the mean really spends 2x its claim
    assert_twice_flagged(broken, ("n", "total_income", "mean_hours", "mean_hours/sum", "mean_hours/count"))


def assert_twice_flagged(broken: Plan, labels: tuple[str, ...]) -> None:
    """Each labelled target spends twice its claim: found by the search without noise, and shown by the noise on the
    event Z >= L."""
    report = run(broken)
    stats_ = by_name(report)
    for label in labels:
        s = stats_[label]
        assert s.pair_loss == 2 * s.claimed_loss, label
        assert laplace_top_event(broken, s) > s.claimed_epsilon, label
        assert s.epsilon_lower_bound > s.claimed_epsilon, (label, s.epsilon_lower_bound, s.claimed_epsilon)
        assert not s.within_claim
    assert not report.ok


def test_halved_laplace_scales_are_flagged_replace():
    # a row moves from one cell to the other: two cells, L1 sensitivity 2, each moves by 1 with the halved scale
    names = ("by_sex", "ages")
    broken = scaled_laplace(only(pure("replace"), names), names, Fraction(1, 2))
    report = run(broken)
    for label in names:
        s = by_name(report)[label]
        assert s.cells == 2
        assert s.pair_loss == 2 * s.claimed_loss
        assert laplace_top_event(broken, s) > s.claimed_epsilon
        assert s.epsilon_lower_bound > s.claimed_epsilon, (label, s.epsilon_lower_bound, s.claimed_epsilon)
    assert not report.ok


VARIANCE_STATISTICS = """\
statistics:
  - {name: var_hours,      kind: variance, column: hours,          epsilon: 1}
  - {name: std_age_by_sex, kind: std,      column: age, by: [sex], epsilon: 1}
"""


def variances(neighbours: str) -> Plan:
    return make_plan(parse_spec(spec_text(neighbours, "epsilon: 2", VARIANCE_STATISTICS)))


@pytest.mark.slow
@pytest.mark.parametrize("neighbours", ["add_remove", "replace"])
def test_variance_and_std_within_claim(neighbours):
    report = run(variances(neighbours))
    assert_within(report)
    assert {s.kind for s in report.statistics if s.scope == "statistic"} == {"variance", "std"}
    # each part is audited on its own too
    assert {s.statistic for s in report.statistics if s.scope == "component"} >= {"var_hours/squares"}


@pytest.mark.slow  # statistical, ~1.5 s: make test-slow (issue 28: the default suite's budget)
def test_halved_variance_scales_are_flagged():
    """Every part of a variance and a std given half its noise scale: one added row at a bound moves the count, the
    centred sum and the sum of squares at their worst together, so each part and each statistic spends 2x."""
    plan = variances("add_remove")
    broken = scaled_laplace(plan, ("var_hours", "std_age_by_sex"), Fraction(1, 2))
    assert_twice_flagged(broken, (
        "var_hours", "var_hours/sum", "var_hours/squares", "var_hours/count",
        "std_age_by_sex", "std_age_by_sex/sum", "std_age_by_sex/squares", "std_age_by_sex/count",
    ))


@pytest.mark.slow  # statistical, ~1 s: make test-slow (issue 28: the default suite's budget)
def test_halved_l2_sensitivity_is_flagged():
    """The real plan, with each Gaussian sum part's variance replaced by the one for half its L2 sensitivity."""
    text = spec_text(
        "replace", "rho: 1, delta: 0.001",
        "statistics:\n"
        "  - {name: s, kind: sum, column: x, by: [sex], mechanism: gaussian}\n"
        "  - {name: m, kind: mean, column: x, by: [sex], mechanism: gaussian}\n",
        "columns:\n  x: {type: int, bounds: [-10, 10]}\n  sex: {type: category, categories: [F, M]}\n",
    )
    plan = make_plan(parse_spec(text))
    out = []
    for sp in plan.statistics:
        comp = sp.component("sum")
        # (L2 / 2)^2 = L2^2 / 4 over 2 rho: the variance a plan would give with half the L2 sensitivity
        half = dataclasses.replace(comp, variance=Fraction(comp.l2_squared, 4) / (2 * comp.rho))
        out.append(dataclasses.replace(sp, components=tuple(half if c is comp else c for c in sp.components)))
    broken = dataclasses.replace(plan, statistics=tuple(out))
    report = run(broken)
    stats_ = by_name(report)
    for label in ("s", "m/sum"):
        s = stats_[label]
        assert s.pair_loss == 4 * s.claimed_loss, label  # the same-cell pair: ρ real = 4x the share
        assert gaussian_best_event(broken, s) > s.claimed_epsilon, label
        assert s.epsilon_lower_bound > s.claimed_epsilon, (label, s.epsilon_lower_bound, s.claimed_epsilon)
    assert not report.ok


@pytest.mark.slow  # ~18 s of CPU: make test-slow
def test_pre_fix_l2_of_a_centred_mean_by_under_replace_is_flagged():
    """The L2 sensitivity before commit ac1ee73 (2 max(|L|, |U|)², a row moving between cells) for a centred mean
    with by: under replace: the sum part's noise is too small for a value going from L to U inside its cell."""
    plan = mean_by_sex("[0, 10]", "2", "0.01")
    sp = plan.statistics[0]
    comp = sp.component("sum")
    glo, ghi = plan.spec.columns["x"].grid_bounds
    biggest = max(abs(glo - comp.offset), abs(ghi - comp.offset))
    old_l2 = 2 * biggest * biggest
    assert old_l2 < comp.l2_squared  # the fix raised it
    old = dataclasses.replace(comp, l2_squared=old_l2, variance=conservative_variance(old_l2, comp.rho))
    broken = dataclasses.replace(
        plan, statistics=(dataclasses.replace(sp, components=tuple(old if c is comp else c for c in sp.components)),)
    )
    report = run(broken, trials=1_000_000)
    stats_ = by_name(report)

    s = stats_["m/sum"]
    # the search finds the same-cell pair and sees, without noise, that the part spends 2x its share ...
    assert s.cells == 1
    assert cell(s.row_d, broken, "sex") == cell(s.row_d_prime, broken, "sex")
    assert s.pair_loss == Fraction((ghi - glo) ** 2) / (2 * old.variance) > s.claimed_loss
    # ... and the noise shows it
    assert gaussian_best_event(broken, s) > s.claimed_epsilon
    assert s.epsilon_lower_bound > s.claimed_epsilon, (s.epsilon_lower_bound, s.claimed_epsilon, s.worst_event)
    assert not report.ok

    # the mean as a whole stays within its total ρ: the same-cell pair leaves the count part, and its half of ρ,
    # untouched. Only the per-part audit catches this bug.
    whole = stats_["m"]
    assert whole.pair_loss <= whole.claimed_loss
    assert whole.within_claim


@pytest.mark.slow  # statistical, ~2.5 s: make test-slow (issue 28: the default suite's budget)
def test_the_release_is_audited_jointly():
    statistics = (
        "statistics:\n"
        "  - {name: n, kind: count}\n"
        "  - {name: by_sex, kind: count, by: [sex]}\n"
        "  - {name: total_income, kind: sum, column: income}\n"
        "  - {name: mean_hours, kind: mean, column: hours}\n"
    )
    plan = make_plan(parse_spec(spec_text("add_remove", "epsilon: 1", statistics)))
    report = run(plan)
    assert_within(report)
    release = by_name(report)["(release)"]
    # one neighbouring pair for the whole release: one added row in a cell of every statistic, at its worst for
    # each, so the total loss is the release's whole ε
    assert release.claimed_epsilon == plan.epsilon == 1
    assert release.pair_loss == 1
    assert sorted((c.statistic, c.component) for c in release.noised) == sorted(
        (sp.statistic.name, c.role) for sp in plan.statistics for c in sp.components
    )

    names = tuple(sp.statistic.name for sp in plan.statistics)
    broken = scaled_laplace(plan, names, Fraction(1, 2))
    release = by_name(run(broken))["(release)"]
    assert release.pair_loss == 2
    assert laplace_top_event(broken, release) > release.claimed_epsilon
    assert release.epsilon_lower_bound > release.claimed_epsilon, (release.epsilon_lower_bound, release.worst_event)


# ----------------------------------------------------------------------------------------------------------------
# the harness itself


def test_clopper_pearson_bounds_are_the_exact_binomial_tails():
    n, k, alpha = 200_000, 1234, 1e-9
    lo, hi = clopper_pearson(k, n, alpha)
    assert stats.binom.sf(k - 1, n, lo) == pytest.approx(alpha, rel=1e-6)  # P[K >= k | p = lo] = alpha
    assert stats.binom.cdf(k, n, hi) == pytest.approx(alpha, rel=1e-6)  # P[K <= k | p = hi] = alpha
    assert clopper_pearson(0, n, alpha)[0] == 0
    assert clopper_pearson(n, n, alpha)[1] == 1
