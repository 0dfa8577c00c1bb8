"""One release id, one spend, whatever happens to the spec (issue 25): a re-run is found by (dataset, the spec's
`name:`, release id) and given the paid result when the spec's canonical meaning is the same (comments, whitespace,
key order, number spelling, paths, engine and dialect are no meaning); another meaning is refused before anything is
read, naming the record that paid. Records of dpcli 0.3, keyed on the spec's bytes, are still found.

Through the command in process (tests/helpers.py run_in_process); the ledger is read back from its file."""

from __future__ import annotations

import hashlib
import json
from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.core.accounting import Budget, Cap
from dpcli.errors import ReleaseIdPaid, ReleaseIdTaken
from dpcli.ledger import Delivery, JsonlLedger, Purchase
from dpcli.ledger.base import release_key
from dpcli.specs.load import parse_spec
from dpcli.specs.meaning import release_meaning
from tests.helpers import run_in_process as dpcli
from tests.spec_builder import spec_text

COLUMNS = {"age": "{type: int, bounds: [0, 100]}", "sex": "{type: category, categories: [F, M]}"}
STATISTICS = ["{name: n, kind: count, by: [sex]}", "{name: ages, kind: histogram, column: age, bins: [0, 18, 65, 101]}"]
SPEC = spec_text(COLUMNS, STATISTICS, privacy="unit: row, neighbours: add_remove, epsilon: 0.5")
# The same meaning, written otherwise: a comment, blank lines and indentation, keys in another order, block style,
# 1/2 for 0.5, 101.0 for 101, defaults stated, paths and planning fields that are no meaning
SAME_MEANING = """\
# edited by a colleague: the weekly numbers
dataset: toy
version: 1
output: elsewhere.csv
engine: polars
expected_rows: 1000
csv: {delimiter: ",", encoding: utf-8}

privacy:
    epsilon: 1/2
    neighbours: add_remove
    unit: row
columns:
    sex: {categories: [F, M], type: category}
    age:
        type: int
        bounds: [0e0, 100]
statistics:
  - {kind: count, name: n, by: [sex], mechanism: laplace}
  - {name: ages, column: age, kind: histogram, bins: [0, 18, 65, 101.0], target: {error95: 50}}
"""
DATA = "age,sex\n34,F\n71,M\n15,F\n45,M\n"


def spends(ledger: Path) -> list[dict]:
    return [r for r in map(json.loads, ledger.read_text().splitlines()) if r["type"] == "spend"]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "data.csv").write_text(DATA)
    r = dpcli("budget", "set", "toy", "--epsilon", "10", "--ledger", tmp_path / "L.jsonl")
    assert r.returncode == 0, r.stderr
    return tmp_path


def release(work: Path, spec: str, out: str, release_id: str = "day1", input_name: str = "data.csv"):
    (work / "spec.yaml").write_text(spec)
    return dpcli("release", work / "spec.yaml", "-i", work / input_name, "-o", work / out,
                 "--ledger", work / "L.jsonl", "--release-id", release_id)


def test_a_retry_after_a_comment_edit_spends_once(work: Path) -> None:
    """The cron retry of issue 25: a colleague added a comment, the retry under --release-id day1 spent ε again."""
    first = release(work, SPEC, "a.csv")
    assert first.returncode == 0, first.stderr
    edited = "# a comment a colleague added\n" + SPEC.replace("columns:\n", "\ncolumns:  \n")
    again = release(work, edited, "b.csv")
    assert again.returncode == 0, again.stderr
    assert len(spends(work / "L.jsonl")) == 1
    assert (work / "b.csv").read_bytes() == (work / "a.csv").read_bytes()
    meta = json.loads((work / "b.csv.meta.json").read_text())
    assert meta["reissued"] is True
    assert meta["ledger"]["record"] == 1


def test_number_spelling_key_order_and_paths_are_no_meaning(work: Path) -> None:
    first = release(work, SPEC, "a.csv")
    assert first.returncode == 0, first.stderr
    for i, text in enumerate((SAME_MEANING, SPEC.replace("epsilon: 0.5", "epsilon: 5e-1"))):
        again = release(work, text, f"b{i}.csv")
        assert again.returncode == 0, again.stderr
        assert (work / f"b{i}.csv").read_bytes() == (work / "a.csv").read_bytes()
    assert len(spends(work / "L.jsonl")) == 1
    meanings = {release_meaning(parse_spec(t)) for t in (SPEC, SAME_MEANING, SPEC.replace("0.5", "1/2"))}
    assert len(meanings) == 1


@pytest.mark.parametrize("change", [
    ("epsilon: 0.5", "epsilon: 0.6"),
    ("bounds: [0, 100]", "bounds: [0, 99]"),
    ("bins: [0, 18, 65, 101]", "bins: [0, 21, 65, 101]"),
    ("categories: [F, M]", "categories: [F, M, X]"),
    ("{name: n, kind: count, by: [sex]}", "{name: n, kind: count, by: [sex], mechanism: gaussian}"),
])
def test_every_field_that_defines_a_mechanism_is_meaning(change: tuple[str, str]) -> None:
    text = SPEC.replace(*change)
    if "gaussian" in change[1]:
        text = text.replace("epsilon: 0.5", "rho: 0.1")
    assert text != SPEC
    assert release_meaning(parse_spec(text)) != release_meaning(parse_spec(SPEC))


def test_another_meaning_is_refused_before_the_input_is_read_naming_the_record(work: Path) -> None:
    first = release(work, SPEC, "a.csv")
    assert first.returncode == 0, first.stderr
    (work / "data.csv").unlink()  # refused from the spec and the ledger alone: the input is never opened
    changed = SPEC.replace("epsilon: 0.5", "epsilon: 0.6")
    refused = release(work, changed, "b.csv")
    message = refused.stderr.decode()
    assert refused.returncode == 2, message
    assert "release id 'day1' of dataset 'toy' was paid for by record 1" in message
    assert "`name:`" in message
    assert "--release-id" in message
    assert not (work / "b.csv").exists()
    assert len(spends(work / "L.jsonl")) == 1
    # `dpcli check` makes the same refusal, with the same line
    checked = dpcli("check", work / "spec.yaml", "--ledger", work / "L.jsonl", "--release-id", "day1")
    assert checked.returncode == 2
    assert message.strip().splitlines()[-1] in checked.stderr.decode()
    # a `name:` makes it another release under the same id; its retry after an edit spends nothing
    (work / "data.csv").write_text(DATA)
    named = release(work, "name: weekly\n" + changed, "c.csv")
    assert named.returncode == 0, named.stderr
    again = release(work, "name: weekly\n# retried\n" + changed, "d.csv")
    assert again.returncode == 0, again.stderr
    assert [(s.get("spec_name"), s["release_id"]) for s in spends(work / "L.jsonl")] == [
        (None, "day1"), ("weekly", "day1")
    ]


STORE_02 = Path(__file__).resolve().parents[1] / "data" / "store-0.2"  # a table, its spec and its data


def test_an_id_paid_under_03s_byte_key_is_reissued_and_its_edits_refused(tmp_path: Path) -> None:
    # a release paid, stored and recorded as dpcli 0.3 did: its key the spec's bytes, no meaning in its record
    text = (STORE_02 / "spec.yaml").read_text()
    spec = parse_spec(text)
    book = JsonlLedger(tmp_path / "L.jsonl")
    book.set_cap("adult", Cap(Fraction(10)), False)
    key = release_key(spec.dataset, spec.sha256, "day1")
    stored = (STORE_02 / "table.store.json").read_bytes()
    book.spend("adult", Budget(Fraction(1)),
               Purchase("day1", key, spec.sha256, "row", "add_remove", tuple(s.name for s in spec.statistics)))
    book.store_table(key, stored)
    book.mark_released(key, Delivery("day1", hashlib.sha256(stored).hexdigest()))

    def rerun(spec_text: str, out: str):  # type: ignore[no-untyped-def]
        (tmp_path / "spec.yaml").write_text(spec_text)
        return dpcli("release", tmp_path / "spec.yaml", "-i", STORE_02.parent / "adult.csv", "-o", tmp_path / out,
                     "--ledger", tmp_path / "L.jsonl", "--release-id", "day1")

    again = rerun(text, "a.csv")  # the first retry after the upgrade: the same text
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "a.csv").read_bytes() == (STORE_02 / "table.csv").read_bytes()
    assert len(spends(tmp_path / "L.jsonl")) == 1
    # 0.3 knew a spec by its bytes only: an edited text cannot be told the same, so it is refused, never paid again
    edited = rerun("# edited\n" + text, "b.csv")
    assert edited.returncode == 2, edited.stderr
    assert "by record 1 with a spec whose text differs" in edited.stderr.decode()
    assert len(spends(tmp_path / "L.jsonl")) == 1
    # a name makes it another release: 0.3 records name none
    named = rerun("name: weekly\n" + text, "c.csv")
    assert named.returncode == 0, named.stderr
    assert len(spends(tmp_path / "L.jsonl")) == 2


def test_the_ledger_never_spends_one_key_twice_under_its_lock(tmp_path: Path) -> None:
    """The binding check, under the lock (a concurrent run with another meaning that passed the early check)."""
    book = JsonlLedger(tmp_path / "L.jsonl")
    book.set_cap("toy", Cap(Fraction(10)), False)
    spec, other = parse_spec(SPEC), parse_spec(SPEC.replace("0.5", "0.6"))

    def purchase(s):  # type: ignore[no-untyped-def]
        return Purchase.of(s.dataset, s.sha256, "day1", "row", "add_remove", ("n",), meaning=release_meaning(s))

    paid = book.spend("toy", Budget(Fraction(1, 2)), purchase(spec))
    with pytest.raises(ReleaseIdTaken) as taken:
        book.spend("toy", Budget(Fraction(6, 10)), purchase(other))
    assert taken.value.record_seq == paid.seq
    with pytest.raises(ReleaseIdPaid):
        book.spend("toy", Budget(Fraction(1, 2)), purchase(parse_spec("# same\n" + SPEC)))
    assert [r.type for r in book.records()] == ["cap", "spend"]
    assert paid.get("meaning") == release_meaning(spec)
    assert "spec_name" not in paid.fields


RANDOMIZE = """\
version: 1
dataset: survey
privacy: {unit: row, neighbours: replace, epsilon: 2}
columns:
  colour: {type: category, categories: [red, green, blue]}
  age: {type: int, bounds: [0, 120]}
randomize: {columns: [colour]}
"""


def test_randomize_gets_the_same_treatment(tmp_path: Path) -> None:
    (tmp_path / "people.csv").write_text("age,colour\n30,red\n41,green\n25,blue\n")
    assert dpcli("budget", "set", "survey", "--epsilon", "10", "--ledger", tmp_path / "L.jsonl").returncode == 0

    def run(text: str, out: str):  # type: ignore[no-untyped-def]
        (tmp_path / "rr.yaml").write_text(text)
        return dpcli("randomize", tmp_path / "rr.yaml", "-i", tmp_path / "people.csv", "-o", tmp_path / out,
                     "--ledger", tmp_path / "L.jsonl", "--release-id", "day1")

    assert run(RANDOMIZE, "a.csv").returncode == 0
    # a comment, another number spelling, another key order, an unused column's bounds: the same randomization
    same = "# retried\n" + RANDOMIZE.replace("epsilon: 2", "epsilon: 2.0").replace("[0, 120]", "[0, 99]").replace(
        "{type: category, categories: [red, green, blue]}", "{categories: [red, green, blue], type: category}")
    again = run(same, "b.csv")
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "b.csv").read_bytes() == (tmp_path / "a.csv").read_bytes()
    refused = run(RANDOMIZE.replace("epsilon: 2", "epsilon: 3"), "c.csv")
    assert refused.returncode == 2, refused.stderr
    assert "release id 'day1' of dataset 'survey' was paid for by record 1" in refused.stderr.decode()
    # a release spec under the same key: another command's meaning, refused naming the randomize run
    release_spec = spec_text({"colour": "{type: category, categories: [red, green, blue]}"}, dataset="survey",
                             privacy="unit: row, neighbours: replace, epsilon: 1")
    (tmp_path / "spec.yaml").write_text(release_spec)
    other = dpcli("release", tmp_path / "spec.yaml", "-i", tmp_path / "people.csv", "-o", tmp_path / "d.csv",
                  "--ledger", tmp_path / "L.jsonl", "--release-id", "day1")
    assert other.returncode == 2, other.stderr
    assert "was paid for by record 1 (a `dpcli randomize` run) with a spec of another meaning" in other.stderr.decode()
    assert len(spends(tmp_path / "L.jsonl")) == 1
