"""`dpcli audit` audits a factorised series (``method: factorization``) as the joint mechanism the run draws: each
period's exact values by the real engine, combined into the exact products by the run's own code
(dpcli.run.series_products.exact_products), each product noised at the plan's σ², against the series' one charge.
No noise is drawn: a pair's exact loss against the claim proves a broken plan (or a right one)."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from pathlib import Path

from dpcli.audit.neighbours import Neighbours, find_neighbours
from dpcli.audit.series import layout_of
from dpcli.plan.factorization import column_norm_squared
from dpcli.plan.model import Plan
from dpcli.plan.series import SeriesPlan, make_series_plan
from dpcli.specs.load import parse_spec
from tests.spec_builder import spec_text

SERIES = "series: {periods: 8, period: {column: day_no}, design: %s, method: factorization}\n"


def series_plan(design: str = "running_totals") -> SeriesPlan:
    return make_series_plan(parse_spec(spec_text(
        {"k": "{type: category, categories: [a, b]}"}, ["{name: n, kind: count, mechanism: gaussian}"],
        privacy="unit: row, neighbours: add_remove, rho: 1/2", extra=SERIES % design,
    )))


def search(splan: SeriesPlan, folder: Path) -> dict[str, Neighbours]:
    layout = layout_of(splan)[0]
    folder.mkdir(parents=True, exist_ok=True)
    found, _ = find_neighbours(layout.plan, folder, Fraction(1, 10**6), layout)
    return {nb.target.label: nb for nb in found}


def with_variance(plan: Plan, factor: Fraction) -> Plan:
    """Every Gaussian σ² of the plan times ``factor`` (a share or a sensitivity that far off)."""
    return dataclasses.replace(plan, statistics=tuple(
        dataclasses.replace(sp, components=tuple(dataclasses.replace(c, variance=c.variance * factor)
                                                 for c in sp.components))
        for sp in plan.statistics))


def test_a_factorised_series_is_audited_over_its_products_at_its_one_charge(tmp_path: Path) -> None:
    """A row in period 1 reaches C's first (largest) column: its loss over the products f1..f8 is |c_1|^2 shares of
    1/|c_1|^2 each, exactly the series' ρ; the pieces are the products, never tree blocks."""
    splan = series_plan()
    found = search(splan, tmp_path)
    series = found["(series)"]
    assert series.target.claimed_loss == splan.charge.rho == Fraction(1, 2)
    assert series.pair_loss == series.target.claimed_loss
    assert found["n"].pair_loss == found["n"].target.claimed_loss == Fraction(1, 2)
    labels = {c.label for c in series.noised}
    assert labels == {f"product f{t}" for t in range(1, 9)}


def test_design_both_claims_the_per_period_part_plus_the_products(tmp_path: Path) -> None:
    splan = series_plan("both")
    found = search(splan, tmp_path)
    assert found["(series)"].target.claimed_loss == splan.charge.rho == Fraction(1, 2)
    assert found["(series)"].pair_loss == found["(series)"].target.claimed_loss


def test_a_per_product_share_at_1_instead_of_1_over_c1_squared_is_caught(tmp_path: Path) -> None:
    """Each product drawn at the whole running-totals share (σ² |c_1|^2 times too small): the loss of a row in
    period 1 is |c_1|^2 times the claim."""
    splan = series_plan()
    assert splan.blocks is not None
    c1 = column_norm_squared(8)
    broken = dataclasses.replace(splan, blocks=with_variance(splan.blocks, Fraction(1, c1)))
    found = search(broken, tmp_path)
    assert found["(series)"].pair_loss == c1 * found["(series)"].target.claimed_loss
