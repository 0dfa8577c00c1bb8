"""The plan: everything about a release that follows from the spec alone, before any data is read.

Per statistic: its cells (declared keys and bins, never observed ones), its share of the budget (dpcli.plan.budget),
its noise components (dpcli.plan.sensitivity: each with its L1 sensitivity *and the derivation*, the noise scale and
the error half-width) and, for open keys, its partition selection. The engine and the mechanisms consume this plan
and never recompute a sensitivity, which is what lets ``dpcli plan`` promise exactly what ``dpcli release`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

from dpcli.core.accounting import (
    format_decimal,
    rho_to_pure_epsilon,
    selection_delta,
    selection_threshold,
    zcdp_to_epsilon,
)
from dpcli.errors import InternalError, SpecError
from dpcli.plan.bins import bin_count, check_bins_on_grid
from dpcli.plan.budget import NOTHING_SPENT, cost_text, split_budget
from dpcli.plan.sensitivity import (
    Bounding,
    NoiseComponent,
    Share,
    bounding,
    choice_component,
    components,
    quantile_components,
)
from dpcli.specs.grid import quantile_bins
from dpcli.specs.kinds import KINDS, Family
from dpcli.specs.model import (
    AnyStatistic,
    Frequency,
    Histogram,
    Quantile,
    Spec,
    Statistic,
    TopK,
    counts_persons,
    open_dimensions,
    periodic,
)


@dataclass(frozen=True)
class Selection:
    """Private partition selection of an open-key statistic: an observed entry (a cell with an open key) is released
    only when its noisy count reaches ``threshold``; its released value is that noisy count."""

    threshold: int  # tau
    delta: Fraction  # the delta this selection spends (a rigorous upper bound is at most this)
    dimension: int  # index of the open column in statistic.dimensions
    max_length: int  # released keys are cut to this many characters
    keys: int  # g: new entries one person can bring
    per_key: int  # r: one person's count in one entry
    derivation: str


@dataclass(frozen=True)
class StatisticPlan:
    statistic: Statistic
    epsilon: Fraction  # pure epsilon charged (0 in a zCDP release)
    components: tuple[NoiseComponent, ...]
    cells: int  # declared cells (an open-key statistic: of its declared dimensions only)
    # per dimension: declared keys, or None for numeric bins and for the open dimension (see ``selection``)
    dimension_keys: tuple[tuple[str, ...] | None, ...]
    rho: Fraction = Fraction(0)  # zCDP rho charged (0 in a pure release)
    reported_epsilon: Fraction | None = None  # the output's epsilon column: the share, or rho converted at delta
    bounding: Bounding | None = None  # a person unit's bounds (None: one person = one row)
    selection: Selection | None = None  # open keys: private partition selection

    @property
    def mechanism(self) -> str:
        if self.components and self.components[0].mechanism == "exponential":  # top_k over declared keys
            return "exponential"
        return "discrete_gaussian" if self.statistic.mechanism == "gaussian" else "discrete_laplace"

    def required_selection(self) -> Selection:
        """The partition selection of an open-key statistic."""
        if self.selection is None:
            raise InternalError(f"statistic {self.statistic.name!r} has no partition selection")
        return self.selection

    def component(self, role: str) -> NoiseComponent:
        for c in self.components:
            if c.role == role:
                return c
        raise KeyError(role)


@dataclass(frozen=True)
class Plan:
    spec: Spec
    statistics: tuple[StatisticPlan, ...]
    confidence: Fraction = Fraction(95, 100)  # of every error half-width and interval (the spec's ``confidence:``)
    # a series (issue 26): the periods whose rows the exact aggregates are of (the engine filters rows on their own
    # period field); None for a release that is not a series
    periods: frozenset[int] | None = None

    # Totals are computed once per plan (cached_property writes the instance's __dict__, which a frozen dataclass
    # allows): render and build_table read them per statistic, which made 4,000 statistics take 46 s to print.
    @cached_property
    def epsilon(self) -> Fraction:
        """The pure epsilon the release charges: the exact sum of the statistics' shares (0 for zCDP)."""
        return sum((s.epsilon for s in self.statistics), Fraction(0))

    @cached_property
    def rho(self) -> Fraction:
        """The zCDP rho the release charges (0 for a pure release)."""
        return sum((s.rho for s in self.statistics), Fraction(0))

    @property
    def delta(self) -> Fraction | None:
        """The release's whole delta (the spec's): its partition selections' plus its zCDP conversion's."""
        return self.spec.privacy.delta

    @cached_property
    def selection_delta(self) -> Fraction:
        """The delta the release's partition selections spend (0 without open keys)."""
        return sum((s.selection.delta for s in self.statistics if s.selection is not None), Fraction(0))

    @property
    def conversion_delta(self) -> Fraction | None:
        """The delta at which the zCDP rho is converted: the spec's delta less the selections'."""
        return None if self.delta is None else self.delta - self.selection_delta

    @cached_property
    def epsilon_at_delta(self) -> Fraction | None:
        """The release's (epsilon, delta) guarantee: epsilon for a pure release (its delta is the selections'), rho
        converted at the conversion's delta (with the selections' delta, the spec's delta in all)."""
        if self.rho == 0:
            return self.epsilon
        if self.conversion_delta is None:
            return None
        return zcdp_to_epsilon(self.rho, self.conversion_delta)

    @property
    def frequency_only(self) -> bool:
        """Estimates from a randomized file only (``kind: frequency``): nothing is spent, no noise is drawn."""
        return bool(self.statistics) and all(KINDS[sp.statistic.kind].family is Family.RANDOMIZED
                                             for sp in self.statistics)

    def cost_text(self, cap_delta: Fraction | None = None) -> str:
        """What the release charges, as `release`, `plan` and the report say it (``cost_text`` below); a zCDP rho
        is converted at the spec's delta, else at ``cap_delta`` (the ledger's cap) when one is given."""
        if self.frequency_only:
            return NOTHING_SPENT
        delta = self.delta if self.delta is not None or self.rho == 0 else cap_delta
        return cost_text(self.epsilon, self.rho, delta, self.selection_delta)

    @property
    def dimensions(self) -> tuple[str, ...]:
        return self.spec.dimensions


def _dimension_keys(spec: Spec, stat: Statistic) -> tuple[tuple[str, ...] | None, ...]:
    keys: list[tuple[str, ...] | None] = [None if spec.columns[d].open else spec.columns[d].keys for d in stat.by]
    if isinstance(stat, Histogram | TopK):
        column = spec.columns[stat.column]
        keys.append(None if column.numeric or column.open else column.keys)
    if isinstance(stat, Frequency):
        keys.append(spec.columns[stat.column].keys)
    return tuple(keys)


def _selection(
    path: str, spec: Spec, stat: Statistic, count: NoiseComponent, delta: Fraction, b: Bounding | None
) -> Selection:
    """The threshold of an open-key statistic's partition selection, from its count's noise scale, the entries one
    person can bring (g) and their count in each (r): the smallest tau with g P(Z >= tau - r) <= delta."""
    column = next(d for d in stat.dimensions if spec.columns[d].open)
    persons = counts_persons(stat)
    keys = b.reach if b is not None else 1
    per_key = 1 if (b is None or persons) else b.per_cell
    scale = count.required_scale()
    tau = selection_threshold(scale, keys, per_key, delta)
    spent = selection_delta(scale, keys, per_key, tau)
    who = "one row" if b is None else f"one person ({b.text()})"
    why = (
        f"an entry only {who} holds has a count of at most r={per_key}, and "
        f"{'a row is in' if b is None else 'that person holds'} at most g={keys} such entries; with discrete "
        f"Laplace noise of t={format_decimal(scale, 6)} an entry is released when its "
        f"noisy count is at least τ={tau}: g·P(Z ≥ τ - r) = g·q^(τ-r)/(1+q) ≤ {float(spent):.3g} ≤ "
        f"δ={format_decimal(delta, 6)}, q = e^(-1/t)"
    )
    return Selection(
        tau, delta, stat.dimensions.index(column), spec.columns[column].max_length or 0, keys, per_key, why
    )


def make_plan(spec: Spec, scale: Fraction = Fraction(1)) -> Plan:
    """The plan of a validated spec. Reads no data. Its errors name the spec file, as the loader's do.

    ``scale``: the part of the spec's budget this plan spends (a series' tree block: 1/h of the running totals'
    share; its per-period values under design both: 1 - that share). A series' statistics are derived with the period
    as a leading ``by:`` key (dpcli.plan.series.periodic): under replace a row may move between periods."""
    try:
        return _make_plan(spec, scale)
    except SpecError as exc:
        if spec.source == "<string>":
            raise
        from dpcli.specs.load import printable

        raise exc.in_file(printable(spec.source)) from None


def _make_plan(spec: Spec, scale: Fraction) -> Plan:
    if spec.synth is not None:
        # its statistics are none: a release would publish an empty table under the synth spec's meaning
        raise SpecError("synth", "a synth spec's synthetic CSV is written by `dpcli synth SPEC` (dpcli plan, "
                        "dpcli check and dpcli audit read it too): release publishes a spec's statistics")
    plans = []
    neighbours = spec.privacy.neighbours
    selection_deltas = _split_selection_deltas(spec)
    zcdp = spec.privacy.accounting == "zcdp"
    for i, (stat, whole) in enumerate(zip(spec.statistics, split_budget(spec).shares, strict=True)):
        share = whole * scale
        derived = _seen(spec, stat)  # the sensitivities' view of the statistic
        if not zcdp:
            budget = Share("laplace", share)
        elif stat.mechanism == "gaussian":
            budget = Share("gaussian", share)
        else:  # a Laplace statistic in a zCDP release: epsilon-DP is (epsilon^2/2)-zCDP, so epsilon = sqrt(2 rho)
            budget = Share("laplace", rho_to_pure_epsilon(share))
        path = f"statistics[{i}]"
        cells = 1
        for d in stat.by:
            cells *= 1 if spec.columns[d].open else len(spec.columns[d].keys)
        if isinstance(stat, Histogram):
            cells *= bin_count(spec, stat)
            check_bins_on_grid(path, spec, stat)
        if isinstance(stat, Quantile):
            # a person's bounds reach the cells of by: (cells, so far), never the candidates' bins
            qb = None if spec.privacy.person is None else bounding(spec.privacy.person, derived, cells)
            cells *= quantile_bins(stat, spec.columns[stat.column])
            comps = quantile_components(path, spec, _seen(spec, stat), neighbours, share, zcdp, qb)
            pure = sum((c.epsilon for c in comps), Fraction(0))  # the draws' pure epsilon, also in a zCDP release
            plans.append(StatisticPlan(
                stat, Fraction(0) if zcdp else share, comps, cells, _dimension_keys(spec, stat),
                share if zcdp else Fraction(0), pure if zcdp else share, qb,
            ))
            continue
        if isinstance(stat, TopK):
            cells *= 1 if spec.columns[stat.column].open else len(spec.columns[stat.column].keys)
        if isinstance(stat, Frequency):
            cells *= len(spec.columns[stat.column].keys)
        opened = bool(open_dimensions(stat, spec.columns))
        person = spec.privacy.person
        b = None if person is None else bounding(person, derived, None if opened else cells)
        if isinstance(stat, TopK) and not opened:
            # report-noisy-max: k permute-and-flip draws, pure epsilon-DP on their own (share / k each, or the
            # largest epsilon0 with k epsilon0^2 / 2 <= rho in a zCDP release)
            keys = len(spec.columns[stat.column].keys)  # each cell of by: ranks the column's keys on its own
            comp = choice_component(path, _seen(spec, stat), neighbours, keys, share, zcdp, b)
            plans.append(StatisticPlan(
                stat, Fraction(0) if zcdp else share, (comp,), cells, _dimension_keys(spec, stat),
                share if zcdp else Fraction(0), comp.epsilon * stat.k, b,
            ))
            continue
        comps = components(path, spec, derived, neighbours, budget, b)
        selection = None
        if opened:
            selection = _selection(path, spec, stat, comps[0], selection_deltas[i], b)
        if zcdp:
            delta = spec.privacy.delta
            reported = zcdp_to_epsilon(share, delta) if delta is not None else None
            if stat.mechanism != "gaussian":
                reported = budget.amount  # a Laplace statistic is pure epsilon-DP on its own
            plans.append(StatisticPlan(
                stat, Fraction(0), comps, cells, _dimension_keys(spec, stat), share, reported, b, selection
            ))
        else:
            plans.append(StatisticPlan(
                stat, share, comps, cells, _dimension_keys(spec, stat), Fraction(0), share, b, selection
            ))
    return Plan(spec, tuple(plans), spec.confidence)


def _seen(spec: Spec, stat: AnyStatistic) -> AnyStatistic:
    """A statistic as its sensitivities are derived: a series' with the period as a leading by: key."""
    return stat if spec.series is None else periodic(stat)


def _split_selection_deltas(spec: Spec) -> dict[int, Fraction]:
    """Each open-key statistic's selection delta: named, or privacy.delta split evenly (the loader's rules)."""
    opened = [i for i, s in enumerate(spec.statistics) if open_dimensions(s, spec.columns)]
    delta = spec.privacy.delta
    out: dict[int, Fraction] = {}
    for i in opened:
        named = spec.statistics[i].delta
        if named is None:
            if delta is None:  # the loader requires privacy.delta with open keys
                raise InternalError(f"statistic {spec.statistics[i].name!r} has open keys and no delta")
            named = delta / len(opened)
        out[i] = named
    return out
