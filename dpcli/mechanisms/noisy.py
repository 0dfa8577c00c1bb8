"""What a mechanism hands post-processing: the noisy integers of one statistic (``Noisy``), and an open-key entry."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Noisy:
    """Noisy integers of one statistic (grid units), the input of post-processing.

    Declared cells: one value per declared cell, ``keys`` None. Open keys: one value per *released* entry, and
    ``keys[i]`` = (code over the declared dimensions, open key text) of value i, in the output's order."""

    counts: np.ndarray | None
    sums: np.ndarray | None
    keys: tuple[tuple[int, str], ...] | None = None
    # a quantile: per declared cell and level (increasing), the index of the released candidate (cells x levels)
    choices: np.ndarray | None = None
    # top_k / mode over declared keys: the chosen keys' indices, in rank order (dpcli.mechanisms.topk); open keys:
    # ``keys`` in
    # rank order, with their noisy counts
    chosen: np.ndarray | None = None
    squares: np.ndarray | None = None  # variance/std: the noisy centred sums of squares (their own grid)
    # a quantile with interval: (ci_low, ci_high) as grid offsets from its lowest candidate (cells x levels)
    interval: tuple[np.ndarray, np.ndarray] | None = None


Entry = tuple[int, str]  # (code over the declared dimensions, first slowest; open key text)
