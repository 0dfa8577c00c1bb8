"""A series' pieces in the ledger (issue 26), on both backends: stored, then recorded in one ``pieces`` record
chained to the charge; a recorded piece is never drawn again (a second run needing it finds the record under the
lock); a recorded piece missing or altered is exit 5; a period's table is frozen once; malformed ``pieces`` records
are refused when the chain is read. The series end to end on PostgreSQL: tests/ledger/test_series_pieces.py
``test_a_series_on_postgresql``."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from dpcli.core.accounting import Cap
from dpcli.errors import LedgerError, SpentThenFailed
from dpcli.ledger import Delivery, Ledger, open_ledger
from dpcli.ledger.base import GENESIS, Record, new_record, piece_key, verify_chain
from dpcli.run.series import release_period
from tests.pg_server import PgServer
from tests.run.test_series import ROWS, SPEC

DATASET = "admissions"
SERIES = "s" * 40


@pytest.fixture(params=["jsonl", pytest.param("postgres", marks=pytest.mark.postgres)])
def book(request: pytest.FixtureRequest, tmp_path: Path) -> Ledger:
    if request.param == "jsonl":
        return open_ledger(tmp_path / "ledger.jsonl")
    server: PgServer = request.getfixturevalue("pg_server")
    return open_ledger(server.create_schema())


def counting_draw(log: list[list[str]]) -> Any:
    def draw(missing: list[str]) -> dict[str, bytes]:
        log.append(list(missing))
        return {p: f"noisy {p}".encode() for p in missing}

    return draw


def test_a_piece_is_drawn_once_stored_then_recorded(book: Ledger) -> None:
    log: list[list[str]] = []
    drawn = book.draw_pieces(DATASET, SERIES, 1, ["p1", "p2"], counting_draw(log))
    assert sorted(drawn) == ["p1", "p2"]
    again = book.draw_pieces(DATASET, SERIES, 1, ["p2", "p3"], counting_draw(log))
    assert log == [["p1", "p2"], ["p3"]]
    assert list(again) == ["p3"]
    pieces = [r for r in book.records() if r.type == "pieces"]
    assert [[p["id"] for p in r.get("pieces")] for r in pieces] == [["p1", "p2"], ["p3"]]
    assert pieces[0].get("pieces")[0]["sha256"] == hashlib.sha256(b"noisy p1").hexdigest()
    assert book.load_piece(SERIES, "p2") == b"noisy p2"


def test_a_recorded_piece_missing_or_altered_is_exit_5(book: Ledger) -> None:
    book.draw_pieces(DATASET, SERIES, 1, ["p1"], counting_draw([]))
    book.store_table(piece_key(SERIES, "p1"), b"another draw")  # the store edited by hand
    with pytest.raises(LedgerError, match="recorded piece p1 is altered") as info:
        book.load_piece(SERIES, "p1")
    assert info.value.exit_code == 5


def test_a_period_is_frozen_once(book: Ledger) -> None:
    key = "f" * 40
    first = book.freeze_period(key, b"table one", Delivery("series:period-1", hashlib.sha256(b"table one").hexdigest(),
                                                            period=1, pieces=("p1",)))
    second = book.freeze_period(key, b"table two", Delivery("series:period-1", "0" * 64, period=1, pieces=("p1",)))
    assert first[1] == second[1] == b"table one"
    assert [r.type for r in book.records()] == ["released"]


@pytest.mark.parametrize("pieces", [[], [{"id": "p1"}], [{"id": 1, "sha256": "0" * 64}], "p1",
                                    [{"id": "p1", "sha256": "xyz"}]])
def test_a_malformed_pieces_record_is_refused(pieces: object) -> None:
    fields = {"type": "pieces", "dataset": DATASET, "series_key": SERIES, "charge": 0, "pieces": pieces}
    record = new_record([], fields, None)  # type: ignore[arg-type]
    with pytest.raises(LedgerError, match="malformed pieces"):
        verify_chain([record], None, "test")
    assert GENESIS


@pytest.mark.postgres
def test_a_series_on_postgresql(pg_server: PgServer, tmp_path: Path) -> None:
    url = pg_server.create_schema()
    (tmp_path / "series.yaml").write_text(SPEC.replace("ledger: ledger.jsonl\n", ""))
    (tmp_path / "admissions.csv").write_text("admitted,ward,stay\n" + "".join(f"{d},{w},{s}\n" for d, w, s in ROWS))
    book = open_ledger(url)
    book.set_cap(DATASET, Cap(Fraction(3), Fraction(0)), allow_raise=False)
    after = datetime(2027, 2, 1, tzinfo=UTC)

    def run(t: int, out: str) -> Any:
        return release_period(tmp_path / "series.yaml", period=t, ledger=url, output=tmp_path / out, now=after)

    assert run(2, "p2.csv").charged
    assert not run(1, "p1.csv").charged
    again = run(2, "p2-again.csv")
    assert again.reused
    assert (tmp_path / "p2-again.csv").read_bytes() == (tmp_path / "p2.csv").read_bytes()
    records: list[Record] = open_ledger(url).records()
    assert [r.type for r in records].count("spend") == 1
    series_key = next(r for r in records if r.type == "spend").get("release_key")
    with book._connection().cursor() as cur:
        cur.execute("DELETE FROM dpcli_release_store WHERE release_id = %s", (piece_key(series_key, "p1"),))
    book._connection().commit()
    with pytest.raises(SpentThenFailed, match="recorded piece p1 is missing"):
        run(3, "p3.csv")
