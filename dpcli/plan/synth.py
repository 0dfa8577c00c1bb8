"""The plan of a synth spec (issue 27; docs/spec.md, "Synthetic data"): MST's every public number, from the spec
alone, before any data is read.

MST (McKenna, Miklau & Sheldon 2021) over d columns, in three steps sharing the spec's rho by ``synth.shares``:
1. one-way marginals: d discrete Gaussian measurements, rho * shares[0] / d each;
2. selection: a maximum spanning tree over the d columns, d - 1 rounds of Kruskal, each one exponential-mechanism draw
   at epsilon_sel among the candidate pairs joining two components; an epsilon-DP exponential mechanism is
   epsilon-bounded-range, hence epsilon^2/8-zCDP (Durfee & Rogers 2019; Cesar & Rogers 2021, Lemma 3.2), so the
   d - 1 draws cost (d - 1) epsilon_sel^2 / 8, epsilon_sel rounded DOWN so that this is at most rho * shares[1];
3. measurement: the d - 1 selected pairs, rho * shares[2] / (d - 1) each.
Each marginal is a count over cells: one row changes one cell by 1 under add/remove (L2^2 = 1), and under replace
leaves one cell and joins another (L2^2 = 2); sigma^2 = L2^2 / (2 rho_i) rounded UP onto the sampler's domain
(dpcli.plan.scales). A pair's selection score, the L1 distance between its exact counts and the rounded model's, has
sensitivity 1 under add/remove (2 under replace): the draw's rate is epsilon_sel / (2 Delta_u).

``exact_plan`` is what the engine aggregates in one read: the d one-way marginals, then EVERY candidate pair (each
at its measurement share: only the d - 1 selected pairs are ever noised, so its ``rho`` total is not the charge;
``charge`` is).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from itertools import combinations

from dpcli.core.accounting import Budget, epsilon_delta_to_rho, format_decimal, format_exact, rho_to_pure_epsilon
from dpcli.errors import InternalError, SpecError
from dpcli.plan.bins import bin_label
from dpcli.plan.model import Plan, StatisticPlan
from dpcli.plan.sensitivity import NoiseComponent, Share, components
from dpcli.specs.model import Marginal, Spec, Statistic, Synth, synth_sizes
from dpcli.specs.v1 import BOOL_KEYS, MAX_CELLS

# The code label of a kept missing cell: the synthetic CSV writes it as an empty cell
MISSING_LABEL = ""
# The exact exponential-mechanism sampler takes its rate as num/den with both at most this (dpcli.core.samplers):
# a rate past it would fail in the draw, after the spend, so the plan refuses it before. Its value, not an import:
# the samplers load numpy, and `dpcli plan` starts without it (tests/plan/test_synth_plan.py checks they agree)
RATE_LIMIT = 1 << 48


@dataclass(frozen=True)
class SynthPlan:
    """Every public number of a synth release (MST), from the spec alone."""

    spec: Spec
    sizes: tuple[int, ...]  # per synth column (output order): its number of codes
    labels: tuple[tuple[str, ...], ...]  # per synth column: each code's label (key, [lo..hi) bin, "" kept missing)
    candidates: tuple[tuple[int, int], ...]  # every pair (i, j), i < j, in that order
    rounds: int  # d - 1: the selection's draws and the measured pairs
    rho: Fraction  # the spec's rho (privacy.rho, or epsilon with delta converted, rounded down)
    one_way_rho: Fraction  # each one-way marginal's
    pair_rho: Fraction  # each measured pair's
    one_way_sigma2: Fraction  # each one-way marginal's discrete Gaussian sigma^2 (rounded up)
    pair_sigma2: Fraction  # each measured pair's
    l2_squared: int  # a marginal's squared L2 sensitivity: 1 (add_remove) or 2 (replace)
    epsilon_select: Fraction  # each selection draw's epsilon (rounded down)
    score_sensitivity: int  # Delta_u of a pair's score: 1 (add_remove) or 2 (replace)
    rate: tuple[int, int]  # (num, den): the draw's P(i) ∝ exp(-(num/den) gap_i), num/den = epsilon_sel / (2 Delta_u)
    rho_one_way: Fraction  # the d one-way marginals' together
    rho_select: Fraction  # (d - 1) epsilon_sel^2 / 8 exactly
    rho_measure: Fraction  # the d - 1 pairs' together
    charge: Budget  # what the release charges: rho_one_way + rho_select + rho_measure (<= rho)
    exact_plan: Plan  # the engine's plan: d one-ways, then every candidate pair (see the module's docstring)
    derivations: tuple[str, ...]  # how each number follows, one line each

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.synth.columns)

    @property
    def synth(self) -> Synth:
        if self.spec.synth is None:  # a SynthPlan is made of a synth spec only
            raise InternalError("a synth plan without its synth section")
        return self.spec.synth

    def pair_index(self, i: int, j: int) -> int:
        """The place of pair (i, j), i < j, among the candidates (and of its marginal in ``exact_plan``, after the
        d one-ways)."""
        return self.candidates.index((i, j))


def make_synth_plan(spec: Spec) -> SynthPlan:
    """The plan of a validated synth spec. Reads no data; every refusal (exit 2) names its figure and the file."""
    try:
        return _make_synth_plan(spec)
    except SpecError as exc:
        if spec.source == "<string>":
            raise
        from dpcli.specs.load import printable

        raise exc.in_file(printable(spec.source)) from None


def _spec_rho(spec: Spec) -> tuple[Fraction, str]:
    p = spec.privacy
    if p.rho is not None:
        return p.rho, "privacy.rho"
    if p.epsilon is None or p.delta is None:  # the loader requires one of the two (dpcli.specs.rules._synth_privacy)
        raise InternalError("a synth spec without a zCDP budget")
    rho = epsilon_delta_to_rho(p.epsilon, p.delta)
    return rho, (f"privacy.epsilon={format_decimal(p.epsilon, 10)} at δ={format_decimal(p.delta, 6)}, converted "
                 "(rounded down)")


def _labels(spec: Spec) -> tuple[tuple[str, ...], ...]:
    out = []
    for sc in spec.synth.columns if spec.synth is not None else ():
        column = spec.columns[sc.name]
        if sc.bins is not None:
            bins = sc.bins
            keys = tuple(bin_label(bins, i) for i in range(bins.count))
        else:
            keys = BOOL_KEYS if column.type == "bool" else column.keys
        out.append((*keys, MISSING_LABEL) if sc.missing == "keep" else keys)
    return tuple(out)


def _make_synth_plan(spec: Spec) -> SynthPlan:
    synth = spec.synth
    if synth is None:
        raise InternalError("make_synth_plan is given a spec without synth:")
    names = [c.name for c in synth.columns]
    d = len(names)
    sizes = synth_sizes(spec)
    candidates = tuple(combinations(range(d), 2))
    rounds = d - 1
    # the domain's refusals, before anything else: the largest marginal, and all the engine would hold
    largest = max(candidates, key=lambda ij: sizes[ij[0]] * sizes[ij[1]])
    cells = sizes[largest[0]] * sizes[largest[1]]
    if cells > synth.max_cells:
        raise SpecError("synth.columns", f"marginal {names[largest[0]]}×{names[largest[1]]} has {cells:,} cells "
                        f"({sizes[largest[0]]:,} × {sizes[largest[1]]:,} codes), over synth.max_cells = "
                        f"{synth.max_cells:,}: use fewer bins or keys, or leave a column out")
    total_cells = sum(sizes) + sum(sizes[i] * sizes[j] for i, j in candidates)
    if total_cells > MAX_CELLS:
        raise SpecError("synth.columns", f"the {d} one-way and {len(candidates)} candidate pair marginals have "
                        f"{total_cells:,} cells in all, over the limit of {MAX_CELLS:,} per release: use fewer bins "
                        "or keys, or fewer columns")
    rho, source = _spec_rho(spec)
    one, select, measure = synth.shares
    one_way_rho = rho * one / d
    pair_rho = rho * measure / rounds
    neighbours = spec.privacy.neighbours
    l2_squared, score_sensitivity = (1, 1) if neighbours == "add_remove" else (2, 2)
    # epsilon_sel: the largest on the rounding grid with (d - 1) eps^2 / 8 <= rho * select, i.e. eps / 2 the largest
    # with (eps / 2)^2 / 2 <= rho * select / (d - 1) (rho_to_pure_epsilon rounds down, rigorously)
    epsilon_select = 2 * rho_to_pure_epsilon(rho * select / rounds)
    if epsilon_select <= 0:
        raise SpecError("synth.shares.select", "the selection's share of the budget is too small to plan (each "
                        "draw's epsilon rounds to 0): raise it")
    rho_select = rounds * epsilon_select * epsilon_select / 8
    if rho_select > rho * select:  # rounded down above: never reached
        raise InternalError("the selection's charge exceeds its share")
    rate = epsilon_select / (2 * score_sensitivity)
    if rate.numerator > RATE_LIMIT or rate.denominator > RATE_LIMIT:
        raise SpecError("privacy.rho", "too many digits for the exact sampler: the selection's rate needs a "
                        "numerator and denominator of at most 2^48 (write a shorter decimal)")
    coded = [(sc.bins, sc.missing == "keep") for sc in synth.columns]
    marginals: list[Statistic] = [
        Marginal(name=f"one_way:{names[i]}", columns=(names[i],), column_bins=(coded[i][0],),
                 kept_missing=(coded[i][1],), mechanism="gaussian", rho=one_way_rho)
        for i in range(d)
    ]
    for i, j in candidates:
        marginals.append(Marginal(name=f"pair:{names[i]}:{names[j]}", columns=(names[i], names[j]),
                                  column_bins=(coded[i][0], coded[j][0]), kept_missing=(coded[i][1], coded[j][1]),
                                  mechanism="gaussian", rho=pair_rho))
    engine_spec = replace(spec, statistics=tuple(marginals))
    plans = []
    for k, stat in enumerate(marginals):
        if not isinstance(stat, Marginal):  # built just above: never reached
            raise InternalError("a synth plan's statistic is not a marginal")
        path = "synth.shares.one_way" if k < d else "synth.shares.measure"
        share = one_way_rho if k < d else pair_rho
        comps = components(path, engine_spec, stat, neighbours, Share("gaussian", share), None)
        size = 1
        for name in stat.columns:
            size *= sizes[names.index(name)]
        plans.append(StatisticPlan(stat, Fraction(0), comps, size, tuple(None for _ in stat.columns), share, None))
    exact_plan = Plan(engine_spec, tuple(plans), spec.confidence)
    one_way_component: NoiseComponent = plans[0].components[0]
    pair_component: NoiseComponent = plans[d].components[0]
    rho_one_way, rho_measure = one_way_rho * d, pair_rho * rounds
    total = rho_one_way + rho_select + rho_measure
    if total > rho:  # exact fractions, each share at most its part: never reached
        raise InternalError("a synth plan's charge exceeds the spec's rho")
    s0, s1, s2 = (format_exact(x) for x in synth.shares)
    why_l2 = ("add/remove one row changes one cell of a marginal by 1 (L2² 1)" if l2_squared == 1 else
              "replace one row: it can leave one cell of a marginal and join another (L2² 1 + 1)")
    why_u = ("add/remove one row changes a pair's exact counts by 1 in one cell, so its score Σ|exact − model| by at "
             "most 1 (the model's counts are rounded to integers before the score)" if score_sensitivity == 1 else
             "replace one row changes a pair's exact counts in two cells, so its score by at most 2 (the model's "
             "counts are rounded to integers before the score)")
    derivations = (
        f"domain: {' × '.join(f'{n} {s}' for n, s in zip(names, sizes, strict=True))} codes; {len(candidates)} "
        f"candidate pairs, the largest {names[largest[0]]}×{names[largest[1]]} with {cells:,} cells "
        f"(limit {synth.max_cells:,})",
        f"ρ = {format_decimal(rho, 10)} ({source}), shared one_way {s0}, select {s1}, measure {s2}",
        f"{why_l2}",
        f"one-way marginals: ρ·{s0} / {d} = {format_decimal(one_way_rho, 10)} each; σ² = {l2_squared}/(2·ρ_i) = "
        f"{format_decimal(one_way_component.required_variance(), 10)} (rounded up)",
        f"selection: {rounds} exponential-mechanism draws (Kruskal rounds) at ε_sel = "
        f"{format_decimal(epsilon_select, 12)} each, rounded down so that {rounds}·ε_sel²/8 ≤ ρ·{s1} = "
        f"{format_decimal(rho * select, 10)}; charged by the bounded-range bound, ε_sel²/8 each "
        f"(Cesar & Rogers 2021): {format_decimal(rho_select, 10)}",
        f"score sensitivity Δ_u = {score_sensitivity}: {why_u}; each draw's rate ε_sel/(2·Δ_u) = "
        f"{rate.numerator}/{rate.denominator}",
        f"measured pairs: ρ·{s2} / {rounds} = {format_decimal(pair_rho, 10)} each; σ² = {l2_squared}/(2·ρ_i) = "
        f"{format_decimal(pair_component.required_variance(), 10)} (rounded up)",
        f"charge: ρ = {format_decimal(rho_one_way, 10)} + {format_decimal(rho_select, 10)} + "
        f"{format_decimal(rho_measure, 10)} = {format_decimal(total, 10)} ≤ {format_decimal(rho, 10)}",
    )
    return SynthPlan(
        spec=spec, sizes=sizes, labels=_labels(spec), candidates=candidates, rounds=rounds, rho=rho,
        one_way_rho=one_way_rho, pair_rho=pair_rho, one_way_sigma2=one_way_component.required_variance(),
        pair_sigma2=pair_component.required_variance(), l2_squared=l2_squared, epsilon_select=epsilon_select,
        score_sensitivity=score_sensitivity, rate=(rate.numerator, rate.denominator), rho_one_way=rho_one_way,
        rho_select=rho_select, rho_measure=rho_measure, charge=Budget(rho=total), exact_plan=exact_plan,
        derivations=derivations,
    )
