"""A series' running totals and period values from the factorisation's noisy products (``method: factorization``,
dpcli.plan.factorization), spending nothing: each estimate is a fixed linear combination of the products y_1..y_t
whose weights depend on t only, computed first, so an estimate and its interval's weights can never disagree.

The weights are floats (C^-1 by forward substitution): post-processing of released values. So that the interval
still holds for the float estimate, its half-width is widened by ``FLOAT_MARGIN`` times sum |w_s| |y_s|, far above
the rounding of the weights, of the products' conversion to floats and of the sum (a few units of 2^-53 times T,
T <= 10^4, relative to that magnitude).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpcli.errors import InternalError
from dpcli.plan.factorization import weights

FLOAT_MARGIN = 1e-9


@dataclass(frozen=True)
class ProductsEstimate:
    """Period t's value and the running total to t, per cell, from the noisy products y_1..y_t; each estimate is
    ``weights @ products`` and its error the same combination of the products' independent noises."""

    t: int
    period: np.ndarray
    to_date: np.ndarray
    period_weights: np.ndarray  # one weight per product 1..t
    to_date_weights: np.ndarray
    period_margin: np.ndarray  # per cell: what the float arithmetic may have moved the estimate, at most
    to_date_margin: np.ndarray


def estimate_products(noisy: Sequence[np.ndarray]) -> ProductsEstimate:
    """The estimates at t = len(noisy) from the noisy products of periods 1..t (in order): (A C^-1 y)_t and its
    difference with (A C^-1 y)_(t-1). (The first t coefficients of C and C^-1 do not depend on the horizon.)"""
    t = len(noisy)
    if t < 1:
        raise InternalError("a factorisation's estimate needs the products of periods 1..t")
    values = np.stack([np.asarray(v, dtype=np.float64) for v in noisy])
    magnitudes = np.abs(values)
    period_weights, to_date_weights = weights(t, t)
    return ProductsEstimate(
        t=t,
        period=period_weights @ values,
        to_date=to_date_weights @ values,
        period_weights=period_weights,
        to_date_weights=to_date_weights,
        period_margin=FLOAT_MARGIN * (np.abs(period_weights) @ magnitudes),
        to_date_margin=FLOAT_MARGIN * (np.abs(to_date_weights) @ magnitudes),
    )
