"""The audit's events: thresholds on the log-likelihood ratio Z of D' to D, fixed before any noise is drawn, and how
many of ``trials`` draws of the plan's real noise on each dataset's exact values fall in each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpcli.audit import required
from dpcli.audit.neighbours import Neighbours, NoisedCell, choice_cells, choice_z
from dpcli.core.samplers import exponential_sample
from dpcli.mechanisms import topk
from dpcli.mechanisms.noise import add_noise
from dpcli.plan.model import Plan
from dpcli.plan.sensitivity import NoiseComponent

CHUNK = 250_000  # trials drawn at once (memory stays ~ tens of MB whatever --trials is)
# Relative tolerance of an event's threshold: Z's float rounding must not split a value lying exactly on it (the
# event stays one fixed set, the same for D and D')
Z_TOLERANCE = 1e-9
# Event thresholds. Laplace: fractions of the pair's maximal log-likelihood ratio L (Z = L is the most telling
# event of pure DP). Gaussian: Z ~ N(±μ²/2, μ²) under D' and D, thresholds at μ²/2 + kμ; the event that shows
# most at a small δ lies a few standard deviations out.
_TAUS = (1.0, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0)
_MIXED_TAUS = (1.0, 0.5)
_KS = tuple(k / 4 for k in range(-4, 25))  # -1 to 6 standard deviations


@dataclass(frozen=True)
class EventCount:
    """One event on the log-likelihood ratio Z, and how many trials on D and on D' fell in it."""

    direction: str  # "up": Z >= threshold (favours D'); "down": Z <= -threshold (favours D)
    threshold: float
    text: str
    hits_d: int
    hits_d_prime: int


def _noised(value: int, comp: NoiseComponent, size: int) -> np.ndarray:
    """``size`` independent noisy copies of one exact value, by the release's own mechanism (dpcli.mechanisms.noise)."""
    base = np.full(size, value, dtype=np.int64) if abs(value) < 2**62 else np.full(size, value, dtype=object)
    return add_noise(base, comp)


def _llr(offset: np.ndarray, shift: int, comp: NoiseComponent) -> np.ndarray:
    """log P[x | centre a + shift] / P[x | centre a] for x = a + offset, one cell."""
    z: np.ndarray
    if comp.mechanism == "discrete_gaussian":
        # ((x - a)^2 - (x - a - s)^2) / (2 sigma^2) = s (2 (x - a) - s) / (2 sigma^2)
        z = float(shift) * (2.0 * offset.astype(float) - float(shift)) / (2.0 * float(required.variance(comp)))
        return z
    scale = required.scale(comp)
    # (|x - a| - |x - a - s|) / t = sign(s) (2 clip(x - a, between 0 and s) - s) / t
    clipped = np.minimum(np.maximum(offset, min(0, shift)), max(0, shift))
    sign = 1.0 if shift > 0 else -1.0
    z = sign * (2.0 * clipped.astype(float) - float(shift)) / float(scale)
    return z


def event_thresholds(plan: Plan, noised: tuple[NoisedCell, ...], choice_loss: float = 0.0) -> list[float]:
    """The events' thresholds on Z, fixed before any noise is drawn. With open-key entries that one dataset lacks, Z
    is +inf when one only D' holds is released and -inf when one only D holds is (those outputs are impossible under
    the other dataset), and the threshold inf adds the events "such a key is released"."""
    laplace, mu2 = choice_loss, 0.0  # a top_k's largest |Z| counts as a Laplace part's
    one_sided = any(c.only_in is not None for c in noised)
    for c in noised:
        if c.only_in is not None or c.component == "choice":
            continue
        comp = plan.statistics[c.index].component(c.component)
        shift = c.exact_d_prime - c.exact_d
        if c.utilities is not None:  # a quantile level: Z takes one of the candidates' ratios
            laplace += max(abs(v) for v in c.llr)
            continue
        if comp.mechanism == "discrete_gaussian":
            mu2 += float(shift) ** 2 / float(required.variance(comp))
        else:
            laplace += abs(shift) / float(required.scale(comp))
    if mu2 == 0:
        out = [tau * laplace for tau in _TAUS]
    else:
        mu = math.sqrt(mu2)
        out = [tau * laplace + mu2 / 2 + k * mu for tau in (_MIXED_TAUS if laplace else (0.0,)) for k in _KS]
    if one_sided:
        out.append(math.inf)
    return list(dict.fromkeys(out))


def count_hits(
    plan: Plan, nb: Neighbours, on_d: bool, thresholds: list[float], trials: int
) -> tuple[list[int], list[int]]:
    """Draw the plan's noise ``trials`` times on D's (or D''s) exact values; hits of Z >= c and of Z <= -c."""
    up = [0] * len(thresholds)
    down = [0] * len(thresholds)
    done = 0
    while done < trials:
        m = min(CHUNK, trials - done)
        z = np.zeros(m)
        for i, counts_d, counts_d_prime in nb.choices:  # a top_k: its whole draw, by the release's own sampler
            sp = plan.statistics[i]
            for a, b in choice_cells(sp, counts_d, counts_d_prime):  # the cells of by: that differ, each drawn
                z += choice_z(sp, a, b, topk.peeled_sample(sp, a if on_d else b, m))
        for c in nb.noised:
            comp = plan.statistics[c.index].component(c.component)
            if c.component == "choice":
                continue
            if c.only_in is not None:
                # an entry one dataset lacks: drawn and offered where it exists; released, it shows that dataset
                if c.only_in == ("D" if on_d else "D'"):
                    released = _noised(c.exact_d if on_d else c.exact_d_prime, comp, m) >= c.threshold
                    z[released] += -math.inf if on_d else math.inf
                continue
            if c.utilities is not None:  # a quantile level: the release's exact draw of a candidate, then its ratio
                scale = required.scale(comp)
                drawn = exponential_sample(list(c.utilities[0 if on_d else 1]), scale.denominator, scale.numerator, m)
                z += np.asarray(c.llr)[drawn]
                continue
            noisy = _noised(c.exact_d if on_d else c.exact_d_prime, comp, m)
            z += _llr(noisy - c.exact_d, c.exact_d_prime - c.exact_d, comp)
        z.sort()
        for j, t in enumerate(thresholds):
            if math.isinf(t):
                up[j] += m - int(np.searchsorted(z, math.inf, side="left"))
                down[j] += int(np.searchsorted(z, -math.inf, side="right"))
                continue
            tol = Z_TOLERANCE * max(1.0, abs(t))
            up[j] += m - int(np.searchsorted(z, t - tol, side="left"))
            down[j] += int(np.searchsorted(z, -t + tol, side="right"))
        done += m
    return up, down
