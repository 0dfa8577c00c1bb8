"""Empirical privacy audit: ``dpcli audit SPEC``. Reads no data and spends nothing.

It audits four kinds of *target*: every statistic of the plan (against its share of the budget); each noisy part
of a mean on its own (the centred sum and the count, each against the share the plan charges it); the partition
selection of each open-key statistic (against its δ); and the release as a whole (against its total: the pure ε
summed, or for zCDP the total ρ converted at δ).

1. **Neighbours, found by search.** Candidate rows are built from the declared columns alone (the spec's ``input:``
   is never opened). Per numeric column: both bounds, a value beyond each bound, the grid midpoint, the first grid
   value of the first two and last two reachable bins of each histogram on it, a missing and an unparseable cell.
   Per category or bool column: two declared keys, the ``other:`` key, a missing and an undeclared value. A
   candidate dataset is ``BASE_ROWS`` base rows plus at most one candidate row; each is written to a temporary CSV and
   aggregated by the real engine (:func:`dpcli.engine.aggregate`, the whole plan at once). Neighbouring pairs are
   (base, base + row) under ``add_remove`` (a row added or removed, at each extreme) and (base + row, base + other
   row) under ``replace`` (cell moves, a value going from L to U inside its cell, missing <-> value, a key becoming
   undeclared or missing). For a statistic and its parts, the rows combine every candidate value of the statistic's
   own columns (fewer values past ``ROW_CAP`` rows) and vary each other column alone, so a column the plan thinks
   irrelevant is tried too. The plan's sensitivity formulas are not used anywhere in the search: each pair is scored
   by the privacy loss of the exact difference Δ between the engine's two outputs under the plan's noise,
   Σ |Δ_i| / t_i for discrete Laplace (the pair's exact pure ε) and Σ Δ_i² / (2 σ_i²) for the discrete Gaussian (its
   exact ρ: the Rényi divergence of discrete Gaussians at integer shifts is that of continuous ones), and the
   pair with the largest loss is kept (ties: fewer differing cells, which gives the events more power). For the
   release, the score is the total over statistics (ε summed; in zCDP ρ summed, a Laplace statistic counting
   ε²/2), maximised by coordinate ascent over every column of both rows, starting from the best per-target pairs
   and from their rows merged.
   A kept pair whose loss exceeds the target's claim is a bug proved without any noise (the exact outputs of two
   neighbours differ by more than the plan's noise covers): the target is reported as a violation.

   **Under a person unit** a candidate is a whole *person* (rows sharing PERSON_ID; the base rows are persons of one
   row each, and the engine keeps rows by the fixed AUDIT_SECRET): each candidate row alone and repeated past K and
   R, one row in each of many cells (past K and G) and each of those repeated past R, persons exactly at the bounds
   (min(R, K) rows in each of min(G, K) cells, K rows in all, per candidate value of the statistic's other columns),
   and one row whose id is missing (empty or U+FFFD). Neighbours add or remove one person, or replace one by another;
   the release's pair is searched from the per-target pairs and their persons merged (no coordinate ascent).

   **Open keys** (``categories: open``) have no declared keys: the base holds a key and, in rows of their own, the
   shared keys s1, s2, ...; candidates bring keys only they hold (see ``open_key``: every key stays itself once cut
   to max_length). An open-key statistic's exact values are its observed entries, so an entry can exist in one
   dataset only; it is released there alone, when its noisy count reaches the plan's threshold. The statistic's loss
   counts the entries both datasets hold; its selection target scores a pair by the exact chance (40 digits) that a
   dataset releases an entry the other lacks, against the selection's δ.
2. **Noise.** The plan's real noise (:mod:`dpcli.mechanisms.noise`, with the plan's scales and variances) is drawn
   ``trials`` times on each of the two datasets' exact values, on the cells whose exact values differ only: the
   other cells get independent noise of the same law under D and D', which cannot change any test's outcome. The
   noisy integers are audited before post-processing: a release's numbers are a function of them, so whatever an
   event on released numbers could show, an event on these can show too.
3. **Events and bounds.** The statistic of every event is the log-likelihood ratio Z = log P[x | D'] / P[x | D] of
   the noisy values x (for the release: summed over all its statistics), computed from the exact values and the
   noise parameters, which are public here; Z >= c favours D' and Z <= -c favours D, the most powerful tests
   (Neyman-Pearson). The thresholds c are fixed before any noise is drawn: fractions of the Laplace part's
   maximum, and the Gaussian part's mean plus multiples of its standard deviation. An open-key entry one dataset
   lacks is drawn where it exists and makes Z +inf (only D' holds it) or -inf (only D) when released: the threshold
   inf adds the events "such a key is released", impossible under the other dataset. For each event Clopper-Pearson
   gives a lower bound on P[E | favoured dataset] and an upper bound on P[E | the other], and ε_lb = max log((p_lo -
   δ) / p_hi). With probability at least ``confidence`` every bound of the report holds at once (a union bound:
   each one-sided bound is at level (1 - confidence) / (number of bounds)), and then an (ε, δ)-DP target has
   ε_lb <= ε. So a report with ε_lb > claimed ε is, up to that probability, proof of a bug.

**Quantiles** (permute-and-flip): a level's exact values are the engine's bins, from which its utilities under D and
D' follow (dpcli.mechanisms.quantiles); a pair's loss is 2 max_c |Δu(c)| / t per cell of by: (the mechanism's
pure-ε bound; ε²/2 in zCDP), and Z is the log-likelihood ratio, under permute-and-flip's output law, of the
candidate the release's sampler draws.

**A series** (a spec with ``series:``, dpcli.audit.series): candidate rows carry the period field, each piece (a
period's, a tree block's) is aggregated by the real engine, each statistic is audited over all its pieces at once and
the series (``(series)``) against its one charge. Under a person unit (per_period, on a renewing cap) one period's
release (``(period 1)``) is audited against one period's budget, with candidate persons' rows in it and elsewhere.

It is evidence, not a proof: a lower bound that stays below the claim does not show the mechanism private (other
datasets or events might show more, and a finite sample cannot see rare events); one above it proves a bug.

Claims: a Laplace target claims its pure ε (δ = 0), a part of a mean the ε the plan gives that part; an open-key
statistic and its selection claim that ε at the selection's δ. A Gaussian target with share ρ claims
ε = zcdp_to_epsilon(ρ, δ) at the spec's ``privacy.delta``. The release claims the plan's total: its pure ε at the
selections' δ, or for zCDP its total ρ converted at what the selections leave of δ (with the whole δ). A spec with
only ``rho`` is audited at δ = ``ASSUMED_DELTA`` (the report says so).
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from dpcli.audit.bounds import clopper_pearson, epsilon_bound
from dpcli.audit.events import EventCount, count_hits, event_thresholds
from dpcli.audit.neighbours import CandidateCounts, NoisedCell, Person, PersonPair, choice_loss, find_neighbours
from dpcli.audit.series import layout_of
from dpcli.audit.targets import ASSUMED_DELTA, without_interval_draws
from dpcli.core.accounting import format_exact
from dpcli.errors import UsageError
from dpcli.plan.model import Plan, make_plan
from dpcli.plan.series import SeriesPlan, make_series_plan
from dpcli.specs.load import load_spec
from dpcli.specs.model import Quantile, Spec

DEFAULT_TRIALS = 200_000
MIN_TRIALS = 1_000
MAX_TRIALS = 1_000_000_000
# Probability that every Clopper-Pearson bound of a report holds at once: a correct mechanism is reported as a
# violation (exit 6) with probability at most 1e-9, so a scheduled audit in CI never fails by chance in practice.
DEFAULT_CONFIDENCE = 1 - 1e-9
_LOSS_TOLERANCE = Fraction(1, 10**9)

EVIDENCE_NOTE = (
    "This audit is evidence, not a proof: a lower bound at or below the claim does not show a statistic private "
    "(other datasets or events might show more); a lower bound above the claim proves a bug."
)


@dataclass(frozen=True)
class StatisticAudit(PersonPair):
    """One target's result (a statistic, a part of a mean, or the release; the name is historical)."""

    statistic: str  # the target's label
    scope: str
    kind: str
    mechanism: str
    claimed_epsilon: Fraction
    delta: Fraction
    epsilon_lower_bound: float  # >= 0; 0 when no event shows anything
    trials: int  # per dataset
    events: tuple[EventCount, ...]
    alpha_per_bound: float  # level of each one-sided Clopper-Pearson bound
    neighbour: str  # how D and D' differ, and the search's result
    pair_loss: Fraction
    claimed_loss: Fraction
    loss_unit: str
    pairs_searched: int
    columns: tuple[str, ...]  # the CSV's columns, the order of each row of person_d and person_d_prime
    person_d: Person | None
    person_d_prime: Person
    noised: tuple[NoisedCell, ...]
    worst_event: str | None  # the event that gave epsilon_lower_bound

    @property
    def cells(self) -> int:
        return len(self.noised)

    @property
    def empirical_within_claim(self) -> bool:
        return Fraction(self.epsilon_lower_bound) <= self.claimed_epsilon

    @property
    def pair_within_claim(self) -> bool:
        # a top_k's loss comes from float64 likelihoods (relative error ~1e-15); permute-and-flip's loss reaches its
        # claim exactly on some pairs, so the comparison allows Z_TOLERANCE (exact losses are unaffected in practice)
        return self.pair_loss <= self.claimed_loss * (1 + _LOSS_TOLERANCE)

    @property
    def within_claim(self) -> bool:
        return self.empirical_within_claim and self.pair_within_claim

    def as_dict(self) -> dict[str, Any]:
        return {
            "statistic": self.statistic,
            "scope": self.scope,
            "kind": self.kind,
            "mechanism": self.mechanism,
            "claimed_epsilon": format_exact(self.claimed_epsilon),
            "delta": format_exact(self.delta),
            "epsilon_lower_bound": self.epsilon_lower_bound,
            "within_claim": self.within_claim,
            "pair_loss": format_exact(self.pair_loss),
            "claimed_loss": format_exact(self.claimed_loss),
            "loss_unit": {"ε": "epsilon", "ρ": "rho", "δ": "delta"}[self.loss_unit],
            "pair_within_claim": self.pair_within_claim,
            "pairs_searched": self.pairs_searched,
            "trials": self.trials,
            "events": len(self.events),
            "alpha_per_bound": self.alpha_per_bound,
            "noised_cells": self.cells,
            "neighbour": self.neighbour,
            "row_d": None if self.row_d is None else dict(zip(self.columns, self.row_d, strict=True)),
            "row_d_prime": dict(zip(self.columns, self.row_d_prime, strict=True)),
            # the whole person on each side (one row under unit: row)
            "rows_d": None if self.person_d is None else [
                dict(zip(self.columns, r, strict=True)) for r in self.person_d
            ],
            "rows_d_prime": [dict(zip(self.columns, r, strict=True)) for r in self.person_d_prime],
            "differing_cells": [
                {
                    "statistic": c.statistic,
                    "component": c.component,
                    "cell": c.label,
                    "exact_d": format_exact(c.exact_d * c.unit),
                    "exact_d_prime": format_exact(c.exact_d_prime * c.unit),
                    **({} if c.only_in is None else {"only_in": c.only_in, "threshold": c.threshold,
                                                      "release_probability": c.release_probability}),
                }
                for c in self.noised
            ],
            "worst_event": self.worst_event,
        }


@dataclass(frozen=True)
class AuditReport:
    dataset: str
    neighbours: str
    accounting: str  # "pure" | "zcdp"
    trials: int
    confidence: float
    statistics: tuple[StatisticAudit, ...]  # every target: statistics, parts of means, then the release
    notes: tuple[str, ...]
    datasets_aggregated: int = 0

    @property
    def ok(self) -> bool:
        return all(s.within_claim for s in self.statistics)

    @property
    def violations(self) -> tuple[StatisticAudit, ...]:
        return tuple(s for s in self.statistics if not s.within_claim)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "neighbours": self.neighbours,
            "accounting": self.accounting,
            "trials": self.trials,
            "confidence": self.confidence,
            "data_read": False,
            "spent": False,
            "ok": self.ok,
            "datasets_aggregated": self.datasets_aggregated,
            "statistics": [s.as_dict() for s in self.statistics],
            "notes": list(self.notes),
        }


# ---------------------------------------------------------------------------------------------------------------


def audit(
    spec: Spec | Plan | SeriesPlan | str | Path,
    trials: int = DEFAULT_TRIALS,
    confidence: float = DEFAULT_CONFIDENCE,
    datasets: list[CandidateCounts] | None = None,
) -> AuditReport:
    """Audit every statistic, part of a mean and the release of a spec (or of a plan, e.g. a deliberately broken one
    in a test); a spec with ``series:`` (or a series plan) every piece of its series at once (dpcli.audit.series).
    No data read. ``datasets``: receives the search's candidate datasets (``find_neighbours``; a synth audit reads
    them, dpcli.audit.synth_audit)."""
    if not isinstance(spec, Plan | SeriesPlan):
        loaded = spec if isinstance(spec, Spec) else load_spec(spec)
        if loaded.synth is not None:
            raise UsageError("a synth spec's measurements and selection are audited by "
                             "dpcli.audit.synth_audit.audit_synth (the command line's dpcli audit SPEC)")
        spec = make_series_plan(loaded) if loaded.series is not None else make_plan(loaded)
    splan = spec if isinstance(spec, SeriesPlan) else None
    plan = spec.main if isinstance(spec, SeriesPlan) else spec
    the_spec = plan.spec
    if plan.frequency_only:
        raise UsageError(
            "frequency statistics add no noise (their input is a randomized file): audit the randomize spec that "
            "wrote it (dpcli audit RANDOMIZE_SPEC)"
        )
    if isinstance(trials, bool) or not isinstance(trials, int) or not MIN_TRIALS <= trials <= MAX_TRIALS:
        raise UsageError(
            f"must be a whole number in [{MIN_TRIALS}, {MAX_TRIALS}]", argument="trials", option="--trials"
        )
    if not 0.0 < confidence < 1.0:
        raise UsageError("confidence: must be in (0, 1)")
    alpha = 1.0 - confidence

    plan, unaudited = without_interval_draws(plan)
    layout = None
    if splan is not None:
        layout, unaudited = layout_of(splan)
        plan = layout.plan
    notes = []
    if unaudited:
        notes.append(
            f"NOT AUDITED: the interval draws of {', '.join(unaudited)} (their levels come from the noisy count, "
            "data-dependent); their ε is left out of every claim here; the interval count is audited like a count"
        )
    delta = plan.delta
    if the_spec.privacy.accounting == "zcdp" and delta is None:
        delta = ASSUMED_DELTA
        notes.append(
            f"the spec states rho without delta: Gaussian statistics and the release are audited at "
            f"δ={format_exact(ASSUMED_DELTA)}"
        )
    with tempfile.TemporaryDirectory(prefix="dpcli-audit-") as tmp:
        found, aggregated = find_neighbours(plan, Path(tmp), delta, layout, datasets)
    notes += [
        f"neighbouring pairs found by search: {aggregated} synthetic datasets aggregated by the real engine; each "
        "target keeps the pair whose exact difference has the largest privacy loss under the plan's noise (Laplace "
        "Σ|Δ|/t as ε, Gaussian Σ Δ²/(2σ²) as ρ), the release the pair with the largest total",
        "a pair whose loss exceeds the claim is a violation without any noise drawn",
        "each part of a mean, variance or std is also audited against its own share of the statistic's budget",
        "only the cells whose exact values differ between D and D' are noised: the others get independent noise "
        "of the same law under both, which no test can use",
        "events are on the log-likelihood ratio of D' to D at the noisy values before post-processing (a release's "
        "numbers are a function of them), at thresholds fixed before any noise is drawn",
    ]
    if layout is not None and layout.person:
        notes.append(
            f"series under a person unit: T = {layout.series.periods} periods, design {layout.series.design}; "
            f"candidate persons' rows carry the period field {layout.field} (in the audited period and in others, "
            "before the start, after period T, with offsets, naive, missing, unparseable); " + layout.describe()
        )
    elif layout is not None:
        notes.append(
            f"series: T = {layout.series.periods} periods, design {layout.series.design}; candidate rows carry the "
            f"period field {layout.field} (in periods, at their first and last instants, before the start, after "
            "period T, with offsets, naive, missing, unparseable); every statistic is audited over all its pieces "
            "at once, and the series as a whole against its one charge; " + layout.describe()
        )
    if the_spec.privacy.person is not None:
        notes.append(
            "person unit: neighbours differ by a whole person (many rows sharing an id): candidates hold more than K "
            "rows, rows in more than G cells, more than R rows in a cell, extreme or missing values, or one row "
            "without an id; the engine keeps rows by a fixed audit secret"
        )
    if any(isinstance(sp.statistic, Quantile) for sp in plan.statistics):
        notes.append(
            "quantiles: each level's pair loss is 2 max|Δu|/t per cell of by: (the exponential mechanism's bound), "
            "and its events are on the exact log-likelihood ratio of the drawn candidate under D' and D"
        )
    if plan.selection_delta:
        notes.append(
            "open keys: an entry only one dataset holds can be released there alone (when its noisy count reaches "
            "the threshold); the events include 'a key only D' (or D) holds is released', and each selection is "
            "also audited on its own: the chance of that against its δ"
        )

    work = [
        (nb, event_thresholds(plan, nb.noised, sum(choice_loss(plan.statistics[i], d, dp) for i, d, dp in nb.choices))
         if nb.noised else [])
        for nb in found
    ]
    total_bounds = sum(2 * 2 * len(th) for _, th in work)  # per threshold: up and down, each one lo and one hi
    alpha_bound = alpha / max(total_bounds, 1)

    results = []
    for nb, thresholds in work:
        t = nb.target
        best, worst = 0.0, None
        events = []
        if thresholds:
            up_d, down_d = count_hits(plan, nb, True, thresholds, trials)
            up_dp, down_dp = count_hits(plan, nb, False, thresholds, trials)
            dlt = float(t.delta)
            for j, c in enumerate(thresholds):
                up_text = "a key only D' holds is released" if math.isinf(c) else f"Z ≥ {c:.6g}"
                down_text = "a key only D holds is released" if math.isinf(c) else f"Z ≤ {-c:.6g}"
                for direction, text, h_d, h_dp, fav, other, h_fav, h_oth in (
                    ("up", up_text, up_d[j], up_dp[j], "D'", "D", up_dp[j], up_d[j]),
                    ("down", down_text, down_d[j], down_dp[j], "D", "D'", down_d[j], down_dp[j]),
                ):
                    events.append(EventCount(direction, c, text, h_d, h_dp))
                    lo = clopper_pearson(h_fav, trials, alpha_bound)[0]
                    hi = clopper_pearson(h_oth, trials, alpha_bound)[1]
                    eps = epsilon_bound(lo, hi, dlt)
                    if eps is not None and eps > best:
                        best = eps
                        worst = (
                            f"{text}: P[E|{fav}] ≈ {h_fav / trials:.4g} vs P[E|{other}] ≈ {h_oth / trials:.4g}"
                        )
        results.append(
            StatisticAudit(
                statistic=t.label,
                scope=t.scope,
                kind=t.kind,
                mechanism=t.mechanism,
                claimed_epsilon=t.claimed_epsilon,
                delta=t.delta,
                epsilon_lower_bound=best,
                trials=trials,
                events=tuple(events),
                alpha_per_bound=alpha_bound,
                neighbour=nb.description,
                pair_loss=nb.pair_loss,
                claimed_loss=t.claimed_loss,
                loss_unit=t.loss_unit,
                pairs_searched=nb.pairs_searched,
                columns=tuple(the_spec.columns) + ((layout.field,) if layout is not None else ())
                + ((the_spec.id_column,) if the_spec.id_column is not None else ()),
                person_d=nb.person_d,
                person_d_prime=nb.person_d_prime,
                noised=nb.noised,
                worst_event=worst,
            )
        )
    notes.append(EVIDENCE_NOTE)
    return AuditReport(
        dataset=the_spec.dataset,
        neighbours=the_spec.privacy.neighbours,
        accounting=the_spec.privacy.accounting,
        trials=trials,
        confidence=confidence,
        statistics=tuple(results),
        notes=tuple(notes),
        datasets_aggregated=aggregated,
    )
