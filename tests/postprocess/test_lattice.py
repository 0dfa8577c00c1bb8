"""Every released number lies on a grid fixed by the spec alone, never by the data.

Real releases (library ``dpcli.run.release.release``, a throwaway ledger, ``reuse=False``) of the same spec on two
different synthetic CSVs. Every ``value``, ``ci_low`` and ``ci_high`` must be
- an integer for counts and histograms,
- a multiple of the column's precision for sums,
- a multiple of precision / 10^MEAN_DIGITS_BELOW_PRECISION for means,
for Laplace (pure ε) and Gaussian (zCDP) statistics alike; the grid and the released cells are the same for both
inputs. A grid that moved with the data (a float noise, a data-dependent rounding or step) would leak through its
low-order digits (Mironov 2012).
"""

from __future__ import annotations

import csv
import random
import re
from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.core.accounting import Cap
from dpcli.ledger import open_ledger
from dpcli.postprocess.values import MEAN_DIGITS_BELOW_PRECISION
from dpcli.run.release import release
from dpcli.specs.load import load_spec

COLUMNS = """\
columns:
  age:      {type: int, bounds: [0, 100]}
  income:   {type: float, bounds: [-500, 25000], precision: 0.05}
  score:    {type: float, bounds: [0, 1]}
  sex:      {type: category, categories: [F, M, X]}
  employed: {type: bool}
"""

PURE = """\
version: 1
dataset: lattice
privacy: {unit: row, neighbours: add_remove, epsilon: 3}
""" + COLUMNS + """\
statistics:
  - {name: n,               kind: count}
  - {name: n_by_sex,        kind: count, by: [sex]}
  - {name: ages,            kind: histogram, column: age, bins: [0, 18, 30.5, 65, 101]}
  - {name: scores,          kind: histogram, column: score, bins: {start: 0, stop: 1, step: 0.125}, by: [employed]}
  - {name: employment,      kind: histogram, column: employed}
  - {name: total_income,    kind: sum, column: income}
  - {name: score_by_sex,    kind: sum, column: score, by: [sex]}
  - {name: total_age,       kind: sum, column: age}
  - {name: mean_income,     kind: mean, column: income, by: [sex]}
  - {name: mean_score,      kind: mean, column: score}
  - {name: mean_age,        kind: mean, column: age, by: [employed]}
"""

ZCDP = """\
version: 1
dataset: lattice
privacy: {unit: row, neighbours: replace, epsilon: 4, delta: 0.00001}
""" + COLUMNS + """\
statistics:
  - {name: n,               kind: count, mechanism: gaussian}
  - {name: n_by_sex,        kind: count, by: [sex], mechanism: gaussian}
  - {name: ages,            kind: histogram, column: age, bins: [0, 18, 30.5, 65, 101], mechanism: gaussian}
  - {name: employment,      kind: histogram, column: employed}
  - {name: total_income,    kind: sum, column: income, mechanism: gaussian}
  - {name: score_by_sex,    kind: sum, column: score, by: [sex], mechanism: gaussian}
  - {name: total_age,       kind: sum, column: age}
  - {name: mean_income,     kind: mean, column: income, by: [sex], mechanism: gaussian}
  - {name: mean_score,      kind: mean, column: score, mechanism: gaussian}
  - {name: mean_age,        kind: mean, column: age, by: [employed]}
"""


def write_people(path: Path, rows: int, seed: int) -> None:
    """Synthetic rows, messy cells included (out of bounds, unparseable, undeclared, missing). The seed makes the
    *data* reproducible; the noise is never seeded."""
    rng = random.Random(seed)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["age", "income", "score", "sex", "employed"])
        for _ in range(rows):
            age = rng.choice([str(rng.randint(-5, 110)), str(rng.randint(0, 100)), "", "n/a"])
            income = rng.choice([f"{rng.uniform(-1000, 30000):.5f}", f"{rng.uniform(0, 9000):.2f}", "", "1e309"])
            score = rng.choice([f"{rng.random():.9f}", f"{rng.uniform(-0.5, 1.5):.3f}", "", "nan"])
            sex = rng.choice(["F", "M", "X", "f", "", "Other"])
            employed = rng.choice(["true", "false", "1", "0", "TRUE", "", "maybe"])
            w.writerow([age, income, score, sex, employed])


def grids(spec_path: Path) -> dict[str, tuple[Fraction, str]]:
    """Per statistic, from the spec alone: the step every released number must be a multiple of, and its kind."""
    spec = load_spec(spec_path)
    out = {}
    for s in spec.statistics:
        if s.kind in ("count", "histogram"):
            out[s.name] = (Fraction(1), s.kind)
        else:
            p = spec.columns[s.column].precision
            assert p is not None
            out[s.name] = (p if s.kind == "sum" else p / 10**MEAN_DIGITS_BELOW_PRECISION, s.kind)
    return out


def released(spec_path: Path, data: Path, tmp: Path, tag: str) -> list[dict[str, str]]:
    out = tmp / f"out-{tag}.csv"
    release(spec_path, input=data, output=out, ledger=tmp / "ledger.jsonl")
    with open(out, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


INTEGER = re.compile(r"-?\d+")


@pytest.mark.parametrize("text", [PURE, ZCDP], ids=["laplace", "gaussian"])
def test_released_numbers_lie_on_a_data_independent_grid(tmp_path, text):
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(text)
    open_ledger(tmp_path / "ledger.jsonl").set_cap("lattice", Cap(Fraction(1000), Fraction(1, 1000)), False)
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    write_people(first, 700, seed=1)
    write_people(second, 2500, seed=2)
    steps = grids(spec_path)

    tables = [released(spec_path, first, tmp_path, "a"), released(spec_path, second, tmp_path, "b")]
    seen_kinds = set()
    for rows in tables:
        assert rows
        for row in rows:
            step, kind = steps[row["statistic"]]
            seen_kinds.add(kind)
            for field in ("value", "ci_low", "ci_high"):
                text_value = row[field]
                if kind in ("count", "histogram"):
                    assert INTEGER.fullmatch(text_value), (row["statistic"], field, text_value)
                x = Fraction(text_value)
                assert (x / step).denominator == 1, (row["statistic"], field, text_value, step)
    assert seen_kinds == {"count", "histogram", "sum", "mean"}

    # the same cells (statistic and dimension labels), in the same order, whatever the data: every declared cell is
    # released, none is added or dropped because of what the data holds
    def cells(rows: list[dict[str, str]]) -> list[tuple]:
        return [tuple(v for k, v in r.items() if k not in ("value", "ci_low", "ci_high")) for r in rows]

    assert cells(tables[0]) == cells(tables[1])
