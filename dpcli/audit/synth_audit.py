"""``dpcli audit`` of a synth spec (issue 27): MST's measurement and selection steps, each against its claim, on
synthetic neighbouring datasets aggregated by the real engine. Reads no data, spends nothing. The report is a release
audit's (dpcli.audit.release_audit.AuditReport): the same table, JSON and exit code.

**Measurement.** The release audit (dpcli.audit.release_audit, its neighbour search, events and bounds) of
``SynthPlan.exact_plan``: every one-way marginal and every candidate pair, each against its own ρ (``one_way_rho``,
``pair_rho``), and ``(measurement)``: the d one-ways with the pairs of one spanning tree, against ρ_one_way +
ρ_measure (dpcli.audit.targets; given the selection, by adaptive composition, any tree costs the same).

**Selection.** Each Kruskal round is one exponential-mechanism draw; the first round is over every candidate pair,
so it is the draw audited. Its scores (``dpcli.mechanisms.mst.pair_scores``) are computed from the engine's exact
pair counts of each candidate dataset (every dataset the measurement's neighbour search aggregated) and a FIXED public
one-way estimate and total: a run computes them from the noisy one-ways, released before the selection, so the
selection is audited given them (adaptive composition), and the audit may choose them. The search tries, for every
neighbouring pair (add_remove: the base rows against the base plus a candidate row; replace: two candidate rows),
every estimate of a small family (each column's mass at the base row's code, or spread evenly over its codes; at
most two columns spread, or all; totals from 1 to past the largest pair's cells) and keeps the pair and estimate
whose draw has the largest exact privacy loss max_i |log P[i | D'] − log P[i | D]| (the law P(i) ∝ exp(−(num/den)
gap_i) at the plan's rate). The real sampler (``exponential_mechanism_sample``, the exact law ``select_tree`` draws
from) is then drawn ``trials`` times on each dataset's gaps; the events are "the chosen pair is one whose
log-likelihood ratio Z is ≥ c" (favouring D') or "≤ −c" (favouring D), c every |Z| value; Clopper-Pearson bounds give
ε_lb, against ε_sel: the pure ε-DP of one draw. The ε_sel²/8 zCDP charge per round is the bounded-range bound of that
same law (an ε-DP exponential mechanism is ε-bounded-range, hence ε²/8-zCDP; Cesar & Rogers 2021), so the pure ε_sel
is the claim the charge rests on. A pair loss over ε_sel is a violation without any draw.

Confidence: the measurement's bounds and the selection's share it: each part holds at 1 − (1 − confidence) / 2, so
every bound of the report holds at once with probability at least ``confidence``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

import numpy as np

from dpcli.audit.bounds import clopper_pearson, epsilon_bound
from dpcli.audit.events import Z_TOLERANCE, EventCount
from dpcli.audit.neighbours import CandidateCounts, Person
from dpcli.audit.release_audit import (
    DEFAULT_CONFIDENCE,
    DEFAULT_TRIALS,
    EVIDENCE_NOTE,
    MAX_TRIALS,
    MIN_TRIALS,
    AuditReport,
    StatisticAudit,
    audit,
)
from dpcli.core.accounting import format_decimal
from dpcli.core.samplers import exponential_mechanism_sample, saturated_gaps
from dpcli.errors import InternalError, UsageError
from dpcli.mechanisms.mst import independence_marginal, pair_scores
from dpcli.plan.synth import SynthPlan, make_synth_plan
from dpcli.postprocess.synth_model import noisy_total
from dpcli.specs.load import load_spec
from dpcli.specs.model import Spec

SELECTION = "(selection)"
# At most this many columns are spread evenly in one estimate (besides "all of them"): the patterns that move some
# pairs' scores up and others down need the columns a candidate row changes, and a row changes at most two
MAX_SPREAD_COLUMNS = 2
# Under replace, neighbouring pairs searched per estimate at most about this many (every pair of candidate rows when
# they are fewer): the search's work stays bounded for a spec with many columns
MAX_REPLACE_PAIRS = 20_000


def audit_synth(
    spec: Spec | SynthPlan | str | Path,
    trials: int = DEFAULT_TRIALS,
    confidence: float = DEFAULT_CONFIDENCE,
) -> AuditReport:
    """Audit a synth spec's measurements and selection (or a synth plan's, e.g. a deliberately wrong one in a
    test). No data read."""
    if isinstance(spec, SynthPlan):
        plan = spec
    else:
        loaded = spec if isinstance(spec, Spec) else load_spec(spec)
        if loaded.synth is None:
            raise UsageError("not a synth spec (no synth: section): audit it with dpcli audit SPEC")
        plan = make_synth_plan(loaded)
    if isinstance(trials, bool) or not isinstance(trials, int) or not MIN_TRIALS <= trials <= MAX_TRIALS:
        raise UsageError(
            f"must be a whole number in [{MIN_TRIALS}, {MAX_TRIALS}]", argument="trials", option="--trials"
        )
    if not 0.0 < confidence < 1.0:
        raise UsageError("confidence: must be in (0, 1)")
    alpha = (1.0 - confidence) / 2
    kept: list[CandidateCounts] = []
    measured = audit(plan.exact_plan, trials, 1.0 - alpha, datasets=kept)
    selection, searched = _audit_selection(plan, kept[0], trials, alpha)
    d = len(plan.sizes)
    num, den = plan.rate
    notes = [n for n in measured.notes if n != EVIDENCE_NOTE]
    notes += [
        f"synth (MST): the measurement is audited on the engine's plan of every marginal, each one-way against "
        f"ρ={format_decimal(plan.one_way_rho, 10)} and each of the {len(plan.candidates)} candidate pairs against "
        f"ρ={format_decimal(plan.pair_rho, 10)}; '(measurement)' is the {d} one-ways with the {d - 1} pairs of one "
        "spanning tree (the star of the first column), against ρ_one_way + ρ_measure: given the selection (adaptive "
        "composition) every tree costs the same",
        f"synth selection: the first Kruskal round's exponential-mechanism draw over all {len(plan.candidates)} "
        f"candidate pairs at the plan's rate {num}/{den} (ε_sel/(2Δ_u), Δ_u = {plan.score_sensitivity}), drawn by the "
        "real sampler on integer scores (dpcli.mechanisms.mst.pair_scores) of the engine's exact pairs with a FIXED "
        f"public one-way estimate and total (the released one-ways are given: {searched}); claimed: ε_sel, the pure "
        "ε-DP of one draw",
        f"synth selection: the zCDP charge ε_sel²/8 per round ({plan.rounds} rounds, ρ_select = "
        f"{float(plan.rho_select):.6g}) is the bounded-range bound of this same law (an ε-DP exponential "
        "mechanism is ε-bounded-range, hence ε²/8-zCDP; Cesar & Rogers 2021)",
        f"synth: the measurement's and the selection's bounds each hold at {1.0 - alpha}, all at once at "
        f"{confidence}",
        EVIDENCE_NOTE,
    ]
    return replace(
        measured, confidence=confidence, statistics=(*measured.statistics, selection), notes=tuple(notes),
        datasets_aggregated=measured.datasets_aggregated,
    )


# ---------------------------------------------------------------------------------------------------------------
# The selection's search: neighbouring pairs x public estimates, scored by the draw's exact privacy loss


@dataclass(frozen=True)
class _Estimate:
    """A public one-way estimate: each column's mass all at the base row's code, or (``spread``) even over its
    codes; every column sums to ``mass``."""

    spread: frozenset[int]
    mass: int

    def one_ways(self, sizes: tuple[int, ...], base_codes: list[int]) -> list[np.ndarray]:
        out = []
        for i, size in enumerate(sizes):
            v = np.zeros(size, dtype=np.int64)
            if i in self.spread:
                v += self.mass // size
                v[: self.mass % size] += 1
            else:
                v[base_codes[i]] = self.mass
            out.append(v)
        return out

    def describe(self, names: tuple[str, ...]) -> str:
        spread = [names[i] for i in sorted(self.spread)]
        where = ("every column spread evenly over its codes" if len(spread) == len(names) else
                 f"{', '.join(spread)} spread evenly over its codes, the others at the base row's code" if spread
                 else "every column at the base row's code")
        return f"one-way estimate: {where}, each summing to {self.mass}"


def _estimates(plan: SynthPlan) -> list[_Estimate]:
    d = len(plan.sizes)
    largest = max(plan.sizes[i] * plan.sizes[j] for i, j in plan.candidates)
    masses = sorted({m for k in range(2 + max(2, largest.bit_length())) for m in (2**k, 3 * 2**k)
                     if m <= 4 * largest + 8})
    spreads = [frozenset(c) for r in range(min(MAX_SPREAD_COLUMNS, d) + 1) for c in itertools.combinations(range(d), r)]
    if frozenset(range(d)) not in spreads:
        spreads.append(frozenset(range(d)))
    return [_Estimate(s, m) for m in masses for s in spreads]


def _log_law(scores: np.ndarray, rate: float) -> np.ndarray:
    """log P(i) of the exponential mechanism over scores (rows: datasets), P(i) ∝ exp(rate · score_i)."""
    z = rate * scores.astype(np.float64)
    top = z.max(axis=-1, keepdims=True)
    out: np.ndarray = z - top - np.log(np.exp(z - top).sum(axis=-1, keepdims=True))
    return out


@dataclass(frozen=True)
class _Found:
    value: float  # what the pair was kept for: its loss, or its expected lower bound
    d: Person | None
    d_prime: Person
    estimate: _Estimate


def _expected_bound(llr: np.ndarray, law_d: np.ndarray, law_dp: np.ndarray, trials: int, z: float) -> np.ndarray:
    """Per row (a neighbouring pair), roughly the largest ε lower bound ``trials`` draws would show: over the events
    "Z ≥ c" and "Z ≤ −c", log of (P[E | favoured] − z·sd) / (P[E | other] + z·sd), the binomial's normal bands."""
    order = np.argsort(-llr, axis=1)
    p_d = np.take_along_axis(np.exp(law_d), order, axis=1)
    p_dp = np.take_along_axis(np.exp(law_dp), order, axis=1)
    best = np.zeros(len(llr))
    with np.errstate(divide="ignore", invalid="ignore"):
        for fav, oth in ((np.cumsum(p_dp, axis=1), np.cumsum(p_d, axis=1)),  # Z >= c: the largest Z first
                         (np.cumsum(p_d[:, ::-1], axis=1), np.cumsum(p_dp[:, ::-1], axis=1))):  # Z <= -c
            lo = fav - z * np.sqrt(fav * (1 - fav) / trials)
            hi = oth + z * np.sqrt(oth * (1 - oth) / trials) + 1.0 / trials
            value = np.where(lo > 0, np.log(np.maximum(lo, 1e-300) / hi), 0.0)
            best = np.maximum(best, value[:, :-1].max(axis=1, initial=0.0))
    return best


def _search(plan: SynthPlan, cands: CandidateCounts, trials: int, alpha: float) -> tuple[_Found, _Found, int]:
    """The neighbouring pair and estimate whose first-round draw loses most (the pair loss against the claim), the
    one whose events ``trials`` draws are expected to show most (drawn), and how many (pair, estimate) were tried."""
    d = len(plan.sizes)
    keys = list(cands.counts)  # the base alone (None) first
    pairs = [cands.counts[p][d:] for p in keys]
    tables = [np.stack([counts[j] for counts in pairs]) for j in range(len(plan.candidates))]  # per pair: N x cells
    base = cands.counts[None]
    base_codes = [int(np.argmax(base[i])) for i in range(d)]
    rate = plan.rate[0] / plan.rate[1]
    z = math.sqrt(2 * math.log(4 * len(plan.candidates) / alpha))  # a normal tail at about each bound's level
    if plan.spec.privacy.neighbours == "add_remove":
        left = np.zeros(len(keys) - 1, dtype=np.int64)
        right = np.arange(1, len(keys), dtype=np.int64)
    else:  # replace: two candidate rows; past MAX_REPLACE_PAIRS, the first row from an even subset of them
        n = len(keys) - 1
        stride = max(1, math.ceil(n * (n - 1) / 2 / MAX_REPLACE_PAIRS))
        combos = np.array([(a, b) for a, b in itertools.combinations(range(1, n + 1), 2) if (a - 1) % stride == 0],
                          dtype=np.int64).reshape(-1, 2)
        left, right = combos[:, 0], combos[:, 1]
    worst: _Found | None = None
    telling: _Found | None = None
    tried = 0
    cache: dict[tuple[int, bool, bool, int], np.ndarray] = {}
    for est in _estimates(plan):
        one_ways = est.one_ways(plan.sizes, base_codes)
        total = noisy_total(one_ways, plan.one_way_sigma2)
        columns = []
        for j, (a, b) in enumerate(plan.candidates):
            key = (j, a in est.spread, b in est.spread, total)
            if key not in cache:  # the same rounded model table as pair_scores (its own function)
                model = independence_marginal(one_ways[a], one_ways[b], float(total)).reshape(-1)
                cache[key] = np.abs(tables[j] - model).sum(axis=1)
            columns.append(cache[key])
        law = _log_law(np.column_stack(columns), rate)
        llr = law[right] - law[left]
        tried += len(llr)
        for value, kept in ((np.abs(llr).max(axis=1), worst), (_expected_bound(llr, law[left], law[right], trials, z),
                                                               telling)):
            k = int(np.argmax(value))
            d_prime = keys[int(right[k])]
            if d_prime is None:  # the base alone is key 0, only ever on the left
                raise InternalError("the synth selection's search put the base rows on the right")
            if kept is None or float(value[k]) > kept.value:
                found = _Found(float(value[k]), keys[int(left[k])], d_prime, est)
                if kept is worst:
                    worst = found
                else:
                    telling = found
    if worst is None or telling is None:
        raise InternalError("the synth selection's search found no neighbouring pair")
    # too few trials for any event to show: draw on the pair that loses most
    return worst, telling if telling.value > 0 else worst, tried


def _law(plan: SynthPlan, cands: CandidateCounts, found: _Found) -> tuple[list[np.ndarray], int, np.ndarray]:
    """The pair's real gaps (``pair_scores``, then ``saturated_gaps``, as ``select_tree`` makes them) under D and D',
    the total, and log P[i | D'] − log P[i | D] per candidate at the plan's rate."""
    d = len(plan.sizes)
    base_codes = [int(np.argmax(cands.counts[None][i])) for i in range(d)]
    one_ways = found.estimate.one_ways(plan.sizes, base_codes)
    total = noisy_total(one_ways, plan.one_way_sigma2)
    sides = []
    for person in (found.d, found.d_prime):
        counts = cands.counts[person]
        exact = {pair: counts[d + j] for j, pair in enumerate(plan.candidates)}
        sides.append(saturated_gaps(pair_scores(exact, one_ways, total)))
    rate = plan.rate[0] / plan.rate[1]
    llr: np.ndarray = _log_law(-sides[1], rate) - _log_law(-sides[0], rate)
    return sides, total, llr


def _audit_selection(plan: SynthPlan, cands: CandidateCounts, trials: int, alpha: float) -> tuple[StatisticAudit, str]:
    worst, found, tried = _search(plan, cands, trials, alpha)
    names = plan.columns
    _, _, worst_llr = _law(plan, cands, worst)
    pair_loss = float(np.abs(worst_llr).max())  # the largest loss searched, from the real scores
    loss = Fraction(f"{pair_loss:.15g}")  # float64's digits (the report's figure; the claim allows 1e-9 relative)
    (gaps_d, gaps_dp), total, llr = _law(plan, cands, found)
    num, den = plan.rate
    thresholds = sorted({float(v) for v in np.abs(llr) if v > 0}, reverse=True)
    bounds = 2 * 2 * len(thresholds)  # per threshold: up and down, each a lower and an upper bound
    alpha_bound = alpha / max(bounds, 1)
    events: list[EventCount] = []
    best, strongest = 0.0, None
    if thresholds:
        drawn_d = exponential_mechanism_sample(gaps_d, num, den, trials)
        drawn_dp = exponential_mechanism_sample(gaps_dp, num, den, trials)
        for c in thresholds:
            tol = Z_TOLERANCE * max(1.0, c)
            for direction, chosen, fav, other in (("up", llr >= c - tol, "D'", "D"),
                                                  ("down", llr <= -c + tol, "D", "D'")):
                shown = [f"{names[a]}×{names[b]}" for (a, b), hit in zip(plan.candidates, chosen, strict=True) if hit]
                text = f"the chosen pair is one of {{{', '.join(shown)}}} (Z {'≥' if direction == 'up' else '≤'} " \
                       f"{c if direction == 'up' else -c:.6g})"
                h_d, h_dp = int(np.isin(drawn_d, np.flatnonzero(chosen)).sum()), int(
                    np.isin(drawn_dp, np.flatnonzero(chosen)).sum())
                events.append(EventCount(direction, c, text, h_d, h_dp))
                h_fav, h_oth = (h_dp, h_d) if fav == "D'" else (h_d, h_dp)
                lo = clopper_pearson(h_fav, trials, alpha_bound)[0]
                hi = clopper_pearson(h_oth, trials, alpha_bound)[1]
                eps = epsilon_bound(lo, hi, 0.0)
                if eps is not None and eps > best:
                    best = eps
                    strongest = f"{text}: P[E|{fav}] ≈ {h_fav / trials:.4g} vs P[E|{other}] ≈ {h_oth / trials:.4g}"
    claim = plan.epsilon_select
    verdict = "EXCEEDS the claim" if loss > claim * (1 + Fraction(1, 10**9)) else "is within the claim"
    drawn = float(np.abs(llr).max())
    largest = ("" if (worst.d, worst.d_prime, worst.estimate) == (found.d, found.d_prime, found.estimate) else
               f"; the largest loss searched, ε={pair_loss:.6g}, on {_pair_text(cands, worst.d, worst.d_prime)} with "
               f"a {worst.estimate.describe(names)}")
    neighbour = (
        f"{_pair_text(cands, found.d, found.d_prime)}; {found.estimate.describe(names)} (total {total}): the draw's "
        f"ε={drawn:.6g} over its {len(plan.candidates)} candidates, the pair whose events these trials should show "
        f"most, of {tried} (pair, estimate) searched{largest}; the largest {verdict} (ε={float(claim):.6g})"
    )
    result = StatisticAudit(
        statistic=SELECTION, scope="selection", kind="mst selection (first round)", mechanism="exponential",
        claimed_epsilon=claim, delta=Fraction(0), epsilon_lower_bound=best, trials=trials, events=tuple(events),
        alpha_per_bound=alpha_bound, neighbour=neighbour, pair_loss=loss, claimed_loss=claim,
        loss_unit="ε", pairs_searched=tried, columns=cands.columns,
        person_d=found.d, person_d_prime=found.d_prime, noised=(),
        worst_event=strongest,
    )
    searched = (f"{len(_estimates(plan))} estimates (each column's mass at the base row's code or spread evenly), "
                f"{tried} (pair, estimate) searched")
    return result, searched


def _pair_text(cands: CandidateCounts, d: Person | None, d_prime: Person) -> str:
    def show(person: Person) -> str:
        return ", ".join(f"{n}={v if v != '' else '(empty)'}" for n, v in zip(cands.columns, person[0], strict=True))

    if d is None:
        return f"D: {cands.base_rows} rows; D' = D + 1 row ({show(d_prime)})"
    return f"D: {cands.base_rows} rows + 1 row ({show(d)}); D': that row replaced by ({show(d_prime)})"


__all__ = ["SELECTION", "audit_synth"]
