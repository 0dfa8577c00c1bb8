"""Issue 9: a release's size is known and limited before the spend, and the post-spend path is cheap.

The cell limit and memory estimate are functions of the spec alone and refuse (exit 2, nothing spent) before the
input is opened. Tables are columnar (labels made from the declared keys and bins, numbers as int64 arrays): their
CSV and JSON must stay byte for byte what dpcli 0.2 wrote, the compact release store must give the same bytes on a
re-run, and a table stored by dpcli 0.2 must still be readable.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import dpcli.publish.store as store
import dpcli.publish.writers as writers
from dpcli.core.accounting import Cap, format_exact
from dpcli.errors import SpecError
from dpcli.mechanisms.noisy import Noisy
from dpcli.plan.cost import MAX_RELEASE_CELLS, MAX_RELEASE_MEMORY_MB, check_cost, release_cost
from dpcli.plan.model import make_plan
from dpcli.postprocess.values import mean_grids, means
from dpcli.publish.columns import GridLabels, KeyLabels
from dpcli.publish.labels import label_columns
from dpcli.publish.store import decode_table, encode_table
from dpcli.publish.table import Table, build_table
from dpcli.publish.writers import HashingWriter, write_csv, write_json
from dpcli.specs.load import parse_spec
from dpcli.specs.model import GridBins
from tests.helpers import measured, run_dpcli, run_in_process

HEADER = """\
version: 1
dataset: toy
privacy: {unit: row, neighbours: add_remove, epsilon: 1}
columns:
  x: {type: float, bounds: [-1, 1], precision: 0.25}
  big: {type: float, bounds: [0, 10000000], precision: 1}
  age: {type: int, bounds: [-40, 90]}
  sex: {type: category, categories: ['F, x', 'M"q', 'é ü', ' lead']}
  emp: {type: bool}
statistics:
"""


def plan_of(*statistics: str):
    return make_plan(parse_spec(HEADER + "".join(f"  - {s}\n" for s in statistics)))


OVER = (
    "{name: h, kind: histogram, column: big, bins: {start: 0, stop: 10000000, step: 1}}",
    "{name: n, kind: count}",
)


# -- the limit: before anything is read or spent -------------------------------------------------------------------


def test_over_the_cell_limit_is_exit_2_before_the_input_is_opened_and_nothing_is_spent(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(HEADER + "".join(f"  - {s}\n" for s in OVER))
    led = tmp_path / "ledger.jsonl"
    assert run_in_process("budget", "set", "toy", "--epsilon", "10", "--ledger", led).returncode == 0
    before = led.read_bytes()
    # the input does not exist: the refusal comes first, so it says nothing about the input (exit 2, not 3)
    r = run_in_process("release", tmp_path / "spec.yaml", "-i", tmp_path / "missing.csv", "-o", tmp_path / "o.csv",
                  "--ledger", led)
    assert r.returncode == 2, r.stderr
    assert "10000001 cell(s)" in r.stderr.decode()
    assert f"limits are {MAX_RELEASE_CELLS} cells" in r.stderr.decode()
    assert led.read_bytes() == before
    assert not (tmp_path / "o.csv").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.jsonl", "ledger.jsonl.head", "spec.yaml"]
    for command in ("check", "plan"):
        assert run_in_process(command, tmp_path / "spec.yaml").returncode == 2


def test_cost_is_a_function_of_the_spec_alone() -> None:
    plan = plan_of(*OVER)
    cost = release_cost(plan)
    assert cost == release_cost(plan_of(*OVER))
    assert cost.cells == 10_000_001
    assert cost.over_limit
    with pytest.raises(SpecError) as info:
        check_cost(plan)
    assert info.value.exit_code == 2
    # exactly at the cell limit: allowed (the measured 10^7-cell histogram), and its estimate under the memory limit
    at = release_cost(plan_of(OVER[0]))
    assert at.cells == MAX_RELEASE_CELLS
    assert not at.over_limit
    assert at.memory_mb < MAX_RELEASE_MEMORY_MB
    assert check_cost(plan_of(OVER[0])) == at
    # the estimate weighs kinds by their measured cost: 6.25M cells of means are under the cell limit, not the memory
    # one; the same cells of counts are under both
    keys = "[" + ", ".join(f"k{i}" for i in range(2500)) + "]"
    columns = f"  a: {{type: category, categories: {keys}}}\n  b: {{type: category, categories: {keys}}}\nstatistics:\n"
    text = HEADER.replace("statistics:\n", columns)
    means_plan = make_plan(parse_spec(text + "  - {name: m, kind: mean, column: x, by: [a, b]}\n"))
    counts_plan = make_plan(parse_spec(text + "  - {name: c, kind: count, by: [a, b]}\n"))
    assert release_cost(means_plan).cells == release_cost(counts_plan).cells == 6_250_000
    assert release_cost(means_plan).over_limit
    assert not release_cost(counts_plan).over_limit


def test_labels_are_built_before_the_spend(tmp_path: Path, monkeypatch) -> None:
    """Label code that fails (here made to) fails before the spend: the ledger holds no spend record."""
    from dpcli.ledger import JsonlLedger
    from dpcli.run.release import release

    (tmp_path / "spec.yaml").write_text(
        HEADER + "  - {name: g, kind: histogram, column: x, bins: {start: -1, stop: 1, step: 0.5}}\n"
    )
    (tmp_path / "data.csv").write_text("x,big,age,sex,emp\n0.5,1,30,F,true\n")
    led = tmp_path / "L.jsonl"
    JsonlLedger(led).set_cap("toy", Cap(Fraction(10), Fraction(0)), False)

    def broken(self, first, n):
        raise MemoryError

    monkeypatch.setattr(GridLabels, "_edges", broken)
    with pytest.raises(MemoryError):
        release(tmp_path / "spec.yaml", input=tmp_path / "data.csv", output=tmp_path / "o.csv", ledger=led)
    assert [json.loads(line)["type"] for line in led.read_text().splitlines()] == ["cap"]


# -- labels: the same text as dpcli 0.2, made on demand ------------------------------------------------------------


def reference_bin_labels(start: Fraction, step: Fraction, count: int, sep: str = "..") -> list[str]:
    """The labels, straightforwardly: every edge through format_exact (sep ', ': dpcli 0.2's)."""
    return [f"[{format_exact(start + i * step)}{sep}{format_exact(start + (i + 1) * step)})" for i in range(count)]


@pytest.mark.parametrize(
    ("start", "step", "count"),
    [("0", "1", 7), ("-3", "0.25", 30), ("-1.5", "0.003", 1001), ("-0.0007", "0.0001", 20), ("-10", "1/3", 40),
     ("100000000", "1000000", 5), ("-2.5", "2.5", 3)],
)
def test_grid_labels_match_the_reference(monkeypatch, start: str, step: str, count: int) -> None:
    monkeypatch.setattr(writers, "CHUNK_ROWS", 64)  # several chunks, and chunks that wrap around the grid
    s, t = Fraction(start), Fraction(step)
    bins = GridBins(s, s + count * t, t)
    expected = reference_bin_labels(s, t, count)
    assert list(GridLabels(bins, 1, count)) == expected
    # the bin as an inner dimension (repeated under each key) and as an outer one (each label repeated)
    assert list(GridLabels(bins, 1, 3 * count)) == expected * 3
    assert list(GridLabels(bins, 3, 3 * count)) == [x for x in expected for _ in range(3)]
    assert list(GridLabels(bins, 1, count).csv(0, count)) == expected  # contract 0.3: never quoted
    assert list(GridLabels(bins, 1, count).json(0, count)) == [f'"{x}"' for x in expected]
    assert GridLabels(bins, 1, count)[count - 1] == expected[-1]
    # a re-issued dpcli 0.2 table: its labels, quoted in CSV as csv.writer quoted them
    legacy = reference_bin_labels(s, t, count, ", ")
    assert list(GridLabels(bins, 3, 3 * count, ", ").csv(0, 3 * count)) == [f'"{x}"' for x in legacy for _ in range(3)]
    # the edges as numbers, row for row with the labels
    low, high = (list(GridLabels(bins, 3, 3 * count, part=p)) for p in ("low", "high"))
    assert [f"[{a}..{b})" for a, b in zip(low, high, strict=True)] == [x for x in expected for _ in range(3)]


def test_label_columns_are_the_product_first_dimension_slowest() -> None:
    keys = (("F, x", 'M"q', "é ü"), ("false", "true"))
    bins = GridBins(Fraction(-1), Fraction(1), Fraction(1, 2))
    cols = label_columns([*keys, bins])
    rows = list(zip(*cols, strict=True))
    edges = reference_bin_labels(Fraction(-1), Fraction(1, 2), 4)
    assert rows == [(a, b, c) for a in keys[0] for b in keys[1] for c in edges]
    assert isinstance(cols[0], KeyLabels)
    assert len(cols[0]) == 24


# -- output bytes: what csv.writer and dpcli 0.2's JSON writer wrote ----------------------------------------------


def reference_csv(table: Table) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(table.columns)
    w.writerows(tuple("" if x is None else x for x in row) for row in table.rows())
    return buf.getvalue().encode()


def reference_json(table: Table) -> bytes:
    numeric = {"value", "ci_low", "ci_high", "epsilon", "rho", "bin_low", "bin_high"}
    keys = [json.dumps(c) for c in table.columns]
    out, first = "[", True
    for row in table.rows():
        parts = [f"{k}: {'null' if x is None else x if c in numeric else json.dumps(x, ensure_ascii=False)}"
                 for k, c, x in zip(keys, table.columns, row, strict=True)]
        out += ("\n  {" if first else ",\n  {") + ", ".join(parts) + "}"
        first = False
    return (out + ("\n]\n" if not first else "]\n")).encode()


def written(table: Table, writer) -> bytes:
    buf = io.BytesIO()
    sink = HashingWriter(buf)
    writer(table, sink)
    sink.flush()
    return buf.getvalue()


STATISTICS = (
    "{name: n, kind: count}",
    "{name: by, kind: count, by: [sex, emp]}",
    "{name: e, kind: histogram, column: age, bins: [-40, -0.5, 1, 17.25, 91]}",
    "{name: g, kind: histogram, column: x, bins: {start: -1, stop: 1, step: 0.25}, by: [sex]}",
    "{name: c, kind: histogram, column: sex}",
    "{name: s, kind: sum, column: x, by: [emp]}",
    "{name: m, kind: mean, column: x, by: [sex]}",
    "{name: ma, kind: mean, column: age}",
)


def noisy_for(plan, seed: int) -> list[Noisy]:
    rng = np.random.default_rng(seed)  # test inputs standing in for noisy values (no noise is drawn here)
    out = []
    for sp in plan.statistics:
        kind = sp.statistic.kind
        counts = None if kind == "sum" else rng.integers(-4 if seed else -30, 9 if seed else 300, sp.cells)
        sums = rng.integers(-10**6, 10**6, sp.cells).astype(object) if kind in ("sum", "mean") else None
        if sums is not None and seed == 2:
            sums[0] = 2**70  # past int64: the Fractions' path, same text
        out.append(Noisy(counts, sums))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_csv_and_json_bytes_are_the_reference_writers(monkeypatch, seed: int) -> None:
    monkeypatch.setattr(writers, "CHUNK_ROWS", 5)
    plan = plan_of(*STATISTICS)
    table = build_table(plan, noisy_for(plan, seed))
    assert written(table, write_csv) == reference_csv(table)
    assert written(table, write_json) == reference_json(table)
    again = decode_table(encode_table(table))
    assert written(again, write_csv) == reference_csv(table)
    assert written(again, write_json) == reference_json(table)


def test_vectorised_means_are_the_fraction_means() -> None:
    plan = plan_of("{name: m, kind: mean, column: x, by: [sex]}", "{name: a, kind: mean, column: age}")
    rng = np.random.default_rng(5)
    for sp, bounds in zip(plan.statistics, [(-4, 4), (-40, 90)], strict=True):
        for spread in (3, 50, 10**6):
            s = rng.integers(-spread * 50, spread * 50, 4000)
            n = rng.integers(-5, spread, 4000)
            value, low, high, mult, digits = mean_grids(sp, s, n, bounds)
            ref = means(sp, s, n, bounds)
            unit = Fraction(mult, 10**digits)
            assert [v * unit for v in value.tolist()] == ref.value
            assert [v * unit for v in low.tolist()] == ref.ci_low
            assert [v * unit for v in high.tolist()] == ref.ci_high


# -- the release store ---------------------------------------------------------------------------------------------

# A table as dpcli 0.2 stored it, and what dpcli 0.2 wrote from it (generated with dpcli 0.2's code).
STORED_02 = (
    '{"dimensions":["sex","x"],"with_rho":false,"blocks":[{"statistic":"h","epsilon":"1/3","rho":null,"labels":'
    '{"sex":["F, x","F, x","M\\"q","M\\"q"],"x":["[-1, -0.25)","[-0.25, 0.5)","[-1, -0.25)","[-0.25, 0.5)"]},'
    '"value":["3","-1","0","7"],"ci_low":["-6","-10","-9","-2"],"ci_high":["12","8","9","16"]},{"statistic":"s",'
    '"epsilon":"1/3","rho":null,"labels":{},"value":["-1.25"],"ci_low":["-10.25"],"ci_high":["7.75"]},'
    '{"statistic":"m","epsilon":"1/3","rho":null,"labels":{"sex":["F, x","M\\"q"]},"value":["0.1875","0"],'
    '"ci_low":["-1","-1"],"ci_high":["1","1"]}]}'
)
CSV_02 = (
    'statistic,sex,x,value,ci_low,ci_high,epsilon\nh,"F, x","[-1, -0.25)",3,-6,12,0.333333333333334\n'
    'h,"F, x","[-0.25, 0.5)",-1,-10,8,0.333333333333334\nh,"M""q","[-1, -0.25)",0,-9,9,0.333333333333334\n'
    'h,"M""q","[-0.25, 0.5)",7,-2,16,0.333333333333334\ns,,,-1.25,-10.25,7.75,0.333333333333334\n'
    'm,"F, x",,0.1875,-1,1,0.333333333333334\nm,"M""q",,0,-1,1,0.333333333333334\n'
)
JSON_02_FIRST = '[\n  {"statistic": "h", "sex": "F, x", "x": "[-1, -0.25)", "value": 3, "ci_low": -6, "ci_high": 12, '


def test_a_table_stored_by_dpcli_02_is_read_and_written_as_02_wrote_it() -> None:
    table = decode_table(STORED_02.encode())
    assert written(table, write_csv) == CSV_02.encode()
    assert written(table, write_json).decode().startswith(JSON_02_FIRST)
    assert encode_table(decode_table(encode_table(table))) == encode_table(table)


def _to_json_02(self: Table) -> bytes:
    """dpcli 0.2's store form of a table (encode_table): every cell as text."""
    doc = {"dimensions": list(self.dimensions), "with_rho": self.with_rho, "blocks": [
        {"statistic": b.statistic, "epsilon": None if b.epsilon is None else format_exact(b.epsilon),
         "rho": None if b.rho is None else format_exact(b.rho), "labels": {k: list(v) for k, v in b.labels.items()},
         "value": list(b.value), "ci_low": list(b.ci_low), "ci_high": list(b.ci_high)} for b in self.blocks]}
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


SMALL_GRID = HEADER.replace("statistics:\n", "") + """\
statistics:
  - {name: g, kind: histogram, column: age, bins: {start: -40, stop: 90, step: 2}, by: [emp]}
  - {name: f, kind: histogram, column: x, bins: {start: -1, stop: 1, step: 0.25}}
  - {name: s, kind: sum, column: x}
  - {name: m, kind: mean, column: x, by: [sex]}
  - {name: n, kind: count, by: [sex]}
"""


@pytest.mark.parametrize("first_store", ["current"])
@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_reissue_writes_the_first_runs_bytes(tmp_path: Path, monkeypatch, first_store: str, fmt: str) -> None:
    """The first run stores its table (in this version's compact form); a re-run under the release id writes the
    same bytes without drawing again. Small chunks make every column span several pieces. (A table stored by
    dpcli 0.2 is re-issued in 0.2's layout: test_a_table_stored_by_dpcli_02_is_read_and_written_as_02_wrote_it here,
    and tests/publish/test_table.py with a table and bytes made by dpcli 0.2.0 itself.)"""
    import dpcli.run.release
    from dpcli.ledger import JsonlLedger
    from dpcli.run.release import release

    monkeypatch.setattr(writers, "CHUNK_ROWS", 7)
    monkeypatch.setattr(store, "PACK_CHUNK", 11)
    (tmp_path / "spec.yaml").write_text(SMALL_GRID)
    (tmp_path / "data.csv").write_text("x,big,age,sex,emp\n" + "0.5,1,30,F,true\n-0.25,2,-3,é ü,false\n" * 20)
    led = tmp_path / "L.jsonl"
    JsonlLedger(led).set_cap("toy", Cap(Fraction(10), Fraction(0)), False)
    with monkeypatch.context() as m:
        if first_store == "0.2":
            m.setattr(dpcli.run.release, "encode_table", _to_json_02)
        first = release(tmp_path / "spec.yaml", input=tmp_path / "data.csv", output=tmp_path / f"a.{fmt}",
                        ledger=led, release_id="r1")
    stored = next((tmp_path / "L.jsonl.releases").iterdir()).read_bytes()
    assert (b'"format":3' in stored) == (first_store == "current")
    again = release(tmp_path / "spec.yaml", input=tmp_path / "gone.csv", output=tmp_path / f"b.{fmt}", ledger=led,
                    release_id="r1")
    assert again.reused
    assert not first.reused
    assert (tmp_path / f"a.{fmt}").read_bytes() == (tmp_path / f"b.{fmt}").read_bytes()
    table = first.table
    assert (tmp_path / f"a.{fmt}").read_bytes() == (reference_csv if fmt == "csv" else reference_json)(table)


# -- whole-process figures (slow: a 10^7-cell release) -------------------------------------------------------------


@pytest.mark.slow
def test_ten_million_cells_release_under_a_gigabyte(tmp_path: Path) -> None:
    """The issue's spec: 10^7 bins. dpcli 0.2 peaked at 3.1 GB after the spend; the whole process must stay under 1 GB
    and the release store must be compact (a few MB, not ~500 MB of text)."""
    (tmp_path / "spec.yaml").write_text(HEADER + "  - " + OVER[0] + "\n")
    (tmp_path / "data.csv").write_text("x,big,age,sex,emp\n" + "".join(f"0,{i * 997},1,F,true\n" for i in range(1000)))
    led = tmp_path / "L.jsonl"
    assert run_dpcli("budget", "set", "toy", "--epsilon", "10", "--ledger", led).returncode == 0
    peak = tmp_path / "peak"
    argv = [sys.executable, "-m", "dpcli", "release", str(tmp_path / "spec.yaml"), "-i", str(tmp_path / "data.csv"),
            "-o", str(tmp_path / "o.csv"), "--ledger", str(led)]
    r = subprocess.run(measured(argv, peak), capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr
    peak_kb = int(peak.read_text())
    assert peak_kb < 1_000_000, peak_kb
    store = next((tmp_path / "L.jsonl.releases").iterdir())
    assert store.stat().st_size < 30_000_000
    with open(tmp_path / "o.csv", "rb") as fh:
        assert fh.readline() == b"statistic,kind,column,big,bin_low,bin_high,value,ci_low,ci_high,epsilon\n"
        assert fh.readline().startswith(b'h,histogram,big,[0..1),0,1,')
    with open(tmp_path / "o.csv", "rb") as fh:
        assert sum(1 for _ in fh) == 10_000_001
