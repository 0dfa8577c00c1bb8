"""Open category keys after the engine: partition selection (dpcli.mechanisms.noise), the released entries' rows in the
output table and their escaping in CSV and JSON (dpcli.publish.table), the sidecar's record of a selection and of a
person
unit, and what `dpcli plan` prints about them (dpcli.cli.render_plan).

Every test here is exact (no noise drawn), except test_release_of_open_keys_end_to_end, whose
false-failure probability is bounded in its docstring."""

from __future__ import annotations

import csv
import io
import json
from fractions import Fraction

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpcli.cli.render_plan import plan_json, print_plan
from dpcli.engine import ExactStatistic
from dpcli.ledger.base import Record
from dpcli.mechanisms.noisy import Noisy
from dpcli.mechanisms.selection import select_entries
from dpcli.plan.model import Plan, make_plan
from dpcli.publish.columns import csv_field, csv_texts, json_texts
from dpcli.publish.sidecar import release_metadata
from dpcli.publish.table import build_table
from dpcli.publish.writers import write_csv, write_json
from dpcli.specs.load import parse_spec

HEAD = """\
version: 1
dataset: open_test
input: /nonexistent/never-read.csv
"""


def plan_of(statistics: str, privacy: str = "{epsilon: 1, delta: 1e-6}", extra_columns: str = "") -> Plan:
    text = (
        HEAD + f"privacy: {privacy}\n"
        "columns:\n"
        "  country: {type: category, categories: open, max_length: 8}\n"
        "  sex:     {type: category, categories: [M, F]}\n"  # declared order is not text order
        "  smoker:  {type: bool}\n" + extra_columns + statistics
    )
    return make_plan(parse_spec(text))


BY_SEX_COUNTRY = "statistics:\n  - {name: c, kind: count, by: [sex, country]}\n"
BY_COUNTRY_SEX = "statistics:\n  - {name: c, kind: count, by: [country, sex, smoker]}\n"
HISTOGRAM = "statistics:\n  - {name: h, kind: histogram, column: country, by: [sex]}\n"


def codes(plan: Plan, **keys: str) -> int:
    """The code over the declared dimensions of an entry (first declared dimension slowest)."""
    sp = plan.statistics[0]
    code = 0
    for j, name in enumerate(sp.statistic.dimensions):
        if j == sp.selection.dimension:
            continue
        declared = sp.dimension_keys[j]
        code = code * len(declared) + declared.index(keys[name])
    return code


# ---------------------------------------------------------------------------------------------------------------
# the release step of partition selection


def test_entries_at_or_above_the_threshold_are_released_with_that_same_count():
    plan = plan_of(BY_SEX_COUNTRY)
    sp = plan.statistics[0]
    tau = sp.selection.threshold
    assert tau > 2
    keys = [(0, "a"), (1, "b"), (0, "c"), (1, "d"), (0, "e")]
    counts = np.array([tau - 1, tau, tau + 7, -3, 10 * tau], dtype=np.int64)
    out = select_entries(sp, counts, keys)
    assert out.keys == ((0, "c"), (0, "e"), (1, "b"))  # M (code 0) before F, then by text
    assert out.counts.tolist() == [tau + 7, 10 * tau, tau]
    assert out.sums is None


def test_no_entry_passes_nothing_is_released():
    sp = plan_of(BY_SEX_COUNTRY).statistics[0]
    out = select_entries(sp, np.zeros(3, dtype=np.int64), [(0, "a"), (1, "a"), (0, "b")])
    assert out.keys == ()
    assert out.counts.tolist() == []
    empty = select_entries(sp, np.zeros(0, dtype=np.int64), [])
    assert empty.keys == ()
    assert len(empty.counts) == 0


def test_entries_are_ordered_over_the_dimensions_declared_order_then_key_text():
    """by: [country, sex, smoker]: the open dimension first, by text (code points: 'B' < 'a' < 'ä'), then sex in
    declared order (M before F), then smoker (declared keys of a bool column)."""
    plan = plan_of(BY_COUNTRY_SEX)
    sp = plan.statistics[0]
    assert sp.selection.dimension == 0
    texts = ["ä", "a", "B", "a b", "a,b"]
    keys, counts = [], []
    for text in texts:
        for sex in ("F", "M"):
            for smoker in sp.dimension_keys[2]:
                keys.append((codes(plan, sex=sex, smoker=smoker), text))
                counts.append(sp.selection.threshold)
    rng = np.random.default_rng(0)  # a shuffled input order: the engine hands entries in any order
    order = rng.permutation(len(keys))
    out = select_entries(sp, np.array(counts)[order], [keys[i] for i in order])
    released = [(text, code) for code, text in out.keys]
    expected = [
        (text, codes(plan, sex=sex, smoker=smoker))
        for text in sorted(texts)
        for sex in ("M", "F")
        for smoker in sp.dimension_keys[2]
    ]
    assert released == expected
    assert sorted(texts) == ["B", "a", "a b", "a,b", "ä"]


def test_a_repeated_or_uncut_entry_is_refused():
    from dpcli.mechanisms.noise import exact_noisy

    plan = plan_of(BY_SEX_COUNTRY)

    def entries(keys):  # the engine's result, hand-built
        return ExactStatistic(np.full(len(keys), 10**6, dtype=np.int64), None, tuple(keys))

    with pytest.raises(ValueError, match="repeated or uncut keys"):
        exact_noisy([entries([(0, "a"), (0, "a")])], plan)
    with pytest.raises(ValueError, match="repeated or uncut keys"):
        exact_noisy([entries([(0, "x" * 9)])], plan)  # max_length 8
    ok = exact_noisy([entries([(1, "x" * 8), (0, "y")])], plan)[0]
    assert ok.keys == ((0, "y"), (1, "x" * 8))


# ---------------------------------------------------------------------------------------------------------------
# the output table: rows, labels and escaping

HOSTILE_KEYS = [
    "a,b",  # the delimiter
    'say "hi"',  # quotes
    "two\nlines",  # a line break
    "cr\rkey",  # a carriage return: csv.writer leaves it unquoted unless told
    "=1+2",  # looks like a spreadsheet formula: dpcli does not rewrite keys (written as they are, quoted as needed)
    " padded ",
    "ünï",
    "tab\tkey",
    "back\\slash",
    "nul\x00key",
]


def hostile_table(plan: Plan):
    sp = plan.statistics[0]
    tau = sp.selection.threshold
    keys = [(j % 2, text) for j, text in enumerate(HOSTILE_KEYS)]
    counts = np.array([tau + j for j in range(len(keys))], dtype=np.int64)
    noisy = select_entries(sp, counts, keys)
    return build_table(plan, [noisy]), noisy


class Sink(io.TextIOBase):
    """The writers' sink as HashingWriter offers it (text and bytes), into one buffer."""

    def __init__(self):
        self.buf = io.BytesIO()

    def write(self, s: str) -> int:
        self.buf.write(s.encode("utf-8"))
        return len(s)

    def write_bytes(self, data) -> None:
        self.buf.write(bytes(data))


def test_released_entries_become_labelled_rows_in_order():
    plan = plan_of(BY_SEX_COUNTRY)
    table, noisy = hostile_table(plan)
    assert table.columns == (
        "statistic", "kind", "column", "sex", "country", "value", "ci_low", "ci_high", "epsilon"
    )
    rows = list(table.rows())
    expected = sorted(((j % 2, text) for j, text in enumerate(HOSTILE_KEYS)))
    assert [(r[3], r[4]) for r in rows] == [(("M", "F")[code], text) for code, text in expected]
    k = plan.statistics[0].component("count").halfwidth(0.95)
    for r, value in zip(rows, noisy.counts.tolist(), strict=True):
        assert r[0] == "c"
        assert r[8] == "1"
        assert (r[5], r[6], r[7]) == (str(value), str(value - k), str(value + k))


def test_csv_quotes_and_escapes_every_key_so_readers_get_it_back():
    plan = plan_of(BY_SEX_COUNTRY)
    table, _ = hostile_table(plan)
    sink = Sink()
    write_csv(table, sink)
    data = sink.buf.getvalue()
    # byte for byte what csv.writer writes, except that a carriage return is quoted too
    parsed = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
    assert parsed[0] == list(table.columns)
    assert sorted(r[4] for r in parsed[1:]) == sorted(HOSTILE_KEYS)
    assert len(parsed) == 1 + len(HOSTILE_KEYS)
    assert b'"cr\rkey"' in data
    assert b'"a,b"' in data
    assert b'"say ""hi"""' in data
    frame = pl.read_csv(io.BytesIO(data), infer_schema=False)
    assert sorted(frame["country"].to_list()) == sorted(HOSTILE_KEYS)


def test_json_escapes_every_key():
    plan = plan_of(BY_SEX_COUNTRY)
    table, _ = hostile_table(plan)
    sink = Sink()
    write_json(table, sink)
    rows = json.loads(sink.buf.getvalue())
    assert sorted(r["country"] for r in rows) == sorted(HOSTILE_KEYS)
    assert all(r["sex"] in ("M", "F") and isinstance(r["value"], int) for r in rows)


def test_the_stored_table_gives_the_same_rows():
    plan = plan_of(HISTOGRAM)
    sp = plan.statistics[0]
    assert sp.statistic.dimensions == ("sex", "country")
    assert sp.selection.dimension == 1
    noisy = select_entries(sp, np.array([sp.selection.threshold] * 2), [(1, "x,y"), (0, "z\n")])
    table = build_table(plan, [noisy])
    from dpcli.publish.store import decode_table, encode_table

    again = decode_table(encode_table(table))
    assert list(again.rows()) == list(table.rows())
    assert table.columns[3:5] == ("sex", "country")
    assert [(r[3], r[4]) for r in table.rows()] == [("M", "z\n"), ("F", "x,y")]


def test_an_open_key_statistic_beside_declared_ones():
    plan = plan_of(
        "statistics:\n  - {name: n, kind: count}\n  - {name: c, kind: count, by: [country]}\n"
        "  - {name: s, kind: count, by: [sex]}\n"
    )
    sp = plan.statistics[1]
    noisy = [
        Noisy(np.array([5]), None),
        select_entries(sp, np.array([sp.selection.threshold]), [(0, "PT")]),
        Noisy(np.array([3, 4]), None),
    ]
    rows = list(build_table(plan, noisy).rows())
    assert table_columns(plan)[:6] == ("statistic", "kind", "column", "country", "sex", "value")
    assert [(r[0], r[3], r[4], r[5]) for r in rows] == [
        ("n", None, None, "5"), ("c", "PT", None, str(sp.selection.threshold)), ("s", None, "M", "3"),
        ("s", None, "F", "4"),
    ]


def table_columns(plan: Plan) -> tuple[str, ...]:
    return build_table(plan, [Noisy(np.zeros(sp.cells, dtype=np.int64), None, () if sp.selection else None)
                              for sp in plan.statistics]).columns


# ---------------------------------------------------------------------------------------------------------------
# the sidecar and the plan

PERSON = "{epsilon: 1, delta: 1e-6, unit: {id: pid, max_rows: 5, max_groups: 2, max_rows_per_group: 3, " \
    "missing_id: person}}"
PERSON_STATISTICS = (
    "statistics:\n"
    "  - {name: c, kind: count, by: [sex, country]}\n"
    "  - {name: people, kind: count, of: persons}\n"
    "  - {name: total, kind: sum, column: x, clamp: person}\n"
)


def test_the_sidecar_records_the_selection_and_the_person_unit():
    plan = plan_of(PERSON_STATISTICS, PERSON, "  x: {type: int, bounds: [0, 10]}\n")
    spend = Record({"seq": 7, "type": "spend", "release_id": "r1"}, "ab" * 32)
    meta = release_metadata(plan, spend, spend.hash)
    json.dumps(meta)  # all of it is JSON
    assert meta["unit"] == "person"
    assert meta["person"] == {"id": "pid", "max_rows": 5, "max_groups": 2, "max_rows_per_group": 3,
                              "missing_id": "person"}
    assert meta["columns"]["country"] == {"type": "category", "categories": "open", "max_length": 8}
    c, people, total = meta["statistics"]
    sel = plan.statistics[0].selection
    assert c["selection"] == {
        "keys": "data-selected", "dimension": "country", "threshold": sel.threshold, "delta": "0.000001",
        "max_length": 8,
        "rule": "an entry is released when its noisy count >= threshold; the released value is that noisy count",
    }
    assert c["of"] == "rows"
    assert people["of"] == "persons"
    assert total["clamp"] == "person"
    assert "selection" not in people
    assert "selection" not in total
    for s, sp in zip(meta["statistics"], plan.statistics, strict=True):
        b = sp.bounding
        assert s["bounding"] == {"max_rows": 5, "max_groups": 2, "max_rows_per_group": 3} == {
            "max_rows": b.max_rows, "max_groups": b.groups, "max_rows_per_group": b.rows_per_group}


def test_a_row_unit_sidecar_has_no_person_fields():
    plan = plan_of("statistics:\n  - {name: n, kind: count}\n", "{epsilon: 1}")
    spend = Record({"seq": 1, "type": "spend"}, "cd" * 32)
    meta = release_metadata(plan, spend, spend.hash)
    assert "person" not in meta
    assert "bounding" not in meta["statistics"][0]
    assert "selection" not in meta["statistics"][0]
    assert meta["unit"] == "row"


def test_plan_prints_the_threshold_and_the_bounding():
    plan = plan_of(PERSON_STATISTICS, PERSON, "  x: {type: int, bounds: [0, 10]}\n")
    out = io.StringIO()
    print_plan(plan, out)
    text = out.getvalue()
    sel = plan.statistics[0].selection
    assert "one person = the rows sharing a pid, at most 5 kept" in text
    assert "a row with a missing id is a person of its own" in text
    b = plan.statistics[0].bounding
    assert (f"  c (K=5, G=2, R=3): one person reaches at most {b.rows} of its rows, in at most g={b.reach} cell(s), "
            f"r={b.per_cell} in each") in text
    assert (f"  c: keys are released when their noisy count >= {sel.threshold}; a key no other person holds is "
            "released with probability at most δ=0.000001 (the selection's δ); keys of country are cut to 8 "
            "characters; the released value is that same noisy count") in text
    assert f"    why: {sel.derivation}" in text
    doc = json.loads(plan_json(plan))
    assert doc["person"]["id"] == "pid"
    assert doc["person"]["missing_id"] == "person"
    first = doc["statistics"][0]
    assert first["selection"]["threshold"] == sel.threshold
    assert first["selection"]["delta"] == "0.000001"
    assert first["bounding"]["max_rows"] == 5
    assert first["bounding"]["cells_reached"] == b.reach


def test_a_row_unit_plan_prints_no_bounding_or_selection():
    out = io.StringIO()
    print_plan(plan_of("statistics:\n  - {name: n, kind: count, by: [sex]}\n", "{epsilon: 1}"), out)
    text = out.getvalue()
    assert "one person = one row" in text
    assert "contribution bounding" not in text
    assert "open keys" not in text


def test_exact_tail_of_a_released_single_person_key_is_at_most_the_plans_delta():
    """The plan's threshold, checked against P[r + Z >= tau] summed over the g keys one person can bring, computed
    here in exact rational arithmetic bounds (q^m / (1 + q), q = e^(-1/t), with e^(-1/t) bracketed by its series)."""
    for privacy in ("{epsilon: 1, delta: 1e-6}", PERSON):
        plan = plan_of(BY_SEX_COUNTRY, privacy)
        sp = plan.statistics[0]
        sel, t = sp.selection, sp.component("count").scale
        m = sel.threshold - sel.per_key
        assert m >= 1
        q_hi = _exp_neg_bound(Fraction(1) / t, upper=True)
        assert sel.keys * q_hi**m / (1 + q_hi) <= sel.delta  # (1 + q) >= 1 + q_lo: a lower q_lo makes it larger
        q_lo = _exp_neg_bound(Fraction(1) / t, upper=False)
        # and tau is the smallest such threshold: one less would spend more than delta
        assert sel.keys * q_lo ** (m - 1) / (1 + q_hi) > sel.delta or m == 1


def _exp_neg_bound(x: Fraction, upper: bool) -> Fraction:
    """A bound on e^-x (0 < x <= 1): the alternating series cut after a positive term (upper) or a negative one
    (lower), once the next term is below 1e-30."""
    term, total, k = Fraction(1), Fraction(1), 0
    while True:
        k += 1
        term = term * -x / k
        total += term
        if (term > 0) == upper and abs(term * x / (k + 1)) < Fraction(1, 10**30):
            return total


# ---------------------------------------------------------------------------------------------------------------
# end to end: `dpcli release` of open keys under a person unit


def test_release_of_open_keys_end_to_end(tmp_path):
    """Keys many persons hold are released (cut to max_length, sorted, written so csv.reader gets them back); a key
    only one person holds is not, and a key nobody holds cannot be. With ε = 4 for the one statistic, t = 1/4 and
    δ = 1e-9: each of the two single-person keys shows with probability <= 1e-9, and a key of >= 40 persons is missed
    with probability <= e^-(4 (40 - τ)), below 1e-40 (τ = 7). False failure < 1e-8."""
    from tests.helpers import run_in_process

    many = ["United States", "Mexico", "a,b", 'q"uote', "=SUM(A1)", "line\nbreak"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["pid", "country", "sex"])
    for j, key in enumerate(many):
        for p in range(40):
            w.writerows([[f"p{j}-{p}", key, "F"]] * 3)  # three rows per person: K = 2 keeps two, R = 1 counts one
    w.writerows([["lonely", "Atlantis", "F"], ["lonely2", "Lemuria", "M"], ["", "Mu", "F"]])  # one person each
    (tmp_path / "panel.csv").write_text(buf.getvalue(), encoding="utf-8")
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "version: 1\ndataset: panel\ninput: panel.csv\ncsv: {quoted_line_breaks: true}\n"
        "privacy: {epsilon: 4, delta: 1e-9, unit: {id: pid, max_rows: 2, max_groups: 1, max_rows_per_group: 1, "
        "missing_id: drop}}\n"
        "columns:\n  country: {type: category, categories: open, max_length: 8}\n"
        "  sex: {type: category, categories: [F, M]}\n"
        "statistics:\n  - {name: by_country, kind: count, by: [country]}\n"
    )
    ledger = tmp_path / "ledger.jsonl"
    r = run_in_process("budget", "set", "panel", "--epsilon", "10", "--delta", "1e-6", "--unit", "person:pid",
                       "--neighbours", "add_remove", "--ledger", str(ledger))
    assert r.returncode == 0, r.stderr.decode()
    r = run_in_process("release", str(spec), "--ledger", str(ledger), "--output", str(tmp_path / "out.csv"))
    assert r.returncode == 0, r.stderr.decode()
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out.csv").read_text(encoding="utf-8"), newline="")))
    released = [row["country"] for row in rows]
    assert released == sorted(key[:8] for key in many)
    plan = make_plan(parse_spec(spec.read_text()))
    tau = plan.statistics[0].selection.threshold
    assert tau == 7
    assert all(int(row["value"]) >= tau for row in rows)
    meta = json.loads((tmp_path / "out.csv.meta.json").read_text())
    assert meta["statistics"][0]["selection"]["threshold"] == tau
    assert meta["person"]["id"] == "pid"
    for secret in ("Atlantis", "Lemuria", "Mu", "lonely"):  # nothing of the data outside the released keys
        assert secret not in (tmp_path / "out.csv").read_text() + json.dumps(meta) + r.stderr.decode()


TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)


@given(st.lists(TEXT, max_size=20))
def test_column_escaping_is_csv_writer_and_json_dumps(texts):
    """The writers escape a column of texts at once (polars); each text must come out as csv.writer (quoting a
    carriage return too: csv_field) and json.dumps write it alone."""
    series = pl.Series(texts + HOSTILE_KEYS + ["", "\x1f\x7f\u2028", '\\"\\'], dtype=pl.String)
    assert csv_texts(series).to_list() == [csv_field(t) for t in series.to_list()]
    assert json_texts(series).to_list() == [json.dumps(t, ensure_ascii=False) for t in series.to_list()]
    for t in series.to_list():
        assert next(csv.reader(io.StringIO(csv_field(t) + "\n", newline=""))) == [t] or t == ""
