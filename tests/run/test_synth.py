"""``dpcli synth`` end to end (issue 27): the file holds only declared values, re-runs write the same bytes and spend
nothing, a failure while estimating is exit 5 and the re-run finishes it, and the measurements are the exact
marginals on the internal no-noise path (which the command line cannot reach)."""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import random
import subprocess
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import clean_env, run_in_process

ROOT = Path(__file__).resolve().parents[2]

AGE_BINS = [18, 30, 45, 65, 91]
CITIES = ["Lyon", "Paris", "Nice, Côte d'Azur", 'The "Big" One']
SPEC = """\
version: 1
dataset: town
input: people.csv
privacy: {{unit: row, neighbours: add_remove, rho: 2}}
columns:
  age:      {{type: int, bounds: [18, 90]}}
  income:   {{type: float, bounds: [0, 1000], precision: 0.5}}
  sex:      {{type: category, categories: [F, M]}}
  employed: {{type: bool}}
  city:     {{type: category, categories: ["Lyon", "Paris", "Nice, Côte d'Azur", 'The "Big" One']}}
synth:
  method: mst
  rows: {rows}
  columns:
    age:      {{bins: {age_bins}, values: {values}}}
    income:   {{bins: [0, 250, 500, 1000.5], values: uniform}}
    sex:      {{}}
    employed: {{}}
    city:     {{missing: keep}}
"""


def _people(path: Path, n: int = 600, seed: int = 7) -> None:
    rng = random.Random(seed)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["age", "income", "sex", "employed", "city", "unused"])
        for _ in range(n):
            sex = rng.choice(["F", "M"])
            age = rng.randint(10, 99)  # some out of bounds: clamped
            employed = rng.choice(["true", "false", "1", "0", "maybe"])
            city = rng.choice([*CITIES, "", "Atlantis"])  # empty and undeclared: missing (kept as a code)
            income = rng.choice([str(rng.uniform(-50, 1200)), "n/a", ""])
            w.writerow([age, income, sex, employed, city, rng.random()])


def _setup(tmp_path: Path, rows: str = "noisy", values: str = "low") -> Path:
    _people(tmp_path / "people.csv")
    spec = tmp_path / "synth.yaml"
    spec.write_text(SPEC.format(rows=rows, age_bins=AGE_BINS, values=values), encoding="utf-8")
    done = run_in_process("budget", "set", "town", "--epsilon", "40", "--delta", "1e-6", "--ledger",
                          tmp_path / "ledger.jsonl")
    assert done.returncode == 0, done.stderr.decode()
    return spec


def _synth(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_in_process("synth", tmp_path / "synth.yaml", "--ledger", tmp_path / "ledger.jsonl", "-o",
                          tmp_path / "out.csv", *extra, cwd=tmp_path)


def _spends(tmp_path: Path) -> int:
    lines = (tmp_path / "ledger.jsonl").read_text().splitlines()
    return sum(1 for line in lines if json.loads(line).get("type") == "spend")


def test_values_only_from_the_declared_domain(tmp_path: Path) -> None:
    _setup(tmp_path, values="low")
    done = _synth(tmp_path, "--release-id", "r1")
    assert done.returncode == 0, done.stderr.decode()
    rows = list(csv.reader(io.StringIO((tmp_path / "out.csv").read_text(encoding="utf-8"))))
    assert rows[0] == ["age", "income", "sex", "employed", "city"]
    body = rows[1:]
    assert body, "the noisy total of 600 rows at rho 2 is far from 0"
    lows = {str(max(lo, 18)) for lo in AGE_BINS[:-1]}
    for age, income, sex, employed, city in body:
        assert age in lows  # values: low -> each bin's least in-bounds grid point
        value = Fraction(income)
        assert 0 <= value <= 1000  # inside the bounds
        assert (value * 2).denominator == 1  # on the 0.5 grid
        assert sex in {"F", "M"}
        assert employed in {"false", "true"}
        assert city in {*CITIES, ""}  # "" is the kept missing code, never "Atlantis"
    assert (tmp_path / "out.csv.marginals.csv").exists()
    meta = json.loads((tmp_path / "out.csv.meta.json").read_text())
    assert [s["step"] for s in meta["steps"]] == ["one_way", "select", "measure"]
    assert len(meta["steps"][1]["selected"]) == 4  # d - 1 pairs: a spanning tree
    assert meta["rows"]["published"] == len(body)


def test_a_rerun_writes_the_same_bytes_and_spends_nothing(tmp_path: Path) -> None:
    _setup(tmp_path, values="uniform")
    first = _synth(tmp_path, "--release-id", "r1", "--report", str(tmp_path / "report.html"))
    assert first.returncode == 0, first.stderr.decode()
    outputs = {name: (tmp_path / name).read_bytes() for name in ("out.csv", "out.csv.marginals.csv",
                                                                 "out.csv.meta.json", "report.html")}
    for name in outputs:
        (tmp_path / name).unlink()
    (tmp_path / "people.csv").write_text("age,income,sex,employed,city\n")  # never read again
    again = _synth(tmp_path, "--release-id", "r1", "--report", str(tmp_path / "report.html"))
    assert again.returncode == 0, again.stderr.decode()
    assert b"nothing spent" in again.stderr
    assert {name: (tmp_path / name).read_bytes() for name in outputs} == outputs
    assert _spends(tmp_path) == 1
    page = outputs["report.html"].decode("utf-8")
    assert "a fit to the published measurements" in page
    assert "<script" not in page


def test_json_summary_and_declared_rows(tmp_path: Path) -> None:
    _setup(tmp_path, rows="123")
    done = _synth(tmp_path, "--json")
    assert done.returncode == 0, done.stderr.decode()
    doc = json.loads(done.stderr.decode().strip().splitlines()[-1])
    assert doc["rows"] == 123
    assert doc["reused"] is False
    assert doc["columns"] == ["age", "income", "sex", "employed", "city"]
    assert len(doc["selected"]) == 4
    assert Fraction(doc["rho_spent"]) <= 2
    assert len((tmp_path / "out.csv").read_text().splitlines()) == 124


def test_the_measurements_are_the_exact_marginals_without_noise(tmp_path: Path) -> None:
    """The internal no-noise path: the stored one-ways are the exact counts of the engine's rules, checked against
    a count in Python; each selected pair's measurement is that pair's exact count."""
    from dpcli.engine import aggregate
    from dpcli.plan.synth import make_synth_plan
    from dpcli.run.synth import draw_state
    from dpcli.specs.load import load_spec

    spec_path = _setup(tmp_path)
    plan = make_synth_plan(load_spec(spec_path))
    exact = aggregate(plan.exact_plan, tmp_path / "people.csv")
    state = draw_state(plan, exact, noise=lambda _s2, size: np.zeros(size, dtype=np.int64))
    with (tmp_path / "people.csv").open(encoding="utf-8", newline="") as fh:
        records = list(csv.DictReader(fh))
    sexes = Counter(r["sex"] for r in records)
    assert state.one_way[2].tolist() == [sexes["F"], sexes["M"]]
    cities = Counter(r["city"] if r["city"] in CITIES else "" for r in records)
    assert state.one_way[4].tolist() == [cities[c] for c in CITIES] + [cities[""]]
    ages = Counter(sum(min(max(int(r["age"]), 18), 90) >= e for e in AGE_BINS) - 1 for r in records)
    assert state.one_way[0].tolist() == [ages[i] for i in range(len(AGE_BINS) - 1)]
    assert len(state.selected) == 4
    for (a, b), measured in zip(state.selected, state.pairs, strict=True):
        k = plan.candidates.index((a, b))
        table = np.asarray(exact[len(plan.sizes) + k].counts).reshape(plan.sizes[a], plan.sizes[b])
        # summed onto the compressed codes (none merged unless a noisy one-way count is below 3σ)
        expected = np.zeros((int(state.maps[a].max()) + 1, int(state.maps[b].max()) + 1), dtype=np.int64)
        for i, j in np.ndindex(*table.shape):
            expected[state.maps[a][i], state.maps[b][j]] += table[i, j]
        assert measured.tolist() == expected.reshape(-1).tolist()


_FAILING = """
import sys
import dpcli.run.synth as synth
def fails(*args, **kwargs):
    raise MemoryError
synth.fit_tree = fails
from dpcli.cli.app import main
main(sys.argv[1:])
"""


def test_a_failure_while_estimating_is_exit_5_and_the_rerun_finishes_it(tmp_path: Path) -> None:
    _setup(tmp_path)
    args = ["synth", str(tmp_path / "synth.yaml"), "--ledger", str(tmp_path / "ledger.jsonl"), "-o",
            str(tmp_path / "out.csv"), "--release-id", "r9"]
    failed = subprocess.run([sys.executable, "-c", _FAILING, *args], capture_output=True, env=clean_env(),
                            cwd=tmp_path, timeout=120)
    assert failed.returncode == 5, failed.stderr.decode()
    assert b"out of memory after the spend" in failed.stderr
    assert b"record 1" in failed.stderr
    assert not (tmp_path / "out.csv").exists()
    again = _synth(tmp_path, "--release-id", "r9")
    assert again.returncode == 0, again.stderr.decode()
    assert (tmp_path / "out.csv").exists()
    assert _spends(tmp_path) == 1


def test_refused_before_the_spend_when_the_marginals_table_is_the_input(tmp_path: Path) -> None:
    _setup(tmp_path)
    done = _synth(tmp_path, "--marginals", str(tmp_path / "people.csv"))
    assert done.returncode == 2, done.stderr.decode()
    assert _spends(tmp_path) == 0


@pytest.mark.parametrize("values", ["mid", "uniform"])
def test_numeric_values_stay_in_their_bins(tmp_path: Path, values: str) -> None:
    _setup(tmp_path, rows="400", values=values)
    done = _synth(tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out.csv").read_text(encoding="utf-8"))))
    mids = {(lo + hi) // 2 if (lo + hi) % 2 == 0 else (lo + hi - 1) // 2 for lo, hi in itertools.pairwise(AGE_BINS)}
    for r in rows:
        age = int(r["age"])
        assert 18 <= age <= 90
        if values == "mid":
            assert min(age, 90) in {min(m, 90) for m in mids}


def test_rare_codes_are_compressed_for_the_pairs_and_expanded_back_to_declared_values(tmp_path: Path) -> None:
    """At a small ρ the cities fall under 3σ: the pairs are measured over one merged code (its label the merged keys
    joined by '|', named in the sidecar), and the file still holds declared values only. Which codes merge is a
    function of the released one-ways, so the sidecar's merged sets are checked against the rule applied to the
    published one-way counts. That at least two city codes merge is chance: σ² = 75000 (σ ≈ 274, 3σ ≈ 822) and the
    five codes' true counts are 98-112 and 190, so each reaches 3σ with probability < 0.011 and four of five do with
    probability < 4e-9."""
    spec = _setup(tmp_path, rows="300")
    spec.write_text(spec.read_text().replace("rho: 2", "rho: 0.0001"))
    done = _synth(tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    meta = json.loads((tmp_path / "out.csv.meta.json").read_text())
    assert Fraction(meta["steps"][0]["sigma2"]) == 75000
    three_sigma = 3 * math.sqrt(float(Fraction(meta["steps"][0]["sigma2"])))
    merged = meta["steps"][2]["compressed"]
    table = (tmp_path / "out.csv.marginals.csv").read_text(encoding="utf-8")
    marginals = list(csv.DictReader(io.StringIO(table)))
    for column in merged:
        one_way = [(m["value_1"], int(m["noisy_count"])) for m in marginals if m["marginal"] == column]
        small = [value for value, count in one_way if count < three_sigma]
        assert merged[column] == (small if len(small) >= 2 else []), column
    assert len(merged["city"]) >= 2
    pair_values = {m["value_2"] for m in marginals if m["column_2"] == "city"}
    assert "|".join(merged["city"]) in pair_values
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out.csv").read_text(encoding="utf-8"))))
    assert len(rows) == 300
    assert {r["city"] for r in rows} <= {*CITIES, ""}
