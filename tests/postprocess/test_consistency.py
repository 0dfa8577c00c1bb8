"""dpcli.postprocess.consistency: GLS consistency, rounding keeping the total, non-negativity, the small-cell policy."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dpcli.errors import SpecError
from dpcli.postprocess.consistency import (
    MAX_FINEST_CELLS,
    Measurement,
    check_finest_size,
    flag_column,
    make_consistent,
    margins,
    round_keeping_total,
    round_to,
    small_cells,
)

SIZES = {"sex": 2, "race": 3}
EXACT = np.array([[10, 0, 7], [25, 3, 1]])  # sex x race


def _measurements(noise: np.random.Generator | None = None, scale: float = 0.0) -> list[Measurement]:
    def noisy(a: np.ndarray) -> np.ndarray:
        return a if noise is None else a + np.rint(noise.laplace(0, scale, a.shape)).astype(np.int64)

    return [
        Measurement("total", (), noisy(np.array([EXACT.sum()])), 2 * max(scale, 1) ** 2),
        Measurement("by_sex", ("sex",), noisy(EXACT.sum(axis=1)), 2 * max(scale, 1) ** 2),
        # by race then sex: the measurement's own order, transposed inside
        Measurement("by_race_sex", ("race", "sex"), noisy(EXACT.T.reshape(-1)), 2 * max(scale, 1) ** 2),
    ]


def test_exact_input_comes_back_exactly() -> None:
    out = make_consistent(_measurements(), SIZES, nonnegative=True)
    assert out["total"].tolist() == [EXACT.sum()]
    assert out["by_sex"].tolist() == EXACT.sum(axis=1).tolist()
    assert out["by_race_sex"].tolist() == EXACT.T.reshape(-1).tolist()


@pytest.mark.parametrize("seed", range(20))
def test_noisy_margins_add_up_exactly(seed: int) -> None:
    out = make_consistent(_measurements(np.random.default_rng(seed), 5.0), SIZES)
    fine = out["by_race_sex"].reshape(3, 2)
    assert out["by_sex"].tolist() == fine.sum(axis=0).tolist()
    assert out["total"].tolist() == [fine.sum()]


@pytest.mark.parametrize("seed", range(20))
def test_nonnegative_cells(seed: int) -> None:
    out = make_consistent(_measurements(np.random.default_rng(seed), 20.0), SIZES, nonnegative=True)
    assert all((v >= 0).all() for v in out.values())


def test_gls_weights_by_variance() -> None:
    # a precise total (variance 1e-6) pins the sum of the two cells; the noisy cells share the difference
    ms = [Measurement("total", (), np.array([100]), 1e-6), Measurement("by_sex", ("sex",), np.array([60, 60]), 1.0)]
    out = make_consistent(ms, {"sex": 2})
    assert out["total"].tolist() == [100]
    assert out["by_sex"].tolist() == [50, 50]


@pytest.mark.slow  # statistical (2,500 fits, ~2 s): make test-slow (issue 28: the default suite's budget)
def test_consistency_lowers_the_error_on_average() -> None:
    # the total is measured three times over (total, margin, finest): its GLS error is far below the raw one's
    rng = np.random.default_rng(7)
    raw, fitted = [], []
    for _ in range(2500):
        ms = _measurements(rng, 10.0)
        out = make_consistent(ms, SIZES)
        raw.append(abs(int(ms[0].values[0]) - EXACT.sum()))
        fitted.append(abs(int(out["total"][0]) - EXACT.sum()))
    # GLS over three measurements of the total (variances v, 2v, 6v) has variance 0.6 v: its mean error is ~0.77
    # of the raw one's. Over 2500 draws each mean's relative standard error is ~2%, so 0.9 is > 5 of them away (< 1e-6)
    assert np.mean(fitted) < 0.9 * np.mean(raw)


def test_no_finest_table_is_refused() -> None:
    ms = [Measurement("by_sex", ("sex",), np.array([1, 2]), 1.0), Measurement("by_race", ("race",), np.zeros(3), 1.0)]
    with pytest.raises(SpecError, match="share no finest table: add a count over every dimension they have"):
        make_consistent(ms, SIZES)


def test_finest_cap() -> None:
    check_finest_size(MAX_FINEST_CELLS, ["a"])
    with pytest.raises(SpecError, match=f"has {MAX_FINEST_CELLS + 1} cells; at most {MAX_FINEST_CELLS}"):
        check_finest_size(MAX_FINEST_CELLS + 1, ["a", "b"])


def test_round_keeping_total() -> None:
    x = np.array([0.4, 0.4, 0.4, 1.8])
    out = round_keeping_total(x)
    assert out.tolist() == [1, 0, 0, 2]  # the total 3 kept: +1 to the largest remainders, the earlier of the ties
    assert np.all(np.abs(out - x) < 1)


def test_margins_in_own_order() -> None:
    cells = np.arange(6)  # sex x race
    assert margins(("sex", "race"), SIZES, cells, ("race", "sex")).tolist() == [0, 3, 1, 4, 2, 5]
    assert margins(("sex", "race"), SIZES, cells, ("race",)).tolist() == [3, 5, 7]
    assert margins(("sex", "race"), SIZES, cells, ()).tolist() == [15]


def test_round_to_digits() -> None:
    assert round_to([Fraction(12345, 1000), Fraction(-5, 2)], 1) == [Fraction(123, 10), Fraction(-5, 2)]
    assert round_to([Fraction(1250)], -2) == [Fraction(1200)]


def test_small_cells_and_flags() -> None:
    small = small_cells(
        [Fraction(25), Fraction(1000), Fraction(0), None],
        [Fraction(-23), Fraction(950), Fraction(-1), None],
        [Fraction(73), Fraction(1050), Fraction(1), None],
        Fraction(1, 2),
    )
    assert small == [True, False, True, False]
    assert flag_column(small, "suppress") == ["suppressed", "", "suppressed", ""]
    assert flag_column(small, "flag") == ["flagged", "", "flagged", ""]
