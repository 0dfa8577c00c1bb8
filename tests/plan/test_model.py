"""The plan: sensitivities, epsilon shares and scales for every statistic kind, from the spec alone."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dpcli.errors import SpecError
from dpcli.plan.bins import bin_label
from dpcli.plan.model import make_plan
from dpcli.plan.scales import MAX_SCALE, SCALE_LIMIT, conservative_scale, laplace_halfwidth
from dpcli.specs.load import parse_spec
from tests.spec_builder import spec_text

COLUMNS = """\
  age: {type: int, bounds: [17, 90]}
  neg: {type: int, bounds: [-50, 10]}
  gain: {type: float, bounds: [0, 99999], precision: 0.01}
  gain1: {type: float, bounds: [0, 99999], precision: 1}
  gain_imputed: {type: float, bounds: [0, 99999], precision: 0.01, impute: 0}
  off: {type: float, bounds: [0.05, 10.01], precision: 0.1}
  sex: {type: category, categories: [Female, Male]}
  race: {type: category, categories: [A, B, C, D, E]}
  flag: {type: bool}
"""


def plan_of(statistics: list[str], neighbours: str = "add_remove", epsilon: str = "1", columns: str = COLUMNS):
    text = spec_text(
        columns, statistics, privacy=f"neighbours: {neighbours}, epsilon: {epsilon}", dataset="t",
        input="/nonexistent/dir/data.csv",
    )
    return make_plan(parse_spec(text))


def one(statistic: str, neighbours: str = "add_remove", epsilon: str = "1"):
    plan = plan_of([statistic], neighbours, epsilon)
    assert len(plan.statistics) == 1
    return plan.statistics[0]


def components(sp) -> list[tuple[str, int, Fraction, Fraction, Fraction, int]]:
    return [(c.role, c.sensitivity, c.epsilon, c.scale, c.unit, c.offset) for c in sp.components]


F = Fraction

# (statistic, neighbours) -> components (role, sensitivity, epsilon, scale, unit, offset) at epsilon 1/2
CASES = [
    # counts: 1 under add_remove; replace: 1 for a plain count, 2 for cells
    ("{name: s, kind: count}", "add_remove", [("count", 1, F(1, 2), F(2), F(1), 0)]),
    ("{name: s, kind: count}", "replace", [("count", 1, F(1, 2), F(2), F(1), 0)]),
    ("{name: s, kind: count, by: [sex]}", "add_remove", [("count", 1, F(1, 2), F(2), F(1), 0)]),
    ("{name: s, kind: count, by: [sex]}", "replace", [("count", 2, F(1, 2), F(4), F(1), 0)]),
    ("{name: s, kind: count, by: [race, sex, flag]}", "replace", [("count", 2, F(1, 2), F(4), F(1), 0)]),
    (
        "{name: s, kind: histogram, column: age, bins: [17, 25, 91]}",
        "add_remove",
        [("count", 1, F(1, 2), F(2), F(1), 0)],
    ),
    ("{name: s, kind: histogram, column: age, bins: [17, 25, 91]}", "replace", [("count", 2, F(1, 2), F(4), F(1), 0)]),
    ("{name: s, kind: histogram, column: sex}", "add_remove", [("count", 1, F(1, 2), F(2), F(1), 0)]),
    ("{name: s, kind: histogram, column: sex}", "replace", [("count", 2, F(1, 2), F(4), F(1), 0)]),
    # sum, add_remove: max(|L'|, |U'|) in grid units
    ("{name: s, kind: sum, column: age}", "add_remove", [("sum", 90, F(1, 2), F(180), F(1), 0)]),
    ("{name: s, kind: sum, column: neg}", "add_remove", [("sum", 50, F(1, 2), F(100), F(1), 0)]),
    ("{name: s, kind: sum, column: gain}", "add_remove", [("sum", 9999900, F(1, 2), F(19999800), F(1, 100), 0)]),
    ("{name: s, kind: sum, column: gain1}", "add_remove", [("sum", 99999, F(1, 2), F(199998), F(1), 0)]),
    ("{name: s, kind: sum, column: off}", "add_remove", [("sum", 100, F(1, 2), F(200), F(1, 10), 0)]),
    ("{name: s, kind: sum, column: neg, by: [sex]}", "add_remove", [("sum", 50, F(1, 2), F(100), F(1), 0)]),
    # sum, replace, no impute: max(U' - L', max(|L'|, |U'|)); with impute: U' - L'
    ("{name: s, kind: sum, column: age}", "replace", [("sum", 90, F(1, 2), F(180), F(1), 0)]),
    ("{name: s, kind: sum, column: neg}", "replace", [("sum", 60, F(1, 2), F(120), F(1), 0)]),
    ("{name: s, kind: sum, column: gain}", "replace", [("sum", 9999900, F(1, 2), F(19999800), F(1, 100), 0)]),
    ("{name: s, kind: sum, column: gain_imputed}", "replace", [("sum", 9999900, F(1, 2), F(19999800), F(1, 100), 0)]),
    ("{name: s, kind: sum, column: off}", "replace", [("sum", 100, F(1, 2), F(200), F(1, 10), 0)]),
    # sum by, replace: 2 max(|L'|, |U'|)
    ("{name: s, kind: sum, column: neg, by: [sex]}", "replace", [("sum", 100, F(1, 2), F(200), F(1), 0)]),
    (
        "{name: s, kind: sum, column: gain, by: [sex]}",
        "replace",
        [("sum", 19999800, F(1, 2), F(39999600), F(1, 100), 0)],
    ),
    # mean: epsilon halved between a centred sum and a count of rows with a value
    (
        "{name: s, kind: mean, column: age}",
        "add_remove",
        [("sum", 37, F(1, 4), F(148), F(1), 53), ("count", 1, F(1, 4), F(4), F(1), 0)],
    ),
    (
        "{name: s, kind: mean, column: age}",
        "replace",
        [("sum", 73, F(1, 4), F(292), F(1), 53), ("count", 1, F(1, 4), F(4), F(1), 0)],
    ),
    (
        "{name: s, kind: mean, column: neg, by: [sex]}",
        "add_remove",
        [("sum", 30, F(1, 4), F(120), F(1), -20), ("count", 1, F(1, 4), F(4), F(1), 0)],
    ),
    (
        "{name: s, kind: mean, column: neg, by: [sex]}",
        "replace",
        [("sum", 60, F(1, 4), F(240), F(1), -20), ("count", 2, F(1, 4), F(8), F(1), 0)],
    ),
    (
        "{name: s, kind: mean, column: gain}",
        "add_remove",
        [("sum", 4999950, F(1, 4), F(19999800), F(1, 100), 4999950), ("count", 1, F(1, 4), F(4), F(1), 0)],
    ),
    (
        "{name: s, kind: mean, column: gain}",
        "replace",
        [("sum", 9999900, F(1, 4), F(39999600), F(1, 100), 4999950), ("count", 1, F(1, 4), F(4), F(1), 0)],
    ),
    (
        "{name: s, kind: mean, column: gain_imputed}",
        "replace",
        [("sum", 9999900, F(1, 4), F(39999600), F(1, 100), 4999950), ("count", 1, F(1, 4), F(4), F(1), 0)],
    ),
    (
        "{name: s, kind: mean, column: off}",
        "add_remove",
        # grid [1, 100], centre (1 + 100) // 2 = 50: [-49, 50]
        [("sum", 50, F(1, 4), F(200), F(1, 10), 50), ("count", 1, F(1, 4), F(4), F(1), 0)],
    ),
]


@pytest.mark.parametrize(("statistic", "neighbours", "expected"), CASES)
def test_sensitivity_and_scale(statistic, neighbours, expected):
    sp = one(statistic, neighbours, epsilon="0.5")
    assert sp.epsilon == F(1, 2)
    assert components(sp) == expected
    for c in sp.components:
        assert c.scale == Fraction(c.sensitivity) / c.epsilon  # exact: no rounding needed at these sizes
        assert type(c.sensitivity) is int
    assert sum(c.epsilon for c in sp.components) == sp.epsilon
    assert sp.mechanism == "discrete_laplace"


def test_replace_sum_without_impute_where_one_bound_dominates():
    # bounds [-50, 10]: U - L = 60 > max(|L|, |U|) = 50; bounds [40, 100]: max(|L|, |U|) = 100 > U - L = 60
    cols = "  a: {type: int, bounds: [40, 100]}\n  b: {type: int, bounds: [40, 100], impute: 40}\n"
    plan = plan_of(["{name: a, kind: sum, column: a}", "{name: b, kind: sum, column: b}"], "replace", columns=cols)
    assert plan.statistics[0].component("sum").sensitivity == 100
    assert plan.statistics[1].component("sum").sensitivity == 60


def test_derivations_name_the_rule_and_the_bounds():
    sp = one("{name: s, kind: sum, column: gain}", "replace")
    assert sp.components[0].derivation == (
        "replace one row: U - L, or max(|L|, |U|) when a missing value (left out) becomes a value, of [0, 99999]; "
        "clamped to [0, 99999] (grid step 0.01: bounds 0..9999900 steps)"
    )
    sp = one("{name: s, kind: count, by: [sex]}", "replace")
    assert sp.components[0].derivation == (
        "replace one row: it can leave one cell and join another of the count (L1 1 + 1; L2² 1 + 1)"
    )
    sp = one("{name: s, kind: mean, column: age}")
    assert [c.derivation for c in sp.components] == [
        "add/remove one row changes the sum by at most max(|L|, |U|) of [-36, 37]; clamped to [17, 90], centred on 53",
        "add/remove one row changes the count of rows with a age by 1",
    ]


def test_epsilon_shares_cells_and_keys():
    plan = plan_of(
        [
            "{name: a, kind: count, weight: 2}",
            "{name: b, kind: count, by: [race, sex]}",
            "{name: c, kind: histogram, column: age, by: [flag], bins: {start: 0, stop: 100, step: 10}}",
            "{name: d, kind: mean, column: age, by: [sex]}",
        ],
        epsilon="1",
    )
    assert [sp.epsilon for sp in plan.statistics] == [F(2, 5), F(1, 5), F(1, 5), F(1, 5)]
    assert plan.epsilon == F(1)
    assert [sp.cells for sp in plan.statistics] == [1, 10, 20, 2]
    assert plan.statistics[1].dimension_keys == (("A", "B", "C", "D", "E"), ("Female", "Male"))
    assert plan.statistics[2].dimension_keys == (("false", "true"), None)
    assert plan.statistics[0].dimension_keys == ()
    assert plan.dimensions == ("race", "sex", "flag", "age")
    assert plan.statistics[2].components[0].scale == 5


def test_explicit_epsilons_charge_their_sum():
    plan = plan_of(["{name: a, kind: count, epsilon: 0.1}", "{name: b, kind: count, epsilon: 0.1}"], epsilon="0.3")
    assert plan.epsilon == F(1, 5)
    assert plan.statistics[0].components[0].scale == 10


def test_non_terminating_shares_give_exact_scales():
    plan = plan_of(
        ["{name: a, kind: sum, column: age}"] + [f"{{name: c{i}, kind: count}}" for i in range(2)], epsilon="1"
    )
    assert plan.statistics[0].epsilon == F(1, 3)
    assert plan.statistics[0].components[0].scale == 270
    plan = plan_of(["{name: a, kind: sum, column: age}"], epsilon="0.7")
    assert plan.statistics[0].components[0].scale == F(900, 7)


# ---------------------------------------------------------------------------------------------------------------
# Bins and grid


@pytest.mark.parametrize(
    ("bins", "message"),
    [
        ("{start: 0, stop: 1, step: 0.001}", "statistics[0].bins.step: bins narrower than the column's precision 0.01"),
        ("[0.001, 0.009, 1]", "statistics[0].bins[1]: bin narrower than the column's precision 0.01"),
        ("[0, 0.011, 0.02, 1]", "statistics[0].bins[2]: bin narrower than the column's precision 0.01"),
    ],
)
def test_bins_narrower_than_precision_refused(bins, message):
    with pytest.raises(SpecError) as info:
        plan_of([f"{{name: h, kind: histogram, column: gain, bins: {bins}}}"])
    assert str(info.value) == message
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    "bins",
    [
        "{start: 0, stop: 1, step: 0.01}",
        "{start: 0, stop: 1.5, step: 0.015}",  # wider than p: every bin holds a grid point
        "[0, 0.005, 1]",  # [0, 0.005) holds 0
        "[0.001, 0.011, 1]",  # [0.001, 0.011) holds 0.01
    ],
)
def test_bins_holding_a_grid_point_accepted(bins):
    sp = plan_of([f"{{name: h, kind: histogram, column: gain, bins: {bins}}}"]).statistics[0]
    assert sp.components[0].sensitivity == 1


def test_bin_labels():
    plan = plan_of(
        [
            "{name: a, kind: histogram, column: age, bins: [17, 25, 35, 91]}",
            "{name: b, kind: histogram, column: gain, bins: {start: 0, stop: 1, step: 0.25}}",
        ]
    )
    edges, grid = (sp.statistic.bins for sp in plan.statistics)
    assert [bin_label(edges, i) for i in range(edges.count)] == ["[17..25)", "[25..35)", "[35..91)"]
    assert [bin_label(grid, i) for i in range(grid.count)] == ["[0..0.25)", "[0.25..0.5)", "[0.5..0.75)", "[0.75..1)"]


# ---------------------------------------------------------------------------------------------------------------
# Scale limits


def test_scale_too_large_refused():
    with pytest.raises(SpecError) as info:
        plan_of(["{name: s, kind: sum, column: gain}"], epsilon="0.000001")
    assert str(info.value) == (
        "statistics[0]: noise scale 9999900000000 grid steps is too large: "
        "use a coarser precision, tighter bounds or a larger epsilon"
    )
    assert info.value.exit_code == 2


def test_scale_past_the_sampler_limit_is_a_spec_error_not_a_crash():
    # 1e15 / 1e-6 = 1e21 > 2^48: used to divide by zero in conservative_scale (an internal error, exit 1)
    cols = "  big: {type: int, bounds: [0, 1e15]}\n"
    with pytest.raises(SpecError) as info:
        plan_of(["{name: s, kind: sum, column: big}"], epsilon="0.000001", columns=cols)
    assert str(info.value) == (
        "statistics[0]: noise scale 1000000000000000000000 grid steps is too large: "
        "use a coarser precision, tighter bounds or a larger epsilon"
    )


def test_scale_at_the_maximum_accepted():
    cols = f"  x: {{type: int, bounds: [0, {2**40}]}}\n"
    sp = plan_of(["{name: s, kind: sum, column: x}"], epsilon="1", columns=cols).statistics[0]
    assert sp.components[0].scale == MAX_SCALE
    cols = f"  x: {{type: int, bounds: [0, {2**40 + 1}]}}\n"
    with pytest.raises(SpecError):
        plan_of(["{name: s, kind: sum, column: x}"], epsilon="1", columns=cols)


def test_conservative_scale_examples():
    assert conservative_scale(1, F(1, 3)) == 3
    assert conservative_scale(9999900, F(1, 11)) == 109998900
    # 7 / (1/(2^50+1)): numerator 7 (2^50 + 1) is over 2^48, so rounded up to a fraction the sampler takes
    eps = F(2**50 + 3, 2**50 + 1)
    s = conservative_scale(7, eps)
    assert s >= F(7) / eps
    assert s.numerator <= SCALE_LIMIT
    assert s.denominator <= SCALE_LIMIT


epsilons = st.builds(
    Fraction,
    st.integers(min_value=1, max_value=2**70),
    st.integers(min_value=1, max_value=2**70),
).filter(lambda e: F(1, 10**6) <= e <= 100)


@settings(max_examples=400, deadline=None)
@given(st.integers(min_value=1, max_value=2**54), epsilons)
@example(1, F(1, 10**6))
@example(2**53, F(100))
@example(3, F(2**48 + 1, 2**48))
def test_conservative_scale_never_rounds_down_and_fits_the_sampler(sensitivity, epsilon):
    exact = F(sensitivity) / epsilon
    scale = conservative_scale(sensitivity, epsilon)
    assert type(scale) is Fraction
    assert scale >= exact
    if exact.numerator <= SCALE_LIMIT and exact.denominator <= SCALE_LIMIT:
        assert scale == exact
    if exact < SCALE_LIMIT - 1:
        assert scale.numerator <= SCALE_LIMIT
        assert scale.denominator <= SCALE_LIMIT
        # close: within one step of the denominator used
        assert scale - exact <= F(math.ceil(exact) + 1, SCALE_LIMIT) * 2
    else:
        # not representable under the limits at all: rounded up to an integer (and then refused by the plan)
        assert scale == math.ceil(exact)


# ---------------------------------------------------------------------------------------------------------------
# The 95% half-width of discrete Laplace noise


def tail(scale: Fraction, k: int) -> Decimal:
    """P(|X| > k) for X ~ discrete Laplace(scale), computed in 60-digit decimal: 2 q^(k+1) / (1 + q)."""
    with localcontext() as ctx:
        ctx.prec = 60
        q = (-(Decimal(scale.denominator) / Decimal(scale.numerator))).exp()
        return 2 * q ** (k + 1) / (1 + q)


def reference_halfwidth(scale: Fraction, confidence: Decimal) -> int:
    """Smallest k with tail(k) <= 1 - confidence, by bisection (the tail decreases in k)."""
    alpha = 1 - confidence
    hi = 1
    while tail(scale, hi) > alpha:
        hi *= 2
    lo = -1  # tail(-1) = 2q^0/(1+q) > alpha
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if tail(scale, mid) <= alpha:
            hi = mid
        else:
            lo = mid
    return hi


@pytest.mark.parametrize(
    ("scale", "k"),
    [
        (F(1), 3),  # P(|X| > 2) = 0.0728, P(|X| > 3) = 0.0268
        (F(1, 100), 0),
        (F(2), 6),  # P(|X| > 5) = 0.0620, P(|X| > 6) = 0.0376
        (F(10), 30),  # 0.0523, 0.0473
        (F(20), 60),
        (F(1000), 2996),  # 0.050012, 0.049962
    ],
)
def test_laplace_halfwidth_examples(scale, k):
    assert laplace_halfwidth(scale) == k
    assert laplace_halfwidth(scale, 0.95) == k
    assert tail(scale, k) <= Decimal("0.05")
    if k > 0:
        assert tail(scale, k - 1) > Decimal("0.05")


@settings(max_examples=300, deadline=None)
@given(
    st.builds(Fraction, st.integers(1, 10**9), st.integers(1, 10**4)).filter(lambda s: F(1, 100) <= s <= 10**7)
)
@example(F(1))
@example(F(11))
@example(F(109998900))
def test_laplace_halfwidth_is_the_smallest_k_reaching_95_percent(scale):
    k = laplace_halfwidth(scale, 0.95)
    assert k == reference_halfwidth(scale, Decimal("0.95"))
    assert tail(scale, k) <= Decimal("0.05")
    if k > 0:
        assert tail(scale, k - 1) > Decimal("0.05")


@pytest.mark.parametrize("scale", [F(1), F(7, 3), F(1000)])
def test_laplace_halfwidth_at_975_percent(scale):
    assert laplace_halfwidth(scale, 0.975) == reference_halfwidth(scale, Decimal("0.975"))


def test_component_halfwidth_uses_its_scale():
    sp = one("{name: s, kind: count}", epsilon="0.1")  # scale 10
    assert sp.components[0].halfwidth(0.95) == 30


# ---------------------------------------------------------------------------------------------------------------
# The plan reads no data


def test_plan_reads_no_data(tmp_path):
    missing = tmp_path / "no" / "such" / "file.csv"
    text = spec_text(
        COLUMNS,
        ["{name: a, kind: count}", "{name: b, kind: mean, column: gain, by: [sex]}",
         "{name: c, kind: histogram, column: age, bins: {start: 0, stop: 100, step: 1}}"],
        privacy="epsilon: 1", dataset="t", input=str(missing),
    )
    spec = parse_spec(text)
    assert spec.input == missing
    assert not missing.exists()
    plan = make_plan(spec)
    assert [sp.statistic.name for sp in plan.statistics] == ["a", "b", "c"]
    assert not missing.parent.exists()


# ---------------------------------------------------------------------------------------------------------------
# Linear in the number of statistics


class CountingTuple(tuple):
    """A tuple that counts the walks over it (iter(), for, zip, sum)."""

    def __iter__(self):
        self.walks = getattr(self, "walks", 0) + 1
        return super().__iter__()


def many_counts(n: int, privacy: str) -> str:
    gaussian = ", mechanism: gaussian" if "delta" in privacy else ""
    statistics = [f"{{name: s{i}, kind: count, by: [sex]{gaussian}}}" for i in range(n)]
    return spec_text(COLUMNS, statistics, privacy=privacy, dataset="t")


def walks_over_statistics(n: int, privacy: str) -> tuple[int, int]:
    """Walks over spec.statistics and plan.statistics while planning, rendering and building the table of n
    statistics: a total recomputed per statistic (Plan.rho read in a per-statistic loop) makes this grow with n."""
    import dataclasses
    import io

    import numpy as np

    from dpcli.cli import render_plan
    from dpcli.mechanisms.noisy import Noisy
    from dpcli.publish.table import build_table

    spec = parse_spec(many_counts(n, privacy))
    spec = dataclasses.replace(spec, statistics=CountingTuple(spec.statistics))
    plan = make_plan(spec)
    plan = dataclasses.replace(plan, statistics=CountingTuple(plan.statistics))
    render_plan.print_plan(plan, io.StringIO())
    render_plan.plan_json(plan)
    plan.cost_text()
    table = build_table(plan, [Noisy(np.zeros(sp.cells, dtype=np.int64), None) for sp in plan.statistics])
    assert len(table.blocks) == n
    return spec.statistics.walks, plan.statistics.walks


@pytest.mark.parametrize("privacy", ["{epsilon: 1}", "{epsilon: 1, delta: 1e-6}", "{rho: 0.5}"])
def test_planning_rendering_and_the_table_walk_the_statistics_a_fixed_number_of_times(privacy: str) -> None:
    # Plan.epsilon, Plan.rho and Plan.epsilon_at_delta are computed once per plan (4,000 statistics took 46 s when
    # render and build_table summed them again for every statistic); bench/bench_plan.py has the times
    assert walks_over_statistics(10, privacy) == walks_over_statistics(40, privacy)
    sample = make_plan(parse_spec(many_counts(1, privacy)))
    assert "epsilon" not in vars(sample)
    assert "rho" not in vars(sample)
    _ = sample.epsilon_at_delta  # computed on first use
    assert {"rho", "epsilon_at_delta"} <= set(vars(sample))  # cached on the instance
