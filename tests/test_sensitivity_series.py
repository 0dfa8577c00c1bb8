"""A series' sensitivities hold over all its periods at once (issue 26): a property test.

tests/test_sensitivity_property.py checks one release; a series is T releases of one charge, each from its own
period's rows, so what one record can change is the concatenation of every period's exact vectors. Random small
series specs (count, count by, histogram, sum, mean; add_remove or replace), random rows whose period field may be
missing, unparseable or out of range, a random neighbour (a row added or removed; under replace a row changed,
possibly moved to another period), then each period's exact aggregates of both files: the L1 and squared L2 distance
over all periods together is at most each noise component's ``sensitivity`` and ``l2_squared`` (under replace the
by:[period] derivation: a plain count's L1 is 2, not 1)."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcli.engine import aggregate
from dpcli.plan.model import make_plan
from dpcli.specs.load import parse_spec
from tests.spec_builder import spec_text

STATISTICS = [
    "{name: n, kind: count}",
    "{name: nk, kind: count, by: [k]}",
    "{name: h, kind: histogram, column: k}",
    "{name: s, kind: sum, column: x}",
    "{name: m, kind: mean, column: x}",
]
PERIOD_TEXTS = ["1", "2", "3", "0", "4", "", "x", " 2 "]
row = st.tuples(st.sampled_from(PERIOD_TEXTS), st.sampled_from(["a", "b", "", "zz"]),
                st.sampled_from(["-5", "0", "3", "10", "", "oops"]))


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    neighbours = draw(st.sampled_from(["add_remove", "replace"]))
    stats = draw(st.lists(st.sampled_from(STATISTICS), min_size=1, max_size=3, unique=True))
    text = spec_text({"k": "{type: category, categories: [a, b]}", "x": "{type: int, bounds: [-5, 10]}"}, stats,
                     privacy=f"unit: row, neighbours: {neighbours}, epsilon: 1",
                     extra="series: {periods: 3, period: {column: d}}\n")
    rows = draw(st.lists(row, max_size=8))
    if neighbours == "add_remove":
        other = [*rows, draw(row)]
    else:
        if not rows:
            rows = [draw(row)]
        i = draw(st.integers(0, len(rows) - 1))
        other = [*rows[:i], draw(row), *rows[i + 1:]]
    return text, rows, other


def _write(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    path.write_text("d,k,x\n" + "".join(f"{d},{k},{x}\n" for d, k, x in rows))
    return path


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(cases())
def test_one_record_changes_the_whole_series_by_at_most_its_sensitivity(
    case: tuple[str, list[tuple[str, str, str]], list[tuple[str, str, str]]],
) -> None:
    text, rows, other = case
    plan = make_plan(parse_spec(text))
    with tempfile.TemporaryDirectory() as tmp:
        a, b = _write(Path(tmp) / "a.csv", rows), _write(Path(tmp) / "b.csv", other)
        per_period = [
            (aggregate(p := dataclasses.replace(plan, periods=frozenset({t})), a), aggregate(p, b)) for t in (1, 2, 3)
        ]
    for i, sp in enumerate(plan.statistics):
        for comp in sp.components:
            diff = np.concatenate([
                np.asarray(x[i].part(comp.role), dtype=object) - np.asarray(y[i].part(comp.role), dtype=object)
                for x, y in per_period
            ])
            l1 = int(sum(abs(int(v)) for v in diff))
            assert l1 <= comp.sensitivity, (sp.statistic.name, comp.role, l1, comp.derivation)


def test_a_row_moved_between_periods_is_the_by_period_derivation() -> None:
    """Under replace a plain count's sensitivity is 2: the row leaves one period and joins another."""
    plan = make_plan(parse_spec(spec_text(privacy="unit: row, neighbours: replace, epsilon: 1",
                                          extra="series: {periods: 3, period: {column: d}}\n")))
    assert plan.statistics[0].components[0].sensitivity == 2


@st.composite
def factorized_cases(draw: st.DrawFn) -> tuple[str, list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """An add/remove neighbour of a factorised series (``method: factorization``: Gaussian, add_remove only)."""
    stats = draw(st.lists(st.sampled_from(STATISTICS), min_size=1, max_size=3, unique=True))
    text = spec_text({"k": "{type: category, categories: [a, b]}", "x": "{type: int, bounds: [-5, 10]}"},
                     [s.replace("}", ", mechanism: gaussian}") for s in stats],
                     privacy="unit: row, neighbours: add_remove, rho: 1",
                     extra="series: {periods: 3, period: {column: d}, design: running_totals, "
                           "method: factorization}\n")
    rows = draw(st.lists(row, max_size=8))
    return text, rows, [*rows, draw(row)]


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(factorized_cases())
def test_one_record_changes_the_factorisations_products_by_at_most_their_sensitivity(
    case: tuple[str, list[tuple[str, str, str]], list[tuple[str, str, str]]],
) -> None:
    """Every product (C x)_1..(C x)_T of both files: the squared L2 distance over them all is at most |c_1|^2 times
    each component's per-row l2_squared, i.e. what the products' noise is drawn for (sigma^2 = that / (2 rho))."""
    from dpcli.plan.series import make_series_plan
    from dpcli.run.series_products import exact_products

    text, rows, other = case
    splan = make_series_plan(parse_spec(text))
    plan = splan.blocks
    assert plan is not None
    assert splan.factorized
    with tempfile.TemporaryDirectory() as tmp:
        a, b = _write(Path(tmp) / "a.csv", rows), _write(Path(tmp) / "b.csv", other)
        products = [exact_products([1, 2, 3], 3, lambda s, f=f: aggregate(  # type: ignore[misc]
            dataclasses.replace(plan, periods=frozenset({s})), f)) for f in (a, b)]
    for i, sp in enumerate(plan.statistics):
        for comp in sp.components:
            diff = np.concatenate([
                np.asarray(products[0][f"f{t}"][i].part(comp.role), dtype=object)
                - np.asarray(products[1][f"f{t}"][i].part(comp.role), dtype=object) for t in (1, 2, 3)
            ])
            l2_squared = sum(int(v) ** 2 for v in diff)
            assert l2_squared <= splan.multiplicity * comp.l2_squared, (sp.statistic.name, comp.role, l2_squared)
