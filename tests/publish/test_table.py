"""Contract 0.3's table and sidecar (issue 14, slice A).

- the columns, in order: statistic, kind, column, the dimensions, bin_low/bin_high (when a statistic has bins),
  quantile, value, ci_low, ci_high, epsilon, rho; for every kind, in CSV and JSON, through the exact no-noise path;
- a bin's label '[lo..hi)' needs no quoting, and bin_low/bin_high are its edges, row for row (edge bins, grids,
  a grid under a by:, an open-key histogram's entries);
- the release store keeps all of it (format 3), and a table stored by dpcli 0.2 (format 2, made by dpcli 0.2.0:
  tests/data/store-0.2) is re-issued byte for byte as it was first written;
- every sidecar written here validates against the shipped JSON Schema (dpcli/publish/schemas/sidecar.schema.json),
which
  `dpcli schema --sidecar` prints; the release time is the spend's and the same on a re-issue; `--meta PATH` writes
  the sidecar of a table on standard output.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from fractions import Fraction
from pathlib import Path

import jsonschema
import pytest

from dpcli.core.accounting import Budget, Cap
from dpcli.engine import aggregate
from dpcli.ledger import Delivery, Purchase, open_ledger
from dpcli.ledger.base import release_key
from dpcli.mechanisms.noise import exact_noisy
from dpcli.plan.model import make_plan
from dpcli.publish.columns import Texts
from dpcli.publish.sidecar import SIDECAR_SCHEMA
from dpcli.publish.store import decode_table, encode_table
from dpcli.publish.table import Table, bin_edge_columns, build_table
from dpcli.publish.writers import write_table
from dpcli.run.release import release
from dpcli.specs.load import parse_spec
from dpcli.specs.model import EdgeBins
from tests import spec_builder
from tests.helpers import run_in_process

ROOT = Path(__file__).resolve().parents[2]
ADULT = ROOT / "tests" / "data" / "adult.csv"
STORE_02 = ROOT / "tests" / "data" / "store-0.2"
VALIDATOR = jsonschema.Draft202012Validator(json.loads(SIDECAR_SCHEMA.read_text()))

COLUMNS = """\
  age: {type: int, bounds: [17, 90]}
  hours_per_week: {type: int, bounds: [1, 99]}
  capital_gain: {type: float, bounds: [0, 99999], precision: 1}
  sex: {type: category, categories: [Female, Male]}
  occupation: {type: category, categories: [Adm-clerical, Armed-Forces, Craft-repair, Exec-managerial,
    Farming-fishing, Handlers-cleaners, Machine-op-inspct, Other-service, Priv-house-serv, Prof-specialty,
    Protective-serv, Sales, Tech-support, Transport-moving]}
  native_country: {type: category, categories: open, max_length: 32}
"""
EVERY_KIND = """\
  - {name: people, kind: count}
  - {name: by_sex, kind: count, by: [sex]}
  - {name: age_edges, kind: histogram, column: age, bins: [17, 25, 35, 91]}
  - {name: age_grid, kind: histogram, column: age, by: [sex], bins: {start: 17, stop: 91, step: 37}}
  - {name: sex_hist, kind: histogram, column: sex}
  - {name: gain, kind: sum, column: capital_gain}
  - {name: hours, kind: mean, column: hours_per_week, by: [sex]}
  - {name: age_q, kind: quantile, column: age, q: [0.25, 0.75]}
  - {name: age_median, kind: median, column: age, by: [sex]}
  - {name: top_jobs, kind: top_k, column: occupation, k: 2}
  - {name: commonest_sex, kind: mode, column: sex}
  - {name: age_var, kind: variance, column: age}
  - {name: age_std, kind: std, column: age, by: [sex]}
"""
OPEN_KEYS = """\
  - {name: by_country, kind: count, by: [native_country]}
"""


def spec_text(statistics: str, privacy: str = "{unit: row, neighbours: add_remove, epsilon: 1, delta: 1e-6}") -> str:
    return spec_builder.spec_text(COLUMNS, statistics, privacy=privacy, dataset="adult")


def exact_table(text: str) -> Table:
    plan = make_plan(parse_spec(text))
    return build_table(plan, exact_noisy(aggregate(plan, ADULT), plan))


def written(table: Table, fmt: str, tmp_path: Path) -> bytes:
    path = tmp_path / f"t.{fmt}"
    write_table(table, path, fmt)
    return path.read_bytes()


def test_every_kind_has_the_contract_columns_in_csv_and_json(tmp_path: Path) -> None:
    table = exact_table(spec_text(EVERY_KIND + OPEN_KEYS))
    header = (
        "statistic", "kind", "column", "sex", "age", "occupation", "native_country", "bin_low", "bin_high",
        "quantile", "value", "ci_low", "ci_high", "epsilon",
    )
    assert table.columns == header
    text = written(table, "csv", tmp_path).decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert tuple(csv.reader(io.StringIO(text.splitlines()[0]))) == (list(header),)
    objects = json.loads(written(table, "json", tmp_path))
    assert len(objects) == len(rows) == len(table)
    kinds = {"people": ("count", ""), "by_sex": ("count", ""), "age_edges": ("histogram", "age"),
             "age_grid": ("histogram", "age"), "sex_hist": ("histogram", "sex"), "gain": ("sum", "capital_gain"),
             "hours": ("mean", "hours_per_week"), "age_q": ("quantile", "age"), "age_median": ("median", "age"),
             "top_jobs": ("top_k", "occupation"), "commonest_sex": ("mode", "sex"), "age_var": ("variance", "age"),
             "age_std": ("std", "age"), "by_country": ("count", "")}
    assert {r["statistic"] for r in rows} == set(kinds)
    for row, obj in zip(rows, objects, strict=True):
        assert list(obj) == list(header)
        kind, column = kinds[row["statistic"]]
        assert (row["kind"], row["column"]) == (kind, column)
        assert (obj["kind"], obj["column"]) == (kind, column or None)
        binned = row["statistic"] in ("age_edges", "age_grid")
        assert (row["bin_low"] != "") == binned
        assert (obj["bin_low"] is not None) == binned
        if binned:  # the label is quote-free and its edges are the numbers beside it
            assert row["age"] == f"[{row['bin_low']}..{row['bin_high']})" == obj["age"]
            assert Fraction(row["bin_low"]) == Fraction(str(obj["bin_low"])) < Fraction(row["bin_high"])
    # no field of the CSV is quoted: every label and number is plain text (open keys from this file are too)
    assert '"' not in text
    edges = [(r["sex"], r["bin_low"], r["bin_high"]) for r in rows if r["statistic"] == "age_grid"]
    assert edges == [("Female", "17", "54"), ("Female", "54", "91"), ("Male", "17", "54"), ("Male", "54", "91")]
    assert [(r["bin_low"], r["bin_high"]) for r in rows if r["statistic"] == "age_edges"] == [
        ("17", "25"), ("25", "35"), ("35", "91")]
    assert [r["quantile"] for r in rows if r["statistic"] == "age_q"] == ["0.25", "0.75"]


def test_a_zcdp_table_keeps_rho_last_and_a_table_without_bins_has_no_edge_columns() -> None:
    table = exact_table(spec_text(
        "  - {name: n, kind: count, mechanism: gaussian}\n  - {name: s, kind: sum, column: age, by: [sex]}\n",
        privacy="{unit: row, neighbours: add_remove, rho: 0.5}",
    ))
    assert table.columns == (
        "statistic", "kind", "column", "sex", "value", "ci_low", "ci_high", "epsilon", "rho")


def test_an_open_key_histograms_entries_get_the_edges_of_their_labels() -> None:
    bins = EdgeBins((Fraction(0), Fraction(1, 2), Fraction(3)))
    low, high = bin_edge_columns(bins, Texts(["[0.5..3)", "[0..0.5)", "[0.5..3)"]))
    assert (list(low), list(high)) == (["0.5", "0", "0.5"], ["3", "0.5", "3"])


def test_the_store_keeps_the_contract_columns(tmp_path: Path) -> None:
    table = exact_table(spec_text(EVERY_KIND + OPEN_KEYS))
    again = decode_table(encode_table(table))
    assert again.contract == "0.3"
    assert json.loads(encode_table(table))["format"] == 3
    for fmt in ("csv", "json"):
        assert written(again, fmt, tmp_path) == written(table, fmt, tmp_path)


def test_a_table_stored_by_dpcli_02_is_reissued_as_it_was_first_written(tmp_path: Path) -> None:
    """tests/data/store-0.2: a table stored by dpcli 0.2.0 (release-store format 2, no kind, column or bin edges)
    and the CSV and JSON bytes dpcli 0.2.0 wrote from it. A re-issue gives back those bytes: what a paid release
    published never changes under its release id."""
    stored = (STORE_02 / "table.store.json").read_bytes()
    table = decode_table(stored)
    assert table.contract == "0.2"
    assert written(table, "csv", tmp_path) == (STORE_02 / "table.csv").read_bytes()
    assert written(table, "json", tmp_path) == (STORE_02 / "table.json").read_bytes()
    assert decode_table(encode_table(table)).contract == "0.2"  # stored again (never needed) it stays 0.2
    # the same spec released today: the same numbers in the 0.3 layout
    fresh = exact_table((STORE_02 / "spec.yaml").read_text())
    assert [r[-4:] for r in fresh.rows()] == [r[-4:] for r in table.rows()]


def test_a_release_reissuing_a_02_table_writes_its_bytes_and_a_02_sidecar(tmp_path: Path) -> None:
    ledger = tmp_path / "L.jsonl"
    book = open_ledger(ledger)
    book.set_cap("adult", Cap(Fraction(10), Fraction(0)), False)
    spec = parse_spec((STORE_02 / "spec.yaml").read_text())
    # a release paid and stored by dpcli 0.2 (its spend, its stored table, its `released` record)
    key = release_key(spec.dataset, spec.sha256, "r1")
    stored = (STORE_02 / "table.store.json").read_bytes()
    spend = book.spend(spec.dataset, Budget(make_plan(spec).epsilon),
                       Purchase("r1", key, spec.sha256, spec.privacy.pinned_unit, spec.privacy.neighbours, ()))
    book.store_table(key, stored)
    book.mark_released(key, Delivery("r1", hashlib.sha256(stored).hexdigest()))
    again = release(spec, input=ADULT, output=tmp_path / "b.csv", ledger=ledger, release_id="r1")
    assert again.reused
    assert (tmp_path / "b.csv").read_bytes() == (STORE_02 / "table.csv").read_bytes()
    meta = json.loads((tmp_path / "b.csv.meta.json").read_text())
    VALIDATOR.validate(meta)
    assert meta["contract"] == "0.2"
    assert meta["reissued"] is True
    assert meta["release_time"] == spend.get("time")[:19] + "Z"
    assert meta["ledger"]["record"] == spend.seq


PURE = "{unit: row, neighbours: add_remove, epsilon: 1}"
SIDECAR_SPECS = {
    "every_kind": (spec_text(EVERY_KIND), PURE),
    "open_keys": (spec_text(OPEN_KEYS), None),
    "zcdp": (spec_text(
        "  - {name: n, kind: count, mechanism: gaussian}\n"
        "  - {name: h, kind: histogram, column: age, bins: {start: 17, stop: 91, step: 1}, mechanism: gaussian}\n"
        "  - {name: m, kind: mean, column: age, by: [sex]}\n",
        privacy="{unit: row, neighbours: replace, epsilon: 1, delta: 1e-6}",
    ), None),
    # slices B and D's sidecar additions: each statistic's postprocess block, the spec's confidence as exact text
    "postprocess_and_confidence": (spec_text(
        "  - {name: people, kind: count}\n"
        "  - {name: by_sex, kind: count, by: [sex]}\n"
        "  - {name: mean_age, kind: mean, column: age, postprocess: {digits: 1}}\n",
    ).replace("statistics:\n", "confidence: 0.9\npostprocess: {consistent: true, nonnegative: true, "
              "small_cells: {max_relative_width: 0.5, action: flag}}\nstatistics:\n")
    # every row has a sex, so the two counts can be made consistent (without impute: the spec is refused, exit 2)
    .replace("categories: [Female, Male]}", "categories: [Female, Male], impute: Female}"), PURE),
}


@pytest.mark.parametrize("name", sorted(SIDECAR_SPECS))
def test_every_sidecar_validates_and_its_time_is_the_spends(tmp_path: Path, name: str) -> None:
    text, privacy = SIDECAR_SPECS[name]
    if privacy is not None:
        text = text.replace("{unit: row, neighbours: add_remove, epsilon: 1, delta: 1e-6}", privacy)
    ledger = tmp_path / "L.jsonl"
    open_ledger(ledger).set_cap("adult", Cap(Fraction(10), Fraction(1, 1000)), False)
    spec = parse_spec(text)
    r = release(spec, input=ADULT, output=tmp_path / "out.json", ledger=ledger, release_id="2026-11-24")
    meta = json.loads((tmp_path / "out.json.meta.json").read_text())
    VALIDATOR.validate(meta)
    assert meta == r.metadata | {"output_sha256": r.output_sha256}
    assert meta["contract"] == "0.3"
    assert meta["release_id"] == "2026-11-24"
    assert meta["release_time"] == r.spend.get("time")[:19] + "Z"
    if name == "postprocess_and_confidence":
        assert meta["confidence"] == "0.9"
        small_cells = {s["name"]: s["postprocess"]["small_cells"] for s in meta["statistics"]}
        assert list(small_cells) == ["people", "by_sex", "mean_age"]
        assert all(s == {"max_relative_width": "0.5", "action": "flag"} for s in small_cells.values())
    again = release(spec, input=ADULT, output=tmp_path / "again.json", ledger=ledger, release_id="2026-11-24")
    reissued = json.loads((tmp_path / "again.json.meta.json").read_text())
    VALIDATOR.validate(reissued)
    assert again.reused
    assert reissued["release_time"] == meta["release_time"]
    assert (tmp_path / "again.json").read_bytes() == (tmp_path / "out.json").read_bytes()


def test_the_schema_refuses_a_sidecar_missing_a_public_parameter(tmp_path: Path) -> None:
    ledger = tmp_path / "L.jsonl"
    open_ledger(ledger).set_cap("adult", Cap(Fraction(10), Fraction(0)), False)
    r = release(parse_spec(spec_text(EVERY_KIND, PURE)),
                input=ADULT, output=tmp_path / "o.csv", ledger=ledger)
    meta = json.loads((tmp_path / "o.csv.meta.json").read_text())
    VALIDATOR.validate(meta)
    for broken in (
        {k: v for k, v in meta.items() if k != "release_time"},
        {**meta, "columns": {"age": {"type": "int", "bounds": ["17"]}}},
        {**meta, "statistics": [{k: v for k, v in meta["statistics"][0].items() if k != "noise"}]},
        {**meta, "epsilon": 1.0},
        {**meta, "row_count": 5},  # nothing computed from the input has a place in it
    ):
        assert not VALIDATOR.is_valid(broken)
    assert r.output is not None


def test_meta_writes_the_sidecar_of_a_table_on_standard_output(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(spec_text("  - {name: people, kind: count}\n", PURE))
    assert run_in_process("budget", "set", "adult", "--epsilon", "5", "--ledger", tmp_path / "L.jsonl").returncode == 0
    r = run_in_process("release", tmp_path / "spec.yaml", "--input", ADULT, "-o", "-", "--ledger",
                       tmp_path / "L.jsonl", "--meta", tmp_path / "side.json", "--quiet")
    assert r.returncode == 0, r.stderr
    meta = json.loads((tmp_path / "side.json").read_text())
    VALIDATOR.validate(meta)
    assert meta["output_sha256"] == hashlib.sha256(r.stdout).hexdigest()
    assert r.stdout.startswith(b"statistic,kind,column,value,ci_low,ci_high,epsilon\npeople,count,,")
    # beside an output file, --meta puts it where the user says (and nothing beside the table)
    r = run_in_process("release", tmp_path / "spec.yaml", "--input", ADULT, "-o", tmp_path / "t.csv", "--ledger",
                       tmp_path / "L.jsonl", "--meta", tmp_path / "elsewhere.json", "--quiet")
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "t.csv.meta.json").exists()
    VALIDATOR.validate(json.loads((tmp_path / "elsewhere.json").read_text()))
    # refused before the spend: the sidecar is not the table, nor standard output
    spent = (tmp_path / "L.jsonl").read_bytes()
    for bad, message in ((tmp_path / "t2.csv", "is the output"), ("-", "--meta names a file")):
        r = run_in_process("release", tmp_path / "spec.yaml", "--input", ADULT, "-o", tmp_path / "t2.csv",
                           "--ledger", tmp_path / "L.jsonl", "--meta", bad)
        assert r.returncode == 2
        assert message in r.stderr.decode()
    assert (tmp_path / "L.jsonl").read_bytes() == spent


def test_dpcli_schema_sidecar_prints_the_shipped_schema() -> None:
    r = run_in_process("schema", "--sidecar")
    assert r.returncode == 0
    schema = json.loads(r.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert r.stdout == SIDECAR_SCHEMA.read_bytes()
