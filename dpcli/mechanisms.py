"""Noise mechanisms as pure functions over numpy arrays of exact integers.

Every released number is ``exact integer + exact discrete noise``: no float ever touches a value before the
noise is added, so there are no low bits to leak (Mironov 2012). Values are int64 arrays (counts) or object
arrays of Python ints (fixed-point sums, which may exceed 64 bits).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from dpcli.samplers import RandomSource, discrete_gaussian, discrete_laplace

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
