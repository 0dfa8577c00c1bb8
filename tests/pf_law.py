"""Permute-and-flip's exact output law, in Fractions (no scipy: the default suite imports it too)."""

from __future__ import annotations

import decimal
from fractions import Fraction


def permute_and_flip_law(scores: list[int], rate: Fraction) -> list[Fraction]:
    """P(i) of permute-and-flip, exactly (up to the 60-digit p_j): p_i * sum_k c_k / (k + 1) for the polynomial
    prod_{j != i} (1 - p_j u) = sum_k c_k u^k."""
    best = max(scores)
    context = decimal.Context(prec=60)
    p = [Fraction(context.exp(-context.divide(decimal.Decimal(rate.numerator * (best - s)),
                                              decimal.Decimal(rate.denominator)))) for s in scores]
    out = []
    for i in range(len(p)):
        coefficients = [Fraction(1)]
        for j, pj in enumerate(p):
            if j != i:
                coefficients = [a - pj * b for a, b in zip([*coefficients, 0], [0, *coefficients], strict=True)]
        out.append(p[i] * sum(c / (k + 1) for k, c in enumerate(coefficients)))
    assert sum(out) == 1 or abs(sum(out) - 1) < Fraction(1, 10**50)
    return out
