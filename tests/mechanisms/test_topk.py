"""top_k and mode (docs/spec.md, "Top-k and mode"): the loader's rules, the plan's accounting and sensitivity, the
exact answer through the no-noise path on every local engine, the output's rows, and the release end to end.

The mechanism's law (the plan's temperature wired into the exact sampler) is tested by chi-squared in
tests/statistical/test_top_k.py."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dpcli.engine import aggregate
from dpcli.errors import SpecError
from dpcli.mechanisms.noise import draw_noise, exact_noisy
from dpcli.plan.model import make_plan
from dpcli.plan.scales import choice_gap
from dpcli.publish.table import build_table
from dpcli.specs.load import parse_spec
from tests.helpers import run_in_process

ROOT = Path(__file__).resolve().parents[2]
ADULT = ROOT / "tests" / "data" / "adult.csv"
OCCUPATIONS = [
    "Adm-clerical", "Armed-Forces", "Craft-repair", "Exec-managerial", "Farming-fishing", "Handlers-cleaners",
    "Machine-op-inspct", "Other-service", "Priv-house-serv", "Prof-specialty", "Protective-serv", "Sales",
    "Tech-support", "Transport-moving",
]


def spec_text(statistics: str, privacy: str = "{epsilon: 1}", columns: str = "") -> str:
    return f"""\
version: 1
dataset: adult
privacy: {privacy}
columns:
  occupation: {{type: category, categories: [{", ".join(OCCUPATIONS)}]}}
  sex:        {{type: category, categories: [Female, Male]}}
  age:        {{type: int, bounds: [0, 100]}}
{columns}statistics:
{statistics}"""


RICH = "  rich:       {type: bool}\n"


def plan_of(statistics: str, **kwargs: str):
    return make_plan(parse_spec(spec_text(statistics, **kwargs)))


def error(statistics: str, **kwargs: str) -> str:
    with pytest.raises(SpecError) as info:
        plan_of(statistics, **kwargs)
    return str(info.value)


# -- the loader --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("statistic", "message"),
    [
        ("{name: t, kind: top_k, column: occupation}", "statistics[0].k: required for a top_k: how many keys to rank"),
        ("{name: t, kind: top_k, column: sex, k: 3}", "statistics[0].k: k is 3, more than the 2 keys of 'sex'"),
        ("{name: t, kind: top_k, column: age, k: 1}",
         "statistics[0].column: a top_k ranks the keys of a category or bool column; 'age' is int"),
        ("{name: t, kind: mode, column: sex, k: 1}",
         "statistics[0].k: a mode is a top_k with k: 1 (use kind: top_k for more)"),
        ("{name: t, kind: mode, column: sex, mechanism: gaussian}",
         "statistics[0].mechanism: a top_k or mode uses the exponential mechanism (report-noisy-max): no mechanism "
         "to choose"),
        ("{name: t, kind: mode}", "statistics[0].column: required for a mode"),
        ("{name: t, kind: top_k, column: sex, k: 0}", "statistics[0].k: the value must be in [1, 1000], got 0"),
        ("{name: t, kind: mode, column: sex, delta: 1e-6}",
         "statistics[0].delta: only for a statistic with open keys (its partition selection's delta)"),
    ],
)
def test_the_loader_refuses(statistic: str, message: str) -> None:
    assert error(f"  - {statistic}\n") == message


def test_a_mode_is_a_top_k_of_one_and_bool_columns_have_keys() -> None:
    plan = plan_of(
        "  - {name: m, kind: mode, column: rich}\n  - {name: t, kind: top_k, column: rich, k: 2}\n", columns=RICH
    )
    assert [sp.statistic.k for sp in plan.statistics] == [1, 2]  # type: ignore[union-attr]
    assert [sp.statistic.kind for sp in plan.statistics] == ["mode", "top_k"]
    assert [sp.cells for sp in plan.statistics] == [2, 2]


# -- the plan: accounting and sensitivity --------------------------------------------------------------------------


def choice(plan, i: int = 0):
    comp = plan.statistics[i].component("choice")
    assert comp.mechanism == "exponential"
    return comp


@pytest.mark.parametrize(("neighbours", "factor"), [("add_remove", 1), ("replace", 2)])
def test_pure_epsilon_is_split_over_the_k_draws(neighbours: str, factor: int) -> None:
    plan = plan_of(
        "  - {name: t, kind: top_k, column: occupation, k: 3}\n  - {name: n, kind: count}\n",
        privacy=f"{{epsilon: 1.5, neighbours: {neighbours}}}",
    )
    comp, sp = choice(plan), plan.statistics[0]
    assert sp.epsilon == Fraction(3, 4)
    assert plan.epsilon == Fraction(3, 2)  # the weights' even split
    assert comp.epsilon == Fraction(1, 4)
    assert comp.draws == 3
    assert comp.choices == 14
    assert comp.sensitivity == 1
    assert comp.scale == factor * 4  # temperature: factor * D / eps0
    assert sp.reported_epsilon == Fraction(3, 4)
    assert ("(a monotone utility)" in comp.derivation) == (neighbours == "add_remove")


def test_zcdp_draws_use_the_largest_epsilon_rho_allows_rounded_down() -> None:
    plan = plan_of(
        "  - {name: t, kind: top_k, column: occupation, k: 5, rho: 0.02}\n"
        "  - {name: n, kind: count, mechanism: gaussian, rho: 0.01}\n",
        privacy="{rho: 0.03}",
    )
    comp, sp = choice(plan), plan.statistics[0]
    assert sp.rho == Fraction(2, 100)
    assert sp.epsilon == 0
    assert plan.rho == Fraction(3, 100)
    eps0 = comp.epsilon
    # k eps0^2 / 2 <= rho (each permute-and-flip draw is pure eps0-DP, so eps0^2/2-zCDP; it is not claimed
    # bounded-range, issue 23), and eps0 is not far below it
    assert 5 * eps0 * eps0 / 2 <= Fraction(2, 100)
    assert math.isclose(float(eps0), math.sqrt(2 * 0.02 / 5), rel_tol=1e-9)
    assert comp.scale >= 1 / eps0
    assert sp.reported_epsilon == 5 * eps0


@pytest.mark.parametrize(
    ("unit", "neighbours", "sensitivity", "factor"),
    [
        ("{id: pid, max_rows: 10, missing_id: drop}", "add_remove", 10, 1),
        ("{id: pid, max_rows: 10, max_rows_per_group: 3, missing_id: drop}", "add_remove", 3, 1),
        ("{id: pid, max_rows: 2, max_groups: 1, max_rows_per_group: 5, missing_id: drop}", "replace", 2, 2),
    ],
)
def test_under_a_person_unit_the_utility_sensitivity_is_the_rows_per_key(
    unit: str, neighbours: str, sensitivity: int, factor: int
) -> None:
    plan = plan_of(
        "  - {name: t, kind: top_k, column: occupation, k: 2}\n",
        privacy=f"{{unit: {unit}, neighbours: {neighbours}, epsilon: 1}}",
    )
    comp = choice(plan)
    assert comp.sensitivity == sensitivity
    assert comp.scale == factor * sensitivity * 2  # eps0 = 1/2
    assert f"D={sensitivity}" in comp.derivation


def test_the_count_gap_bound_holds_where_it_is_tight() -> None:
    """choice_gap's h: the exact chance that a draw misses the best by more than h is at most 5%, in the case the
    bound is about (every other key exactly h + 1 below the best); and h is the smallest h the bound gives."""
    for t, m in [(Fraction(9), 14), (Fraction(2), 2), (Fraction(1, 3), 40), (Fraction(250), 1000)]:
        h = choice_gap(t, m, 1)
        w = (m - 1) * math.exp(-(h + 1) / float(t))
        assert w / (1 + w) <= 0.05
        if h > 0:  # h is the smallest the bound allows: at h - 1 it no longer reaches 95%
            assert (m - 1) * math.exp(-h / float(t)) > 0.05
    assert choice_gap(Fraction(5), 1, 1) == 0  # one key: nothing to miss
    assert choice_gap(Fraction(9), 14, 3) > choice_gap(Fraction(9), 14, 1)


def test_plan_prints_the_sensitivity_its_reason_and_the_count_gap(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text("  - {name: top, kind: top_k, column: occupation, k: 3}\n"), encoding="utf-8")
    run = run_in_process("plan", spec)
    assert run.returncode == 0, run.stderr
    out = run.stdout.decode()
    assert "top choice 14 exponential 1 3×1/3 t=3" in " ".join(out.split())
    assert "top (choice): add/remove one row changes a key's count by at most D=1" in out
    assert "a top_k's or mode's ±error is a count gap" in out
    doc = json.loads(run_in_process("plan", spec, "--json").stdout)["statistics"][0]
    assert (doc["mechanism"], doc["epsilon"], doc["scale"], doc["draws"], doc["choices"]) == (
        "exponential", "1/3", "3", 3, 14
    )
    assert int(doc["error95"]) == choice_gap(Fraction(3), 14, 3)


# -- the exact answer through the no-noise path ------------------------------------------------------------------


def expected_ranking(column: str, k: int, frame: pl.DataFrame, keys: list[str]) -> list[str]:
    """The k declared keys with the most rows, ties to the first declared key: plain polars."""
    counts = dict(frame[column].value_counts().iter_rows())
    return sorted(keys, key=lambda key: (-counts.get(key, 0), keys.index(key)))[:k]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_the_exact_ranking_is_the_largest_counts_on_every_local_engine(tmp_path: Path, fmt: str) -> None:
    frame = pl.read_csv(ADULT, infer_schema=False)
    path = ADULT
    if fmt == "parquet":
        path = tmp_path / "adult.parquet"
        frame.write_parquet(path)
    plan = plan_of(
        "  - {name: top, kind: top_k, column: occupation, k: 5}\n  - {name: commonest, kind: mode, column: sex}\n"
        "  - {name: both, kind: top_k, column: sex, k: 2}\n"
    )
    table = build_table(plan, exact_noisy(aggregate(plan, path), plan))
    rows = list(table.rows())
    assert [r[3] for r in rows[:5]] == expected_ranking("occupation", 5, frame, OCCUPATIONS)
    assert [r[4] for r in rows[5:]] == ["Male", "Male", "Female"]
    assert [r[5] for r in rows] == ["1", "2", "3", "4", "5", "1", "1", "2"]  # value: the rank
    assert {r[6] for r in rows} == {None}
    assert {r[7] for r in rows} == {None}  # no interval
    kinds = [("top_k", "occupation")] * 5 + [("mode", "sex"), ("top_k", "sex"), ("top_k", "sex")]
    assert [r[1:3] for r in rows] == kinds


def test_ties_go_to_the_first_declared_key_on_the_no_noise_path(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("occupation,sex,rich,age\nSales,Male,true,1\nSales,Female,false,2\nArmed-Forces,Male,x,3\n"
                    "Armed-Forces,,,\nTech-support,Male,1,5\n", encoding="utf-8")
    plan = plan_of(
        "  - {name: top, kind: top_k, column: occupation, k: 3}\n  - {name: r, kind: mode, column: rich}\n",
        columns=RICH,
    )
    rows = list(build_table(plan, exact_noisy(aggregate(plan, path), plan)).rows())
    assert [r[3] for r in rows[:3]] == ["Armed-Forces", "Sales", "Tech-support"]
    # true: 2 (true, 1), false: 1; "x" and the empty cell are missing
    assert rows[3][1:6] == ("mode", "rich", None, "true", "1")


def test_under_a_person_unit_the_counts_are_the_histograms_of_the_same_bounding(tmp_path: Path) -> None:
    """A top_k reads its column's per-key counts exactly as a histogram of that column does (the same recipe, the
    same K/G/R bounding, tested against a brute-force reading in tests/engine/test_persons.py)."""
    path = tmp_path / "p.csv"
    lines = ["pid,occupation,sex,rich,age"] + [
        f"p{i % 23},{OCCUPATIONS[(i * 7) % 5]},{'Male' if i % 3 else 'Female'},true,{i % 90}" for i in range(200)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    plan = plan_of(
        "  - {name: top, kind: top_k, column: occupation, k: 2}\n"
        "  - {name: h, kind: histogram, column: occupation}\n",
        privacy="{unit: {id: pid, max_rows: 4, max_groups: 2, max_rows_per_group: 1, missing_id: drop}, epsilon: 1}",
    )
    top, hist = aggregate(plan, path, secret=b"s" * 32)
    assert top.counts.tolist() == hist.counts.tolist()
    assert 0 < top.counts.sum() <= 23 * 2  # G = 2 cells, R = 1 row in each


# -- open keys: ranked after the partition selection --------------------------------------------------------------

OPEN = """\
version: 1
dataset: adult
privacy: {epsilon: 1, delta: 1e-6}
columns:
  native_country: {type: category, categories: open, max_length: 32}
statistics:
  - {name: top_countries, kind: top_k, column: native_country, k: 4}
"""


def test_open_keys_rank_the_selected_entries_by_their_counts() -> None:
    plan = make_plan(parse_spec(OPEN))
    sp = plan.statistics[0]
    assert sp.selection is not None
    assert [c.role for c in sp.components] == ["count"]
    assert sp.components[0].mechanism == "discrete_laplace"
    assert sp.components[0].scale == 1
    rows = list(build_table(plan, exact_noisy(aggregate(plan, ADULT), plan)).rows())
    counts = pl.read_csv(ADULT, infer_schema=False)["native_country"].value_counts(sort=True)
    top = [c for c, n in counts.iter_rows() if c is not None and n >= sp.selection.threshold][:4]
    assert [r[3] for r in rows] == top
    assert [r[4] for r in rows] == ["1", "2", "3", "4"]


def test_open_keys_with_fewer_passing_keys_release_fewer_rows(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("native_country\n" + "Cuba\n" * 40 + "Peru\n" * 60 + "rare\n", encoding="utf-8")
    plan = make_plan(parse_spec(OPEN))
    rows = list(build_table(plan, exact_noisy(aggregate(plan, path), plan)).rows())
    assert [(r[3], r[4]) for r in rows] == [("Peru", "1"), ("Cuba", "2")]


# -- the release ---------------------------------------------------------------------------------------------------


def test_a_noisy_draw_returns_k_distinct_declared_keys() -> None:
    plan = plan_of("  - {name: top, kind: top_k, column: occupation, k: 4}\n")
    exact = aggregate(plan, ADULT)
    chosen = draw_noise(plan, exact)[0].chosen
    assert chosen is not None
    assert len(set(chosen.tolist())) == 4
    assert all(0 <= i < len(OCCUPATIONS) for i in chosen.tolist())


def test_release_writes_ranks_without_intervals_and_a_rerun_returns_the_same_bytes(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        spec_text("  - {name: top, kind: top_k, column: occupation, k: 3}\n  - {name: n, kind: count}\n")
        + f"input: {ADULT}\n",
        encoding="utf-8",
    )
    ledger = tmp_path / "ledger.jsonl"
    assert run_in_process("budget", "set", "adult", "--epsilon", "5", "--ledger", ledger).returncode == 0
    for fmt in ("csv", "json"):
        out = tmp_path / f"out.{fmt}"
        args = ("release", spec, "--ledger", ledger, "--output", out, "--release-id", fmt, "--quiet")
        assert run_in_process(*args).returncode == 0
        first = out.read_bytes()
        out.unlink()
        assert run_in_process(*args).returncode == 0
        assert out.read_bytes() == first
    csv_lines = (tmp_path / "out.csv").read_text(encoding="utf-8").splitlines()
    assert csv_lines[0] == "statistic,kind,column,occupation,value,ci_low,ci_high,epsilon"
    assert [line.split(",")[4:7] for line in csv_lines[1:4]] == [["1", "", ""], ["2", "", ""], ["3", "", ""]]
    assert len({line.split(",")[3] for line in csv_lines[1:4]}) == 3
    doc = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert [(r["value"], r["ci_low"], r["ci_high"]) for r in doc[:3]] == [(1, None, None), (2, None, None),
                                                                          (3, None, None)]
    assert all(r["occupation"] in OCCUPATIONS for r in doc[:3])
    sidecar = json.loads((tmp_path / "out.json.meta.json").read_text(encoding="utf-8"))
    top = sidecar["statistics"][0]
    assert top["k"] == 3
    assert top["noise"][0]["mechanism"] == "exponential"
    assert top["noise"][0]["draws"] == 3
    assert np.isclose(float(top["epsilon"]), 0.5)


def test_the_audits_permute_and_flip_law_matches_the_exact_one() -> None:
    # dpcli audit's likelihoods (float64 quadrature) against permute-and-flip's law expanded exactly in Fractions
    from dpcli.mechanisms.topk import permute_and_flip_log_pmf
    from tests.pf_law import permute_and_flip_law

    for scores, rate in [([3, 2, 0], Fraction(1)), ([5, 5, 5, 0, 3], Fraction(10, 7)), (list(range(7)), Fraction(2)),
                         ([0, 1, 1, 1, 1, 1, 1], Fraction(1, 3)), ([10**6, 0], Fraction(1, 2))]:
        exact = permute_and_flip_law(scores, rate)
        gaps = np.array([max(scores) - s for s in scores], dtype=float)
        got = permute_and_flip_log_pmf(gaps, float(1 / rate))
        for g, p in zip(got.tolist(), exact, strict=True):
            if p > Fraction(1, 10**200):
                assert math.isclose(g, math.log(p), rel_tol=1e-12, abs_tol=1e-12), (scores, rate)
            else:
                assert g < -200
