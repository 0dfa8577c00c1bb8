"""The synthetic file's values (dpcli.publish.synth_output) and the model's draws (dpcli.postprocess.synth_model) at
their edges: found by review (issue 27), each failed before its fix."""

from __future__ import annotations

import csv
import io
from fractions import Fraction

import numpy as np

from dpcli.plan.synth import make_synth_plan
from dpcli.postprocess.synth_model import _draw
from dpcli.publish.synth_output import grid_range, synthetic_csv
from dpcli.specs.load import parse_spec

WIDE = """\
version: 1
dataset: wide
privacy: {rho: 1}
columns:
  x: {type: float, bounds: [0, 200000000000000], precision: 0.03125}
  s: {type: category, categories: [a, b]}
synth:
  method: mst
  columns:
    x: {bins: {start: 0, stop: 210000000000000, step: 10000000000000}, values: VALUES}
    s: {}
"""


def test_values_of_a_fine_grid_over_wide_bounds_stay_in_their_bins() -> None:
    """k·precision formed in 64 bits wrapped for k near 2^53 and a precision of 1/32: values printed below the lower
    bound and in the wrong bin. Every value is now its bin's grid point, within the bounds."""
    for values in ("uniform", "low", "mid"):
        spec = parse_spec(WIDE.replace("VALUES", values))
        plan = make_synth_plan(spec)
        bins = spec.synth.columns[0].bins
        codes = np.array([[c, c % 2] for c in range(plan.sizes[0])] * 50, dtype=np.int64)
        rows = list(csv.reader(io.StringIO(synthetic_csv(spec, codes, b"k" * 32).decode())))[1:]
        column = spec.columns["x"]
        for (code, _), (text, _) in zip(codes.tolist(), rows, strict=True):
            value = Fraction(text)
            low, high = grid_range(column, bins, code)
            assert low * column.grid_step <= value <= high * column.grid_step, (values, code, text)
            assert (value / column.grid_step).denominator == 1


def test_a_zero_probability_code_is_never_drawn_near_u_1() -> None:
    """Rows laid end to end as parent + cdf rounded parent 1's u = 1 - 2^-53 up to 2.0, drawing its code 2, which has
    probability 0 under parent 1."""
    cdf = np.array([[0.2, 1.0, 1.0], [0.5, 1.0, 1.0]])
    u = np.array([1 - 2.0**-53, 0.4, 0.7, 0.1])
    drawn = _draw(cdf, np.array([1, 1, 1, 0]), u)
    assert drawn.tolist() == [1, 0, 1, 0]
