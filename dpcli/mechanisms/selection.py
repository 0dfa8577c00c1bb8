"""Private partition selection of open keys (``StatisticPlan.selection`` set; docs/spec.md, "Open keys"): its release
step.

The engine hands one entry per *observed* cell, each entry's count gets the plan's discrete Laplace noise
(dpcli.mechanisms.noise), and an entry is released, with that same noisy count, when the noisy count reaches the
plan's threshold (dpcli.plan.model). Cells nobody falls in never appear, and nothing else about the data decides
which keys are released.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from dpcli.mechanisms.noisy import Entry, Noisy
from dpcli.plan.model import StatisticPlan
from dpcli.specs.model import histogram_bins

if TYPE_CHECKING:  # the engine's result type only: importing the engine would load polars
    from dpcli.engine import ExactStatistic


def declared_sizes(sp: StatisticPlan) -> list[int]:
    """Sizes of the statistic's dimensions (None for a numeric histogram's bins; the open one counted as 0)."""
    stat = sp.statistic
    open_dim = sp.selection.dimension if sp.selection is not None else -1
    sizes = []
    for j, keys in enumerate(sp.dimension_keys):
        if j == open_dim:
            sizes.append(0)
        else:
            sizes.append(len(keys) if keys is not None else histogram_bins(stat).count)
    return sizes


def entry_order(sp: StatisticPlan, keys: Sequence[Entry]) -> list[int]:
    """Indices of ``keys`` in the output's order: over the statistic's dimensions in turn, declared dimensions in
    declared key order, the open one by its text (Python str order: code points)."""
    import polars as pl  # loaded with the release's engine anyway; `dpcli budget` never comes here

    after = 1  # cells of the declared dimensions after the open one: code = before * after + rest
    for size in declared_sizes(sp)[sp.required_selection().dimension + 1:]:
        after *= size
    codes = np.fromiter((code for code, _ in keys), dtype=np.int64, count=len(keys))
    # polars sorts text by its UTF-8 bytes, which is code point order (Python's): a million entries in ~0.2 s, where
    # sorted() with a key function took ~1.5 s
    texts = pl.Series([text for _, text in keys], dtype=pl.String)
    frame = pl.DataFrame({"before": codes // after, "text": texts, "rest": codes % after})
    return frame.with_row_index().sort(["before", "text", "rest"])["index"].to_list()


def select_entries(sp: StatisticPlan, noisy_counts: np.ndarray, keys: Sequence[Entry]) -> Noisy:
    """Partition selection's release step: the entries whose noisy count reaches the threshold, with that count, in
    the output's order. ``noisy_counts[i]`` is entry ``keys[i]``'s count plus the plan's noise (or, on the no-noise
    path of the tests, its exact count)."""
    threshold = sp.required_selection().threshold
    if len(noisy_counts) != len(keys):
        raise ValueError("open-key statistic: counts and keys of different lengths (an engine bug)")
    kept = np.flatnonzero(np.asarray(noisy_counts) >= threshold)
    chosen = [keys[i] for i in kept.tolist()]
    order = entry_order(sp, chosen)
    values = np.asarray(noisy_counts, dtype=np.int64)[kept[order]] if len(order) else np.zeros(0, dtype=np.int64)
    return Noisy(values, None, tuple(chosen[i] for i in order))


def checked_keys(sp: StatisticPlan, ex: ExactStatistic) -> Sequence[Entry]:
    """The engine's entries of an open-key statistic. A repeated entry would be noised and offered twice, and a key
    longer than max_length was not cut as the spec says: either is an engine bug, refused rather than released."""
    max_length = sp.required_selection().max_length
    keys = ex.keys
    if keys is None:
        raise ValueError(f"open-key statistic {sp.statistic.name!r}: the engine returned no keys (an engine bug)")
    if len(set(keys)) != len(keys) or any(len(text) > max_length for _, text in keys):
        raise ValueError(f"open-key statistic {sp.statistic.name!r}: repeated or uncut keys (an engine bug)")
    return keys
