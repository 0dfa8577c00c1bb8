"""The empirical privacy audit (dpcli.audit) on every mechanism kind, and proof that it can fail.

Error budget of this file (no seeds, no retries: each audit draws once from the real CSPRNG and decides):

* False failure of a correct mechanism. Every audit here runs at ``confidence = 1 - ALPHA`` with ALPHA = 1e-8:
  dpcli.audit splits ALPHA evenly over all the one-sided Clopper-Pearson bounds of the report (a union bound), so
  with probability >= 1 - ALPHA every bound holds, and then every (ε, δ)-DP statistic has ε_lb <= ε. Five audits
  here expect no violation: 5e-8 (the three audits of broken plans hold broken statistics only).
* Missed detection of a broken mechanism. For each broken statistic we take one event E of the audit's own event
  set whose exact probabilities p_fav = P[E | favoured dataset] and p_oth = P[E | other dataset] we know in closed
  form. With K_fav ~ Bin(N, p_fav) and K_oth ~ Bin(N, p_oth) the audit's counts, let
      k_fav = binom.ppf(Q, N, p_fav)   (P[K_fav < k_fav] < Q)   and   k_oth = binom.isf(Q, N, p_oth)  (P[K_oth > k_oth] <= Q).
  Clopper-Pearson bounds are increasing in the count, so with probability >= 1 - 2Q the audit's ε for E is at least
      g = log((CP_lo(k_fav) - δ) / CP_hi(k_oth))
  computed at the report's own per-bound level, and ε_lb (a maximum over events) is at least g. Each test first
  asserts g > claimed ε (a deterministic computation), so the broken statistic is flagged with probability
  >= 1 - 2Q. With Q = 1e-8 and 6 broken statistics, a miss happens with probability <= 1.2e-7.
* In all, this file fails by chance with probability below 5e-8 + 1.2e-7 < 1e-6.

Worked numbers (N = 200 000; the broken add/remove audit has 42 events, so 168 bounds at 1e-8/168 = 6e-11 each,
z ~ 6.5): a count at ε = 1 with its Laplace scale halved is ε = 2 on the event "value >= D' count":
p_fav = 1/(1+q) = 0.881, p_oth = q/(1+q) = 0.119 with q = e^-2. The relative error of each bound is about
z sqrt((1-p)/(N p)) plus the binomial quantile's own ~5.6 sqrt((1-p)/(N p)), 1% and 7% here, so g = 1.92 > 1 (the
sum gives 1.88, the mean 1.83 and the replace histograms 1.88, all against a claim of 1). The discrete Gaussian count
with σ² = 1 (ρ = 1/2, claimed ε = 3.54 at δ = 1e-3) with its variance quartered has P[noise >= 1] = 0.1066 against
P[noise >= 2] = 2.6e-4: log((0.1066 - 0.001)/2.6e-4) ~ 6.0 before sampling error, and g = 4.73 > 3.54.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpcli.audit import AuditReport, StatisticAudit, audit, clopper_pearson
from dpcli.plan import Plan, make_plan
from dpcli.spec import parse_spec

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


def spec_text(neighbours: str, privacy: str, statistics: str) -> str:
    # the input points nowhere: the audit must never read it
    return (
        "version: 1\ndataset: audit_test\ninput: /nonexistent/never-read.csv\n"
        f"privacy: {{unit: row, neighbours: {neighbours}, {privacy}}}\n" + COLUMNS + statistics
    )


def pure(neighbours: str) -> Plan:
    return make_plan(parse_spec(spec_text(neighbours, "epsilon: 8", PURE_STATISTICS)))


def gaussian(neighbours: str) -> Plan:
    return make_plan(parse_spec(spec_text(neighbours, "rho: 2.5, delta: 0.001", GAUSSIAN_STATISTICS)))


def run(plan: Plan, trials: int = TRIALS) -> AuditReport:
    return audit(plan, trials=trials, confidence=CONFIDENCE)


def by_name(report: AuditReport) -> dict[str, StatisticAudit]:
    return {s.statistic: s for s in report.statistics}


def assert_within(report: AuditReport) -> None:
    for s in report.statistics:
        assert s.within_claim, (s.statistic, s.epsilon_lower_bound, s.claimed_epsilon, s.worst_event)
    assert report.ok


# ----------------------------------------------------------------------------------------------------------------
# correct mechanisms stay within their claims


def test_pure_add_remove_every_kind_within_claim():
    report = run(pure("add_remove"))
    assert_within(report)
    stats_ = by_name(report)
    assert {s.kind for s in report.statistics} == {"count", "histogram", "sum", "mean"}
    for s in report.statistics:
        assert s.claimed_epsilon == 1 and s.delta == 0 and s.cells == 1 and s.events
    # the neighbours are the worst case of the sensitivity table: one row, at the extreme, in an empty mean cell
    assert stats_["total_income"].exact_d_prime[0] - stats_["total_income"].exact_d[0] == 1000
    assert stats_["mean_hours"].exact_d == (Fraction(5),) and stats_["mean_hours"].exact_d_prime == (Fraction(10),)


def test_pure_replace_every_kind_within_claim():
    report = run(pure("replace"))
    assert_within(report)
    stats_ = by_name(report)
    # replace moves a row between cells: two cells differ for a count by, a histogram, a sum by and a mean by
    for name in ("by_sex", "ages", "employment", "income_by_sex", "mean_income_by_sex"):
        assert stats_[name].cells == 2, name
    # replacing a row never changes the number of rows: nothing to test, and said so
    assert stats_["n"].cells == 0 and stats_["n"].epsilon_lower_bound == 0
    assert "nothing to test" in stats_["n"].neighbour


@pytest.mark.parametrize("neighbours", ["add_remove", "replace"])
def test_zcdp_gaussian_within_claim(neighbours):
    report = run(gaussian(neighbours))
    assert_within(report)
    stats_ = by_name(report)
    for name in ("n", "ages", "total", "mean_hours"):
        s = stats_[name]
        if s.cells:
            assert s.mechanism == "discrete_gaussian" and s.delta == Fraction(1, 1000)
            assert 3.5 < float(s.claimed_epsilon) < 3.6  # zcdp_to_epsilon(1/2, 1e-3)
    assert stats_["n_laplace"].mechanism == "discrete_laplace" and stats_["n_laplace"].delta == 0


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
    return math.log((lo - float(s.delta)) / hi)


def has_event(s: StatisticAudit, direction: str, thresholds: tuple[Fraction, ...]) -> bool:
    return any(e.direction == direction and e.thresholds == thresholds for e in s.events)


def halve_laplace(plan: Plan, names: tuple[str, ...]) -> Plan:
    out = []
    for sp in plan.statistics:
        if sp.statistic.name in names:
            comps = tuple(dataclasses.replace(c, scale=c.scale / 2) for c in sp.components)
            out.append(dataclasses.replace(sp, components=comps))
    return dataclasses.replace(plan, statistics=tuple(out))


def laplace_tails(scale: Fraction) -> tuple[float, float]:
    """(P[X >= 0], P[X >= 1]) for the discrete Laplace: 1/(1+q) and q/(1+q), q = exp(-1/scale)."""
    q = math.exp(-1 / float(scale))
    return 1 / (1 + q), q / (1 + q)


def test_halved_laplace_scales_are_flagged_add_remove():
    broken = halve_laplace(pure("add_remove"), ("n", "total_income", "mean_hours"))
    report = run(broken)
    stats_ = by_name(report)

    # count: E = {value >= D' count}; under D' that is noise >= 0, under D noise >= 1
    s = stats_["n"]
    sp = broken.statistics[0]
    assert has_event(s, "up", s.exact_d_prime)
    p_fav, p_oth = laplace_tails(sp.component("count").scale)
    assert guaranteed(p_fav, p_oth, s) > s.claimed_epsilon

    # sum: E = {value >= D' sum}: noise >= 0 under D', noise >= Δ = 100000 grid steps under D
    s = stats_["total_income"]
    comp = broken.statistics[1].component("sum")
    assert has_event(s, "up", s.exact_d_prime)
    q = math.exp(-1 / float(comp.scale))
    p_fav, p_oth = 1 / (1 + q), q ** comp.sensitivity / (1 + q)
    assert guaranteed(p_fav, p_oth, s) > s.claimed_epsilon

    # mean (D: the cell is empty; D': one row at the top, 10, centred value Δs = 5): E = {mean released = 10}, i.e.
    # noisy n >= 1 and noisy centred sum >= 5 n. With K = (1-qc)/((1+qc)(1+qs)) and r = qc qs^5:
    # P[E|D'] = sum_{m>=0} P[Lc = m] P[Ls >= 5m] = K / (1 - r), P[E|D] = sum_{n>=1} P[Lc = n] P[Ls >= 5n] = K r / (1 - r)
    s = stats_["mean_hours"]
    sp = broken.statistics[2]
    assert has_event(s, "up", (Fraction(10),))
    qs = math.exp(-1 / float(sp.component("sum").scale))
    qc = math.exp(-1 / float(sp.component("count").scale))
    k, r = (1 - qc) / ((1 + qc) * (1 + qs)), qc * qs ** sp.component("sum").sensitivity
    assert guaranteed(k / (1 - r), k * r / (1 - r), s) > s.claimed_epsilon

    assert not report.ok
    for s in report.statistics:
        assert not s.within_claim, (s.statistic, s.epsilon_lower_bound, s.claimed_epsilon)


def test_halved_laplace_scales_are_flagged_replace():
    # a row moves from one cell to the other: two cells, L1 sensitivity 2, each moves by 1 with the halved scale
    broken = halve_laplace(pure("replace"), ("by_sex", "ages"))
    report = run(broken)
    for s, sp in zip(report.statistics, broken.statistics):
        assert s.cells == 2
        # E = {both cells at D''s values or beyond}: (P[X >= 0])^2 under D', (P[X >= 1])^2 under D
        assert has_event(s, "up", s.exact_d_prime)
        p0, p1 = laplace_tails(sp.component("count").scale)
        assert guaranteed(p0 * p0, p1 * p1, s) > s.claimed_epsilon
        assert not s.within_claim, (s.statistic, s.epsilon_lower_bound, s.claimed_epsilon)
    assert not report.ok


def discrete_gaussian_tail(variance: Fraction, k: int) -> float:
    """P[X >= k] for the discrete Gaussian, from its kernel summed over |x| <= 60 (the rest is below e^-7000)."""
    xs = np.arange(-60, 61)
    w = np.exp(-(xs.astype(float) ** 2) / (2 * float(variance)))
    return float(w[xs >= k].sum() / w.sum())


def test_quartered_gaussian_variance_is_flagged():
    plan = gaussian("add_remove")
    sp = plan.statistics[0]  # the Gaussian count: sigma^2 = 1, claimed ε = zcdp_to_epsilon(1/2, 1e-3) = 3.54
    comps = tuple(dataclasses.replace(c, variance=c.variance / 4) for c in sp.components)
    broken = dataclasses.replace(plan, statistics=(dataclasses.replace(sp, components=comps),))
    report = run(broken)
    s = report.statistics[0]
    variance = comps[0].variance
    # E = {value >= D' count + 1}: noise >= 1 under D', noise >= 2 under D
    (b,) = s.exact_d_prime
    assert has_event(s, "up", (b + 1,))
    p_fav, p_oth = discrete_gaussian_tail(variance, 1), discrete_gaussian_tail(variance, 2)
    assert guaranteed(p_fav, p_oth, s) > s.claimed_epsilon
    assert not s.within_claim, (s.epsilon_lower_bound, s.claimed_epsilon, s.worst_event)
    assert not report.ok


# ----------------------------------------------------------------------------------------------------------------
# the harness itself


def test_clopper_pearson_bounds_are_the_exact_binomial_tails():
    n, k, alpha = 200_000, 1234, 1e-9
    lo, hi = clopper_pearson(k, n, alpha)
    assert stats.binom.sf(k - 1, n, lo) == pytest.approx(alpha, rel=1e-6)  # P[K >= k | p = lo] = alpha
    assert stats.binom.cdf(k, n, hi) == pytest.approx(alpha, rel=1e-6)  # P[K <= k | p = hi] = alpha
    assert clopper_pearson(0, n, alpha)[0] == 0 and clopper_pearson(n, n, alpha)[1] == 1
