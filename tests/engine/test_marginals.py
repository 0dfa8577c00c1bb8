"""A synth spec's marginals (the internal kind ``marginal``: dpcli.plan.synth) counted by the engine equal a plain
Python count over the same CSV by the documented cell rules (docs/spec.md, "How cells are read" and "Synthetic
data"): missing values dropped or kept as the last code, values outside the bounds clamped into the edge bins, keys
nobody declared missing, bins on int and float columns, edges and even grids."""

from __future__ import annotations

import csv
import math
import random
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from dpcli.engine import aggregate
from dpcli.engine.cells import used_columns
from dpcli.plan.synth import make_synth_plan
from dpcli.specs.load import parse_spec

SPEC = """\
version: 1
dataset: toy
privacy: {unit: row, neighbours: add_remove, rho: 1}
columns:
  age: {type: int, bounds: [17, 90]}
  w: {type: float, bounds: [0, 10], precision: 0.5}
  n: {type: int, bounds: [0, 9]}
  h: {type: float, bounds: [-1, 1], precision: 0.1}
  sex: {type: category, categories: [F, M]}
  ok: {type: bool}
  unused: {type: category, categories: [a]}
synth:
  method: mst
  columns:
    age: {bins: [17, 30, 50, 91], missing: keep}
    w: {bins: {start: 0, stop: 12.5, step: 2.5}}
    n: {bins: {start: -2, stop: 10, step: 4}, missing: keep}
    h: {bins: [-1, -0.3, 0.4, 2]}
    sex: {missing: keep}
    ok: {}
"""
CELLS = {
    "age": ["17", "29", "30", "49", "50", "90", "5", "200", "-3", "abc", "", "31.5"],
    "w": ["0", "2.4", "2.6", "5", "7.4", "9.9", "10", "-2", "15", "nan", "inf", "x", "", "3.3"],
    "n": ["0", "1", "2", "5", "6", "9", "-4", "12", "q", ""],
    "h": ["-1", "-0.31", "-0.29", "0.38", "0.42", "0.99", "-5", "3", "", "1e-3"],
    "sex": ["F", "M", "f", "X", "", "M "],
    "ok": ["true", "FALSE", "1", "0", "yes", "", "True"],
    "unused": ["a", "b"],
}


def _int(text: str) -> int | None:
    t = text[1:] if text[:1] in "+-" else text
    return int(text) if t.isascii() and t.isdigit() else None


def _float(text: str) -> float | None:
    try:
        x = float(text)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def _bin(k: int, step: Fraction, edges: list[Fraction]) -> int:
    value = k * step
    return max(i for i in range(len(edges) - 1) if edges[i] <= value)


def codes(row: dict[str, str]) -> dict[str, int | None]:
    """Each synth column's code by the documented rules, computed here independently of the engine."""
    out: dict[str, int | None] = {}
    a = _int(row["age"])
    out["age"] = 3 if a is None else _bin(min(max(a, 17), 90), Fraction(1), [Fraction(e) for e in (17, 30, 50, 91)])
    w = _float(row["w"])
    # on the grid of 0.5 (nearest point), then its bin of width 2.5: grid units k in [5j, 5j + 5)
    out["w"] = None if w is None else round(min(max(w, 0.0), 10.0) / 0.5) // 5
    n = _int(row["n"])
    out["n"] = 3 if n is None else (min(max(n, 0), 9) + 2) // 4
    h = _float(row["h"])
    if h is None:
        out["h"] = None
    else:
        k = round(min(max(h, -1.0), 1.0) / 0.1)
        out["h"] = _bin(k, Fraction(1, 10), [Fraction(-1), Fraction(-3, 10), Fraction(2, 5), Fraction(2)])
    out["sex"] = {"F": 0, "M": 1}.get(row["sex"], 2)
    out["ok"] = {"true": 1, "false": 0, "1": 1, "0": 0}.get(row["ok"].lower())
    return out


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, str]]]:
    rng = random.Random(27)
    rows = [{name: rng.choice(cells) for name, cells in CELLS.items()} for _ in range(600)]
    path = tmp_path_factory.mktemp("marginals") / "in.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(CELLS))
        writer.writeheader()
        writer.writerows(rows)
    return path, rows


def test_exact_marginals_equal_a_python_count(table: tuple[Path, list[dict[str, str]]]) -> None:
    path, rows = table
    plan = make_synth_plan(parse_spec(SPEC))
    names, sizes = plan.columns, plan.sizes
    assert sizes == (4, 5, 4, 3, 3, 2)
    exact = aggregate(plan.exact_plan, path)
    coded = [codes(r) for r in rows]
    marginals = [(i,) for i in range(len(names))] + list(plan.candidates)
    assert len(exact) == len(marginals)
    for got, dims in zip(exact, marginals, strict=True):
        want = np.zeros(math.prod(sizes[i] for i in dims), dtype=np.int64)
        for c in coded:
            cell = [c[names[i]] for i in dims]
            if None in cell:
                continue  # missing: drop leaves the row out of every marginal of that column
            code = 0
            for i, k in zip(dims, cell, strict=True):
                code = code * sizes[i] + k
            want[code] += 1
        assert got.counts.tolist() == want.tolist(), [names[i] for i in dims]
        assert got.sums is None


def test_the_engine_reads_the_synth_columns_only() -> None:
    plan = make_synth_plan(parse_spec(SPEC))
    assert used_columns(plan.exact_plan.spec) == ["age", "w", "n", "h", "sex", "ok"]


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_columnar_inputs_give_the_same_marginals(table: tuple[Path, list[dict[str, str]]], fmt: str) -> None:
    import polars as pl

    path, rows = table
    plan = make_synth_plan(parse_spec(SPEC))
    frame = pl.DataFrame(rows, schema=dict.fromkeys(CELLS, pl.String))
    other = path.with_suffix(f".{fmt}")
    frame.write_parquet(other) if fmt == "parquet" else frame.write_ipc(other)
    from_csv = aggregate(plan.exact_plan, path)
    columnar = aggregate(plan.exact_plan, other)
    assert [s.counts.tolist() for s in columnar] == [s.counts.tolist() for s in from_csv]
