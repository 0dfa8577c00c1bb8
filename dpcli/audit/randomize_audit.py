"""``dpcli audit`` of a randomize spec: an empirical lower bound on the privacy loss of its randomized response, per
column (against ε_c) and per record (all chosen columns together, against ε). Reads no data, spends nothing.

Neighbours (``replace``: one record changed): a record whose cell holds one declared key against the same record
holding another, and a missing cell against a declared key (the missing-cell rule must not leak either). The other
records are independent of the changed one and identical in both datasets, so they cannot help any test and are
left out. The real sampler (dpcli.mechanisms.randomized_response.randomize_keys) is drawn ``trials`` times per dataset;
the
events are "the published key is j" for every key j (per record: "every published key is the neighbour's key"),
each favouring either dataset; Clopper-Pearson bounds (dpcli.audit.bounds) at joint confidence ``confidence`` (a
union
bound over every bound of the report) give ε_lb = max log(p_lo / p_hi). An ε_lb above the claim proves a bug, up to
that confidence; one below it is evidence, not proof.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from dpcli.audit.bounds import clopper_pearson, epsilon_bound
from dpcli.audit.release_audit import DEFAULT_CONFIDENCE, DEFAULT_TRIALS, MAX_TRIALS, MIN_TRIALS
from dpcli.core.samplers import RandomSource
from dpcli.errors import UsageError
from dpcli.mechanisms.randomized_response import randomize_keys
from dpcli.specs.randomize import RandomizeSpec, load_randomize_spec

Sampler = Callable[[np.ndarray, int, Fraction, RandomSource | None], np.ndarray]


@dataclass(frozen=True)
class RandomizeTarget:
    """One audited target: a column (its share ε_c) or the record (ε), with the pair that showed the most."""

    name: str
    claimed_epsilon: Fraction
    epsilon_lower_bound: float
    neighbour: str
    worst_event: str

    @property
    def within_claim(self) -> bool:
        return self.epsilon_lower_bound <= float(self.claimed_epsilon)


@dataclass(frozen=True)
class RandomizeAudit:
    dataset: str
    trials: int
    confidence: float
    targets: tuple[RandomizeTarget, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return all(t.within_claim for t in self.targets)

    @property
    def violations(self) -> tuple[RandomizeTarget, ...]:
        return tuple(t for t in self.targets if not t.within_claim)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset, "command": "randomize", "trials": self.trials, "confidence": self.confidence,
            "ok": self.ok,
            "targets": [
                {"target": t.name, "claimed_epsilon": str(t.claimed_epsilon),
                 "epsilon_lower_bound": t.epsilon_lower_bound, "within_claim": t.within_claim,
                 "neighbours": t.neighbour, "strongest_event": t.worst_event}
                for t in self.targets
            ],
            "notes": list(self.notes),
        }

    def text(self) -> str:
        lines = [f"audit of the randomized response of dataset '{self.dataset}' (replace neighbours, pure ε): "
                 f"{self.trials} trials per dataset, every bound at joint confidence {self.confidence}; synthetic "
                 "records only: no input read, nothing spent"]
        for t in self.targets:
            verdict = "within claim" if t.within_claim else "VIOLATION"
            lines.append(f"  {t.name}: claimed ε={t.claimed_epsilon}, ε lower bound {t.epsilon_lower_bound:.4f}: "
                         f"{verdict}")
            lines.append(f"    neighbours: {t.neighbour}; strongest event: {t.worst_event}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines) + "\n"


def audit_randomize(
    spec: RandomizeSpec | str | Path,
    trials: int = DEFAULT_TRIALS,
    confidence: float = DEFAULT_CONFIDENCE,
    sampler: Sampler = randomize_keys,
) -> RandomizeAudit:
    """Audit the spec's randomized response. ``sampler`` is the mechanism under test (the real one; a test passes a
    deliberately broken one to show that the audit catches it)."""
    if not isinstance(spec, RandomizeSpec):
        spec = load_randomize_spec(spec)
    if isinstance(trials, bool) or not isinstance(trials, int) or not MIN_TRIALS <= trials <= MAX_TRIALS:
        raise UsageError(f"must be a whole number in [{MIN_TRIALS}, {MAX_TRIALS}]", argument="trials",
                         option="--trials")
    columns = [c for c in spec.columns if len(c.keys) >= 2]  # one key: the output is constant, nothing to learn
    share = spec.column_epsilon
    # bounds: per column two pairs × k events × 2 directions × 2 bounds; the record: 1 event × 2 directions × 2
    bounds = sum(2 * len(c.keys) * 4 for c in columns) + 4
    alpha = (1.0 - confidence) / bounds
    targets = []
    record_draws: list[tuple[np.ndarray, np.ndarray]] = []
    for column in columns:
        k = len(column.keys)
        best: tuple[float, str, str] = (-math.inf, "", "")
        for a, b in ((0, 1), (-1, 0)):
            d = sampler(np.full(trials, a, dtype=np.int64), k, share, None)
            d_prime = sampler(np.full(trials, b, dtype=np.int64), k, share, None)
            if a == 0:
                record_draws.append((d == 0, d_prime == 0))  # one event: the first key published
            shown = f"{column.name} = {'(missing)' if a < 0 else repr(column.keys[a])} vs {column.keys[b]!r}"
            for j in range(k):
                eps, direction = _event_bound(int((d == j).sum()), int((d_prime == j).sum()), trials, alpha)
                if eps > best[0]:
                    best = (eps, shown, f"published key {column.keys[j]!r} ({direction})")
        targets.append(RandomizeTarget(f"column {column.name}", share, best[0], best[1], best[2]))
    if record_draws:
        in_d = np.logical_and.reduce([hits_d for hits_d, _ in record_draws])
        in_d_prime = np.logical_and.reduce([hits_p for _, hits_p in record_draws])
        eps_d, dir_d = _event_bound(int(in_d.sum()), int(in_d_prime.sum()), trials, alpha)
        targets.append(RandomizeTarget(
            "record", share * len(columns), eps_d,
            "every chosen column's first key vs its second",
            f"every published key is the first dataset's true key ({dir_d})",
        ))
    notes = (
        "each target's neighbours differ in one record (replace); the other records are independent of it and the "
        "same in both datasets, so no test can use them",
        "events are 'the published key is j', for every declared key j, favouring either dataset",
        f"the real exact sampler is drawn {trials} times per dataset; every Clopper-Pearson bound holds at once "
        f"with probability >= {confidence} (a union bound over the {bounds} bounds)",
    )
    return RandomizeAudit(spec.dataset, trials, confidence, tuple(targets), notes)


def _event_bound(hits_d: int, hits_d_prime: int, trials: int, alpha: float) -> tuple[float, str]:
    """The larger ε lower bound of an event favouring D (hits_d) or D' (hits_d_prime), and which one it favours."""
    lo_d, hi_d = clopper_pearson(hits_d, trials, alpha)
    lo_p, hi_p = clopper_pearson(hits_d_prime, trials, alpha)
    favour_d = epsilon_bound(lo_d, hi_p, 0.0)
    favour_p = epsilon_bound(lo_p, hi_d, 0.0)
    options = [(e, w) for e, w in ((favour_d, "favours the first"), (favour_p, "favours the second")) if e is not None]
    return max(options, default=(-math.inf, "no event"))
