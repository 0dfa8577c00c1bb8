"""`dpcli randomize` (k-ary randomized response) and `{kind: frequency, randomized: ...}` end to end: the spec's rules,
the ledger (charge, release id, the output's hash), the output's shape and order, and the frequency release's refusal
of any input the ledger did not record as a randomize output.

Chance: every test here that needs the output to equal the input draws at ε = 50 per column (100, the most a spec
takes, over two columns): a cell then changes with probability (k − 1)/(e^50 + k − 1) < 10^-21, so over the few
thousand cells drawn so in this file a false failure has probability below 10^-17. The estimates' arithmetic is
checked against exact expectations (no randomness).
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import tempfile
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcli.errors import InputError, SpecError
from dpcli.mechanisms.randomized_response import estimate_counts, randomize_keys
from dpcli.specs.randomize import parse_randomize_spec
from tests.helpers import run_in_process

ROOT = Path(__file__).resolve().parents[2]

SPEC = """\
version: 1
dataset: survey
input: people.csv
privacy:
  unit: row
  neighbours: replace
  epsilon: {epsilon}
columns:
  colour: {{type: category, categories: [red, green, blue]}}
  smoker: {{type: bool}}
  age: {{type: int, bounds: [0, 120]}}
randomize:
  columns: [colour, smoker]
"""

FREQUENCY = """\
version: 1
dataset: survey
input: {input}
privacy:
  neighbours: replace
columns:
  colour: {{type: category, categories: [red, green, blue]}}
  smoker: {{type: bool}}
statistics:
  - {{name: colours, kind: frequency, column: colour, randomized: {{epsilon: {epsilon}}}}}
  - {{name: smokers, kind: frequency, column: smoker, randomized: {{epsilon: {epsilon}}}}}
"""

ROWS = [  # colour, smoker, age: an undeclared colour, missing cells, bool spellings
    ("red", "true", "30"), ("green", "false", "41"), ("blue", "TRUE", "25"), ("purple", "0", "60"),
    ("", "", "33"), ("red", "1", "19"), ("green", "maybe", "77"), ("blue", "false", "50"),
]


def write_input(tmp: Path, rows: list[tuple[str, str, str]] = ROWS) -> Path:
    path = tmp / "people.csv"
    path.write_text("age,colour,smoker\n" + "".join(f"{a},{c},{s}\n" for c, s, a in rows), encoding="utf-8")
    return path


def dpcli(tmp: Path, *args: object) -> tuple[int, str]:
    r = run_in_process(*args, cwd=tmp)
    return r.returncode, r.stderr.decode()


def setup(tmp: Path, epsilon: str = "100", cap: str = "1000") -> Path:
    write_input(tmp)
    spec = tmp / "rr.yaml"
    spec.write_text(SPEC.format(epsilon=epsilon), encoding="utf-8")
    assert dpcli(tmp, "budget", "set", "survey", "--epsilon", cap, "--ledger", tmp / "ledger.jsonl")[0] == 0
    return spec


def ledger(tmp: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp / "ledger.jsonl").read_text(encoding="utf-8").splitlines()]


# -- the spec ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        (("  neighbours: replace\n", ""), "privacy.neighbours", "only under neighbours: replace"),
        (("neighbours: replace", "neighbours: add_remove"), "privacy.neighbours", "only under neighbours: replace"),
        (("  epsilon: 2\n", "  epsilon: 2\n  delta: 1e-6\n"), "privacy.delta", "pure ε-DP per record"),
        (("  unit: row\n", "  unit: {id: pid, max_rows: 2, missing_id: drop}\n"), "privacy.unit", "a person unit"),
        (("columns: [colour, smoker]", "columns: [colour, age]"), "randomize.columns[1]", "'age' is int"),
        (("columns: [colour, smoker]", "columns: [colour, shape]"), "randomize.columns[1]", "not a declared"),
        (("columns: [colour, smoker]", "columns: [colour, colour]"), "randomize.columns[1]", "chosen twice"),
        (("randomize:\n  columns: [colour, smoker]\n", ""), "randomize", "required"),
        (("  epsilon: 2\n", "  epsilon: 10000000000000000000001/10000000000000000000000\n"), "privacy.epsilon",
         "exact sampler"),
    ],
)
def test_the_spec_rules(change: tuple[str, str], path: str, message: str) -> None:
    text = SPEC.format(epsilon="2").replace(*change)
    assert text != SPEC.format(epsilon="2")
    with pytest.raises(SpecError) as caught:
        parse_randomize_spec(text)
    assert caught.value.path == path, str(caught.value)
    assert message in caught.value.detail, str(caught.value)


def test_epsilon_is_split_evenly_over_the_columns() -> None:
    spec = parse_randomize_spec(SPEC.format(epsilon="3"))
    assert [c.name for c in spec.columns] == ["colour", "smoker"]
    assert spec.column_epsilon == Fraction(3, 2)


# -- the command ------------------------------------------------------------------------------------------------


def test_randomize_publishes_the_chosen_columns_in_input_order_and_records_the_output(tmp_path: Path) -> None:
    spec = setup(tmp_path)
    code, err = dpcli(tmp_path, "randomize", spec, "--ledger", tmp_path / "ledger.jsonl", "-o", tmp_path / "rr.csv",
                      "--release-id", "r1")
    assert code == 0, err
    out = pl.read_csv(tmp_path / "rr.csv", infer_schema=False)
    assert out.columns == ["colour", "smoker"]  # the chosen columns only: age is not published
    assert out.height == len(ROWS)
    # ε = 50 per column: declared cells are kept (see the module's note on chance); missing or undeclared cells
    # ("purple", "", "maybe") are uniform keys, never empty and never their own text
    for (colour, smoker, _), got_colour, got_smoker in zip(ROWS, out["colour"], out["smoker"], strict=True):
        assert got_colour == colour if colour in ("red", "green", "blue") else got_colour in ("red", "green", "blue")
        truth = {"true": "true", "1": "true", "false": "false", "0": "false"}.get(smoker.lower())
        assert got_smoker == truth if truth is not None else got_smoker in ("false", "true")
    records = ledger(tmp_path)
    spend, released = records[-2], records[-1]
    assert spend["type"] == "spend"
    assert spend["epsilon"] == "100"
    assert spend["neighbours"] == "replace"
    assert spend["command"] == "randomize"
    assert spend["release_id"] == "r1"
    digest = hashlib.sha256((tmp_path / "rr.csv").read_bytes()).hexdigest()
    assert released["type"] == "released"
    assert released["output_sha256"] == digest
    assert [(e["column"], e["epsilon"]) for e in released["randomized"]] == [("colour", "50"), ("smoker", "50")]


def test_a_release_id_writes_the_stored_file_again_and_spends_nothing(tmp_path: Path) -> None:
    spec = setup(tmp_path, epsilon="2", cap="5")
    args = ("randomize", spec, "--ledger", tmp_path / "ledger.jsonl", "--release-id", "r1")
    assert dpcli(tmp_path, *args, "-o", tmp_path / "a.csv")[0] == 0
    write_input(tmp_path, ROWS[:2])  # the input changed: a re-run under the id must not read it
    code, err = dpcli(tmp_path, *args, "-o", tmp_path / "b.csv")
    assert code == 0, err
    assert "nothing spent" in err, err
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    assert sum(r["type"] == "spend" for r in ledger(tmp_path)) == 1
    # a new id is a new release: it spends again, and the cap (5) refuses a third ε = 2 (exit 4)
    assert dpcli(tmp_path, "randomize", spec, "--ledger", tmp_path / "ledger.jsonl", "-o", tmp_path / "c.csv")[0] == 0
    code, err = dpcli(tmp_path, "randomize", spec, "--ledger", tmp_path / "ledger.jsonl", "-o", tmp_path / "d.csv")
    assert code == 4, err
    assert "budget refused" in err, err
    assert not (tmp_path / "d.csv").exists()


def test_randomize_is_refused_on_a_dataset_pinned_to_add_remove(tmp_path: Path) -> None:
    write_input(tmp_path)
    spec = tmp_path / "rr.yaml"
    spec.write_text(SPEC.format(epsilon="1"), encoding="utf-8")
    assert dpcli(tmp_path, "budget", "set", "survey", "--epsilon", "5", "--neighbours", "add_remove",
                 "--ledger", tmp_path / "ledger.jsonl")[0] == 0
    code, err = dpcli(tmp_path, "randomize", spec, "--ledger", tmp_path / "ledger.jsonl", "-o", tmp_path / "o.csv")
    assert code == 2, err
    assert "neighbours 'add_remove'" in err, err
    assert [r["type"] for r in ledger(tmp_path)] == ["cap"]


def test_an_input_without_a_chosen_column_is_exit_3_before_the_spend(tmp_path: Path) -> None:
    spec = setup(tmp_path)
    (tmp_path / "people.csv").write_text("age,colour\n1,red\n", encoding="utf-8")
    code, err = dpcli(tmp_path, "randomize", spec, "--ledger", tmp_path / "ledger.jsonl", "-o", tmp_path / "o.csv")
    assert code == 3, err
    assert "lacks the chosen column(s): smoker" in err, err
    assert [r["type"] for r in ledger(tmp_path)] == ["cap"]


# -- frequency estimates ----------------------------------------------------------------------------------------


def randomized_file(tmp: Path, epsilon: str) -> Path:
    spec = setup(tmp, epsilon=epsilon)
    code, err = dpcli(tmp, "randomize", spec, "--ledger", tmp / "ledger.jsonl", "-o", tmp / "rr.csv")
    assert code == 0, err
    return tmp / "rr.csv"


def frequency_spec(tmp: Path, epsilon: str, input_name: str = "rr.csv") -> Path:
    spec = tmp / "freq.yaml"
    spec.write_text(FREQUENCY.format(input=input_name, epsilon=epsilon), encoding="utf-8")
    return spec


def test_frequencies_of_a_nearly_noiseless_randomization_are_the_true_counts(tmp_path: Path) -> None:
    """Exact answer: at ε = 50 per column the published keys are the true ones (the module's note), so the unbiased
    estimate equals the published file's counts; those are computed here with plain polars."""
    published = randomized_file(tmp_path, "100")
    spec = frequency_spec(tmp_path, "50")
    code, err = dpcli(tmp_path, "release", spec, "--ledger", tmp_path / "ledger.jsonl", "-o", tmp_path / "f.csv")
    assert code == 0, err
    table = pl.read_csv(tmp_path / "f.csv", infer_schema=False)
    truth = pl.read_csv(published, infer_schema=False)
    cases = (("colours", "colour", ["red", "green", "blue"]), ("smokers", "smoker", ["false", "true"]))
    for name, column, keys in cases:
        rows = table.filter(pl.col("statistic") == name)
        assert rows[column].to_list() == keys
        expected = [truth.filter(pl.col(column) == k).height for k in keys]
        assert [float(v) for v in rows["value"]] == pytest.approx(expected, abs=0.005)
        assert all(float(lo) < float(v) < float(hi) for lo, v, hi in zip(rows["ci_low"], rows["value"],
                                                                         rows["ci_high"], strict=True))
        assert set(rows["epsilon"]) == {"0"}  # nothing spent by this release
    assert sum(r["type"] == "spend" for r in ledger(tmp_path)) == 1  # randomize's spend only
    # its sidecar is the schema's `frequency` shape (dpcli schema --sidecar), of contract 0.3
    import jsonschema

    from dpcli.publish.sidecar import SIDECAR_SCHEMA

    meta = json.loads((tmp_path / "f.csv.meta.json").read_text())
    jsonschema.Draft202012Validator(json.loads(SIDECAR_SCHEMA.read_text())).validate(meta)
    assert meta["contract"] == "0.3"
    assert meta["input_sha256"]
    assert "ledger" in meta


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        ("edit", "is not a randomize output recorded in ledger"),
        ("epsilon", "was randomized at ε=1 "),
        ("copy-of-input", "is not a randomize output recorded in ledger"),
    ],
)
def test_frequency_refuses_an_input_the_ledger_did_not_record(tmp_path: Path, tamper: str, message: str) -> None:
    randomized_file(tmp_path, "2")
    stated = "1"
    if tamper == "edit":  # one published cell changed: not the recorded file
        data = (tmp_path / "rr.csv").read_bytes()
        (tmp_path / "rr.csv").write_bytes(data.replace(b"\nred,", b"\nblue,", 1) if b"\nred," in data
                                          else data.replace(b"\ngreen,", b"\nred,", 1))
    elif tamper == "epsilon":
        stated = "2"
    else:  # the raw input itself
        shutil.copy(tmp_path / "people.csv", tmp_path / "rr.csv")
    spec = frequency_spec(tmp_path, stated)
    code, err = dpcli(tmp_path, "release", spec, "--ledger", tmp_path / "ledger.jsonl", "-o", tmp_path / "f.csv")
    assert code == 3, err
    assert message in err, err
    assert not (tmp_path / "f.csv").exists()


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        (("statistics:\n", "statistics:\n  - {name: n, kind: count}\n"), "statistics[0].kind", "other statistics"),
        (("privacy:\n", "privacy:\n  epsilon: 1\n"), "privacy.epsilon", "spend nothing"),
        (("randomized: {epsilon: 1}}\n  - {name: smokers", "by: [smoker]}\n  - {name: smokers"), "statistics[0].by",
         "not allowed for a frequency"),
        (("randomized: {epsilon: 1}}\n  - {name: smokers", "}\n  - {name: smokers"), "statistics[0].randomized",
         "required for a frequency"),
        # a randomize output is comma-separated with a header: another dialect would estimate from zero counts
        (("columns:\n", "csv: {delimiter: ';'}\ncolumns:\n"), "csv", "leave csv: out"),
    ],
)
def test_frequency_spec_rules(change: tuple[str, str], path: str, message: str) -> None:
    from dpcli.specs.load import parse_spec

    text = FREQUENCY.format(input="rr.csv", epsilon="1")
    assert change[0] in text
    with pytest.raises(SpecError) as caught:
        parse_spec(text.replace(*change))
    assert caught.value.path == path, str(caught.value)
    assert message in caught.value.detail, str(caught.value)


def test_the_estimate_is_unbiased_and_its_interval_is_hoeffdings() -> None:
    """Exact expectations in, true counts out: E[c_j] = n_j p + (n − n_j) q for the counts n_j of each true key."""
    epsilon, true_counts = Fraction(3, 4), np.array([500.0, 0.0, 1234.0, 66.0])
    k, n, e = len(true_counts), true_counts.sum(), math.exp(0.75)
    p, q = e / (e + k - 1), 1 / (e + k - 1)
    expected = true_counts * p + (n - true_counts) * q
    values, half = estimate_counts(expected, epsilon)
    assert values == pytest.approx(true_counts, abs=1e-9)
    assert half == pytest.approx(math.sqrt(n * math.log(40) / 2) / (p - q))


def test_a_missing_cell_is_a_uniform_key_and_a_true_key_is_kept_at_huge_epsilon() -> None:
    truth = np.array([2, 0, 1, -1] * 50, dtype=np.int64)
    out = randomize_keys(truth, 3, Fraction(50))
    kept = truth >= 0
    assert (out[kept] == truth[kept]).all()
    assert ((out >= 0) & (out < 3)).all()


def test_the_shipped_configs_randomize_then_estimate(tmp_path: Path) -> None:
    """configs/randomize.yaml and configs/frequency.yaml as shipped, on the Adult extract they name."""
    for name in ("configs", "tests/data"):
        shutil.copytree(ROOT / name, tmp_path / name)
    cfg = tmp_path / "configs"
    book = tmp_path / "ledger.jsonl"
    for args in (
        ["budget", "set", "adult_local", "--epsilon", "10", "--ledger", book],
        ["randomize", cfg / "randomize.yaml", "--ledger", book, "--quiet"],
        ["check", cfg / "frequency.yaml"],
        ["plan", cfg / "frequency.yaml"],
        ["release", cfg / "frequency.yaml", "--ledger", book, "--output", tmp_path / "out.csv", "--quiet"],
    ):
        code, err = dpcli(tmp_path, *args)
        assert code == 0, (args[0], err)
    table = pl.read_csv(tmp_path / "out.csv", infer_schema=False)
    assert table["statistic"].to_list() == ["race"] * 5 + ["sex"] * 2 + ["income"] * 2
    assert (cfg / "adult_randomized.csv").read_bytes().count(b"\n") == 48843  # the header and one row per input row


# -- plan, check and audit of a randomize spec ------------------------------------------------------------------


def test_plan_and_check_of_a_randomize_spec(tmp_path: Path) -> None:
    spec = setup(tmp_path, epsilon="2")
    r = run_in_process("plan", spec, "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    plan = json.loads(r.stdout)
    assert plan["epsilon_per_record"] == "2"
    assert plan["neighbours"] == "replace"
    colour = plan["columns"][0]
    assert (colour["column"], colour["keys"], colour["epsilon"]) == ("colour", 3, "1")
    assert colour["keep_probability"] == pytest.approx(math.e / (math.e + 2))
    code, err = dpcli(tmp_path, "check", spec)
    assert code == 0, err
    assert "people.csv has every chosen column" in err, err
    (tmp_path / "other.csv").write_text("colour\nred\n", encoding="utf-8")
    code, err = dpcli(tmp_path, "check", spec, "--input", tmp_path / "other.csv")
    assert code == 3, err
    assert "lacks the chosen column(s): smoker" in err, err


def test_the_audit_finds_the_real_sampler_within_its_claim_and_flags_a_broken_one() -> None:
    """At joint confidence 1 − 1e-9 a correct sampler is within its claim (a false failure has probability ≤ 1e-9).
    A sampler drawing at 2ε_c (half the privacy claimed) has ratio e^2 on the event 'the true key is published'
    (k = 2, ε_c = 1: 0.881 against 0.119); with 200,000 draws each side its Clopper-Pearson bounds at level
    1e-9 / 68 stay within ~5% of those, so the bound is about 1.9 > 1 but for a chance below 1e-9. A sampler that
    publishes a missing cell as the first key, always, is caught on 'the second key is published': P = 0 (the
    upper bound ~1.2e-4) against 0.269 or more."""
    from dpcli.audit.randomize_audit import audit_randomize

    spec = parse_randomize_spec(SPEC.format(epsilon="2"))
    report = audit_randomize(spec, trials=200_000)
    assert report.ok, report.text()
    assert [t.name for t in report.targets] == ["column colour", "column smoker", "record"]

    def doubled(truth: np.ndarray, k: int, epsilon: Fraction, source: object = None) -> np.ndarray:
        return randomize_keys(truth, k, 2 * epsilon)

    broken = audit_randomize(spec, trials=200_000, sampler=doubled)
    assert {t.name for t in broken.violations} == {"column colour", "column smoker", "record"}, broken.text()

    def missing_is_first(truth: np.ndarray, k: int, epsilon: Fraction, source: object = None) -> np.ndarray:
        published = randomize_keys(truth, k, epsilon)
        published[truth < 0] = 0  # the missing-cell rule broken: a missing cell always reads as the first key
        return published

    leaky = audit_randomize(spec, trials=200_000, sampler=missing_is_first)
    assert {t.name for t in leaky.violations} == {"column colour", "column smoker"}, leaky.text()
    assert all("(missing)" in t.neighbour for t in leaky.violations)


def test_dpcli_audit_of_a_randomize_spec_and_of_a_frequency_spec(tmp_path: Path) -> None:
    spec = setup(tmp_path, epsilon="2")
    r = run_in_process("audit", spec, "--trials", "20000", cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    assert "record: claimed ε=2" in r.stdout.decode(), r.stderr.decode()
    code, err = dpcli(tmp_path, "audit", frequency_spec(tmp_path, "1"))
    assert code == 2, err
    assert "audit the randomize spec" in err, err


# -- one row in, one row out: a changed row changes one position of each column, whatever its bytes -------------

_CELLS = st.one_of(
    st.sampled_from(["red", "green", "blue", "true", "false", "TRUE", "0", "1", "", "purple", " red", "red "]),
    st.text(alphabet=st.sampled_from(list('ab,"\r;é')), max_size=6),
)
# a record: two cells, each written as is (quotes unbalanced, separators inside) or quoted as RFC 4180 writes it
_LINES = st.tuples(_CELLS, _CELLS, st.booleans()).map(
    lambda t: ",".join('"' + c.replace('"', '""') + '"' if t[2] else c for c in t[:2])
)


@given(lines=st.lists(_LINES, min_size=1, max_size=12), line=_LINES, where=st.integers(min_value=0, max_value=11))
@settings(max_examples=60, deadline=None)
def test_replacing_one_record_changes_one_position_of_each_column(lines: list, line: str, where: int) -> None:
    """The replace neighbour through the real reader: two files that differ in one record, i.e. one physical line
    (any bytes but a line break: unbalanced quotes, separators, CRs), give key arrays that differ at that record's
    position only, in every chosen column, with one entry per line. So one record's ε_c per column is all a change
    can cost (sequential composition over the columns: ε per record), and row i of the output is line i."""
    from dpcli.run.randomize import read_keys

    spec = parse_randomize_spec(SPEC.format(epsilon="2"))
    where = where % len(lines)
    other = [*lines[:where], line, *lines[where + 1:]]
    with tempfile.TemporaryDirectory() as tmp:
        arrays = []
        for version in (lines, other):
            path = Path(tmp) / "in.csv"
            path.write_text("colour,smoker\n" + "".join(f"{text}\n" for text in version), encoding="utf-8")
            arrays.append(read_keys(spec, path))
            if version is lines:
                engine_counts = _engine_histograms(path)
    for before, after in zip(*arrays, strict=True):
        assert len(before) == len(after) == len(lines)
        differing = np.flatnonzero(before != after)
        assert set(differing) <= {where}
    # the same cells as the release engine reads (its histograms of the two columns count the same keys)
    for keys, counts in zip(arrays[0], engine_counts, strict=True):
        assert np.bincount(keys[keys >= 0], minlength=len(counts)).tolist() == counts


def _engine_histograms(path: Path) -> list[list[int]]:
    from dpcli.engine import aggregate
    from dpcli.plan.model import make_plan
    from dpcli.specs.load import parse_spec

    spec = parse_spec(
        "version: 1\ndataset: survey\nprivacy: {epsilon: 1}\ncolumns:\n"
        "  colour: {type: category, categories: [red, green, blue]}\n  smoker: {type: bool}\nstatistics:\n"
        "  - {name: c, kind: histogram, column: colour}\n  - {name: s, kind: histogram, column: smoker}\n"
    )
    return [[int(x) for x in ex.counts] for ex in aggregate(make_plan(spec), path)]


def test_an_empty_cell_of_a_one_column_file_keeps_its_row(tmp_path: Path) -> None:
    """A one-column file's empty cell is an empty line: it is still a row (a missing cell), so the output's length
    never depends on a cell's value."""
    from dpcli.run.randomize import read_keys

    spec = parse_randomize_spec(SPEC.format(epsilon="2").replace("columns: [colour, smoker]", "columns: [colour]"))
    path = tmp_path / "one.csv"
    path.write_text("colour\nred\n\nblue\n\n", encoding="utf-8")
    (colour,) = read_keys(spec, path)
    assert colour.tolist() == [0, -1, 2, -1]


@pytest.mark.parametrize("fmt", ["csv.gz", "csv.zst"])
def test_randomize_reads_a_compressed_input(tmp_path: Path, fmt: str) -> None:
    """Issue 23: the reader was handed no format, so a documented .csv.gz input was refused as "looks
    gzip-compressed"; it reads as its plain text does, within --max-input-bytes of decompressed text."""
    import gzip

    import zstandard

    from dpcli.run.randomize import read_keys

    spec = setup(tmp_path)
    data = (tmp_path / "people.csv").read_bytes()
    packed = tmp_path / f"people.{fmt}"
    packed.write_bytes(gzip.compress(data) if fmt == "csv.gz" else zstandard.ZstdCompressor().compress(data))
    code, err = dpcli(tmp_path, "randomize", spec, "--ledger", tmp_path / "ledger.jsonl", "-i", packed,
                      "-o", tmp_path / "rr.csv")
    assert code == 0, err
    assert pl.read_csv(tmp_path / "rr.csv", infer_schema=False).height == len(ROWS)
    plain_keys = read_keys(parse_randomize_spec(SPEC.format(epsilon="100")), tmp_path / "people.csv")
    packed_keys = read_keys(parse_randomize_spec(SPEC.format(epsilon="100")), packed, fmt)
    assert [k.tolist() for k in packed_keys] == [k.tolist() for k in plain_keys]
    with pytest.raises(InputError, match="decompresses to more than the input cap"):
        read_keys(parse_randomize_spec(SPEC.format(epsilon="100")), packed, fmt, len(data) - 1)


def test_randomize_reads_standard_input_and_writes_standard_output(tmp_path: Path) -> None:
    from tests.helpers import run_dpcli

    spec = setup(tmp_path)
    data = (tmp_path / "people.csv").read_bytes()
    r = run_dpcli("randomize", spec, "--ledger", tmp_path / "ledger.jsonl", "-i", "-", "-o", "-", "--json",
                  stdin=data, cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    summary = json.loads(r.stderr)
    assert summary["rows"] == len(ROWS)
    assert summary["epsilon_spent"] == "100"
    assert summary["output"] == "-"
    assert hashlib.sha256(r.stdout).hexdigest() == summary["output_sha256"] == ledger(tmp_path)[-1]["output_sha256"]
    assert r.stdout.decode().splitlines()[0] == "colour,smoker"


def test_a_utf16_record_with_an_odd_byte_count_shifts_no_later_row(tmp_path: Path) -> None:
    """Issue 23 (1): randomize reads through the release's reader, so a UTF-16 record of an odd number of bytes is
    its own row (its cells missing) and every later row keeps its keys and its position."""
    from dpcli.run.randomize import read_keys

    text = SPEC.format(epsilon="2").replace("columns:\n", "csv: {encoding: utf-16-le}\ncolumns:\n", 1)
    spec = parse_randomize_spec(text)
    honest = [f"{a},{c},{s}\n".encode("utf-16-le") for c, s, a in ROWS]
    path = tmp_path / "people.csv"
    path.write_bytes("age,colour,smoker\n".encode("utf-16-le") + honest[0] + b"7" + "\n".encode("utf-16-le")
                     + b"".join(honest[1:]))
    colour, smoker = read_keys(spec, path)
    write_input(tmp_path)
    plain_colour, plain_smoker = read_keys(parse_randomize_spec(SPEC.format(epsilon="2")), tmp_path / "people.csv")
    assert colour.tolist() == [plain_colour[0], -1, *plain_colour[1:]]
    assert smoker.tolist() == [plain_smoker[0], -1, *plain_smoker[1:]]
