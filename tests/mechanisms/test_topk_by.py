"""top_k and mode with by: one ranking per cell of by: (docs/spec.md, "Top-k and mode"): the loader and the plan
(the per-cell draws and their sensitivity, unit row and person), the exact answer per cell through the no-noise path,
the noisy draws, and the release, its table, sidecar and report end to end.

The audit of a top_k with by: is in tests/audit/test_audit_top_k_by.py (slow); the property test of sensitivities
draws top_k with by: too (tests/test_sensitivity_property.py)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest

from dpcli.engine import aggregate
from dpcli.mechanisms.noise import draw_noise, exact_noisy
from dpcli.publish.table import build_table
from tests.helpers import run_dpcli
from tests.mechanisms.test_topk import ADULT, OCCUPATIONS, error, plan_of, spec_text

TOP_BY_SEX = "  - {name: top, kind: top_k, column: occupation, k: 3, by: [sex]}\n"


@pytest.mark.parametrize(("neighbours", "factor"), [("add_remove", 1), ("replace", 2)])
def test_a_top_k_with_by_ranks_the_keys_of_each_cell_at_the_whole_epsilon(neighbours: str, factor: int) -> None:
    # before issue 25 the loader refused it: "statistics[0].by: not allowed for a top_k or mode"
    plan = plan_of(TOP_BY_SEX, privacy=f"{{epsilon: 1.5, neighbours: {neighbours}}}")
    sp = plan.statistics[0]
    comp = sp.component("choice")
    assert (sp.cells, comp.choices, comp.draws) == (28, 14, 3)  # 2 cells of by: × 14 keys; 14 candidates a draw
    assert sp.epsilon == plan.epsilon == Fraction(3, 2)  # the cells compose in parallel: each the whole ε
    assert comp.epsilon == Fraction(1, 2)
    assert comp.sensitivity == 1
    assert comp.scale == factor * 2  # temperature factor·D/ε0: as without by:
    assert ("compose in parallel" in comp.derivation) == (neighbours == "add_remove")
    assert ("(D + D)/t = ε0" in comp.derivation) == (neighbours == "replace")


@pytest.mark.parametrize(
    ("unit", "neighbours", "sensitivity", "factor"),
    [
        # n = min(K, g·r), g = min(K, G, cells): the person's largest changes summed over the cells of by:
        ("{id: pid, max_rows: 3, missing_id: drop}", "add_remove", 3, 1),
        ("{id: pid, max_rows: 5, max_groups: 2, max_rows_per_group: 1, missing_id: drop}", "add_remove", 2, 1),
        ("{id: pid, max_rows: 5, max_groups: 2, max_rows_per_group: 2, missing_id: drop}", "replace", 4, 2),
        ("{id: pid, max_rows: 3, max_groups: 4, max_rows_per_group: 2, missing_id: drop}", "replace", 3, 2),
    ],
)
def test_under_a_person_unit_the_sensitivity_is_the_persons_rows_over_the_cells(
    unit: str, neighbours: str, sensitivity: int, factor: int
) -> None:
    plan = plan_of(
        "  - {name: t, kind: top_k, column: occupation, k: 2, by: [sex]}\n",
        privacy=f"{{unit: {unit}, neighbours: {neighbours}, epsilon: 1}}",
    )
    comp = plan.statistics[0].component("choice")
    assert comp.sensitivity == sensitivity
    assert comp.scale == factor * sensitivity * 2  # eps0 = 1/2
    assert f"D=n={sensitivity}" in comp.derivation


def test_open_keys_with_by_are_refused() -> None:
    opened = "  country: {type: category, categories: open}\n"
    privacy = "{epsilon: 1, delta: 1e-6}"
    assert error("  - {name: t, kind: top_k, column: country, k: 2, by: [sex]}\n", privacy=privacy,
                 columns=opened).endswith("statistics[0].by: a top_k with by: ranks declared keys in declared cells "
                                          "('country' is open)")
    assert error("  - {name: t, kind: mode, column: sex, by: [country]}\n", privacy=privacy,
                 columns=opened).endswith("statistics[0].by: a mode with by: ranks declared keys in declared cells "
                                          "('country' is open)")


def expected_per_cell(by: str, column: str, keys: list[str], cells: list[str], k: int) -> list[tuple[str, str]]:
    """Each cell's k declared keys with the most rows, ties to the first declared key: plain polars."""
    frame = pl.read_csv(ADULT, infer_schema=False)
    out = []
    for cell in cells:
        counts = dict(frame.filter(pl.col(by) == cell)[column].value_counts().iter_rows())
        out += [(cell, key) for key in sorted(keys, key=lambda key: (-counts.get(key, 0), keys.index(key)))[:k]]
    return out


def test_the_exact_ranking_is_each_cells_largest_counts() -> None:
    plan = plan_of(TOP_BY_SEX + "  - {name: commonest, kind: mode, column: sex, by: [occupation]}\n")
    rows = list(build_table(plan, exact_noisy(aggregate(plan, ADULT), plan)).rows())
    # columns: statistic, kind, column, sex, occupation, value, ci_low, ci_high, epsilon
    top = [r for r in rows if r[0] == "top"]
    assert [(r[3], r[4]) for r in top] == expected_per_cell("sex", "occupation", OCCUPATIONS, ["Female", "Male"], 3)
    assert [r[5] for r in top] == ["1", "2", "3"] * 2
    mode = [r for r in rows if r[0] == "commonest"]
    assert [(r[4], r[3]) for r in mode] == expected_per_cell("occupation", "sex", ["Female", "Male"], OCCUPATIONS, 1)
    assert {r[5] for r in mode} == {"1"}
    assert {(r[6], r[7]) for r in rows} == {(None, None)}


def test_a_noisy_draw_gives_k_distinct_keys_in_every_cell() -> None:
    plan = plan_of("  - {name: top, kind: top_k, column: occupation, k: 4, by: [sex]}\n")
    chosen = draw_noise(plan, aggregate(plan, ADULT))[0].chosen
    assert chosen is not None
    per_cell = chosen.reshape(2, 4).tolist()
    assert all(len(set(cell)) == 4 and all(0 <= i < len(OCCUPATIONS) for i in cell) for cell in per_cell)


def test_release_plan_and_report_of_a_top_k_with_by(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(TOP_BY_SEX) + f"input: {ADULT}\n", encoding="utf-8")
    plan = run_dpcli("plan", spec)
    assert plan.returncode == 0, plan.stderr
    assert "top (choice): add/remove: one row is in one cell of by:" in plan.stdout.decode()
    ledger, out = tmp_path / "ledger.jsonl", tmp_path / "out.csv"
    assert run_dpcli("budget", "set", "adult", "--epsilon", "1", "--ledger", ledger).returncode == 0
    run = run_dpcli("release", spec, "--ledger", ledger, "-o", out, "--release-id", "a", "--quiet",
                    "--report", tmp_path / "r.html")
    assert run.returncode == 0, run.stderr
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "statistic,kind,column,sex,occupation,value,ci_low,ci_high,epsilon"
    cells = [line.split(",") for line in lines[1:]]
    assert [(c[3], c[5]) for c in cells] == [(s, str(r)) for s in ("Female", "Male") for r in (1, 2, 3)]
    assert all(c[4] in OCCUPATIONS for c in cells)
    assert len({(c[3], c[4]) for c in cells}) == 6
    top = json.loads((tmp_path / "out.csv.meta.json").read_text(encoding="utf-8"))["statistics"][0]
    assert (top["by"], top["k"], top["cells"], top["epsilon"]) == (["sex"], 3, 28, "1")
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<p>Female</p><ol class='ranked'>" in html
    assert "<p>Male</p><ol class='ranked'>" in html


def test_under_a_person_unit_the_counts_are_the_histograms_by_the_same_cells(tmp_path: Path) -> None:
    """A top_k with by: reads its cells' per-key counts exactly as a histogram with the same by: does (the same
    K/G/R bounding over the (cell of by:, key) cells)."""
    path = tmp_path / "p.csv"
    lines = ["pid,occupation,sex,age"] + [
        f"p{i % 23},{OCCUPATIONS[(i * 7) % 5]},{'Male' if i % 3 else 'Female'},{i % 90}" for i in range(200)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    plan = plan_of(
        "  - {name: top, kind: top_k, column: occupation, k: 2, by: [sex]}\n"
        "  - {name: h, kind: histogram, column: occupation, by: [sex]}\n",
        privacy="{unit: {id: pid, max_rows: 4, max_groups: 2, max_rows_per_group: 1, missing_id: drop}, epsilon: 1}",
    )
    top, hist = aggregate(plan, path, secret=b"s" * 32)
    assert top.counts.tolist() == hist.counts.tolist()
    assert 0 < top.counts.sum() <= 23 * 2  # G = 2 cells, R = 1 row in each


# The plan's claim on the neighbours that reach it: each cell of by: is drawn on its own counts, and a draw over a cell
# whose counts fall by at most d and rise by at most e loses at most (d + e)/t; the draws of all cells lose the sum,
# which the temperature t must pay for with the per-draw ε0: sum <= t·ε0. Exact counts of real files, no noise.


def falls_and_rises(plan, path_d: Path, path_d_prime: Path) -> Fraction:
    sp = plan.statistics[0]
    keys = sp.component("choice").choices
    a = aggregate(plan, path_d, secret=b"s" * 32)[0].counts.reshape(-1, keys)
    b = aggregate(plan, path_d_prime, secret=b"s" * 32)[0].counts.reshape(-1, keys)
    return Fraction(sum(int(max(0, (b - a)[c].max())) + int(max(0, (a - b)[c].max())) for c in range(len(a))))


def test_a_row_changing_its_cell_is_paid_for_under_replace(tmp_path: Path) -> None:
    d, d_prime = tmp_path / "d.csv", tmp_path / "d2.csv"
    base = "occupation,sex,age\nSales,Male,30\nSales,Female,31\nTech-support,Male,32\n"
    d.write_text(base + "Sales,Male,40\n", encoding="utf-8")
    d_prime.write_text(base + "Tech-support,Female,40\n", encoding="utf-8")  # one cell loses a row, another gains
    plan = plan_of(TOP_BY_SEX, privacy="{epsilon: 1, neighbours: replace}")
    comp = plan.statistics[0].component("choice")
    assert falls_and_rises(plan, d, d_prime) == 2
    assert comp.required_scale() * comp.epsilon >= 2


@pytest.mark.parametrize("neighbours", ["add_remove", "replace"])
def test_a_person_over_several_cells_is_paid_for(tmp_path: Path, neighbours: str) -> None:
    d, d_prime = tmp_path / "d.csv", tmp_path / "d2.csv"
    base = "pid,occupation,sex,age\nq,Sales,Male,30\nq2,Sales,Female,31\n"
    person = "p,Sales,Male,40\np,Sales,Male,41\np,Sales,Female,42\np,Sales,Female,43\n"  # K = 4 rows kept
    other = "p,Tech-support,Male,40\np,Tech-support,Male,41\np,Tech-support,Female,42\np,Tech-support,Female,43\n"
    d.write_text(base + person, encoding="utf-8")
    d_prime.write_text(base + (other if neighbours == "replace" else ""), encoding="utf-8")
    plan = plan_of(TOP_BY_SEX, privacy=f"{{unit: {{id: pid, max_rows: 4, missing_id: drop}}, neighbours: {neighbours}, "
                   "epsilon: 1}")
    comp = plan.statistics[0].component("choice")
    spread = falls_and_rises(plan, d, d_prime)
    assert spread == (4 if neighbours == "add_remove" else 8)  # 2 in each cell of by:, for each person
    assert spread <= comp.required_scale() * comp.epsilon
