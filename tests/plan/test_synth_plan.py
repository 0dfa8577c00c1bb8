"""The plan of a synth spec (dpcli/plan/synth.py; docs/spec.md, "Synthetic data"): exact arithmetic from the spec
alone: the charge never exceeds the spec's rho, variances are rounded up, replace doubles the sensitivities, and the
domain's refusals name their figure before anything is read."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dpcli.core.accounting import Budget, epsilon_delta_to_rho
from dpcli.errors import SpecError
from dpcli.plan.synth import make_synth_plan
from dpcli.specs.load import parse_spec
from dpcli.specs.model import Marginal

COLUMNS = """\
  age: {type: int, bounds: [17, 90]}
  sex: {type: category, categories: [Female, Male]}
  ok: {type: bool}
  country: {type: category, categories: [a, b, c, d, e, f, g, h, i, j]}
"""
SYNTH = """\
    age: {bins: [17, 25, 35, 45, 55, 65, 91]}
    sex: {}
    ok: {missing: keep}
"""


def plan_of(synth: str = SYNTH, privacy: str = "neighbours: add_remove, rho: 1/2", extra: str = "") -> object:
    return make_synth_plan(parse_spec(
        f"version: 1\ndataset: d\nprivacy: {{unit: row, {privacy}}}\ncolumns:\n{COLUMNS}"
        f"synth:\n  method: mst\n{extra}  columns:\n{synth}"
    ))


def test_the_plan_of_three_columns() -> None:
    plan = plan_of()
    d = 3
    assert plan.sizes == (6, 2, 3)
    assert plan.labels == (("[17..25)", "[25..35)", "[35..45)", "[45..55)", "[55..65)", "[65..91)"),
                           ("Female", "Male"), ("false", "true", ""))
    assert plan.candidates == ((0, 1), (0, 2), (1, 2))
    assert plan.rounds == 2
    assert plan.rho == Fraction(1, 2)
    assert plan.one_way_rho == Fraction(1, 2) / 3 / d
    assert plan.pair_rho == Fraction(1, 2) / 3 / (d - 1)
    assert plan.one_way_sigma2 == 1 / (2 * plan.one_way_rho) == 9
    assert plan.pair_sigma2 == 1 / (2 * plan.pair_rho) == 6
    assert (plan.l2_squared, plan.score_sensitivity) == (1, 1)
    # epsilon_sel: rounded down, and the largest such on its grid (epsilon_sel / 2 on 1e-12's)
    select = Fraction(1, 2) / 3
    assert plan.rounds * plan.epsilon_select ** 2 / 8 <= select
    assert plan.rounds * (plan.epsilon_select + Fraction(2, 10**12)) ** 2 / 8 > select
    assert Fraction(*plan.rate) == plan.epsilon_select / 2
    assert plan.rho_select == plan.rounds * plan.epsilon_select ** 2 / 8
    assert plan.charge == Budget(rho=plan.rho_one_way + plan.rho_select + plan.rho_measure)
    assert plan.charge.rho <= plan.rho
    assert plan.rho_one_way == d * plan.one_way_rho
    assert plan.rho_measure == (d - 1) * plan.pair_rho


def test_the_exact_plan_holds_every_one_way_then_every_candidate_pair() -> None:
    plan = plan_of()
    stats = [sp.statistic for sp in plan.exact_plan.statistics]
    assert all(isinstance(s, Marginal) for s in stats)
    assert [s.columns for s in stats] == [("age",), ("sex",), ("ok",), ("age", "sex"), ("age", "ok"), ("sex", "ok")]
    assert [sp.cells for sp in plan.exact_plan.statistics] == [6, 2, 3, 12, 18, 6]
    assert [s.kept_missing for s in stats][-1] == (False, True)
    assert stats[0].column_bins[0] is not None
    assert stats[1].column_bins == (None,)
    variances = [sp.components[0].required_variance() for sp in plan.exact_plan.statistics]
    assert variances == [plan.one_way_sigma2] * 3 + [plan.pair_sigma2] * 3
    # the engine reads the synth columns only (country is declared, not synthesised)
    assert plan.exact_plan.spec.dimensions == ("age", "sex", "ok")
    assert plan.pair_index(1, 2) == 2


def test_replace_doubles_the_sensitivities() -> None:
    a = plan_of()
    b = plan_of(privacy="neighbours: replace, rho: 1/2")
    assert (b.l2_squared, b.score_sensitivity) == (2, 2)
    assert b.one_way_sigma2 == 2 * a.one_way_sigma2
    assert b.pair_sigma2 == 2 * a.pair_sigma2
    assert b.epsilon_select == a.epsilon_select
    assert Fraction(*b.rate) == Fraction(*a.rate) / 2
    assert b.exact_plan.statistics[3].components[0].sensitivity == 2


def test_variances_are_rounded_up_and_the_charge_stays_within_rho() -> None:
    # rho 1/7 split in thirds over 3 one-ways and 2 pairs: exact, no rounding needed, and never over
    plan = plan_of(privacy="neighbours: add_remove, rho: 0.123456789", extra="  shares: {one_way: 0.2, select: 0.3, "
                   "measure: 0.5}\n")
    assert plan.one_way_sigma2 >= 1 / (2 * plan.one_way_rho)
    assert plan.pair_sigma2 >= 1 / (2 * plan.pair_rho)
    assert plan.charge.rho <= plan.rho
    # epsilon with delta: the rho is converted (rounded down) first
    converted = plan_of(privacy="neighbours: add_remove, epsilon: 1, delta: 1e-6")
    assert converted.rho == epsilon_delta_to_rho(Fraction(1), Fraction(1, 10**6))
    assert converted.charge.rho <= converted.rho


def test_a_variance_past_the_sampler_is_rounded_up_onto_its_domain() -> None:
    plan = plan_of(privacy="neighbours: add_remove, rho: 0.1234567890123456789")
    exact = 1 / (2 * plan.one_way_rho)
    assert plan.one_way_sigma2 >= exact
    assert plan.one_way_sigma2.numerator < 2**49
    assert plan.one_way_sigma2.denominator < 2**49


def test_a_marginal_over_max_cells_is_refused_with_its_figure() -> None:
    with pytest.raises(SpecError) as info:
        plan_of(SYNTH + "    country: {missing: keep}\n", extra="  max_cells: 60\n")
    assert str(info.value) == ("synth.columns: marginal age×country has 66 cells (6 × 11 codes), over "
                               "synth.max_cells = 60: use fewer bins or keys, or leave a column out")


def test_all_candidates_over_the_release_cell_limit_are_refused_with_the_figure() -> None:
    # three columns of 2,000 codes: each pair 4,000,000 cells (within max_cells), 12,006,000 in all
    columns = "".join(f"  {n}: {{type: int, bounds: [0, 1999]}}\n" for n in "abc")
    synth = "".join(f"    {n}: {{bins: {{start: 0, stop: 2000, step: 1}}}}\n" for n in "abc")
    spec = (f"version: 1\ndataset: d\nprivacy: {{unit: row, rho: 1}}\ncolumns:\n{columns}"
            f"synth:\n  method: mst\n  max_cells: 10000000\n  columns:\n{synth}")
    with pytest.raises(SpecError) as info:
        make_synth_plan(parse_spec(spec))
    assert str(info.value) == ("synth.columns: the 3 one-way and 3 candidate pair marginals have 12,006,000 cells in "
                               "all, over the limit of 10,000,000 per release: use fewer bins or keys, or fewer "
                               "columns")


def test_the_derivations_say_how_each_number_follows() -> None:
    lines = plan_of().derivations
    assert lines[0].startswith("domain: age 6 × sex 2 × ok 3 codes; 3 candidate pairs")
    assert any("bounded-range bound, ε_sel²/8 each (Cesar & Rogers 2021)" in line for line in lines)
    assert lines[-1].startswith("charge: ρ = ")


def test_the_plans_rate_limit_is_the_samplers() -> None:
    """A rate the sampler refuses would fail in the draw, after the spend: the plan refuses it before (its limit is
    written out, not imported, so that `dpcli plan` starts without numpy)."""
    from dpcli.core.samplers import MAX_PARAM
    from dpcli.plan.synth import RATE_LIMIT

    assert RATE_LIMIT == MAX_PARAM
