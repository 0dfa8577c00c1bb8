"""Noise mechanisms as pure functions over numpy arrays of exact integers.

Every released number is ``exact integer + exact discrete noise``: no float ever touches a value before the
noise is added, so there are no low bits to leak (Mironov 2012). Values are int64 arrays (counts) or object
arrays of Python ints (fixed-point sums, which may exceed 64 bits).

``draw_noise`` applies a plan's noise components to a release's exact aggregates (a new mechanism plugs in at
``add_noise``, which picks the sampler by the component's mechanism name).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from dpcli.plan import NoiseComponent, Plan
from dpcli.samplers import RandomSource, discrete_gaussian, discrete_laplace

if TYPE_CHECKING:  # the engine's result type only: importing the engine would load polars
    from dpcli.engine import ExactStatistic

_INT64_SAFE = 2**62


def add_discrete_laplace(values: np.ndarray, scale: Fraction, source: RandomSource | None = None) -> np.ndarray:
    """values + independent discrete Laplace(scale) noise per entry, exactly (same dtype family as the input)."""
    return _add(values, discrete_laplace(scale, len(values), source))


def add_discrete_gaussian(values: np.ndarray, variance: Fraction, source: RandomSource | None = None) -> np.ndarray:
    """values + independent discrete Gaussian noise with parameter sigma^2 = variance per entry, exactly."""
    return _add(values, discrete_gaussian(variance, len(values), source))


def _add(values: np.ndarray, noise: np.ndarray) -> np.ndarray:
    if values.dtype == object:
        return values + noise.astype(object)
    if len(values) and int(np.abs(values).max()) >= _INT64_SAFE:
        return values.astype(object) + noise.astype(object)
    return values.astype(np.int64) + noise


def add_noise(values: np.ndarray, comp: NoiseComponent) -> np.ndarray:
    """``values`` plus the noise of one plan component (its mechanism, scale or variance), exactly."""
    if comp.mechanism == "discrete_gaussian":
        assert comp.variance is not None
        return add_discrete_gaussian(values, comp.variance)
    assert comp.scale is not None
    return add_discrete_laplace(values, comp.scale)


@dataclass(frozen=True)
class Noisy:
    """Noisy integers of one statistic (grid units), the input of post-processing."""

    counts: np.ndarray | None
    sums: np.ndarray | None


def draw_noise(plan: Plan, exact: list[ExactStatistic]) -> list[Noisy]:
    """Add the plan's exact discrete noise to every exact vector. Only called after the spend is durable."""
    out = []
    for sp, ex in zip(plan.statistics, exact, strict=True):
        has_count = any(c.role == "count" for c in sp.components)
        counts = add_noise(_narrowed(ex.counts), sp.component("count")) if has_count else None
        sums = add_noise(_narrowed(ex.sums), sp.component("sum")) if ex.sums is not None else None
        out.append(Noisy(counts, sums))
    return out


def _narrowed(values: np.ndarray) -> np.ndarray:
    if values.dtype == object and len(values) and max(abs(int(values.max())), abs(int(values.min()))) < 2**62:
        # fixed-point sums arrive as Python ints; in int64 (as the mechanism keeps them when they fit) the noisy
        # array is 5x smaller and the table's columns are formatted without an object array
        return values.astype(np.int64)
    return values


def exact_noisy(exact: list[ExactStatistic]) -> list[Noisy]:
    """Exact aggregates passed through as if they were noisy: the no-noise path of the exact-answer tests.

    Nothing in the CLI or in ``release`` calls this; it exists so tests can check the whole post-processing and
    output path against plain polars without noise.
    """
    return [Noisy(e.counts, e.sums) for e in exact]
