"""top_k and mode: the chosen keys, ranked (docs/spec.md, "Top-k and mode").

Declared keys: report-noisy-max as the exponential mechanism on the keys' exact counts, peeled k times without
replacement (equal in distribution to one-shot Gumbel top-k, Durfee & Rogers 2019), drawn exactly by
``dpcli.samplers.exponential_choice`` at the plan's temperature t (the ``choice`` component's scale): each draw picks
a key left with probability proportional to exp(-(best - count) / t). No noisy count is released.

Open keys (``categories: open``): the keys that pass the partition selection (dpcli.mechanisms.select_entries), ranked
by their released noisy counts: post-processing of the selection's release, which costs nothing more.

Ties (post-processing of noisy counts, and the no-noise path of the tests) go to the key that comes first in the
output's key order.
"""

from __future__ import annotations

import numpy as np

from dpcli.plan import StatisticPlan
from dpcli.samplers import RandomSource, exponential_choice


def choose(sp: StatisticPlan, counts: np.ndarray, source: RandomSource | None = None) -> np.ndarray:
    """The indices of the k keys chosen from their exact counts, in rank order (1 = the largest), drawn exactly."""
    comp = sp.component("choice")
    assert comp.scale is not None
    t = comp.scale  # exp(-(best - u) / t) = exp(-(num/den) (best - u)) with num/den = 1/t
    return exponential_choice(np.asarray(counts), t.denominator, t.numerator, comp.draws, source)


def ranked(counts: np.ndarray, k: int) -> np.ndarray:
    """The indices of the k largest ``counts`` in rank order, ties to the lower index: the ranking of released noisy
    counts (open keys), and the no-noise path of the exact-answer tests."""
    order = np.argsort(-np.asarray(counts, dtype=np.int64), kind="stable")
    return order[:k].astype(np.int64)
