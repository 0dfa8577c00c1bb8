"""Person-level releases: the engine's exact aggregates against a pure-Python reading of the rules
(dpcli/engine/persons.py, "What the rows mean"), through the no-noise path.

The reference below parses the CSV with the csv module, types the cells itself and applies the rules with plain
Python (dicts, sorts). It borrows one thing from polars: the keyed hash of a row and of a (person, cell), computed on
the reference's own typed values, since the rules choose rows by that hash.
"""

from __future__ import annotations

import csv
import io
import random
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpcli.engine.persons as persons
from dpcli.engine import aggregate, check_input
from dpcli.engine.cells import used_columns
from dpcli.engine.persons import ID_COLUMN, PersonRows, Seeds, exact_from_frames
from dpcli.errors import InputError
from dpcli.plan.model import make_plan
from dpcli.specs.load import parse_spec
from tests import spec_builder

SECRET = bytes(range(32))
SEXES = ["F", "M"]
MAX_LENGTH = 3
BOUNDS = (0, 10)
BINS = [0, 3, 6, 11]

STATISTICS = """\
  - {name: rows, kind: count}
  - {name: persons, kind: count, of: persons}
  - {name: by_sex, kind: count, by: [sex]}
  - {name: persons_by_sex, kind: count, of: persons, by: [sex]}
  - {name: by_country, kind: count, by: [country]}
  - {name: persons_by_sex_country, kind: count, of: persons, by: [sex, country]}
  - {name: amount_hist, kind: histogram, column: amount, bins: [0, 3, 6, 11]}
  - {name: spend, kind: sum, column: amount, by: [sex], clamp: CLAMP}
  - {name: average, kind: mean, column: amount, clamp: CLAMP}
  - {name: spend_all, kind: sum, column: amount, clamp: CLAMP}
  - {name: median_by_sex, kind: median, column: amount, by: [sex]}
  - {name: spread_by_sex, kind: variance, column: amount, by: [sex]}
"""


def spec_text(unit: str, clamp: str = "row") -> str:
    return f"""\
version: 1
dataset: people
privacy:
  epsilon: 1
  delta: 1e-6
  unit: {unit}
columns:
  sex: {{type: category, categories: [{", ".join(SEXES)}]}}
  country: {{type: category, categories: open, max_length: {MAX_LENGTH}}}
  amount: {{type: int, bounds: [{BOUNDS[0]}, {BOUNDS[1]}]}}
statistics:
{STATISTICS.replace("CLAMP", clamp)}"""


def person_unit(k: int, g: int | None, r: int | None, missing: str) -> str:
    fields = [f"id: pid, max_rows: {k}", f"missing_id: {missing}"]
    if g is not None:
        fields.append(f"max_groups: {g}")
    if r is not None:
        fields.append(f"max_rows_per_group: {r}")
    return "{" + ", ".join(fields) + "}"


# -- the reference ---------------------------------------------------------------------------------------------------


def _int_cell(text: str | None) -> int | None:
    """polars' integer parser: an optional sign and ASCII digits."""
    if text is None:
        return None
    body = text[1:] if text[:1] in "+-" else text
    return int(text) if body.isascii() and body.isdigit() else None


def _row_hashes(rows: list[dict], used: list[str], seed: int) -> list[int]:
    """The keyed hash of each row (id and used cells, typed as the engine types them)."""
    schema = {ID_COLUMN: pl.String, **{c: (pl.Int64 if c == "amount" else pl.String) for c in used}}
    frame = pl.DataFrame([{ID_COLUMN: r["id"], **{c: r[c] for c in used}} for r in rows], schema=schema, orient="row")
    return frame.select(pl.struct(ID_COLUMN, *used).hash(seed)).to_series().to_list() if rows else []


def _cell_hashes(cells: list[tuple[str, int, str | None]], seeds: Seeds, opened: bool) -> list[int]:
    """The keyed hash of each (person id, cell)."""
    pid = pl.Series([c[0] for c in cells], dtype=pl.String).hash(seeds.person)
    frame = pl.DataFrame({"p": pid, "code": pl.Series([c[1] for c in cells], dtype=pl.Int64)})
    if opened:
        frame = frame.with_columns(key=pl.Series([c[2] for c in cells], dtype=pl.String))
    return frame.select(pl.struct(frame.columns).hash(seeds.cell)).to_series().to_list() if cells else []


def reference(text: str, k: int, g: int | None, r: int | None, missing: str, clamp: str) -> list[dict]:
    """Per statistic of STATISTICS, {cell: (n, s)}: the rules applied by hand."""
    seeds = Seeds.of(SECRET)
    records = list(csv.reader(io.StringIO(text)))
    header, lines = records[0], records[1:]
    rows = []
    for fields in lines:
        cell = dict(zip(header, fields, strict=False))
        rows.append({
            "id": cell.get("pid"),
            "sex": cell.get("sex") or None,  # an empty text cell reads as a null one
            "country": cell.get("country") or None,
            "amount": _int_cell(cell.get("amount")),
        })
    used = ["sex", "country", "amount"]
    for row, h in zip(rows, _row_hashes(rows, used, seeds.row), strict=True):
        row["h"] = h
    # rule 1: persons; rule 2: K rows each, smallest h first
    persons: dict[str, list[dict]] = defaultdict(list)
    alone = []
    for row in rows:
        ident = row["id"]
        if ident is None or ident == "" or "\ufffd" in ident:
            if missing == "person":
                alone.append(row)
        else:
            persons[ident].append(row)
    kept: list[tuple[str, list[dict]]] = [
        (ident, sorted(own, key=lambda x: x["h"])[:k]) for ident, own in persons.items()
    ]
    kept += [(f"alone{i}", [row]) for i, row in enumerate(alone)]

    def country(row: dict) -> str | None:
        c = row["country"]
        return None if c is None or c == "" or "\ufffd" in c else c[:MAX_LENGTH]

    def sex(row: dict) -> int | None:
        return SEXES.index(row["sex"]) if row["sex"] in SEXES else None

    def amount(row: dict) -> int | None:
        return None if row["amount"] is None else min(max(row["amount"], BOUNDS[0]), BOUNDS[1])

    def bin_of(row: dict) -> int | None:
        a = amount(row)
        return None if a is None else next(i for i in range(len(BINS) - 1) if BINS[i] <= a < BINS[i + 1])

    def cell(*parts):
        """The engine's form of a cell: (declared code,) or (declared code, open key); None outside every cell."""
        return None if any(p is None for p in parts) else parts

    # (cell of a row, value or None, what is counted, has cells)
    statistics = [
        (lambda x: (0,), None, "rows", False),
        (lambda x: (0,), None, "persons", False),
        (lambda x: cell(sex(x)), None, "rows", True),
        (lambda x: cell(sex(x)), None, "persons", True),
        (lambda x: cell(0, country(x)), None, "rows", True),
        (lambda x: cell(sex(x), country(x)), None, "persons", True),
        (lambda x: cell(bin_of(x)), None, "rows", True),
        (lambda x: cell(sex(x)), amount, "sum", True),
        (lambda x: (0,), amount, "mean", False),
        (lambda x: (0,), amount, "sum", False),
        # a quantile: G and R bound the cells of by:, each kept row counted in its (cell, candidate) bin
        (lambda x: cell(sex(x)), amount, "quantile", True),
        # a variance: each kept row clamped (no clamp: field), its centred value and square summed per cell
        (lambda x: cell(sex(x)), amount, "variance", True),
    ]
    out = []
    for cell_of, value_of, what, has_cells in statistics:
        offset = (BOUNDS[0] + BOUNDS[1]) // 2 if what in ("mean", "variance") else 0
        width = 3 if what == "variance" else 2  # (n, s) or (n, s, sum of squares)
        totals: dict[tuple, list[int]] = defaultdict(lambda: [0] * width)  # noqa: B023 - used within the loop
        for ident, own in kept:
            by_cell: dict[tuple, list[dict]] = defaultdict(list)
            for row in own:  # in h order
                c = cell_of(row)
                if c is None or (value_of is not None and value_of(row) is None):
                    continue  # outside every cell: takes no place
                by_cell[c].append(row)
            chosen = list(by_cell)
            if has_cells and g is not None and not ident.startswith("alone"):  # one row alone: one cell
                opened = bool(chosen) and len(chosen[0]) == 2
                keyed = [(ident, c[0], c[1] if opened else None) for c in chosen]
                hashes = _cell_hashes(keyed, seeds, opened)
                order = sorted(range(len(chosen)), key=lambda i: (hashes[i], chosen[i]))
                chosen = [chosen[i] for i in order[:g]]
            for c in chosen:
                selected = by_cell[c][:r] if (has_cells and r is not None) else by_cell[c]
                t = totals[c]
                if what == "quantile":
                    for x in selected:  # candidates 0..10: code = cell of by: x 11 + the value's candidate
                        totals[(c[0] * (BOUNDS[1] - BOUNDS[0] + 1) + amount(x) - BOUNDS[0],)][0] += 1
                elif what == "variance":  # squares on a grid of 1 (int bounds [0, 10]): exact
                    t[0] += len(selected)
                    t[1] += sum(value_of(x) - offset for x in selected)
                    t[2] += sum((value_of(x) - offset) ** 2 for x in selected)
                elif what == "rows":
                    t[0] += len(selected)
                elif what == "persons":
                    t[0] += 1
                elif clamp == "person":
                    total = min(max(sum(value_of(x) for x in selected), BOUNDS[0]), BOUNDS[1])
                    t[0] += 1
                    t[1] += total - offset
                else:
                    t[0] += len(selected)
                    t[1] += sum(value_of(x) - offset for x in selected)
        out.append({c: tuple(v) for c, v in totals.items() if any(v)})
    return out


def engine_cells(exact) -> list[dict]:
    """The engine's statistics in the reference's form."""
    out = []
    for e in exact:
        cells = {}
        if e.keys is not None:
            for (code, key), n in zip(e.keys, e.counts.tolist(), strict=True):
                cells[(code, key)] = (n, 0)
        else:
            for i, n in enumerate(e.counts.tolist()):
                s = int(e.sums[i]) if e.sums is not None else 0
                if e.squares is not None:
                    if n or s or e.squares[i]:
                        cells[(i,)] = (n, s, int(e.squares[i]))
                elif n or s:
                    cells[(i,)] = (n, s)
        out.append(cells)
    return out


# -- data ------------------------------------------------------------------------------------------------------------

IDS = ["p1", "p1", "p2", "p2", "q", "", "\ufffd7"]  # few persons: many rows each
COUNTRIES = ["France", "Frank", "Germany", "Spain", "Sp", "", "It\ufffd", "Fr,x", "ab"]
AMOUNTS = ["", "x", "+3", "007"]


def _field(text: str, quoted: bool) -> str:
    if quoted or "," in text:
        return '"' + text.replace('"', '""') + '"'
    return text


rows_strategy = st.lists(
    st.tuples(
        st.sampled_from(IDS), st.sampled_from([*SEXES, "X", ""]), st.sampled_from(COUNTRIES),
        st.one_of(st.integers(-4, 14).map(str), st.sampled_from(AMOUNTS)), st.booleans(),
    ),
    min_size=4,
    max_size=80,
)


def csv_text(rows: list[tuple]) -> str:
    lines = ["pid,sex,country,amount"]
    for ident, sex, country, amount, quoted in rows:
        lines.append(",".join([_field(ident, False), _field(sex, quoted), _field(country, quoted), amount]))
    return "\n".join(lines) + "\n"


def run(tmp_path: Path, text: str, unit: str, clamp: str, name: str = "in.csv") -> list:
    plan = make_plan(parse_spec(spec_text(unit, clamp)))
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return aggregate(plan, path, secret=SECRET)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=rows_strategy,
    k=st.integers(1, 4),
    g=st.sampled_from([None, 1, 2]),
    r=st.sampled_from([None, 1, 2]),
    missing=st.sampled_from(["drop", "person"]),
    clamp=st.sampled_from(["row", "person"]),
)
def test_engine_matches_the_reference(tmp_path: Path, rows, k, g, r, missing, clamp) -> None:
    text = csv_text(rows)
    got = engine_cells(run(tmp_path, text, person_unit(k, g, r, missing), clamp))
    assert got == reference(text, k, g, r, missing, clamp)


def check_random_panel(tmp_path: Path, rng: random.Random, fewest: int, most: int) -> None:
    """A random panel of ``fewest`` to ``most`` rows of a few persons, every parameter drawn: the engine's cells
    are the reference's."""
    rows = [
        (rng.choice(IDS), rng.choice([*SEXES, "X", ""]), rng.choice(COUNTRIES),
         rng.choice([str(rng.randint(-4, 14)), *AMOUNTS]), rng.random() < 0.3)
        for _ in range(rng.randrange(fewest, most))
    ]
    k, g, r = rng.randint(1, 5), rng.choice([None, 1, 2]), rng.choice([None, 1, 2, 3])
    missing, clamp = rng.choice(["drop", "person"]), rng.choice(["row", "person"])
    text = csv_text(rows)
    assert engine_cells(run(tmp_path, text, person_unit(k, g, r, missing), clamp)) == reference(
        text, k, g, r, missing, clamp
    )


@pytest.mark.parametrize("seed", range(24))
def test_random_panels_match_the_reference(tmp_path: Path, seed: int) -> None:
    """Plain random panels beside the Hypothesis search (which favours small, uniform examples): a few persons with
    dozens of rows each, every parameter drawn."""
    check_random_panel(tmp_path, random.Random(seed), 30, 120)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=rows_strategy, seed=st.integers(0, 2**32), k=st.integers(1, 3), g=st.sampled_from([None, 1]))
def test_the_rows_chosen_do_not_depend_on_file_order(tmp_path: Path, rows, seed, k, g) -> None:
    unit = person_unit(k, g, 1, "person")
    shuffled = list(rows)
    random.Random(seed).shuffle(shuffled)
    assert engine_cells(run(tmp_path, csv_text(rows), unit, "person", "a.csv")) == engine_cells(
        run(tmp_path, csv_text(shuffled), unit, "person", "b.csv")
    )


def test_a_person_with_many_rows_counts_k_of_them(tmp_path: Path) -> None:
    text = "pid,sex,country,amount\n" + "".join(f"a,F,France,{i % 11}\n" for i in range(1000)) + "b,M,Spain,4\n"
    exact = run(tmp_path, text, person_unit(3, 1, None, "drop"), "person")
    cells = engine_cells(exact)
    assert cells[0] == {(0,): (4, 0)}  # 3 of a's rows, b's one
    assert cells[1] == {(0,): (2, 0)}
    assert cells[4] == {(0, "Fra"): (3, 0), (0, "Spa"): (1, 0)}
    assert cells == reference(text, 3, 1, None, "drop", "person")


def test_csv_and_parquet_keep_the_same_rows(tmp_path: Path) -> None:
    rng = random.Random(5)
    rows = [
        (f"p{rng.randrange(40)}", rng.choice(SEXES), rng.choice(["France", "Spain", "Peru"]), rng.randrange(-2, 14))
        for _ in range(2000)
    ]
    text = "pid,sex,country,amount\n" + "".join(f"{a},{b},{c},{d}\n" for a, b, c, d in rows)
    frame = pl.DataFrame(rows, schema={"pid": pl.String, "sex": pl.String, "country": pl.String, "amount": pl.Int64},
                         orient="row")
    for g, clamp in [(None, "row"), (2, "person")]:
        unit = person_unit(5, g, 2, "drop")
        plan = make_plan(parse_spec(spec_text(unit, clamp)))
        frame.write_parquet(tmp_path / "in.parquet")
        from_csv = engine_cells(run(tmp_path, text, unit, clamp))
        from_parquet = engine_cells(aggregate(plan, tmp_path / "in.parquet", secret=SECRET))
        assert from_csv == from_parquet == reference(text, 5, g, 2, "drop", clamp)


@pytest.mark.parametrize("eol", ["\r", "\r\n", "\n"])
def test_line_ends_and_quoted_line_breaks(tmp_path: Path, eol: str) -> None:
    """CR and CRLF files (the LF after the last CR is no row, not even a person of its own), and the RFC 4180 reader
    of csv.quoted_line_breaks, keep what the reference keeps."""
    rows = [("p1", "F", "France", "3", True), ("", "M", "Spain", "4", False), ("p1", "M", "Fr,x", "12", True)] * 7
    text = csv_text(rows)
    unit = person_unit(2, 1, None, "person")
    expected = reference(text, 2, 1, None, "person", "row")
    assert engine_cells(run(tmp_path, text.replace("\n", eol), unit, "row")) == expected
    plan = make_plan(parse_spec(spec_text(unit, "row") + "csv: {quoted_line_breaks: true}\n"))
    path = tmp_path / "rfc.csv"
    path.write_text(text.replace("\n", eol), encoding="utf-8")
    assert engine_cells(aggregate(plan, path, secret=SECRET)) == expected


def test_arrow_ipc_keeps_the_rows_csv_keeps(tmp_path: Path) -> None:
    rows = [(f"p{i % 7}", SEXES[i % 2], ["France", "Peru", ""][i % 3], i % 13) for i in range(300)]
    text = "pid,sex,country,amount\n" + "".join(f"{a},{b},{c},{d}\n" for a, b, c, d in rows)
    frame = pl.DataFrame(rows, schema={"pid": pl.String, "sex": pl.String, "country": pl.String, "amount": pl.Int64},
                         orient="row")
    frame.write_ipc(tmp_path / "in.arrow")
    unit = person_unit(3, 1, 2, "drop")
    plan = make_plan(parse_spec(spec_text(unit, "person")))
    expected = reference(text, 3, 1, 2, "drop", "person")
    assert engine_cells(aggregate(plan, tmp_path / "in.arrow", secret=SECRET)) == expected
    assert engine_cells(run(tmp_path, text, unit, "person")) == expected


def test_another_secret_keeps_other_rows(tmp_path: Path) -> None:
    """The choice is the secret's: a different secret, a different (equally valid) choice."""
    text = "pid,sex,country,amount\n" + "".join(f"a,F,France,{i % 11}\n" for i in range(200))
    plan = make_plan(parse_spec(spec_text(person_unit(3, None, None, "drop"), "row")))
    path = tmp_path / "in.csv"
    path.write_text(text)
    at = [sp.statistic.name for sp in plan.statistics].index("spend_all")
    sums = {int(aggregate(plan, path, secret=bytes([i]) * 32)[at].sums[0]) for i in range(6)}
    assert len(sums) > 1


def test_memory_is_bounded_by_persons(tmp_path: Path) -> None:
    """Many rows of few persons, added in chunks: the rows held stay within a few times persons x K."""
    k, persons = 2, 500
    plan = make_plan(parse_spec(spec_text(person_unit(k, None, None, "drop"), "row")))
    held = PersonRows(plan, SECRET)
    held.COMPACT_ROWS = 1000
    rng = random.Random(1)
    chunk_rows = 4000
    for _ in range(25):  # 100,000 rows
        chunk = pl.DataFrame(
            {
                ID_COLUMN: [f"p{rng.randrange(persons)}" for _ in range(chunk_rows)],
                "sex": [rng.choice(SEXES) for _ in range(chunk_rows)],
                "country": [rng.choice(["France", "Spain"]) for _ in range(chunk_rows)],
                "amount": [rng.randrange(11) for _ in range(chunk_rows)],
            },
            schema={ID_COLUMN: pl.String, "sex": pl.String, "country": pl.String, "amount": pl.Int64},
        )
        held.add(chunk)
        # the rows held are cut to K per person once they pass GROWTH times their size after the last cut
        assert held.held_rows <= held.GROWTH * persons * k + held.COMPACT_ROWS
    assert held.kept_rows().height == persons * k
    assert held.finish()[0].counts.tolist() == [persons * k]


def test_partials_add_up(tmp_path: Path) -> None:
    """Spark's way: persons split between partitions, one PersonRows each, partials added."""
    plan = make_plan(parse_spec(spec_text(person_unit(2, 1, 1, "person"), "person")))
    rng = random.Random(3)
    rows = [
        {ID_COLUMN: rng.choice([f"p{i}" for i in range(30)] + [""]), "sex": rng.choice(SEXES),
         "country": rng.choice(["France", "Spain", "Peru"]), "amount": rng.randrange(12)}
        for _ in range(400)
    ]
    schema = {ID_COLUMN: pl.String, "sex": pl.String, "country": pl.String, "amount": pl.Int64}
    whole = PersonRows(plan, SECRET)
    whole.add(pl.DataFrame(rows, schema=schema))
    parts = [PersonRows(plan, SECRET) for _ in range(3)]
    for i, part in enumerate(parts):
        # each partition's persons, in batches of 8 rows (as Arrow batches come): a person's rows span batches
        mine = [row for row in rows if hash(row[ID_COLUMN]) % 3 == i]
        for start in range(0, len(mine), 8):
            part.add(pl.DataFrame(mine[start : start + 8], schema=schema))
    expected = engine_cells(whole.finish())
    assert engine_cells(exact_from_frames(plan, [p.cell_frames() for p in parts])) == expected
    assert used_columns(plan.spec) == ["sex", "country", "amount"]


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_a_missing_id_field_is_exit_3_before_anything(tmp_path: Path, suffix: str) -> None:
    plan = make_plan(parse_spec(spec_text(person_unit(2, None, None, "drop"), "row")))
    path = tmp_path / f"in.{suffix}"
    frame = pl.DataFrame({"person": ["a"], "sex": ["F"], "country": ["Fr"], "amount": [1]})
    if suffix == "csv":
        frame.write_csv(path)
    else:
        frame.write_parquet(path)
    for call in (lambda: check_input(plan.spec, path), lambda: aggregate(plan, path, secret=SECRET)):
        with pytest.raises(InputError) as info:
            call()
        where = "header" if suffix == "csv" else "schema"
        assert str(info.value) == f"input {path}: the person id field pid (privacy.unit.id) is missing from the {where}"
        assert info.value.exit_code == 3


@pytest.mark.parametrize(("prefix_mask", "row_bits"), [(0, 60), ((1 << 64) - 2, 1)])
@pytest.mark.parametrize("seed", range(6))
def test_shared_key_prefixes_and_key_ties_keep_the_rules_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefix_mask: int, row_bits: int, seed: int
) -> None:
    """The sort key's rare cases, made common: every person under one key prefix (mask 0), or rows of one person
    tying on the key (one bit of h). The exact path must keep the rows the rules keep."""
    monkeypatch.setattr(persons, "_PREFIX_MASK", prefix_mask)
    monkeypatch.setattr(persons, "_ROW_BITS", row_bits)
    check_random_panel(tmp_path, random.Random(1000 + seed), 60, 160)


def test_persons_under_a_shared_key_prefix_are_numbered_apart_from_the_others() -> None:
    """Four persons of one row each, sorted A, B, C, D, where B and C share the key's prefix: each keeps a number of
    its own (the persons' runs and the exact path's numbers never meet)."""
    prefix = 1 << persons._ROW_BITS
    frame = pl.DataFrame(
        {
            persons._KEY: [1 * prefix, 2 * prefix, 2 * prefix + 1, 3 * prefix],
            persons._PID: [1 * prefix, 2 * prefix, 2 * prefix + 5, 3 * prefix],
            persons._IDTEXT: ["a", "b", "c", "d"],
            persons._H: [0, 0, 1 << 40, 0],
        },
        schema={**dict.fromkeys([persons._KEY, persons._PID, persons._H], pl.UInt64), persons._IDTEXT: pl.String},
    )
    numbered = persons._cut(frame, [], 4, numbered=True)
    assert numbered.height == 4
    assert numbered[persons._PERSON].n_unique() == 4
    assert numbered[persons._RANK].to_list() == [0, 0, 0, 0]


COUNTS_ONLY = spec_builder.spec_text(
    {"amount": "{type: int, bounds: [0, 10]}"},
    ["{name: rows, kind: count}", "{name: persons, kind: count, of: persons}"],
    privacy="epsilon: 1, unit: {id: pid, max_rows: 2, missing_id: person}", dataset="people",
)


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_rows_without_an_id_are_persons_of_their_own_when_no_cell_is_read(tmp_path: Path, suffix: str) -> None:
    """Issue 23 (12): with counts alone (no statistic reads a cell) ``missing_id: person`` counted nothing: a file
    whose rows had no id released 0 rows and 0 persons. Each id-less row is a person of its own, with that row."""
    plan = make_plan(parse_spec(COUNTS_ONLY))
    for ids, rows, persons_seen in [([None] * 3, 3, 3), ([None, "p1", None, "p1", "p1", ""], 5, 4)]:
        path = tmp_path / f"in.{suffix}"
        frame = pl.DataFrame(
            {"pid": ids, "amount": list(range(len(ids)))}, schema={"pid": pl.String, "amount": pl.Int64}
        )
        if suffix == "csv":
            frame.write_csv(path)
        else:
            frame.write_parquet(path)
        assert [e.counts.tolist() for e in aggregate(plan, path, secret=SECRET)] == [[rows], [persons_seen]]


@pytest.mark.parametrize("numbered", [False, True])
def test_two_persons_whose_id_hashes_agree_are_two_persons(numbered: bool) -> None:
    """Issue 23 (8): a person is the id's text, not its hash. Two persons whose keyed id hashes agree in all 64 bits
    (which a hash can never rule out, and polars' seeded XXH3 does not make hard to write down) still keep K rows
    each: merged, the pair would keep K rows of both, and one person's presence could move 2K rows."""
    k = 2
    frame = pl.DataFrame(
        {
            persons._KEY: [5 << persons._ROW_BITS | i for i in range(6)],
            persons._PID: [5 << persons._ROW_BITS] * 6,  # one id hash for both persons
            persons._IDTEXT: ["alice", "mallory", "alice", "mallory", "alice", "mallory"],
            persons._H: [0, 1, 2, 3, 4, 5],
        },
        schema={**dict.fromkeys([persons._KEY, persons._PID, persons._H], pl.UInt64), persons._IDTEXT: pl.String},
    )
    kept = persons._cut(frame, [], k, numbered=numbered)
    assert sorted(kept[persons._IDTEXT].to_list()) == ["alice", "alice", "mallory", "mallory"]
    assert sorted(kept[persons._H].to_list()) == [0, 1, 2, 3]  # each person's two smallest h
    if numbered:
        assert kept[persons._PERSON].n_unique() == 2


def test_held_ids_own_their_text() -> None:
    """The rows a cut keeps hold their ids' text in buffers of their own (a gather of polars strings shares its
    source's buffers), so that the rows held stay bounded by the persons, not by the file: here 100 persons with
    40-character ids, 100,000 rows in 20 chunks, K = 2."""
    plan = make_plan(parse_spec(spec_text(person_unit(2, None, None, "drop"), "row")))
    held = PersonRows(plan, SECRET)
    held.COMPACT_ROWS = 1000
    schema = {ID_COLUMN: pl.String, "sex": pl.String, "country": pl.String, "amount": pl.Int64}
    for chunk in range(20):
        ids = [f"{(chunk * 5000 + i) % 100:040d}" for i in range(5000)]
        held.add(pl.DataFrame({ID_COLUMN: ids, "sex": ["F"] * 5000, "country": ["Fr"] * 5000, "amount": [1] * 5000},
                              schema=schema))
    held._cut_all()
    views = pl.CompatLevel.newest()  # as polars holds them (string views and their buffers), not copied to Arrow's
    text = sum(part.select(persons._IDTEXT).to_arrow(compat_level=views).nbytes for part in held.parts)
    assert held.held_rows == 200, text
    assert text < 200 * (16 + 40) * 2, text
