"""`dpcli audit` writes its candidate datasets in the spec's CSV dialect, with raw hostile bytes (issue 23, 7).

The audit wrote comma-separated UTF-8 with a header line whatever the spec's ``csv:`` said, so the engine, reading
them as the spec declares, stopped on any spec with a dialect (a UTF-16 one: "declared column(s) missing from the
header"); and its candidate rows held only text a writer produces, so it could not find a reader that lets one
record's bytes reach another (issue 23, 1). The candidate files are now written in the spec's delimiter, encoding,
header form and line end, and candidate rows hold raw bytes too (an odd byte count in UTF-16, bytes not valid in
the encoding, stray quotes), placed before the other records. With these, the audit run against the reader before
the fix of (1) reports a count's pair loss of 2/3 against a claim of 1/3 (measured; the search is cheap: no noise
is drawn here).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dpcli.audit.neighbours import find_neighbours
from dpcli.plan.model import make_plan
from dpcli.specs.load import parse_spec

SPEC = """\
version: 1
dataset: d
privacy: {neighbours: add_remove, epsilon: 1}
%s
columns:
  age: {type: int, bounds: [0, 100]}
  sex: {type: category, categories: [F, M]}
statistics:
  - {name: n, kind: count}
  - {name: by_sex, kind: count, by: [sex]}
  - {name: s, kind: sum, column: age, by: [sex]}
"""

DIALECTS = [
    "csv: {encoding: utf-16-be, delimiter: tab}",
    "csv: {delimiter: ';', encoding: utf-16, header: [x, sex, age], line_end: cr}",
    "csv: {delimiter: '|', encoding: latin-1, header: false}",
]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_audit_reads_and_writes_the_specs_dialect(tmp_path: Path, dialect: str) -> None:
    """The search runs on every dialect and reaches each statistic's sensitivity (the reader is correct, so no
    pair passes it)."""
    plan = make_plan(parse_spec(SPEC % dialect))
    found, datasets = find_neighbours(plan, tmp_path)
    assert datasets > 1
    for nb in found:
        assert nb.pair_loss == nb.target.claimed_loss, (nb.target.label, nb.pair_loss)


def test_candidate_files_hold_raw_bytes_a_writer_would_not(tmp_path: Path) -> None:
    """Candidate records with an odd number of bytes (UTF-16), a lone surrogate and a stray quote, each written
    before the other records (where damage to the records after it would show)."""
    plan = make_plan(parse_spec(SPEC % "csv: {encoding: utf-16-le}"))
    codec = "utf-16-le"
    find_neighbours(plan, tmp_path)
    term = "\n".encode(codec)
    records = [path.read_bytes().split(term)[1] for path in tmp_path.glob("*.csv")]  # the record after the header
    assert any(len(r) % 2 for r in records)
    assert any(b"\x00\xd8" in r or b"\xd8\x00" in r for r in records)
    assert any(b'"' in r and r.count(b'"') % 2 for r in records)
