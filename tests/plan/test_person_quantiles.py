"""Quantiles and the median under a person unit (issue 25, finding 9): the loader takes them, the plan derives each
level's utility sensitivity from K, G and R (checked against a brute-force search over everything one bounded person
can do to the utilities of every cell), prints the derivation, and a release runs."""

from __future__ import annotations

import itertools
from fractions import Fraction
from functools import cache
from pathlib import Path

import pytest

from dpcli.plan.model import make_plan
from dpcli.specs.load import parse_spec
from tests.helpers import run_in_process
from tests.spec_builder import spec_text

LEVELS = ("0.5", "0.25", "0.9", "1/3")
BINS = 3  # the column's bounds [0, 2] at precision 1: three candidates, one bin each
BASES = tuple(itertools.product((0, 1, 3), repeat=BINS))  # other persons' rows per candidate, in one cell


def unit(k: int, g: int | None, r: int | None) -> str:
    parts = [f"id: pid, max_rows: {k}", "missing_id: drop"]
    parts += [f"max_groups: {g}"] if g else []
    parts += [f"max_rows_per_group: {r}"] if r else []
    return "{" + ", ".join(parts) + "}"


def person_spec(privacy: str, statistics: str) -> str:
    columns = "  s: {type: category, categories: [a, b]}\n  x: {type: int, bounds: [0, 2]}\n"
    return spec_text(columns, statistics, privacy=privacy, dataset="d")


def utility(bins: tuple[int, ...], q: Fraction) -> list[int]:
    """-|(b - a) lt(c) - a gt(c)| per candidate, written out plainly."""
    a, b = q.numerator, q.denominator
    return [-abs((b - a) * sum(bins[:c]) - a * sum(bins[c + 1:])) for c in range(len(bins))]


def rank_distance(bins: tuple[int, ...], q: Fraction) -> list[int]:
    """The intervals' -max(0, a n - b through(c), b lt(c) - a n) per candidate."""
    a, b = q.numerator, q.denominator
    n = sum(bins)
    return [-max(0, a * n - b * sum(bins[: c + 1]), b * sum(bins[:c]) - a * n) for c in range(len(bins))]


@cache
def cell_change(mine: tuple[int, ...], theirs: tuple[int, ...], q: Fraction, rank: bool) -> int:
    """The largest change of one cell's utilities, over the bases, when the person's rows there go from ``mine`` to
    ``theirs`` (per candidate)."""
    f = rank_distance if rank else utility
    worst = 0
    for base in BASES:
        u = f(tuple(x + y for x, y in zip(base, mine, strict=True)), q)
        v = f(tuple(x + y for x, y in zip(base, theirs, strict=True)), q)
        worst = max(worst, *(abs(x - y) for x, y in zip(u, v, strict=True)))
    return worst


def contributions(cells: int, k: int, g: int | None, r: int | None) -> list[tuple[tuple[int, ...], ...]]:
    """Every way one bounded person's rows fall in the cells' candidate bins: at most K rows, in at most G cells, at
    most R in each (no cells: K rows)."""
    per = min(k, r or k) if cells > 1 else k
    in_cell = [v for v in itertools.product(range(per + 1), repeat=BINS) if sum(v) <= per]
    out = []
    for combo in itertools.product(in_cell, repeat=cells):
        if sum(map(sum, combo)) > k or (cells > 1 and sum(1 for v in combo if sum(v)) > min(g or k, k)):
            continue
        out.append(combo)
    return out


@pytest.mark.parametrize("neighbours", ["add_remove", "replace"])
@pytest.mark.parametrize(
    ("by", "k", "g", "r"),
    [(False, 1, None, None), (False, 3, None, None), (True, 3, None, None), (True, 3, 2, None), (True, 4, None, 1),
     (True, 4, 2, 2)],
)
def test_each_level_covers_every_change_one_person_can_make(
    neighbours: str, k: int, g: int | None, r: int | None, by: bool
) -> None:
    """Summed over the cells (the cells' draws compose), one person moves each level's utilities by at most the
    plan's sensitivity; the intervals' rank distance by at most b times theirs."""
    levels = ", ".join(LEVELS)
    stat = f"{{name: q, kind: quantile, column: x, q: [{levels}], interval: {{share: 0.5}}{', by: [s]' if by else ''}}}"
    plan = make_plan(parse_spec(person_spec(f"{{epsilon: 1, neighbours: {neighbours}, unit: {unit(k, g, r)}}}",
                                            f"  - {stat}\n")))
    sp = plan.statistics[0]
    by_role = {c.role: c for c in sp.components}
    people = contributions(2 if by else 1, k, g, r)
    empty = tuple((0,) * BINS for _ in people[0])
    pairs = itertools.product(people, people) if neighbours == "replace" else ((empty, p) for p in people)
    pairs = list(pairs)
    for text in LEVELS:
        q = Fraction(text)
        level, low = by_role[f"q={text}"], by_role[f"q={text} low"]
        moved = max(sum(cell_change(x, y, q, False) for x, y in zip(p1, p2, strict=True)) for p1, p2 in pairs)
        assert moved <= level.sensitivity, (text, moved, level.sensitivity)
        ranked = max(sum(cell_change(x, y, q, True) for x, y in zip(p1, p2, strict=True)) for p1, p2 in pairs)
        assert ranked <= q.denominator * low.sensitivity, (text, ranked, low.sensitivity)
        if not by and neighbours == "add_remove":  # tight: K rows on one side of every candidate
            assert moved == level.sensitivity, (text, moved, level.sensitivity)


def test_the_plan_derives_a_person_level_median_from_k_g_and_r() -> None:
    plan = make_plan(parse_spec(person_spec(
        f"{{epsilon: 1, unit: {unit(4, 2, 3)}}}",
        "  - {name: m, kind: median, column: x}\n  - {name: mb, kind: quantile, column: x, q: [0.9], by: [s]}\n",
    )))
    median, by_cell = plan.statistics[0].components[0], plan.statistics[1].components[0]
    assert (median.sensitivity, by_cell.sensitivity) == (4, 36)  # K·max(a, b - a); min(K, g·r)·9
    assert median.derivation.startswith(
        "add/remove one person (K=4, G=2, R=3): their at most K=4 rows each move into lt(c) or gt(c) (or neither), "
        "so u(c) = -|1·lt(c) - 1·gt(c)| changes by at most K·max(a, b - a) = 4×1 = 4;"
    )
    assert "n_j·max(a, b - a), the n_j adding up to at most n = min(K, g·r) = 4" in by_cell.derivation
    assert plan.statistics[1].bounding is not None


def test_a_person_level_median_is_released(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(person_spec(f"{{epsilon: 5, unit: {unit(2, None, None)}}}",
                                "  - {name: m, kind: median, column: x, by: [s]}\n"))
    data = tmp_path / "d.csv"
    data.write_text("pid,s,x\n" + "".join(f"p{i % 40},{'ab'[i % 2]},{i % 3}\n" for i in range(120)))
    out, ledger = tmp_path / "out.csv", tmp_path / "l.jsonl"
    assert run_in_process("budget", "set", "d", "--epsilon", "5", "--ledger", ledger).returncode == 0
    done = run_in_process("release", spec, "-i", data, "-o", out, "--ledger", ledger)
    assert done.returncode == 0, done.stderr.decode()
    lines = out.read_text().splitlines()
    assert lines[0].startswith("statistic,kind,column,s,quantile,value")
    assert [line.split(",")[3] for line in lines[1:]] == ["a", "b"]
