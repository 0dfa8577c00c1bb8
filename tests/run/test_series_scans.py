"""A series' run reads each input file once (issue 26): the running totals' pieces (the tree's blocks, the
factorisation's products) come from one read of each file, its rows grouped by their own period, not one read per
piece or per period. The reads are counted where the engine reads a file's data lines (dpcli.engine.source.CsvSource
.chunks), wrapped at the module level; the tables' exact answers are checked by tests/run/test_series_tree.py,
test_series_factorization.py and test_series_template.py."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.core.accounting import Cap
from dpcli.engine import source
from dpcli.ledger import open_ledger
from dpcli.ledger.base import recorded_pieces
from dpcli.run.series import release_period
from tests.run.test_series import ROWS
from tests.run.test_series_factorization import AFTER
from tests.run.test_series_factorization import SPEC as FACTORIZATION_SPEC
from tests.run.test_series_template import FILES
from tests.run.test_series_template import _period as template_period
from tests.run.test_series_template import _work as template_work


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Each file's reads of its data lines by the engine, by its name."""
    counted: Counter[str] = Counter()
    chunks = source.CsvSource.chunks

    def counting(self: source.CsvSource, *args: int) -> Iterator[bytes]:
        counted[self.path.name] += 1
        return chunks(self, *args)

    monkeypatch.setattr(source.CsvSource, "chunks", counting)
    return counted


def _pieces(work: Path) -> list[str]:
    records = open_ledger(work / "ledger.jsonl").records()
    series_key = next(r.get("release_key") for r in records if r.type == "spend")
    return sorted(recorded_pieces(records, str(series_key)))


def test_a_tree_run_reads_each_period_file_once(tmp_path: Path, reads: Counter[str]) -> None:
    """Period 4 of a T = 4 tree, first: its 7 blocks need periods 1..4, so the run opens the 4 period files (an
    input template) and reads each one once (before: 7 blocks x 4 files = 28 reads, each file 7 times)."""
    work = template_work(tmp_path, "running_totals")
    template_period(work, 4)
    assert reads == Counter({f"adm-{day}.csv": 1 for day in FILES})
    assert _pieces(work) == ["b0.0", "b0.1", "b0.2", "b0.3", "b1.0", "b1.1", "b2.0"]


def test_a_factorised_run_reads_its_cumulative_file_once(tmp_path: Path, reads: Counter[str]) -> None:
    """Period 3 of a factorised series, first: products 1..3 weigh periods 1..3, each period's rows aggregated
    from one read of the cumulative file (before: once per period, 3 reads)."""
    (tmp_path / "series.yaml").write_text(FACTORIZATION_SPEC.replace("DESIGN", "running_totals"))
    (tmp_path / "admissions.csv").write_text("admitted,ward,stay\n" + "".join(f"{d},{w},{s}\n" for d, w, s in ROWS))
    open_ledger(tmp_path / "ledger.jsonl").set_cap("admissions", Cap(Fraction(10), Fraction(1, 10**5)),
                                                   allow_raise=False)
    release_period(tmp_path / "series.yaml", period=3, output=tmp_path / "p3.csv", now=AFTER)
    assert reads == Counter({"admissions.csv": 1})
    assert _pieces(tmp_path) == ["f1", "f2", "f3"]
