"""The plan: everything about a release that follows from the spec alone, before any data is read.

Per statistic: its cells (declared keys and bins, never observed ones), the noise components (a count part and/or
a fixed-point sum part), each with its L1 sensitivity *and the derivation*, its epsilon share, the discrete
Laplace scale and the 95% error half-width. The engine and the mechanisms consume this plan and never recompute
a sensitivity, which is what lets ``dpcli plan`` promise exactly what ``dpcli release`` does.

Sensitivities (L1, in grid units of the column's precision p; L', U' are the bounds on the grid):
- count / count by / histogram: add_remove 1 (one person is in at most one cell); replace 2 for cells (the person
  may move between two cells), and 1 for a count with no ``by:`` (conservative: under replace the number of rows
  is public and its true sensitivity is 0, but dpcli does not publish n unprotected).
- sum, no by: add_remove max(|L'|, |U'|); replace: U' - L' when every row has a value (``impute:`` declared),
  otherwise max(U' - L', max(|L'|, |U'|)) because a changed row can go from a missing value (left out) to any value.
- sum by: add_remove max(|L'|, |U'|); replace L1 2 max(|L'|, |U'|) (a person moves from one cell to another), and
  L2² max(2 max(|L'|, |U'|)², (U' - L')²): the second term is a value going from L' to U' inside one cell, which
  sets the L2 norm whenever the bounds are close in size (every centred mean with ``by:``).
- mean: a noisy centred sum over a noisy count, the statistic's epsilon split evenly between them. Values are
  centred on the grid midpoint c so the sum's sensitivity is about half the width: max(|L'-c|, |U'-c|) under
  add_remove (and the sum-by rules above, centred, under replace); the count part is a count over the rows with a
  value (sensitivity 1, or 2 by cells under replace).
- variance / std: a mean's two parts and the sum of centred squares on their own grid (``square_step``), a third of
  the share each; squares lie in [0, Q], so Q (2Q by cells under replace, L2² 2Q²) (``_variance_components``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

from dpcli.core.accounting import (
    epsilon_delta_to_rho,
    format_decimal,
    format_exact,
    rho_to_pure_epsilon,
    round_up,
    selection_delta,
    selection_threshold,
    zcdp_to_epsilon,
)
from dpcli.errors import SpecError
from dpcli.plan.quantiles import rank_bound, utility_sensitivity
from dpcli.spec.fields import MAX_RELEASE_EPSILON, MAX_RHO, short
from dpcli.spec.kinds import KINDS, Family
from dpcli.spec.model import (
    Column,
    Count,
    EdgeBins,
    Frequency,
    GridBins,
    Histogram,
    PersonUnit,
    Quantile,
    Spec,
    Statistic,
    Sum,
    TopK,
    Variance,
    candidate_grid,
    clamps_persons,
    counts_persons,
    open_dimensions,
    quantile_bins,
)

# The exact samplers take scales whose numerator and denominator fit in 48 bits; larger are rounded *up*.
# Confidence of the published intervals. A mean's interval combines its two parts at (1 + c) / 2 each, so by the
# union bound the box holds the truth with probability at least c.
CONFIDENCE = 0.95
SCALE_LIMIT = 2**48
MAX_SCALE = Fraction(2**40)
MAX_VARIANCE = Fraction(2**46)  # the exact Gaussian sampler takes sigma^2 with 48-bit numerator and denominator


@dataclass(frozen=True)
class NoiseComponent:
    """One noisy vector of a statistic: its count part or its (fixed-point) sum part.

    Laplace components carry ``epsilon`` and ``scale`` (t = L1 sensitivity / epsilon); Gaussian components carry
    ``rho`` and ``variance`` (sigma^2 = L2 sensitivity^2 / (2 rho)). Both in grid units.
    """

    role: str  # "count" | "sum"
    sensitivity: int  # L1, in grid units (1 for counts)
    derivation: str  # why: the neighbour relation, bounds and unit behind the number
    epsilon: Fraction  # Laplace: the epsilon this part uses (0 for Gaussian)
    scale: Fraction | None  # Laplace scale in grid units, >= sensitivity / epsilon (None for Gaussian)
    unit: Fraction  # value of one grid unit (1 for counts, the column precision for sums)
    offset: int = 0  # centring (grid units) subtracted before summing; mean only
    mechanism: str = "discrete_laplace"
    rho: Fraction = Fraction(0)  # Gaussian: the rho this part uses
    variance: Fraction | None = None  # Gaussian: sigma^2 in grid units, >= l2_squared / (2 rho)
    l2_squared: int = 0  # Gaussian: the squared L2 sensitivity
    candidates: int = 0  # exponential (a quantile level): the candidates it chooses among
    choices: int = 0  # exponential (top_k): the keys it chooses among
    draws: int = 0  # exponential (top_k): the keys it chooses (k), one draw of ``epsilon`` each

    def halfwidth(self, confidence: float) -> int:
        """Smallest k with P(|noise| <= k) >= confidence (grid units). For the exponential mechanism (``scale`` its
        temperature): of a quantile level, how far below the best utility the released candidate's may fall
        (utility units: ``unit`` rows each); of a top_k, the count gap: with that probability every draw's key has a
        count within k of the largest count left at that draw."""
        if self.mechanism == "exponential":
            assert self.scale is not None
            if self.draws:
                return choice_gap(self.scale, self.choices, self.draws, confidence)
            return rank_bound(self.scale, self.candidates, confidence)
        if self.mechanism == "discrete_gaussian":
            assert self.variance is not None
            return gaussian_halfwidth(self.variance, confidence)
        assert self.scale is not None
        return laplace_halfwidth(self.scale, confidence)

    @property
    def parameter_text(self) -> str:
        """The noise parameter as a person reads it: t for Laplace, sigma for Gaussian."""
        if self.mechanism == "discrete_gaussian":
            assert self.variance is not None
            return f"σ={math.sqrt(self.variance):.6g}"
        assert self.scale is not None
        return f"t={format_decimal(self.scale, 6)}"


@dataclass(frozen=True)
class Bounding:
    """A person unit's contribution bounds as one statistic sees them (dpcli.engine.persons applies them)."""

    max_rows: int  # K: rows kept per person, chosen once per release
    groups: int | None  # G as declared: cells of this statistic one person keeps (None: not bounded by cells)
    rows_per_group: int | None  # R as declared: rows of one person in one cell (None: only K)
    reach: int  # g: cells one person can change (min(G, K, the cells); 1 without cells)
    per_cell: int  # r: rows of one person in one cell (min(R, K))
    rows: int  # rows of one person the statistic can see: min(K, g r), K without cells
    squares: int  # the largest sum of squared rows per cell: the count vector's squared L2 norm

    def text(self) -> str:
        parts = [f"K={self.max_rows}"]
        if self.groups is not None:
            parts.append(f"G={self.groups}")
        if self.rows_per_group is not None:
            parts.append(f"R={self.rows_per_group}")
        return ", ".join(parts)


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


NOTHING_SPENT = "nothing (estimates from a randomized file)"


def cost_text(epsilon: Fraction, rho: Fraction, delta: Fraction | None, selection_delta: Fraction) -> str:
    """The one wording of a release's guarantee (the CLI's summary, `plan`, the report and the Markdown summary, from
    a plan or from a sidecar's numbers): pure ``ε=…`` (with ``δ=…`` when partition selections spend one), or
    ``ρ=… zCDP`` with its (ε, δ) at ``delta`` (the release's whole delta: ρ is converted at what the selections
    leave of it), or without when no delta is known."""
    if rho == 0:
        sel = f", δ={format_decimal(selection_delta, 6)}" if selection_delta else ""
        return f"ε={format_decimal(epsilon, 10)}{sel}"
    conv = ""
    if delta is not None and delta > selection_delta:
        at = zcdp_to_epsilon(rho, delta - selection_delta)
        conv = f" (≈ ε={format_decimal(at, 6)} at δ={format_decimal(delta, 6)})"
    return f"ρ={format_decimal(rho, 10)} zCDP{conv}"


def laplace_halfwidth(scale: Fraction, confidence: float = CONFIDENCE) -> int:
    """For X ~ discrete Laplace(t): P(|X| > k) = 2 q^(k+1) / (1 + q), q = exp(-1/t). Smallest k reaching confidence."""
    t = float(scale)
    q = math.exp(-1.0 / t)
    alpha = 1.0 - confidence
    k = max(0, math.ceil(t * math.log(2.0 / (alpha * (1.0 + q)))) - 1)
    # guard the float step: move k until it is the smallest that satisfies the bound. q^k is computed as
    # exp(-k/t), not q ** k: at t ~ 1e12 the rounded q carries a relative error ~1e-4 in log q, and stepping k one by
    # one across that gap took ~15 s per statistic (a release or plan near the 2^40 scale limit seemed to hang)
    while k > 0 and 2 * math.exp(-k / t) / (1 + q) <= alpha:
        k -= 1
    while 2 * math.exp(-(k + 1) / t) / (1 + q) > alpha:
        k += 1
    return k


def gaussian_halfwidth(variance: Fraction, confidence: float = CONFIDENCE) -> int:
    """Smallest k with P(|X| <= k) >= confidence for X ~ discrete Gaussian(sigma^2 = variance)."""
    v = float(variance)
    sigma = math.sqrt(v)
    if sigma > 2000:  # the discrete and continuous Gaussians agree to far below a unit here
        from statistics import NormalDist

        return math.ceil(NormalDist().inv_cdf((1 + confidence) / 2) * sigma)
    reach = int(12 * sigma) + 12
    xs = range(reach + 1)
    weights = [math.exp(-(x * x) / (2 * v)) for x in xs]
    total = weights[0] + 2 * sum(weights[1:])
    mass = weights[0]
    k = 0
    while mass / total < confidence:
        k += 1
        mass += 2 * weights[k]
    return k


def conservative_variance(l2_squared: int, rho: Fraction) -> Fraction:
    """sigma^2 = l2_squared / (2 rho), rounded up (never down) to a fraction the exact sampler accepts."""
    return conservative_scale(l2_squared, 2 * rho)


def conservative_scale(sensitivity: int, epsilon: Fraction) -> Fraction:
    """sensitivity/epsilon, rounded up (never down) to a fraction the exact sampler accepts."""
    exact = Fraction(sensitivity) / epsilon
    if exact.numerator <= SCALE_LIMIT and exact.denominator <= SCALE_LIMIT:
        return exact
    # max(1, ...): a scale past SCALE_LIMIT cannot be represented at all; it is rounded up to an integer and then
    # refused by the MAX_SCALE check (a zero denominator would be an internal error instead of exit 2)
    den = max(1, SCALE_LIMIT // (math.ceil(exact) + 1))
    return round_up(exact, den)


@dataclass(frozen=True)
class Budget:
    """The release's budget and each statistic's share of it, exact, in the release's unit: epsilon (pure) or rho
    (zCDP)."""

    unit: str
    total: Fraction
    shares: tuple[Fraction, ...]


def split_budget(spec: Spec) -> Budget:
    """Split the spec's budget over its statistics (the loader has checked how they share it:
    dpcli.spec.model._privacy).

    A zCDP release's rho is ``privacy.rho``, or ``privacy.epsilon`` with ``delta`` converted to the largest rho whose
    (epsilon, delta) conversion fits (closed form, rounded down), or, with neither, the sum of the named rhos. Named
    shares (every statistic's epsilon or rho) are taken as they are and may add up to less than the budget, never
    more; otherwise the budget is split by weight (default 1), exactly.
    """
    p = spec.privacy
    if spec.statistics and all(KINDS[st.kind].family is Family.RANDOMIZED for st in spec.statistics):
        # estimates from a randomized file: post-processing of published data (the loader allows nothing else)
        return Budget("epsilon", Fraction(0), tuple(Fraction(0) for _ in spec.statistics))
    if p.accounting == "zcdp":
        budget = p.rho
        if budget is None and p.epsilon is not None and p.delta is not None:
            # the conversion gets what the partition selections leave of delta (the loader keeps it positive)
            named = sum((s.delta for s in spec.statistics if s.delta is not None), Fraction(0))
            budget = epsilon_delta_to_rho(p.epsilon, p.delta - named)
        return _split("rho", budget, spec.statistics, MAX_RHO)
    return _split("epsilon", p.epsilon, spec.statistics, MAX_RELEASE_EPSILON)


def _split(unit: str, budget: Fraction | None, stats: tuple[Statistic, ...], maximum: Fraction) -> Budget:
    named = [getattr(s, unit) for s in stats]
    if None not in named:
        shares = tuple(named)
        total = sum(shares, Fraction(0))
        if budget is None:
            if total > maximum:
                raise SpecError(
                    "statistics",
                    f"the statistics' {unit}s add up to {short(total)}, over the maximum of {short(maximum)}",
                )
            return Budget(unit, total, shares)
        if total > budget:
            raise SpecError(
                "statistics",
                f"the statistics' {unit}s add up to {short(total)}, more than privacy.{unit} = {short(budget)}",
            )
        return Budget(unit, budget, shares)
    if budget is None:  # the loader requires a budget when a share is not named: never reached
        raise SpecError(f"privacy.{unit}", f"required field is missing (or give every statistic its own {unit})")
    weights = [s.weight if s.weight is not None else Fraction(1) for s in stats]
    total_w = sum(weights, Fraction(0))
    return Budget(unit, budget, tuple(budget * w / total_w for w in weights))


@dataclass(frozen=True)
class _Budget:
    """A component's share: epsilon for Laplace, rho for Gaussian."""

    mechanism: str
    amount: Fraction

    def half(self) -> _Budget:
        return _Budget(self.mechanism, self.amount / 2)


def _component(
    stat_path: str, role: str, sensitivity: int, derivation: str, budget: _Budget, unit: Fraction, offset: int = 0,
    l2_squared: int | None = None,
) -> NoiseComponent:
    """A noise component; ``l2_squared`` defaults to sensitivity^2 (one cell changes)."""
    if budget.amount <= 0:
        # conversions round down (sqrt(2 rho) for a Laplace share of a zCDP budget, rho from a tiny epsilon with delta):
        # a tiny share can round to 0, which has no finite noise scale
        raise SpecError(stat_path, "its share of the budget is too small to plan (it rounds to 0): raise it")
    if budget.mechanism == "gaussian":
        l2 = sensitivity * sensitivity if l2_squared is None else l2_squared
        variance = conservative_variance(l2, budget.amount)
        if variance > MAX_VARIANCE:
            raise SpecError(
                stat_path,
                f"noise variance {format_decimal(variance, 6)} grid steps² is too large: "
                "use a coarser precision, tighter bounds or a larger rho",
            )
        return NoiseComponent(
            role, sensitivity, derivation, Fraction(0), None, unit, offset, "discrete_gaussian", budget.amount,
            variance, l2,
        )
    scale = conservative_scale(sensitivity, budget.amount)
    if scale > MAX_SCALE:
        raise SpecError(
            stat_path,
            f"noise scale {format_decimal(scale, 6)} grid steps is too large: "
            "use a coarser precision, tighter bounds or a larger epsilon",
        )
    return NoiseComponent(role, sensitivity, derivation, budget.amount, scale, unit, offset)


def bounding(unit: PersonUnit, stat: Statistic, cells: int | None) -> Bounding:
    """What one person can reach in a statistic with ``cells`` cells (None: open keys, unbounded; 1: no cells)."""
    k = unit.max_rows
    r = min(k, unit.max_rows_per_group or k)
    if not stat.dimensions:
        return Bounding(k, unit.max_groups, unit.max_rows_per_group, 1, k, k, k * k)
    g = min(k, unit.max_groups or k, cells if cells is not None else k)
    rows = min(k, g * r)
    squares = (rows // r) * r * r + (rows % r) ** 2  # as many full cells of r rows as the rows allow
    return Bounding(k, unit.max_groups, unit.max_rows_per_group, g, r, rows, squares)


def _reach_text(b: Bounding) -> str:
    """How far one person reaches, for the derivations."""
    if b.reach == 1 and b.rows == b.max_rows:
        return f"at most K={b.max_rows} rows"
    return f"at most {b.rows} rows (K={b.max_rows}), in at most g={b.reach} cells, r={b.per_cell} in each"


def _person_count_component(
    path: str, stat: Statistic, neighbours: str, budget: _Budget, what: str, b: Bounding, persons: bool
) -> NoiseComponent:
    """A count under a person unit: of rows (each cell gains at most r, all cells at most min(K, g r)) or of persons
    (each of at most g cells gains 1). Under replace the person's rows leave and another's arrive: counts are
    non-negative, so L1 doubles and L2² at most doubles (||b - a||² <= ||a||² + ||b||² when a·b >= 0)."""
    if persons:
        l1, l2 = b.reach, b.reach
        reach = f"one person is counted once in at most g={b.reach} cell(s)" if stat.dimensions else (
            "one person is counted at most once"
        )
    else:
        l1, l2 = b.rows, b.squares
        reach = f"one person has {_reach_text(b)}"
    if neighbours == "add_remove" or not stat.dimensions:
        why = f"add/remove one person ({b.text()}): {reach}, so {what} changes by L1 {l1} (L2² {l2})"
        if neighbours == "replace":
            why = f"replace one person ({b.text()}): {reach}, so {what} changes by at most {l1}"
        return _component(path, "count", l1, why, budget, Fraction(1), l2_squared=l2)
    why = (
        f"replace one person ({b.text()}): {reach}; their cells lose and another's gain as much: L1 2×{l1} = "
        f"{2 * l1}, L2² 2×{l2} = {2 * l2} (counts are non-negative)"
    )
    return _component(path, "count", 2 * l1, why, budget, Fraction(1), l2_squared=2 * l2)


def _person_sum_component(
    path: str, stat: Statistic, column: Column, neighbours: str, budget: _Budget, centred: bool, b: Bounding,
) -> NoiseComponent:
    """A sum under a person unit. ``clamp: row``: each row's value in [L, U], one person's rows as in the count of
    rows, so each bound scales by the rows (L1 min(K, g r) max(|L|, |U|), L2² squares max²). ``clamp: person``:
    each person's total in a cell is clamped to [L, U], so the person changes g cells by max(|L|, |U|) each. Under
    replace: L1 doubles; L2² doubles when every value has one sign (a·b >= 0), else quadruples
    (||b - a|| <= ||a|| + ||b||); without cells, a replaced person changes the one sum by at most
    K max(U - L, max(|L|, |U|)) (row clamp) or max(U - L, max(|L|, |U|)) (person clamp)."""
    glo, ghi = column.grid_bounds
    p = column.precision
    assert p is not None
    offset = (glo + ghi) // 2 if centred else 0
    lo, hi = glo - offset, ghi - offset
    biggest, width = max(abs(lo), abs(hi)), hi - lo
    per_person = clamps_persons(stat)
    unit_text = "" if p == 1 else f" (grid step {format_exact(p)}: bounds {glo}..{ghi} steps)"
    clamped = "each person's total in a cell clamped" if per_person else "each row clamped"
    bounds = f"{clamped} to [{format_exact(glo * p)}, {format_exact(ghi * p)}]{unit_text}"
    if centred:
        bounds += f", centred on {format_exact(offset * p)}"
    span = f"[{format_exact(lo * p)}, {format_exact(hi * p)}]"
    times, squares = (b.reach, b.reach) if per_person else (b.rows, b.squares)
    if per_person:
        what = f"g={b.reach} totals of the person (one per cell)" if stat.dimensions else "the person's one total"
    else:
        what = _reach_text(b)
    if not stat.dimensions:
        many = 1 if per_person else b.max_rows
        if neighbours == "add_remove":
            l1 = many * biggest
            each = "" if per_person else " each"
            why = f"add/remove one person ({b.text()}): {what}, of at most max(|L|, |U|){each}, of {span}; {bounds}"
        else:
            l1 = many * max(width, biggest)
            why = (
                f"replace one person ({b.text()}): {what}, each of the leaving and arriving totals of at most "
                f"max(U - L, max(|L|, |U|)), of {span}; {bounds}"
            )
        return _component(path, "sum", l1, why, budget, p, offset, l2_squared=l1 * l1)
    l1, l2 = times * biggest, squares * biggest * biggest
    if neighbours == "add_remove":
        why = (
            f"add/remove one person ({b.text()}): {what} of at most max(|L|, |U|), of {span}: L1 {l1}, L2² {l2}; "
            f"{bounds}"
        )
        return _component(path, "sum", l1, why, budget, p, offset, l2_squared=l2)
    one_sign = lo >= 0 or hi <= 0
    factor = 2 if one_sign else 4
    why = (
        f"replace one person ({b.text()}): {what} leave and as many arrive: L1 2×{l1}, L2² {factor}×{l2} "
        f"({'values of one sign' if one_sign else 'values of both signs: ||b - a|| <= ||a|| + ||b||'}), of {span}; "
        f"{bounds}"
    )
    return _component(path, "sum", 2 * l1, why, budget, p, offset, l2_squared=factor * l2)


def _count_component(path: str, stat: Statistic, neighbours: str, budget: _Budget, what: str) -> NoiseComponent:
    has_cells = bool(stat.dimensions)
    if neighbours == "add_remove":
        why = f"add/remove one row changes {'one cell of ' if has_cells else ''}{what} by 1"
        return _component(path, "count", 1, why, budget, Fraction(1))
    if has_cells:
        why = f"replace one row: it can leave one cell and join another of {what} (L1 1 + 1; L2² 1 + 1)"
        return _component(path, "count", 2, why, budget, Fraction(1), l2_squared=2)
    why = f"replace one row changes {what} by at most 1 (n itself is not treated as public)"
    return _component(path, "count", 1, why, budget, Fraction(1))


def _sum_component(
    path: str, stat: Statistic, column: Column, neighbours: str, budget: _Budget, centred: bool
) -> NoiseComponent:
    glo, ghi = column.grid_bounds
    p = column.precision
    assert p is not None
    offset = (glo + ghi) // 2 if centred else 0
    lo, hi = glo - offset, ghi - offset
    biggest = max(abs(lo), abs(hi))
    unit_text = "" if p == 1 else f" (grid step {format_exact(p)}: bounds {glo}..{ghi} steps)"
    b = f"clamped to [{format_exact(glo * p)}, {format_exact(ghi * p)}]{unit_text}"
    if centred:
        b += f", centred on {format_exact(offset * p)}"
    span = f"[{format_exact(lo * p)}, {format_exact(hi * p)}]"
    if neighbours == "add_remove":
        why = f"add/remove one row changes the sum by at most max(|L|, |U|) of {span}; {b}"
        return _component(path, "sum", biggest, why, budget, p, offset)
    if stat.by:
        # Two kinds of neighbour set the two norms: a row moving from one cell to another changes two cells by up to
        # max(|L|, |U|) each (L1 2 max, L2² 2 max²); a row whose value goes from L to U inside its cell changes one
        # cell by U - L (L1 U - L <= 2 max, but L2² (U - L)², larger than 2 max² when the bounds are close in size).
        move_l2, same_l2 = 2 * biggest * biggest, (hi - lo) * (hi - lo)
        l2_squared = max(move_l2, same_l2)
        l2_pair = (
            "a row moving between cells" if move_l2 >= same_l2 else "a row whose value goes from L to U in its cell"
        )
        why = (
            f"replace one row: L1 2 max(|L|, |U|) when it leaves one cell and joins another (≥ U - L, the change "
            f"inside one cell); L2² max(2 max², (U - L)²) = {l2_squared}, set by {l2_pair}; of {span}; {b}"
        )
        return _component(path, "sum", 2 * biggest, why, budget, p, offset, l2_squared=l2_squared)
    if column.impute is not None:
        why = f"replace one row changes its value within {span}: U - L; {b}"
        return _component(path, "sum", hi - lo, why, budget, p, offset)
    why = (
        f"replace one row: U - L, or max(|L|, |U|) when a missing value (left out) becomes a value, of {span}; {b}"
    )
    return _component(path, "sum", max(hi - lo, biggest), why, budget, p, offset)


def _dimension_keys(spec: Spec, stat: Statistic) -> tuple[tuple[str, ...] | None, ...]:
    keys: list[tuple[str, ...] | None] = [None if spec.columns[d].open else spec.columns[d].keys for d in stat.by]
    if isinstance(stat, Histogram | TopK):
        column = spec.columns[stat.column]
        keys.append(None if column.numeric or column.open else column.keys)
    if isinstance(stat, Frequency):
        keys.append(spec.columns[stat.column].keys)
    return tuple(keys)


def bin_count(spec: Spec, stat: Histogram) -> int:
    """Bins of a histogram: its numeric bins or declared keys (1 for an open column: its keys are selected)."""
    column = spec.columns[stat.column]
    if column.open:
        return 1
    return stat.bins.count if column.numeric and stat.bins is not None else len(column.keys)


def _selection(
    path: str, spec: Spec, stat: Statistic, count: NoiseComponent, delta: Fraction, b: Bounding | None
) -> Selection:
    """The threshold of an open-key statistic's partition selection, from its count's noise scale, the entries one
    person can bring (g) and their count in each (r): the smallest tau with g P(Z >= tau - r) <= delta."""
    column = next(d for d in stat.dimensions if spec.columns[d].open)
    persons = counts_persons(stat)
    keys = b.reach if b is not None else 1
    per_key = 1 if (b is None or persons) else b.per_cell
    assert count.scale is not None
    tau = selection_threshold(count.scale, keys, per_key, delta)
    spent = selection_delta(count.scale, keys, per_key, tau)
    who = "one row" if b is None else f"one person ({b.text()})"
    why = (
        f"an entry only {who} holds has a count of at most r={per_key}, and "
        f"{'a row is in' if b is None else 'that person holds'} at most g={keys} such entries; with discrete "
        f"Laplace noise of t={format_decimal(count.scale, 6)} an entry is released when its "
        f"noisy count is at least τ={tau}: g·P(Z ≥ τ - r) = g·q^(τ-r)/(1+q) ≤ {float(spent):.3g} ≤ "
        f"δ={format_decimal(delta, 6)}, q = e^(-1/t)"
    )
    return Selection(
        tau, delta, stat.dimensions.index(column), spec.columns[column].max_length or 0, keys, per_key, why
    )


def _check_bins_on_grid(path: str, spec: Spec, stat: Histogram) -> None:
    """Every bin must hold at least one point of the column's fixed-point grid, else it could never be counted."""
    column = spec.columns[stat.column]
    bins = stat.bins
    if not column.numeric or bins is None:
        return
    p = column.precision
    assert p is not None
    if isinstance(bins, GridBins):
        if bins.step < p:
            raise SpecError(f"{path}.bins.step", f"bins narrower than the column's precision {format_exact(p)}")
        return
    thresholds = [-((-e / p).numerator // (e / p).denominator) for e in bins.edges]
    for j in range(1, len(thresholds)):
        if thresholds[j] <= thresholds[j - 1]:
            raise SpecError(f"{path}.bins[{j}]", f"bin narrower than the column's precision {format_exact(p)}")


def make_plan(spec: Spec) -> Plan:
    """The plan of a validated spec. Reads no data. Its errors name the spec file, as the loader's do."""
    try:
        return _make_plan(spec)
    except SpecError as exc:
        if spec.source == "<string>":
            raise
        from dpcli.spec.model import printable

        raise exc.in_file(printable(spec.source)) from None


def _make_plan(spec: Spec) -> Plan:
    plans = []
    neighbours = spec.privacy.neighbours
    selection_deltas = _split_selection_deltas(spec)
    zcdp = spec.privacy.accounting == "zcdp"
    for i, (stat, share) in enumerate(zip(spec.statistics, split_budget(spec).shares, strict=True)):
        if not zcdp:
            budget = _Budget("laplace", share)
        elif stat.mechanism == "gaussian":
            budget = _Budget("gaussian", share)
        else:  # a Laplace statistic in a zCDP release: epsilon-DP is (epsilon^2/2)-zCDP, so epsilon = sqrt(2 rho)
            budget = _Budget("laplace", rho_to_pure_epsilon(share))
        path = f"statistics[{i}]"
        cells = 1
        for d in stat.by:
            cells *= 1 if spec.columns[d].open else len(spec.columns[d].keys)
        if isinstance(stat, Histogram):
            cells *= bin_count(spec, stat)
            _check_bins_on_grid(path, spec, stat)
        if isinstance(stat, Quantile):
            cells *= quantile_bins(stat, spec.columns[stat.column])
            comps = _quantile_components(path, spec, stat, neighbours, share, zcdp)
            pure = sum((c.epsilon for c in comps), Fraction(0))  # the draws' pure epsilon, also in a zCDP release
            plans.append(StatisticPlan(
                stat, Fraction(0) if zcdp else share, comps, cells, _dimension_keys(spec, stat),
                share if zcdp else Fraction(0), pure if zcdp else share,
            ))
            continue
        if isinstance(stat, TopK):
            cells *= 1 if spec.columns[stat.column].open else len(spec.columns[stat.column].keys)
        if isinstance(stat, Frequency):
            cells *= len(spec.columns[stat.column].keys)
        opened = bool(open_dimensions(stat, spec.columns))
        person = spec.privacy.person
        b = None if person is None else bounding(person, stat, None if opened else cells)
        if isinstance(stat, TopK) and not opened:
            # report-noisy-max: k permute-and-flip draws, pure epsilon-DP on their own (share / k each, or the
            # largest epsilon0 with k epsilon0^2 / 2 <= rho in a zCDP release)
            comp = _choice_component(path, stat, neighbours, cells, share, zcdp, b)
            plans.append(StatisticPlan(
                stat, Fraction(0) if zcdp else share, (comp,), cells, _dimension_keys(spec, stat),
                share if zcdp else Fraction(0), comp.epsilon * stat.k, b,
            ))
            continue
        comps = _components(path, spec, stat, neighbours, budget, b)
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


def _quantile_components(
    path: str, spec: Spec, stat: Quantile, neighbours: str, share: Fraction, zcdp: bool
) -> tuple[NoiseComponent, ...]:
    """One permute-and-flip draw per level, each with an even share of the statistic's budget: epsilon / k in a pure
    release; in a zCDP release rho / k, whose draw is eps0-DP with eps0 = sqrt(2 rho / k) rounded down (an eps0-DP
    mechanism is eps0^2/2-zCDP; permute-and-flip is not claimed bounded-range, so the exponential mechanism's
    eps0^2/8 of Cesar & Rogers 2021 is not used). The temperature t = 2 D / eps0 is rounded up (never down) onto the
    sampler's domain, numerator and denominator <= 2**48, and at most MAX_SCALE."""
    column = spec.columns[stat.column]
    _, spacing, candidates = candidate_grid(column, stat.step)
    p = column.precision
    assert p is not None
    k = len(stat.levels)
    paid = share * (1 - stat.interval_share) if stat.interval_share is not None else share
    each = paid / k
    eps0 = rho_to_pure_epsilon(each) if zcdp else each
    if eps0 <= 0:
        raise SpecError(path, "its share of the budget is too small to plan (it rounds to 0): raise it")
    grid = f"{candidates} candidates {format_exact(column.grid_bounds[0] * p)}, "
    grid += f"{format_exact((column.grid_bounds[0] + spacing) * p)}, ... (step {format_exact(spacing * p)})"
    out = []
    for q in stat.levels:
        sensitivity, why = utility_sensitivity(q, neighbours, bool(stat.by))
        scale = conservative_scale(2 * sensitivity, eps0)
        if scale > MAX_SCALE:
            raise SpecError(path, f"its exponential mechanism's scale {format_decimal(scale, 6)} is too large: "
                                  "raise its epsilon")
        why += f"; {grid}; permute-and-flip, c accepted with probability exp(-(best - u(c))/t), t = 2×{sensitivity}/ε"
        out.append(NoiseComponent(
            f"q={format_exact(q)}", sensitivity, why, eps0, scale, Fraction(1, q.denominator),
            mechanism="exponential", rho=each if zcdp else Fraction(0), candidates=candidates,
        ))
    if stat.interval_share is not None:
        out.extend(_interval_components(path, stat, neighbours, share * stat.interval_share, zcdp, grid, candidates))
    return tuple(out)


def _interval_components(
    path: str, stat: Quantile, neighbours: str, share: Fraction, zcdp: bool, grid: str, candidates: int
) -> list[NoiseComponent]:
    """A quantile's value-unit intervals (dpcli.plan.quantiles, "Value-unit intervals"): the interval share split evenly
    over a noisy count of the rows with a value (Laplace; in zCDP its part's rho as epsilon = sqrt(2 rho)) and two
    permute-and-flip draws per level (in zCDP eps0 = sqrt(2 rho) rounded down, as a level's). Their scale (rows) is
    rounded up to a dyadic rational with a 24-bit numerator (dpcli.plan.quantiles.interval_scale), so that the draws'
    temperature scale * D, D the levels' public grid, is a value the sampler takes whatever the noisy count."""
    from dataclasses import replace

    from dpcli.plan.quantiles import INTERVAL_COUNT, interval_scale, interval_scale_factor

    part = share / (2 * len(stat.levels) + 1)
    budget = _Budget("laplace", rho_to_pure_epsilon(part) if zcdp else part)
    count = _count_component(path, stat, neighbours, budget, f"the count of rows with a {stat.column}")
    out = [replace(count, role=INTERVAL_COUNT, rho=part if zcdp else Fraction(0))]
    eps0 = rho_to_pure_epsilon(part) if zcdp else part
    factor = interval_scale_factor(neighbours, bool(stat.by))
    if eps0 <= 0 or Fraction(2 * factor) / eps0 > MAX_SCALE:
        raise SpecError(path, "its interval share is too small to plan: raise it or its epsilon")
    scale = interval_scale(Fraction(2 * factor) / eps0)
    if scale > MAX_SCALE:
        raise SpecError(path, "its interval share is too small to plan: raise it or its epsilon")
    why = (
        f"the rank distance to level a/b, -max(0, a·n - b·through(c), b·lt(c) - a·n) on the rows rounded down to the "
        f"candidates, changes by at most {'2' if factor == 2 else ''}b per neighbour; {grid}; permute-and-flip, c "
        f"accepted with probability exp(-(best - v(c))/(b·t)), t = 2×{factor}/ε rows; levels q ∓ (rank bound)/"
        f"(n^ - e_n) from the noisy count, rounded outwards onto a public grid"
    )
    out.extend(
        NoiseComponent(
            f"q={format_exact(q)} {side}", factor, why, eps0, scale, Fraction(1), mechanism="exponential",
            rho=part if zcdp else Fraction(0), candidates=candidates,
        )
        for q in stat.levels
        for side in ("low", "high")
    )
    return out


def _split_selection_deltas(spec: Spec) -> dict[int, Fraction]:
    """Each open-key statistic's selection delta: named, or privacy.delta split evenly (the loader's rules)."""
    opened = [i for i, s in enumerate(spec.statistics) if open_dimensions(s, spec.columns)]
    delta = spec.privacy.delta
    out: dict[int, Fraction] = {}
    for i in opened:
        named = spec.statistics[i].delta
        if named is None:
            assert delta is not None  # the loader requires privacy.delta with open keys
            named = delta / len(opened)
        out[i] = named
    return out


def _components(
    path: str, spec: Spec, stat: Statistic, neighbours: str, budget: _Budget, b: Bounding | None
) -> tuple[NoiseComponent, ...]:
    """A statistic's noise components (a mean: half its share to the centred sum, half to its count)."""
    persons = counts_persons(stat) or clamps_persons(stat)
    if isinstance(stat, Frequency):
        # no noise: the randomized file was paid for by `dpcli randomize` (dpcli.mechanisms.randomized_response)
        return ()
    if isinstance(stat, (Count, Histogram, TopK)):  # a top_k here has open keys: ranked after their selection
        what = "the count" if isinstance(stat, Count) else "the histogram" if isinstance(stat, Histogram) else (
            "the counts of the keys (ranked after their partition selection)"
        )
        if b is not None:
            return (_person_count_component(path, stat, neighbours, budget, what, b, persons),)
        return (_count_component(path, stat, neighbours, budget, what),)
    column = spec.columns[stat.column]
    if isinstance(stat, Variance):  # a person unit is refused by the loader
        return _variance_components(path, stat, column, neighbours, budget)
    if isinstance(stat, Sum):
        if b is not None:
            return (_person_sum_component(path, stat, column, neighbours, budget, False, b),)
        return (_sum_component(path, stat, column, neighbours, budget, centred=False),)
    half = budget.half()
    if b is not None:
        counted = f"the count of {'persons' if persons else 'rows'} with a {column.name}"
        return (
            _person_sum_component(path, stat, column, neighbours, half, True, b),
            _person_count_component(path, stat, neighbours, half, counted, b, persons),
        )
    return (
        _sum_component(path, stat, column, neighbours, half, centred=True),
        _count_component(path, stat, neighbours, half, f"the count of rows with a {column.name}"),
    )


# ---------------------------------------------------------------------------------------------------------------
# top_k and mode over declared keys: report-noisy-max (docs/spec.md, "Top-k and mode"; drawn in
# dpcli/mechanisms/topk.py)


def _choice_component(
    path: str, stat: TopK, neighbours: str, keys: int, share: Fraction, zcdp: bool, b: Bounding | None
) -> NoiseComponent:
    """Permute-and-flip on the keys' counts, peeled k times. Utility: a key's count; its sensitivity D is what one
    neighbour changes one count by (1 row, or r = min(K, R) rows of a person). Under add_remove the counts only grow
    (or only shrink) together, a monotone utility: each draw accepting a key with probability exp(-eps0 (best - u) /
    D) is eps0-DP (McKenna & Sheldon 2020, Theorem 1, and Remark 1 for a monotone quality score, as OpenDP's proof of
    its permute-and-flip top-k cites them: d/scale for a monotone metric, 2d/scale otherwise); under replace one count
    may grow while another shrinks: exp(-eps0 (best - u) / (2 D)). In zCDP a draw is eps0^2 / 2 (pure eps0-DP;
    permute-and-flip is not claimed bounded-range). The temperature t (the component's scale) is factor D / eps0,
    rounded up."""
    k = stat.k
    if zcdp:
        per_draw = rho_to_pure_epsilon(share / k)  # the largest eps0 with k eps0^2 / 2 <= rho, rounded down
        cost = f"k={k} draws of ε0={format_decimal(per_draw, 6)} each: k·ε0²/2 ≤ ρ={format_decimal(share, 6)}"
    else:
        per_draw = share / k
        each = format_decimal(per_draw, 6)
        cost = f"k={k} draws of ε0 = ε/k = {each} each" if k > 1 else f"one draw of ε0 = ε = {each}"
    sensitivity = 1 if b is None else b.per_cell
    who = "one row" if b is None else f"one person ({b.text()}): at most r={b.per_cell} rows in a key"
    if neighbours == "add_remove":
        factor = 1
        why = (
            f"add/remove {who} changes a key's count by at most D={sensitivity}, every count in the same direction "
            f"(a monotone utility): permute-and-flip, a key accepted with probability exp(-ε0·(best - count) / D)"
        )
    else:
        factor = 2
        why = (
            f"replace {who} can lower one key's count by D={sensitivity} and raise another's (not monotone): "
            f"permute-and-flip, a key accepted with probability exp(-ε0·(best - count) / (2D))"
        )
    comp = _component(path, "choice", factor * sensitivity, f"{why}; {cost}", _Budget("laplace", per_draw),
                      Fraction(1))
    return dataclasses.replace(comp, sensitivity=sensitivity, mechanism="exponential", choices=keys, draws=k)


def choice_gap(temperature: Fraction, keys: int, draws: int, confidence: float = CONFIDENCE) -> int:
    """The smallest h such that, with probability >= confidence, each of ``draws`` draws picks a key whose count is
    within h of the largest count left at that draw. A key whose count is g below that largest is picked with
    probability at most exp(-g / t) (its chance to be accepted at all), so draw j (m - j keys left) misses by more
    than h with probability at most (m - j - 1) exp(-(h + 1) / t); a union bound over the draws.
    Public: t, m, k only."""
    others = sum(keys - j - 1 for j in range(draws))
    if others <= 0:
        return 0
    # the relative nudge keeps float rounding from giving one less than the exact ceiling (never fewer: safe side)
    return max(0, math.ceil(float(temperature) * math.log(others / (1 - confidence)) * (1 + 1e-12)) - 1)
# Variance and std: a count, a centred sum and a centred sum of squares on the squares' own grid

# The squares' grid has at most this many steps between 0 and the largest centred square, like a float column's
# default grid (10^6-10^7 steps across its bounds). On the column's grid squared, a float column's default precision
# gives up to ~2.5e13 steps, whose noise scale at a small epsilon runs past MAX_SCALE (2^40).
MAX_SQUARE_STEPS = 10**7


def square_step(column: Column) -> int:
    """D: the squares' grid step in units of precision², the smallest power of ten that puts the largest centred
    square within MAX_SQUARE_STEPS steps (1 for any column whose centred values are at most 3162 steps)."""
    lo, hi = column.grid_bounds
    offset = (lo + hi) // 2
    biggest = max(abs(lo - offset), abs(hi - offset))
    step = 1
    while -(-biggest * biggest // step) > MAX_SQUARE_STEPS:
        step *= 10
    return step


def rounded_square(value: int, step: int) -> int:
    """A centred value's square on the squares' grid (units of precision² × step), rounded half up: the engine's
    rule (dpcli.engine.cells), in exact integer arithmetic."""
    return (value * value + step // 2) // step


def _variance_components(
    path: str, stat: Variance, column: Column, neighbours: str, budget: _Budget
) -> tuple[NoiseComponent, ...]:
    """Thirds of the statistic's share: the centred sum (as a mean's), the centred sum of squares and the count of
    rows with a value. Squares are non-negative and at most Q = the largest rounded centred square, so one row
    changes their sum by at most Q (added, removed, or replaced within one cell, a missing value included) and a
    row moving between cells changes two cells by Q each (L1 2Q, L2² 2Q²)."""
    third = _Budget(budget.mechanism, budget.amount / 3)
    p = column.precision
    assert p is not None
    glo, ghi = column.grid_bounds
    offset = (glo + ghi) // 2
    step = square_step(column)
    q = rounded_square(max(offset - glo, ghi - offset), step)
    unit = p * p * step
    grid = f"squares of values centred on {format_exact(offset * p)}, on a grid of {format_exact(unit)}"
    if neighbours == "add_remove":
        why = f"add/remove one row changes the sum of squares by at most the largest square Q = {q}; {grid}"
        squares = _component(path, "squares", q, why, third, unit, offset)
    elif stat.by:
        why = (
            f"replace one row: it can leave one cell and join another, changing each by at most the largest square "
            f"Q = {q} (L1 2Q, L2² 2Q²); {grid}"
        )
        squares = _component(path, "squares", 2 * q, why, third, unit, offset, l2_squared=2 * q * q)
    else:
        why = (
            f"replace one row: squares lie in [0, Q], Q = {q}, so the sum changes by at most Q (a missing value "
            f"becoming one included); {grid}"
        )
        squares = _component(path, "squares", q, why, third, unit, offset)
    return (
        _sum_component(path, stat, column, neighbours, third, centred=True),
        squares,
        _count_component(path, stat, neighbours, third, f"the count of rows with a {column.name}"),
    )


def bin_label(bins: EdgeBins | GridBins, i: int) -> str:
    """A histogram bin written as its interval, e.g. '[17..25)' (contract 0.3: never a comma, so never quoted)."""
    return f"[{format_exact(bins.edge(i))}..{format_exact(bins.edge(i + 1))})"


# ---------------------------------------------------------------------------------------------------------------
# The release's size, known before anything is read or spent

# Public limits on one release, functions of the spec alone (never of the data): a release over either is refused
# with exit 2 before the input is read, so a spend is never followed by a release too large to finish.
MAX_RELEASE_CELLS = 10_000_000
MAX_RELEASE_MEMORY_MB = 1024
# The estimate: a fixed part (interpreter, polars, numpy, the ledger; the scan of a small input) plus bytes per cell
# by kind (its ``memory_per_cell``, measured with /usr/bin/time: dpcli/spec/kinds.py). The scan of a large input needs
# more on its own.
MEMORY_BASE_MB = 200


@dataclass(frozen=True)
class ReleaseCost:
    """What a release will hold in memory, from its spec alone."""

    cells: int  # rows of the output table: every declared cell of every statistic
    memory_mb: int  # estimated peak memory of `dpcli release` in MiB, before the input's own scan

    @property
    def over_limit(self) -> bool:
        return self.cells > MAX_RELEASE_CELLS or self.memory_mb > MAX_RELEASE_MEMORY_MB

    def text(self) -> str:
        return f"{self.cells} cell(s), ~{self.memory_mb} MB estimated peak memory"


def release_cost(plan: Plan) -> ReleaseCost:
    """Cells and memory estimate of a plan: a function of the spec only (declared keys, bins and kinds)."""
    cells = sum(sp.cells for sp in plan.statistics)
    per_cell = sum(sp.cells * KINDS[sp.statistic.kind].memory_per_cell for sp in plan.statistics)
    return ReleaseCost(cells, MEMORY_BASE_MB + -(-per_cell // 2**20))


def check_cost(plan: Plan) -> ReleaseCost:
    """The plan's cost, or SpecError (exit 2) when it is over a public limit: raised before anything is read or spent,
    instead of a MemoryError after the spend."""
    cost = release_cost(plan)
    if cost.over_limit:
        raise SpecError(
            "statistics",
            f"the release has {cost.text()}; the limits are {MAX_RELEASE_CELLS} cells and "
            f"{MAX_RELEASE_MEMORY_MB} MB: split it into smaller releases or use coarser bins or fewer keys",
        )
    return cost
