"""Random small files through the engine's no-noise path against a plain-Python reading of the documented cell rules
(docs/spec.md): integers, floats on their grid, categories, missing and imputed cells."""

from __future__ import annotations

import csv
import io
import math
import re
from decimal import Decimal
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcli.core.accounting import format_exact
from dpcli.engine import aggregate
from tests.engine.test_aggregate import plan_for, run, write

# ---------------------------------------------------------------------------------------------------------------
# Random small files against a plain-Python reference of the documented cell rules (docs/spec.md)

INT_TEXT = re.compile(r"[+-]?[0-9]+")
FLOAT_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
ODD_CELLS = [
    "", "nan", "NaN", "inf", "-inf", "1e309", "1_0", "0x1", "١", "3 ", "+3", "-3", "007", "3.0", "3.", ".5",
    "1e1", "-0", "abc", "2.5", "-2.5", "0.05", "0.15", "1e-3", "99999999999999999999", "-1e2", "1E1", "1e-400",
]
CATEGORY_CELLS = ["a", "b", "c", "A", " a", "a ", "", "zz", "true", "FALSE", "True", "1", "0", "yes", "f"]


def reference_int(text: str, lo: int, hi: int) -> int | None:
    if not INT_TEXT.fullmatch(text) or abs(int(text)) >= 2**63:
        return None
    return min(max(int(text), lo), hi)


def reference_float(text: str, lo: Fraction, hi: Fraction, p: Fraction, glo: int, ghi: int) -> int | None:
    if not FLOAT_TEXT.fullmatch(text) or float(text) in (float("inf"), float("-inf")):
        return None
    x = min(max(Fraction(Decimal(text)), lo), hi)
    return min(max(round(x / p), glo), ghi)  # nearest grid point, ties to even


number_cells = st.one_of(
    st.sampled_from(ODD_CELLS),
    st.integers(-30, 30).map(str),
    st.decimals(-30, 30, places=3, allow_nan=False, allow_infinity=False).map(str),
)
row = st.tuples(number_cells, number_cells, st.sampled_from(CATEGORY_CELLS), st.sampled_from(CATEGORY_CELLS))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(row, max_size=25),
    int_bounds=st.lists(st.integers(-10, 10), min_size=2, max_size=2, unique=True).map(sorted),
    precision=st.sampled_from([Fraction(1, 10), Fraction(1, 4), Fraction(1), Fraction(1, 100)]),
    steps=st.tuples(st.integers(-40, 0), st.integers(2, 40)),
    nudge=st.sampled_from([Fraction(0), Fraction(1, 1000)]),
    impute=st.booleans(),
)
def test_random_files_against_the_documented_rules(tmp_path_factory, rows, int_bounds, precision, steps, nudge, impute):
    ilo, ihi = int_bounds
    flo, fhi = precision * steps[0] + nudge, precision * steps[1]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["i", "f", "c", "b"])
    writer.writerows(rows)
    path = tmp_path_factory.mktemp("random") / "data.csv"
    path.write_text(buffer.getvalue(), encoding="utf-8")
    columns = (
        f"  i: {{type: int, bounds: [{ilo}, {ihi}]{f', impute: {ilo}' if impute else ''}}}\n"
        f"  f: {{type: float, bounds: [{format_exact(flo)}, {format_exact(fhi)}], "
        f"precision: {format_exact(precision)}}}\n"
        f"  c: {{type: category, categories: [a, b, c]{', impute: c' if impute else ''}}}\n"
        "  b: {type: bool}\n"
    )
    start = flo - nudge
    stats = (
        "  - {name: n, kind: count}\n  - {name: cb, kind: count, by: [c, b]}\n"
        "  - {name: si, kind: sum, column: i, by: [c]}\n  - {name: sf, kind: sum, column: f, by: [b]}\n"
        "  - {name: mi, kind: mean, column: i}\n  - {name: mf, kind: mean, column: f, by: [c]}\n"
        f"  - {{name: hf, kind: histogram, column: f, bins: {{start: {format_exact(start)}, stop: {format_exact(fhi)}, "
        f"step: {format_exact(precision)}}}}}\n"
        "  - {name: hi, kind: histogram, column: i, bins: [-10, -3, 0, 2, 11]}\n"
    )
    plan = plan_for(columns, stats)
    exact = aggregate(plan, path)
    glo, ghi = plan.spec.columns["f"].grid_bounds

    ints = [reference_int(r[0], ilo, ihi) for r in rows]
    ints = [ilo if v is None and impute else v for v in ints]
    floats = [reference_float(r[1], flo, fhi, precision, glo, ghi) for r in rows]
    cats = [{"a": 0, "b": 1, "c": 2}.get(r[2], 2 if impute else None) for r in rows]
    bools = [{"true": 1, "false": 0, "1": 1, "0": 0}.get(r[3].lower()) for r in rows]

    def cells(keys, values, size, offset=0):
        counts, sums = [0] * size, [0] * size
        for k, v in zip(keys, values, strict=True):
            if k is not None and v is not None:
                counts[k] += 1
                sums[k] += v - offset
        return counts, sums

    assert exact[0].counts.tolist() == [len(rows)]
    pairs = [None if c is None or b is None else 2 * c + b for c, b in zip(cats, bools, strict=True)]
    assert exact[1].counts.tolist() == cells(pairs, [0] * len(rows), 6)[0]
    assert (exact[2].counts.tolist(), exact[2].sums.tolist()) == cells(cats, ints, 3)
    assert (exact[3].counts.tolist(), exact[3].sums.tolist()) == cells(bools, floats, 2)
    offset = plan.statistics[4].component("sum").offset
    assert (exact[4].counts.tolist(), exact[4].sums.tolist()) == cells([0] * len(rows), ints, 1, offset)
    offset = plan.statistics[5].component("sum").offset
    assert (exact[5].counts.tolist(), exact[5].sums.tolist()) == cells(cats, floats, 3, offset)
    n_bins = plan.statistics[6].statistic.bins.count
    bins = [None if v is None else math.floor((v * precision - start) / precision) for v in floats]
    bins = [b if b is not None and 0 <= b < n_bins else None for b in bins]
    assert exact[6].counts.tolist() == cells(bins, [0] * len(rows), n_bins)[0]
    edges = [-10, -3, 0, 2, 11]
    int_bins = [None if v is None else next(j for j in range(4) if edges[j] <= v < edges[j + 1]) for v in ints]
    assert exact[7].counts.tolist() == cells(int_bins, [0] * len(rows), 4)[0]


def test_leading_blanks_are_skipped_trailing_blanks_make_a_number_missing(tmp_path):
    """Documented in docs/spec.md: polars' number parser skips leading spaces/tabs; anything after the digits,
    trailing blanks included, makes the cell missing."""
    path = write(tmp_path, 'x,f\n" 7"," 7"\n"\t7","\t7.5"\n"7 ","7 "\n1,1\n')
    columns = "  x: {type: int, bounds: [0, 10]}\n  f: {type: float, bounds: [0, 10], precision: 0.5}\n"
    out = run(columns, "  - {name: sx, kind: sum, column: x}\n  - {name: sf, kind: sum, column: f}\n", path)
    assert out == {"sx": ([3], [15]), "sf": ([3], [31])}
