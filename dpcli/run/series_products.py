"""The exact products of a series' factorisation (``method: factorization``, dpcli.plan.factorization): product t
is sum_{s <= t} C[t - s] x_s over the exact aggregates x_s of each period s's own rows, in exact integers. Every
period's aggregates come from one read of the run's input, its rows grouped by their own period (the engine places
them), whatever file holds them;
only the noisy products are ever stored (the caller adds the noise)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dpcli.engine import ExactStatistic
from dpcli.errors import InternalError
from dpcli.plan.factorization import product_weights


def product_name(t: int) -> str:
    """Product t's piece id (``f<t>``: distinct from a period's ``p<t>`` and a tree block's ``b<level>.<index>``)."""
    return f"f{t}"


def product_period(name: str) -> int | None:
    """The period of a product's piece id, None for any other piece."""
    return int(name[1:]) if name.startswith("f") and name[1:].isdigit() else None


def exact_products(
    products: list[int], periods: int, aggregate_period: Callable[[int], list[ExactStatistic]],
) -> dict[str, list[ExactStatistic]]:
    """The exact products ``products`` (periods of a horizon of ``periods``) from each period 1..max's exact
    aggregates, ``aggregate_period(s)`` (its own rows only)."""
    if not products:
        return {}
    last = max(products)
    periods_exact = {s: aggregate_period(s) for s in range(1, last + 1)}
    return {product_name(t): _combine([periods_exact[s] for s in range(1, t + 1)], product_weights(periods, t))
            for t in products}


def _combine(states: list[list[ExactStatistic]], weights: tuple[int, ...]) -> list[ExactStatistic]:
    out = []
    for parts in zip(*states, strict=True):
        if any(p.keys is not None or p.squares is not None for p in parts):
            raise InternalError("a factorisation's product is of linear statistics over declared cells")
        counts = _weighted([p.counts for p in parts], weights)
        sums = None if parts[0].sums is None else _weighted([_given(p.sums) for p in parts], weights)
        out.append(ExactStatistic(counts=counts, sums=sums))
    return out


def _given(array: np.ndarray | None) -> np.ndarray:
    if array is None:
        raise InternalError("a period's exact aggregates lack a part another period has")
    return array


def _weighted(arrays: list[np.ndarray], weights: tuple[int, ...]) -> np.ndarray:
    """sum_s weights[s] arrays[s] in Python integers (exact), int64 where every value fits."""
    total = np.zeros(len(arrays[0]), dtype=object)
    for w, a in zip(weights, arrays, strict=True):
        total = total + np.asarray(a).astype(object) * w
    if len(total) and max(abs(int(v)) for v in total) < 2**62:
        return total.astype(np.int64)
    return total
