"""Quantiles and the median (issue 13): the loader's rules, the plan's numbers, the exact answer through the engine
on the internal no-noise path (mechanisms.exact_noisy, which the CLI never reaches), and the table's rows.

The reference answer is computed here in plain Python from the rows themselves (sorted values, no bins): the
candidate of the largest utility -|(b - a) #{x < c} - a #{x > c}|, the first of equals."""

from __future__ import annotations

import json
import random
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest

from dpcli.engine import aggregate
from dpcli.errors import SpecError
from dpcli.mechanisms.noise import exact_noisy
from dpcli.plan.model import make_plan
from dpcli.publish.table import build_table
from dpcli.specs.load import parse_spec
from tests.helpers import run_in_process

HEAD = """version: 1
dataset: d
privacy: {{unit: row, neighbours: {neighbours}, {budget}}}
columns:
  x: {{type: {xtype}, bounds: [{lo}, {hi}]{precision}}}
  c: {{type: category, categories: [a, b]}}
statistics:
"""


def spec_text(stats: str, *, xtype: str = "int", lo: str = "0", hi: str = "20", precision: str = "",
              neighbours: str = "add_remove", budget: str = "epsilon: 1") -> str:
    prec = f", precision: {precision}" if precision else ""
    return HEAD.format(xtype=xtype, lo=lo, hi=hi, precision=prec, neighbours=neighbours, budget=budget) + stats


def reference(values: list[Fraction], candidates: list[Fraction], q: Fraction) -> Fraction:
    a, b = q.numerator, q.denominator
    best, chosen = None, candidates[0]
    for c in candidates:
        lt = sum(1 for v in values if v < c)
        gt = sum(1 for v in values if v > c)
        u = -abs((b - a) * lt - a * gt)
        if best is None or u > best:
            best, chosen = u, c
    return chosen


def released(text: str, csv: Path) -> list[dict]:
    plan = make_plan(parse_spec(text))
    table = build_table(plan, exact_noisy(aggregate(plan, csv), plan))
    return [dict(zip(table.columns, row, strict=True)) for row in table.rows()]


@pytest.mark.parametrize("seed", range(6))
def test_exact_quantiles_match_a_plain_reference(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    step = rng.choice([None, 1, 3])
    float_column = seed % 2 == 1
    p = Fraction(1, 2) if float_column else Fraction(1)
    levels = sorted(rng.sample([Fraction(1, 2), Fraction(1, 4), Fraction(9, 10), Fraction(1, 3), Fraction(1, 100)], 3))
    rows = []
    for _ in range(rng.randint(1, 60)):
        value = Fraction(rng.randint(-4, 48), 2) if float_column else Fraction(rng.randint(-3, 24))
        rows.append((value, rng.choice(["a", "b", "zz", ""])))
    lines = ["x,c"] + [f"{float(v) if float_column else int(v)},{k}" for v, k in rows] + ["oops,a", ",b"]
    csv = tmp_path / "d.csv"
    csv.write_text("\n".join(lines) + "\n")
    step_field = f", step: {step * p}" if step else ""
    q_text = ", ".join(str(q) for q in levels)
    text = spec_text(
        f"  - {{name: qs, kind: quantile, column: x, q: [{q_text}], by: [c]{step_field}}}\n"
        f"  - {{name: med, kind: median, column: x{step_field}}}\n",
        xtype="float" if float_column else "int", precision="0.5" if float_column else "",
    )
    out = released(text, csv)
    spacing = (step or 1) * p
    candidates = [Fraction(0) + j * spacing for j in range(int(20 / spacing) + 1)]
    clamped = [(min(max(v, Fraction(0)), Fraction(20)), k) for v, k in rows]
    expected = []
    for key in ("a", "b"):
        cell = [v for v, k in clamped if k == key]
        expected += [("qs", key, q, reference(cell, candidates, q)) for q in levels]
    expected.append(("med", None, Fraction(1, 2), reference([v for v, _ in clamped], candidates, Fraction(1, 2))))
    got = [(r["statistic"], r["c"], Fraction(r["quantile"]), Fraction(r["value"])) for r in out]
    # the exact path sorts a cell's levels' answers too: the reference's are increasing already (u is unimodal)
    assert got == expected
    assert all(r["ci_low"] is None and r["ci_high"] is None for r in out)


def test_the_parquet_engine_gives_the_same_bins(tmp_path: Path) -> None:
    rng = random.Random(7)
    frame = pl.DataFrame({"x": [rng.randint(0, 25) for _ in range(500)], "c": [rng.choice("ab") for _ in range(500)]})
    frame.write_csv(tmp_path / "d.csv")
    frame.write_parquet(tmp_path / "d.parquet")
    stat = "  - {name: q, kind: quantile, column: x, q: [0.1, 0.5], by: [c], step: 2}\n"
    plan = make_plan(parse_spec(spec_text(stat)))
    a = aggregate(plan, tmp_path / "d.csv")[0].counts.tolist()
    b = aggregate(plan, tmp_path / "d.parquet", input_format="parquet")[0].counts.tolist()
    assert a == b
    assert sum(a) == 500


@pytest.mark.parametrize(
    ("stat", "extra", "message"),
    [
        ("{name: q, kind: quantile, column: x}", {},
         "statistics[0].q: required for a quantile: the levels, e.g. [0.25, 0.5, 0.9]"),
        ("{name: q, kind: quantile, column: x, q: [1]}", {},
         "statistics[0].q[0]: a quantile level must be in (0, 1), got 1"),
        ("{name: q, kind: quantile, column: x, q: [0.5, 1/2]}", {}, "statistics[0].q[1]: level 0.5 is listed twice"),
        ("{name: q, kind: median, column: x, q: [0.5]}", {},
         "statistics[0].q: a median is the quantile q = 0.5 (use kind: quantile)"),
        ("{name: q, kind: median, column: c}", {},
         "statistics[0].column: a median needs a numeric column; 'c' is category"),
        ("{name: q, kind: median, column: x, mechanism: gaussian}", {},
         "statistics[0].mechanism: a quantile is chosen by the exponential mechanism: there is no noise mechanism to "
         "choose"),
        ("{name: q, kind: median, column: x, step: 0.3}", {"xtype": "float", "precision": "0.1"}, None),
        ("{name: q, kind: median, column: x, step: 0.25}", {"xtype": "float", "precision": "0.1"},
         "statistics[0].step: must be a whole number of the column's grid steps (precision 0.1)"),
        ("{name: q, kind: median, column: x}", {"xtype": "float", "hi": "1000"},
         "statistics[0]: 1000001 candidates at the column's precision 0.001 is over the limit of 1000000: give a "
         "coarser step"),
        ("{name: q, kind: median, column: x, step: 30}", {},
         "statistics[0].step: leaves fewer than two candidates within the column's bounds"),
    ],
)
def test_loader_rules(stat: str, extra: dict, message: str | None) -> None:
    text = spec_text(f"  - {stat}\n", **extra)
    if message is None:
        parse_spec(text)
        return
    with pytest.raises(SpecError) as err:
        parse_spec(text)
    assert str(err.value) == message


def test_refused_beside_a_dimension_named_quantile() -> None:
    # (a person unit is no longer refused: tests/plan/test_person_quantiles.py)
    clash = spec_text("  - {name: q, kind: median, column: x}\n  - {name: n, kind: count, by: [quantile]}\n").replace(
        "  c: {type", "  quantile: {type: bool}\n  c: {type"
    )
    with pytest.raises(SpecError, match=r"statistics\[1\].by\[0\]: 'quantile' cannot be an output dimension"):
        parse_spec(clash)


@pytest.mark.parametrize(
    ("neighbours", "by", "level", "sensitivity"),
    [
        ("add_remove", "", "0.5", 1), ("add_remove", "", "0.9", 9), ("add_remove", ", by: [c]", "0.25", 3),
        ("replace", "", "0.5", 2), ("replace", "", "0.9", 10), ("replace", ", by: [c]", "0.9", 18),
        ("replace", ", by: [c]", "0.5", 2),
    ],
)
def test_plan_sensitivity_and_rank_bound(neighbours: str, by: str, level: str, sensitivity: int) -> None:
    plan = make_plan(parse_spec(spec_text(
        f"  - {{name: q, kind: quantile, column: x, q: [{level}, 0.01]{by}}}\n", neighbours=neighbours,
    )))
    sp = plan.statistics[0]
    comp = sp.components[1]  # levels in increasing order: 0.01 first
    q = Fraction(level)
    assert (comp.role, comp.sensitivity, comp.mechanism) == (f"q={level}", sensitivity, "exponential")
    assert comp.candidates == 21
    assert comp.epsilon == Fraction(1, 2)
    assert comp.scale == 2 * sensitivity / Fraction(1, 2)
    # the bound: m e^(-x/t) <= 5% at x = the rank bound in utility units (ceil(t ln(20 m)), plus one for floats)
    import math

    x = comp.halfwidth(0.95)
    assert 21 * math.exp(-x / float(comp.scale)) <= 0.05 < 21 * math.exp(-(x - 2) / float(comp.scale))
    assert comp.unit == Fraction(1, q.denominator)
    assert sp.cells == (2 if by else 1) * 21


def test_zcdp_each_level_is_sqrt_2_rho_over_k_rounded_down() -> None:
    # permute-and-flip is pure eps0-DP, hence eps0^2/2-zCDP; it is not claimed bounded-range (issue 23)
    plan = make_plan(parse_spec(spec_text(
        "  - {name: q, kind: quantile, column: x, q: [0.5, 0.9]}\n", budget="rho: 0.5",
    )))
    sp = plan.statistics[0]
    each = Fraction(1, 4)  # rho 0.5 over two levels
    for comp in sp.components:
        assert comp.rho == each
        assert comp.epsilon**2 / 2 <= each
        assert (comp.epsilon + Fraction(1, 10**9)) ** 2 / 2 > each
    assert sp.rho == Fraction(1, 2)
    assert sp.epsilon == 0
    assert sp.reported_epsilon == sum(c.epsilon for c in sp.components)


def test_release_writes_levels_without_intervals_and_reuse_gives_the_same_bytes(tmp_path: Path) -> None:
    csv = tmp_path / "d.csv"
    csv.write_text("x,c\n" + "".join(f"{i % 21},{'ab'[i % 2]}\n" for i in range(300)))
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(
        "  - {name: qs, kind: quantile, column: x, q: [0.9, 0.1], by: [c]}\n  - {name: n, kind: count}\n"
    ).replace("dataset: d\n", "dataset: d\ninput: d.csv\n"))
    ledger = tmp_path / "ledger.jsonl"
    assert run_in_process("budget", "set", "d", "--epsilon", "5", "--ledger", ledger).returncode == 0
    first = run_in_process("release", spec, "--ledger", ledger, "--release-id", "r1", "-o", tmp_path / "a.json")
    assert first.returncode == 0, first.stderr
    again = run_in_process("release", spec, "--ledger", ledger, "--release-id", "r1", "-o", tmp_path / "b.json")
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    rows = json.loads((tmp_path / "a.json").read_text())
    assert [(r["statistic"], r["c"], r["quantile"]) for r in rows] == [
        ("qs", "a", 0.1), ("qs", "a", 0.9), ("qs", "b", 0.1), ("qs", "b", 0.9), ("n", None, None)
    ]
    for r in rows[:4]:
        assert r["ci_low"] is None
        assert r["ci_high"] is None
        assert 0 <= r["value"] <= 20
    assert rows[0]["value"] <= rows[1]["value"]
    assert rows[2]["value"] <= rows[3]["value"]  # sorted per cell
    meta = json.loads((tmp_path / "a.json.meta.json").read_text())
    noise = meta["statistics"][0]["noise"]
    assert [n["part"] for n in noise] == ["q=0.1", "q=0.9"]
    assert all("rank_error95" in n for n in noise)


# ---------------------------------------------------------------------------------------------------------------
# Value-unit intervals (interval: {share: S}); their coverage: tests/statistical/test_quantile_interval.py


@pytest.mark.parametrize(
    ("stat", "message"),
    [
        ("{name: q, kind: median, column: x, interval: {share: 0}}",
         "statistics[0].interval.share: interval share must be in (0, 0.99], got 0"),
        ("{name: q, kind: median, column: x, interval: {share: 1}}",
         "statistics[0].interval.share: interval share must be in (0, 0.99], got 1"),
        ("{name: q, kind: median, column: x, interval: {}}", None),
        ("{name: n, kind: count, interval: {share: 0.2}}", None),
    ],
)
def test_interval_loader_rules(stat: str, message: str | None) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(spec_text(f"  - {stat}\n"))
    if message is not None:
        assert str(err.value) == message
    else:
        assert "interval" in str(err.value)


def test_interval_plan_splits_the_share_over_a_count_and_two_draws_per_level() -> None:
    plan = make_plan(parse_spec(spec_text(
        "  - {name: q, kind: quantile, column: x, q: [0.5, 0.9], interval: {share: 1/4}}\n"
    )))
    sp = plan.statistics[0]
    roles = [c.role for c in sp.components]
    assert roles == ["q=0.5", "q=0.9", "interval n", "q=0.5 low", "q=0.5 high", "q=0.9 low", "q=0.9 high"]
    levels, count, draws = sp.components[:2], sp.components[2], sp.components[3:]
    assert all(c.epsilon == Fraction(3, 8) for c in levels)  # (1 - 1/4) of 1 over two levels
    assert count.epsilon == Fraction(1, 20)
    assert count.mechanism == "discrete_laplace"
    assert count.sensitivity == 1
    assert all(c.epsilon == Fraction(1, 20) and c.scale == 40 and c.unit == 1 for c in draws)  # t = 2/eps0 rows
    assert sum(c.epsilon for c in sp.components) == 1 == sp.epsilon
    by_replace = make_plan(parse_spec(spec_text(
        "  - {name: q, kind: median, column: x, by: [c], interval: {share: 0.5}}\n", neighbours="replace"
    ))).statistics[0]
    assert by_replace.components[1].sensitivity == 2
    assert by_replace.components[2].scale == 4 / Fraction(1, 6)


def test_interval_zcdp_parts_take_even_shares_of_rho() -> None:
    plan = make_plan(parse_spec(spec_text(
        "  - {name: q, kind: median, column: x, interval: {share: 0.5}}\n", budget="rho: 0.5",
    )))
    sp = plan.statistics[0]
    level, count, low, high = sp.components
    assert level.rho == Fraction(1, 4)
    assert count.rho == low.rho == high.rho == Fraction(1, 12)
    assert count.epsilon**2 / 2 <= Fraction(1, 12)
    assert low.epsilon**2 / 2 <= Fraction(1, 12)
    assert low.epsilon == count.epsilon  # both pure-eps parts of the same rho: sqrt(2 rho) (permute-and-flip, issue 23)
    assert sp.rho == Fraction(1, 2)
    assert sp.reported_epsilon == sum(c.epsilon for c in sp.components)


def test_interval_exact_path_is_the_value(tmp_path: Path) -> None:
    csv = tmp_path / "d.csv"
    csv.write_text("x,c\n" + "".join(f"{i % 17},a\n" for i in range(100)))
    rows = released(spec_text("  - {name: q, kind: quantile, column: x, q: [0.25, 0.5], interval: {share: 0.2}}\n"),
                    csv)
    assert [(r["value"], r["ci_low"], r["ci_high"]) for r in rows] == [(r["value"],) * 3 for r in rows]
    values = [Fraction(i % 17) for i in range(100)]
    expected = [reference(values, [Fraction(c) for c in range(21)], Fraction(q)) for q in ("1/4", "1/2")]
    assert [Fraction(r["value"]) for r in rows] == expected


def test_interval_bounds_when_the_count_is_too_small(tmp_path: Path) -> None:
    from dpcli.mechanisms import quantiles
    from dpcli.plan.quantiles import interval_levels

    # n^ - e_n <= 0: both ends are the bounds; a level past 1: the high end is the bound
    assert interval_levels(Fraction(1, 2), 3, 5, 10, 2**24) == (None, None)
    assert interval_levels(Fraction(9, 10), 100, 0, 20, 2**24) == (Fraction(11744051, 2**24), None)
    # the low level is rounded down onto the grid, the high one up (each only widens the interval)
    assert interval_levels(Fraction(1, 3), 100, 0, 10, 2**4) == (Fraction(3, 16), Fraction(7, 16))
    import numpy as np

    counts = np.array([[5, 5, 5, 5]])
    low, high = quantiles.intervals(counts, (Fraction(1, 2),), np.array([[1]]), np.array([2]), 5, Fraction(10), 3,
                                    1, 4, 3)
    assert (low.tolist(), high.tolist()) == ([[0]], [[3]])


def test_release_writes_interval_numbers_and_audit_says_the_draws_are_not_audited(tmp_path: Path) -> None:
    csv = tmp_path / "d.csv"
    csv.write_text("x,c\n" + "".join(f"{i % 21},{'ab'[i % 2]}\n" for i in range(3000)))
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(
        "  - {name: m, kind: median, column: x, by: [c], interval: {share: 0.5}}\n", budget="epsilon: 4"
    ).replace("dataset: d\n", "dataset: d\ninput: d.csv\n"))
    ledger = tmp_path / "ledger.jsonl"
    assert run_in_process("budget", "set", "d", "--epsilon", "5", "--ledger", ledger).returncode == 0
    out = run_in_process("release", spec, "--ledger", ledger, "-o", tmp_path / "a.json")
    assert out.returncode == 0, out.stderr
    rows = json.loads((tmp_path / "a.json").read_text())
    for r in rows:
        assert 0 <= r["ci_low"] <= r["value"] <= r["ci_high"] <= 20
    audit = run_in_process("audit", spec, "--trials", "1000", "--json")
    assert audit.returncode == 0, audit.stderr
    report = json.loads(audit.stdout)
    assert any(n.startswith("NOT AUDITED: the interval draws of m ") for n in report["notes"])


def test_gaps_are_exact_python_int_gaps_saturated_in_int64() -> None:
    # issue 23: one representation (int64 saturated at 2^62) whatever the counts and the level, computed with work
    # fixed by the candidate count; checked against the utilities in Python ints, counts up to 2^40
    import numpy as np

    from dpcli.core.samplers import GAP_CAP
    from dpcli.mechanisms import quantiles

    rng = np.random.default_rng(23)
    for trial in range(200):
        m = int(rng.integers(1, 30))
        counts = rng.integers(0, 2**40 if trial % 3 == 0 else 5, (1, m)).astype(np.int64)
        q = Fraction(int(rng.integers(1, 50)), 50) if trial % 2 else Fraction(int(rng.integers(1, 2**46)), 2**46 + 1)
        lt, _, gt = quantiles.rank_counts(counts, 1, m)
        u = [int(v) for v in quantiles.utilities(lt[0], gt[0], q)]
        assert quantiles.quantile_gaps(lt[0], gt[0], q).tolist() == [min(max(u) - v, GAP_CAP) for v in u]
        grid = 2 ** int(rng.integers(1, 41))
        level = Fraction(int(rng.integers(1, grid)), grid)
        n = int(counts.sum())
        through = [*lt[0][1:].tolist(), n]
        v = quantiles.interval_utilities(lt[0].tolist(), through, n, level)
        scale = grid // level.denominator  # the gaps are in units of 1/grid rows
        expected = [min((max(v) - x) * scale, GAP_CAP) for x in v]
        assert max(v) == 0
        assert quantiles.interval_gaps(lt[0], np.array(through), n, level, grid).tolist() == expected
