"""zCDP: the conversions' rigour, the Gaussian plan, the spec's budget forms and the ledger's mixed accounting."""

from __future__ import annotations

import json
from fractions import Fraction as F
from pathlib import Path

import mpmath
import pytest

from dpcli.core.accounting import (
    Budget,
    Cap,
    epsilon_delta_to_rho,
    format_exact,
    pure_to_rho,
    rho_to_pure_epsilon,
    zcdp_to_epsilon,
)
from dpcli.errors import BudgetRefused, SpecError
from dpcli.ledger import JsonlLedger
from dpcli.plan.model import make_plan
from dpcli.specs.load import parse_spec
from tests.helpers import run_dpcli
from tests.spec_builder import spec_text

CASES = [(F(1, 2), F(1, 10**6)), (F(1, 100), F(1, 10**9)), (F(5), F(1, 10**5)), (F(1, 10**6), F(1, 10**6)),
         (F(17468904769, 10**12), F(1, 10**6))]


def true_epsilon(rho: F, delta: F) -> mpmath.mpf:
    """inf over alpha > 1 of the CKS 2020 Prop. 12 bound, at 60 digits: an independent, slow evaluation (a log grid
    of alpha, then golden-section refinement around the best grid point; the bound is unimodal in alpha)."""
    mpmath.mp.dps = 60
    r, d = mpmath.mpf(rho.numerator) / rho.denominator, mpmath.mpf(delta.numerator) / delta.denominator

    def bound(alpha):
        return alpha * r + (mpmath.log(1 / d) + (alpha - 1) * mpmath.log(1 - 1 / alpha) - mpmath.log(alpha)) / (
            alpha - 1
        )

    grid = [1 + mpmath.mpf(10) ** (k / mpmath.mpf(100)) for k in range(-900, 800)]
    k = min(range(len(grid)), key=lambda i: bound(grid[i]))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    g = (mpmath.sqrt(5) - 1) / 2
    for _ in range(300):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if bound(a) < bound(b):
            hi = b
        else:
            lo = a
    return bound((lo + hi) / 2)


@pytest.mark.parametrize(("rho", "delta"), CASES)
def test_zcdp_to_epsilon_is_a_tight_upper_bound(rho: F, delta: F) -> None:
    eps = zcdp_to_epsilon(rho, delta)
    exact = true_epsilon(rho, delta)
    assert mpmath.mpf(eps.numerator) / eps.denominator >= exact  # never an underestimate
    assert mpmath.mpf(eps.numerator) / eps.denominator - exact < mpmath.mpf("1e-9")  # and tight (rounded up 1e-12)
    simple = (
        float(rho) + 2 * (float(rho) * float(mpmath.log(1 / (mpmath.mpf(delta.numerator) / delta.denominator)))) ** 0.5
    )
    assert float(eps) <= simple + 1e-9  # never worse than the classic bound


def test_zcdp_to_epsilon_edges() -> None:
    assert zcdp_to_epsilon(F(0), F(1, 10**6)) == 0
    for bad in [(F(-1), F(1, 10)), (F(1), F(0)), (F(1), F(1))]:
        with pytest.raises(ValueError, match="need rho >= 0 and 0 < delta < 1"):
            zcdp_to_epsilon(*bad)
    a, b = zcdp_to_epsilon(F(1, 10), F(1, 10**6)), zcdp_to_epsilon(F(2, 10), F(1, 10**6))
    assert a < b  # monotone in rho


@pytest.mark.parametrize(("eps", "delta"), [(F(1), F(1, 10**6)), (F(1, 10), F(1, 10**9)), (F(10), F(1, 1000))])
def test_epsilon_delta_to_rho_round_trips_conservatively(eps: F, delta: F) -> None:
    rho = epsilon_delta_to_rho(eps, delta)
    assert rho > 0
    assert zcdp_to_epsilon(rho, delta) <= eps  # the rho chosen never spends more than the epsilon asked


@pytest.mark.parametrize("rho", [F(1, 2), F(1, 10**6), F(3)])
def test_pure_and_rho_conversions(rho: F) -> None:
    eps = rho_to_pure_epsilon(rho)
    assert pure_to_rho(eps) <= rho  # a Laplace share of a zCDP budget never exceeds it
    assert pure_to_rho(eps + F(1, 10**11)) > rho  # and is as large as the 1e-12 grid allows
    assert pure_to_rho(F(3, 10)) == F(9, 200)


# -- the spec's budget forms and the Gaussian plan ------------------------------------------------------------------

COLUMNS = {"age": "{type: int, bounds: [0, 100]}", "sex": "{type: category, categories: [F, M]}"}


def spec(privacy: str, statistics: str) -> str:
    return spec_text(COLUMNS, statistics, privacy=privacy, dataset="d")


@pytest.mark.parametrize(("neighbours", "l2_count", "l2_cells", "l2_sum"), [("add_remove", 1, 1, 100 * 100),
                                                                   ("replace", 1, 2, 2 * 100 * 100)])
def test_gaussian_variances_are_l2_squared_over_two_rho(neighbours: str, l2_count: int, l2_cells: int, l2_sum: int):
    text = spec(
        f"{{unit: row, neighbours: {neighbours}, rho: 0.5}}",
        "  - {name: n, kind: count, mechanism: gaussian, rho: 0.125}\n"
        "  - {name: h, kind: histogram, column: sex, mechanism: gaussian, rho: 0.125}\n"
        "  - {name: s, kind: sum, column: age, by: [sex], mechanism: gaussian, rho: 0.125}\n"
        "  - {name: l, kind: count, rho: 0.125}\n",
    )
    plan = make_plan(parse_spec(text))
    n, h, s, lap = plan.statistics
    assert (n.components[0].l2_squared, h.components[0].l2_squared) == (l2_count, l2_cells)
    assert n.components[0].variance == F(l2_count) / (2 * F(1, 8))
    assert h.components[0].variance == F(l2_cells) / (2 * F(1, 8))
    assert s.components[0].l2_squared == (100 * 100 if neighbours == "add_remove" else l2_sum)
    assert s.components[0].variance == F(s.components[0].l2_squared) / (2 * F(1, 8))
    # a Laplace statistic in a zCDP release: epsilon = sqrt(2 rho) = 1/2, charged its rho
    assert lap.components[0].mechanism == "discrete_laplace"
    assert lap.components[0].epsilon == F(1, 2)
    assert plan.rho == F(1, 2)
    assert plan.epsilon == 0
    assert all(c.mechanism == "discrete_gaussian" for sp in (n, h, s) for c in sp.components)


def test_named_rhos_are_checked_against_the_rho_converted_from_epsilon_and_delta() -> None:
    converted = epsilon_delta_to_rho(F(1), F(1, 10**6))
    fits = f"  - {{name: n, kind: count, mechanism: gaussian, rho: {format_exact(converted)}}}\n"
    assert make_plan(parse_spec(spec("{epsilon: 1, delta: 1e-6}", fits))).rho == converted
    over = f"  - {{name: n, kind: count, mechanism: gaussian, rho: {format_exact(converted * 2)}}}\n"
    with pytest.raises(SpecError) as exc:
        make_plan(parse_spec(spec("{epsilon: 1, delta: 1e-6}", over)))
    assert str(exc.value).startswith("statistics: the statistics' rhos add up to ")
    assert str(exc.value).endswith(f", more than privacy.rho = {format_exact(converted)}")


def test_epsilon_with_delta_becomes_rho_and_the_plan_shows_both() -> None:
    text = spec("{unit: row, epsilon: 1, delta: 1e-6}", "  - {name: n, kind: count, mechanism: gaussian}\n")
    plan = make_plan(parse_spec(text))
    assert plan.rho == epsilon_delta_to_rho(F(1), F(1, 10**6))
    assert plan.epsilon_at_delta is not None
    assert plan.epsilon_at_delta <= 1
    assert "zCDP" in plan.cost_text()
    assert "δ=0.000001" in plan.cost_text()


@pytest.mark.parametrize(
    ("privacy", "stats", "message"),
    [
        ("{unit: row, epsilon: 1}", "  - {name: n, kind: count, mechanism: gaussian}\n",
         "statistics[0].mechanism: gaussian needs a zCDP budget: privacy.rho, or privacy.epsilon with privacy.delta"),
        ("{unit: row, epsilon: 1, rho: 0.1}", "  - {name: n, kind: count, mechanism: gaussian}\n",
         "privacy.rho: give either rho, or epsilon (with delta), not both"),
        ("{unit: row, epsilon: 1, delta: 1e-6}", "  - {name: n, kind: count}\n",
         "privacy.delta: only used by a release with a mechanism: gaussian statistic or open keys"),
        ("{unit: row, rho: 0.1}", "  - {name: n, kind: count, mechanism: gaussian, epsilon: 0.1}\n",
         "statistics[0].epsilon: not used in a zCDP release (privacy.rho, or epsilon with delta): give each "
         "statistic's rho or a weight"),
        ("{unit: row, rho: 0.1}", "  - {name: n, kind: count, mechanism: gaussian, rho: 0.2}\n",
         "statistics: the statistics' rhos add up to 0.2, more than privacy.rho = 0.1"),
        ("{unit: row, rho: 0.1, delta: 0.5}", "  - {name: n, kind: count, mechanism: gaussian}\n",
         "privacy.delta: delta must be in (0, 0.01], got 0.5"),
    ],
)
def test_budget_form_errors(privacy: str, stats: str, message: str) -> None:
    with pytest.raises(SpecError) as exc:
        make_plan(parse_spec(spec(privacy, stats)))  # the sum of named shares is planning's rule
    assert str(exc.value) == message


# -- the ledger --------------------------------------------------------------------------------------------------


def test_mixed_pure_and_zcdp_spends_against_an_epsilon_delta_cap(tmp_path: Path) -> None:
    book = JsonlLedger(tmp_path / "l.jsonl")
    delta = F(1, 10**6)
    book.set_cap("d", Cap(F(3), delta), allow_raise=False)
    book.spend("d", Budget(F(1, 2)))
    book.spend("d", Budget(F(0), rho=F(1, 100)))
    status = book.status("d")
    assert status is not None
    expected = min(F(1, 2) + zcdp_to_epsilon(F(1, 100), delta), zcdp_to_epsilon(F(1, 100) + F(1, 8), delta))
    assert status.spent == expected
    assert status.remaining == 3 - expected
    # a spend that would push the converted total past the cap is refused, and names the difference
    with pytest.raises(BudgetRefused) as exc:
        book.spend("d", Budget(F(0), rho=F(1, 2)))
    assert "requested ε=" in str(exc.value)
    assert "(ρ=0.5 at δ=0.000001)" in str(exc.value)
    assert book.status("d") == status  # nothing recorded


def test_zcdp_spend_against_a_delta_zero_cap_is_refused(tmp_path: Path) -> None:
    book = JsonlLedger(tmp_path / "l.jsonl")
    book.set_cap("d", Cap(F(10), F(0)), allow_raise=False)
    with pytest.raises(BudgetRefused) as exc:
        book.spend("d", Budget(F(0), rho=F(1, 1000)))
    assert "cap has δ=0" in str(exc.value)


def test_gaussian_release_end_to_end(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        spec(
            "{unit: row, neighbours: replace, epsilon: 1, delta: 1e-6}",
            "  - {name: n, kind: count, mechanism: gaussian}\n"
            "  - {name: h, kind: histogram, column: sex, mechanism: gaussian}\n"
            "  - {name: m, kind: mean, column: age, mechanism: gaussian}\n  - {name: t, kind: sum, column: age}\n",
        )
    )
    (tmp_path / "d.csv").write_text("age,sex\n" + "".join(f"{a},{'FM'[a % 2]}\n" for a in range(100)))
    led = str(tmp_path / "l.jsonl")
    assert run_dpcli("budget", "set", "d", "--epsilon", "2", "--delta", "1e-6", "--ledger", led).returncode == 0
    r = run_dpcli("release", tmp_path / "s.yaml", "-i", tmp_path / "d.csv", "-o", tmp_path / "o.csv", "--ledger", led)
    assert r.returncode == 0, r.stderr
    header, *rows = (tmp_path / "o.csv").read_text().splitlines()
    assert header == "statistic,kind,column,sex,value,ci_low,ci_high,epsilon,rho"
    assert len(rows) == 5
    meta = json.loads((tmp_path / "o.csv.meta.json").read_text())
    assert meta["accounting"] == "zcdp"
    assert meta["statistics"][0]["noise"][0]["mechanism"] == "discrete_gaussian"
    spend = next(json.loads(x) for x in Path(led).read_text().splitlines() if '"spend"' in x)
    assert F(spend["rho"]) == epsilon_delta_to_rho(F(1), F(1, 10**6))
    assert spend["epsilon"] == "0"
    show = json.loads(run_dpcli("budget", "show", "--json", "--ledger", led).stdout)[0]
    assert F(show["spent"]) == zcdp_to_epsilon(F(spend["rho"]), F(1, 10**6))


@pytest.mark.parametrize(
    ("bounds", "kind", "l2_squared", "setter"),
    [
        # centred mean by sex on [17, 90]: grid midpoint 53, centred span [-36, 37]; same-cell L -> U moves 73,
        # a cell move at most 2 * 37^2 = 2738 < 73^2 = 5329
        ("[17, 90]", "mean", 73 * 73, "a row whose value goes from L to U in its cell"),
        # sum by over [40, 50]: a cell move 2 * 50^2 = 5000, the same-cell move only 10^2
        ("[40, 50]", "sum", 2 * 50 * 50, "a row moving between cells"),
        # sum by over [-10, 10]: 2 * 100 = 200 against 20^2 = 400: the same-cell move sets L2
        ("[-10, 10]", "sum", 400, "a row whose value goes from L to U in its cell"),
    ],
)
def test_gaussian_l2_under_replace_covers_a_value_moving_inside_its_cell(
    bounds: str, kind: str, l2_squared: int, setter: str
) -> None:
    text = spec_text(
        {"x": f"{{type: int, bounds: {bounds}}}", "sex": "{type: category, categories: [F, M]}"},
        [f"{{name: s, kind: {kind}, column: x, by: [sex], mechanism: gaussian}}"],
        privacy="unit: row, neighbours: replace, rho: 0.5", dataset="d",
    )
    comp = make_plan(parse_spec(text)).statistics[0].component("sum")
    assert comp.l2_squared == l2_squared
    assert comp.variance >= F(l2_squared) / (2 * (F(1, 2) if kind == "sum" else F(1, 4)))
    assert setter in comp.derivation
    assert f"= {l2_squared}" in comp.derivation


def test_a_laplace_share_that_rounds_to_zero_is_a_spec_error() -> None:
    """Found by the schema round-trip test: weight 2e24 against 1 left the other statistic a rho whose sqrt(2 rho),
    rounded down, is 0 -- a ZeroDivisionError (exit 1) instead of exit 2."""
    text = spec("{rho: 1}", "  - {name: a, kind: count}\n  - {name: b, kind: count, weight: 2e+24}\n")
    with pytest.raises(SpecError) as exc:
        make_plan(parse_spec(text))
    assert str(exc.value).startswith("statistics[0]: its share of the budget is too small")
    tiny = spec("{epsilon: 0.000001, delta: 0.0078125}", "  - {name: h, kind: count, mechanism: gaussian}\n")
    with pytest.raises(SpecError):
        make_plan(parse_spec(tiny))
