"""A series' running totals by the square-root factorisation (``method: factorization``, issue 26): one noisy
product per period, drawn once at its period from the rows of periods 1..t, the series charged once; the exact
answers of a period's table through the no-noise path; the sensitivity is the lattice matrix's largest column norm,
computed here independently; the refusals; and (slow) the running total's error variance is the plan's."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from dpcli.core.accounting import Cap
from dpcli.core.samplers import discrete_gaussian
from dpcli.engine import aggregate
from dpcli.errors import SpecError, SpentThenFailed
from dpcli.ledger import open_ledger
from dpcli.ledger.base import piece_key
from dpcli.mechanisms.noise import exact_noisy
from dpcli.plan.factorization import column_norm_squared, lattice, weights
from dpcli.plan.series import make_series_plan
from dpcli.plan.tree import gaussian_variance
from dpcli.postprocess.factorization import estimate_products
from dpcli.postprocess.series import linear_halfwidth
from dpcli.publish.writers import write_table
from dpcli.run.series import expected_errors, release_period, tree_table
from dpcli.run.series_products import exact_products
from dpcli.specs.load import load_spec, parse_spec
from tests.pg_server import PgServer
from tests.run.test_series import ROWS

SPEC = """\
version: 1
dataset: admissions
input: admissions.csv
ledger: ledger.jsonl
privacy: {unit: row, neighbours: add_remove, rho: 1/2}
columns:
  ward: {type: category, categories: [a, b]}
  stay: {type: int, bounds: [0, 30]}
statistics:
  - {name: n, kind: count, mechanism: gaussian}
  - {name: w, kind: histogram, column: ward, mechanism: gaussian}
  - {name: s, kind: sum, column: stay, mechanism: gaussian}
  - {name: m, kind: mean, column: stay, mechanism: gaussian}
series: {periods: 3, period: {column: admitted, start: 2027-01-01, every: 1 day}, design: DESIGN, method: factorization}
"""
AFTER = datetime(2027, 2, 1, tzinfo=UTC)


@pytest.fixture(params=["running_totals", pytest.param("both", marks=pytest.mark.slow)])
def work(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    (tmp_path / "series.yaml").write_text(SPEC.replace("DESIGN", request.param))
    (tmp_path / "admissions.csv").write_text("admitted,ward,stay\n" + "".join(f"{d},{w},{s}\n" for d, w, s in ROWS))
    cap = Cap(Fraction(10), Fraction(1, 10**5))
    open_ledger(tmp_path / "ledger.jsonl").set_cap("admissions", cap, allow_raise=False)
    return tmp_path


def test_products_are_drawn_once_each_at_their_period_and_the_series_charged_once(work: Path) -> None:
    both = "design: both" in (work / "series.yaml").read_text()
    for t in (1, 2, 3):
        release_period(work / "series.yaml", period=t, output=work / f"p{t}.csv", now=AFTER)
    records = open_ledger(work / "ledger.jsonl").records()
    spends = [r for r in records if r.type == "spend"]
    assert len(spends) == 1
    assert spends[0].get("rho") == "0.5"
    drawn = [[p["id"] for p in r.get("pieces")] for r in records if r.type == "pieces"]
    assert drawn == ([[f"p{t}", f"f{t}"] for t in (1, 2, 3)] if both else [["f1"], ["f2"], ["f3"]])
    table = pl.read_csv(work / "p3.csv", infer_schema=False)
    assert table.filter(pl.col("span") == "to_date").height == 5  # n, w (2 keys), s, m
    # the statistic's share of the running totals, as a release states it: rho/4 each, (1/2 of it under both)
    assert set(table.filter(pl.col("span") == "to_date")["rho"]) == {"0.0625" if both else "0.125"}


def test_a_period_out_of_order_draws_every_product_up_to_it(work: Path) -> None:
    release_period(work / "series.yaml", period=3, output=work / "p3.csv", now=AFTER)
    records = open_ledger(work / "ledger.jsonl").records()
    drawn = {p["id"] for r in records if r.type == "pieces" for p in r.get("pieces")}
    assert {"f1", "f2", "f3"} <= drawn
    assert not any(i.startswith("b") for i in drawn)  # no tree block: the products' ids are their own


def test_exact_answers_through_the_no_noise_path(work: Path) -> None:
    import dataclasses

    splan = make_series_plan(load_spec(work / "series.yaml"))
    assert splan.blocks is not None
    assert splan.factorized
    blocks = splan.blocks

    def period(s: int):  # type: ignore[no-untyped-def]
        return aggregate(dataclasses.replace(blocks, periods=frozenset({s})), work / "admissions.csv")

    exact = exact_products([1, 2, 3], 3, period)
    products = [exact_noisy(exact[f"f{s}"]) for s in (1, 2, 3)]
    own = None
    if splan.per_period is not None:
        p = dataclasses.replace(splan.per_period, periods=frozenset({3}))
        own = exact_noisy(aggregate(p, work / "admissions.csv"), p)
    write_table(tree_table(splan, 3, products, own), work / "exact.csv", "csv")
    rows = pl.read_csv(work / "exact.csv", infer_schema=False)

    def value(stat: str, span: str, ward: str | None = None) -> str:
        where = pl.col("ward").is_null() if ward is None else pl.col("ward") == ward
        return rows.filter((pl.col("statistic") == stat) & (pl.col("span") == span) & where)["value"].item()

    # period 3 has one row (b, 30); periods 1..3 hold 6 rows, stays 3 + 5 + 7 + 1 + 2 + 30 = 48
    assert (value("n", "period"), value("n", "to_date")) == ("1", "6")
    assert (value("w", "to_date", "a"), value("w", "to_date", "b")) == ("3", "3")
    assert (value("s", "period"), value("s", "to_date")) == ("30", "48")
    assert value("m", "to_date") == "8"


def _independent_lattice(periods: int) -> list[int]:
    """round half up of 2^12 binom(2j, j) / 4^j (k = 12, the stated lattice), with Fractions."""
    return [math.floor(Fraction(math.comb(2 * j, j) * 2**12, 4**j) + Fraction(1, 2)) for j in range(periods)]


@pytest.mark.parametrize("periods", [1, 3, 40])
def test_the_sensitivity_is_the_largest_column_norm_of_the_rounded_matrix(periods: int) -> None:
    first = _independent_lattice(periods)
    assert list(lattice(periods)) == first
    matrix = [[first[r - c] if r >= c else 0 for c in range(periods)] for r in range(periods)]
    norms = [sum(matrix[r][c] ** 2 for r in range(periods)) for c in range(periods)]
    assert column_norm_squared(periods) == max(norms)
    # the rounded matrix is a square root of 4^12 times the all-ones lower-triangular one, up to its rounding
    square = np.array(matrix, dtype=np.float64) @ np.array(matrix, dtype=np.float64) / 4**12
    assert np.abs(square - np.tril(np.ones((periods, periods)))).max() < 1e-3
    spec = parse_spec(SPEC.replace("DESIGN", "running_totals").replace("periods: 3", f"periods: {periods}"))
    splan = make_series_plan(spec)
    assert splan.blocks is not None
    assert splan.multiplicity == max(norms)
    assert splan.charge.rho == Fraction(1, 2)
    count = splan.blocks.statistics[0].components[0]  # sigma^2 = |c_1|^2 Delta^2 / (2 rho_n), rho_n = (1/2) / 4
    assert count.required_variance() == Fraction(max(norms), 2 * Fraction(1, 8))
    assert any(f"|c_1|^2 = {max(norms)}" in line for line in splan.derivation())


@pytest.mark.parametrize(("changes", "message"), [
    ({"rho: 1/2}": "epsilon: 1}", ", mechanism: gaussian": ""}, "give privacy a rho"),
    ({"neighbours: add_remove": "neighbours: replace"}, "difference of two lattice columns"),
    ({"mechanism: gaussian}\n  - {name: w": "mechanism: laplace}\n  - {name: w"}, "Gaussian noise only"),
    ({"design: running_totals": "design: per_period"}, "only with design running_totals or both"),
    ({"periods: 3": "periods: 10001"}, "at most 10000 periods"),
    ({"method: factorization": "method: fft"}, "not a running-totals method"),
])
def test_refusals_say_why(changes: dict[str, str], message: str) -> None:
    text = SPEC.replace("DESIGN", "running_totals")
    for old, new in changes.items():
        assert old in text
        text = text.replace(old, new)
    with pytest.raises(SpecError, match=message):
        parse_spec(text)


def test_the_default_method_is_the_tree() -> None:
    spec = parse_spec(SPEC.replace("DESIGN", "running_totals").replace(", method: factorization", ""))
    assert spec.series is not None
    assert spec.series.method == "tree"
    assert not make_series_plan(spec).factorized


@pytest.mark.slow  # 1.4 to 5.5 s: 7.3 million draws
def test_the_running_totals_error_variance_is_the_plans() -> None:
    """Products' noises drawn with dpcli's exact sampler at the plan's sigma^2, R = 20000 replicates at T = 365: the
    empirical variance of the running total's error at t = 365 and t = 200 against weights . weights times the
    exact noise variance (relative sd sqrt(2/R) = 1%: the threshold 6% is 6 sd, a false failure < 1e-8), and the
    plan's rigorous 95% interval covers at least 94% of them (the sd of a coverage of 95% is 0.15%)."""
    periods, replicates = 365, 20_000
    spec = parse_spec(SPEC.replace("DESIGN", "running_totals").replace("periods: 3", f"periods: {periods}"))
    splan = make_series_plan(spec)
    assert splan.blocks is not None
    comp = splan.blocks.statistics[0].components[0]
    variance = comp.required_variance()
    noise = discrete_gaussian(variance, periods * replicates).reshape(periods, replicates)
    for t in (200, periods):
        estimate = estimate_products(list(noise[:t]))
        _period_w, to_date_w = weights(periods, t)
        stated = gaussian_variance(variance) * float(to_date_w @ to_date_w)
        errors = estimate.to_date  # the data are zero: the estimate is its error
        assert abs(float(errors.var()) / stated - 1) < 0.06, (t, float(errors.var()), stated)
        k = linear_halfwidth(to_date_w, comp.mechanism, variance, float(splan.blocks.confidence))
        assert [e.to_date for e in expected_errors(splan, t) if e.statistic == "n"] == [k]
        assert float(np.mean(np.abs(errors) <= k)) >= 0.94
    # the analytic figure of docs/benchmarks.md: 4.334 / rho at t = T = 365 (rho the statistic's: 1/8)
    assert abs(stated / 2**0 * Fraction(1, 8) - 4.334) < 0.01


def test_plan_prints_the_derivation_and_the_rows_each_run_reads(work: Path) -> None:
    from tests.helpers import run_in_process

    r = run_in_process("plan", work / "series.yaml", "--at-period", "2")
    assert r.returncode == 0, r.stderr
    text = r.stdout.decode()
    norm = column_norm_squared(3)
    assert "(method factorization); charged once, ρ=0.5" in text
    assert "round(2^12 L)" in text
    assert f"|c_1|^2 = {norm} (exact)" in text
    assert "n: sigma^2 per product cell = count " in text
    assert "n at period 2: ±" in text
    assert "period 3: periods 1..3's rows" in text
    doc = json.loads(run_in_process("plan", work / "series.yaml", "--json").stdout)["series"]
    assert doc["method"] == "factorization"
    assert doc["lattice"] == {"bits": 12, "column_norm_squared": norm}
    assert doc["levels"] is None
    assert doc["reads"]["3"] == [1, 2, 3]


def test_a_refused_method_is_exit_2_before_anything_is_read(work: Path) -> None:
    from tests.helpers import run_in_process

    text = (work / "series.yaml").read_text().replace("neighbours: add_remove", "neighbours: replace")
    (work / "series.yaml").write_text(text)
    r = run_in_process("release", work / "series.yaml", "--period", "1", "-o", "x.csv", "--allow-unfinished",
                       cwd=work)
    assert r.returncode == 2
    assert b"difference of two lattice columns" in r.stderr
    assert not (work / "x.csv").exists()
    assert not any(json.loads(line)["type"] == "spend" for line in (work / "ledger.jsonl").read_text().splitlines())


def test_the_sidecar_names_the_method_and_the_products(work: Path) -> None:
    import jsonschema

    from dpcli.publish.sidecar import SIDECAR_SCHEMA

    release_period(work / "series.yaml", period=2, output=work / "p2.csv", now=AFTER)
    meta = json.loads((work / "p2.csv.meta.json").read_text())
    jsonschema.validate(meta, json.loads(SIDECAR_SCHEMA.read_text()))
    assert meta["series"]["method"] == "factorization"
    assert {"f1", "f2"} <= set(meta["series"]["pieces"])


@pytest.mark.postgres
def test_a_factorised_series_on_postgresql(pg_server: PgServer, tmp_path: Path) -> None:
    """Products stored and recorded on PostgreSQL: charged once, out of order, a re-run the same bytes, a recorded
    product deleted by hand is exit 5 (never drawn again)."""
    url = pg_server.create_schema()
    text = SPEC.replace("DESIGN", "running_totals").replace("ledger: ledger.jsonl\n", "")
    (tmp_path / "series.yaml").write_text(text)
    (tmp_path / "admissions.csv").write_text("admitted,ward,stay\n" + "".join(f"{d},{w},{s}\n" for d, w, s in ROWS))
    book = open_ledger(url)
    book.set_cap("admissions", Cap(Fraction(10), Fraction(1, 10**5)), allow_raise=False)

    def run(t: int, out: str) -> Any:
        return release_period(tmp_path / "series.yaml", period=t, ledger=url, output=tmp_path / out, now=AFTER)

    assert run(2, "p2.csv").charged
    assert not run(1, "p1.csv").charged
    assert run(2, "p2-again.csv").reused
    assert (tmp_path / "p2-again.csv").read_bytes() == (tmp_path / "p2.csv").read_bytes()
    records = open_ledger(url).records()
    assert [r.type for r in records].count("spend") == 1
    assert [p["id"] for r in records if r.type == "pieces" for p in r.get("pieces")] == ["f1", "f2"]
    series_key = next(r for r in records if r.type == "spend").get("release_key")
    with book._connection().cursor() as cur:
        cur.execute("DELETE FROM dpcli_release_store WHERE release_id = %s", (piece_key(series_key, "f1"),))
    book._connection().commit()
    with pytest.raises(SpentThenFailed, match="recorded piece f1 is missing"):
        run(3, "p3.csv")
