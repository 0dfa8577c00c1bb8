"""Issue 25 (8): the JSON table writes a quantile's level as a number, as every other number (a contract change,
docs/contract-0.3.md "Changed after 0.3.0"), while a table stored before is re-issued with the strings it was first
published with; and `release --json` lists the statistics it released beside their number."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

from dpcli.publish.store import decode_table
from dpcli.publish.writers import write_table
from tests.helpers import run_in_process
from tests.spec_builder import spec_text

SPEC = spec_text(
    {"age": "{type: int, bounds: [0, 100]}", "quantile": "{type: category, categories: [a, b]}"},
    ["{name: n, kind: count}", "{name: med, kind: median, column: age}",
     "{name: quarts, kind: quantile, column: age, q: [0.25, 0.75]}"],
)
DATA = "age,quantile\n" + "".join(f"{20 + i % 50},a\n" for i in range(40))


def test_levels_are_numbers_and_the_summary_lists_the_statistics(make_work: Callable[..., Path]) -> None:
    work = make_work(SPEC, DATA, cap="10")
    r = run_in_process("release", work / "spec.yaml", "-i", work / "data.csv", "--ledger", work / "L.jsonl",
                       "-o", work / "o.json", "--json", "--release-id", "one")
    assert r.returncode == 0, r.stderr
    rows = json.loads((work / "o.json").read_text(), parse_float=Decimal)
    assert [(x["statistic"], x["quantile"]) for x in rows] == [
        ("n", None), ("med", Decimal("0.5")), ("quarts", Decimal("0.25")), ("quarts", Decimal("0.75"))
    ]
    summary = json.loads(r.stderr)
    assert summary["statistics"] == 3  # the count, as 0.3.0 wrote it
    assert summary["statistic_list"] == [
        {"statistic": "n", "kind": "count", "rows": 1}, {"statistic": "med", "kind": "median", "rows": 1},
        {"statistic": "quarts", "kind": "quantile", "rows": 2},
    ]

    # the release store's table: as stored now it writes the same bytes; as a dpcli before issue 25 stored it (no
    # levels_as_numbers key), its levels are the JSON strings first published
    (stored,) = (work / "L.jsonl.releases").iterdir()
    doc = json.loads(stored.read_bytes())
    write_table(decode_table(stored.read_bytes()), work / "again.json", "json")
    assert (work / "again.json").read_bytes() == (work / "o.json").read_bytes()
    del doc["levels_as_numbers"]
    write_table(decode_table(json.dumps(doc).encode()), work / "before.json", "json")
    before = json.loads((work / "before.json").read_text())
    assert [x["quantile"] for x in before] == [None, "0.5", "0.25", "0.75"]


def test_a_column_named_quantile_in_a_release_without_one_stays_text(make_work: Callable[..., Path]) -> None:
    spec = SPEC.split("  - {name: med")[0] + "  - {name: by_q, kind: count, by: [quantile]}\n"
    work = make_work(spec, DATA, cap="10")
    r = run_in_process("release", work / "spec.yaml", "-i", work / "data.csv", "--ledger", work / "L.jsonl",
                       "-o", work / "o.json", "--quiet")
    assert r.returncode == 0, r.stderr
    rows = json.loads((work / "o.json").read_text())
    assert [x["quantile"] for x in rows] == [None, "a", "b"]
