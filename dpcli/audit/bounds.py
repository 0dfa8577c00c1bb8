"""The audit's probability bounds: one-sided Clopper-Pearson bounds on an event's probability, the ε lower bound two
such bounds give, and the exact chance that partition selection releases an entry (40 digits).
"""

from __future__ import annotations

import decimal
import math
from fractions import Fraction

from dpcli.errors import UsageError


def clopper_pearson(hits: int, trials: int, alpha: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds, each at level ``alpha``: P[p < lo] <= alpha and P[p > hi] <= alpha."""
    try:
        from scipy.stats import beta
    except ImportError:  # scipy is installed with dpcli's [test] extra (make demo / make test)
        raise UsageError("dpcli audit needs scipy: pip install scipy (or pip install -e '.[test]')") from None
    lo = 0.0 if hits == 0 else float(beta.ppf(alpha, hits, trials - hits + 1))
    hi = 1.0 if hits == trials else float(beta.isf(alpha, hits + 1, trials - hits))
    return lo, hi


def epsilon_bound(p_lo: float, p_hi: float, delta: float) -> float | None:
    """log((p_lo - delta) / p_hi), or None when p_lo <= delta (the event says nothing at this delta)."""
    if p_lo - delta <= 0 or p_hi <= 0:
        return None
    return math.log((p_lo - delta) / p_hi)


# 40 significant digits: the probability a selection releases a key is compared with the plan's δ (e.g. 1e-9)
PRECISION = decimal.Context(prec=40)


def release_probability(count: int, threshold: int, scale: Fraction) -> decimal.Decimal:
    """P[count + X >= threshold] for X ~ discrete Laplace(scale): P[X >= m] = q^m / (1 + q) for m >= 1, with
    q = exp(-1/scale), and 1 - P[X >= 1 - m] for m <= 0. In 40-digit decimal arithmetic."""
    ctx = PRECISION
    q = ctx.exp(ctx.divide(-decimal.Decimal(scale.denominator), decimal.Decimal(scale.numerator)))

    def tail(m: int) -> decimal.Decimal:  # P[X >= m], m >= 1
        return ctx.divide(ctx.power(q, m), ctx.add(1, q))

    m = threshold - count
    return tail(m) if m >= 1 else ctx.subtract(1, tail(1 - m))
