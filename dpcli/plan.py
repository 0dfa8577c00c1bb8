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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

from dpcli.accounting import (
    epsilon_delta_to_rho,
    format_decimal,
    format_exact,
    rho_to_pure_epsilon,
    round_up,
    zcdp_to_epsilon,
)
from dpcli.errors import SpecError
from dpcli.spec import Column, Count, EdgeBins, GridBins, Histogram, Spec, Statistic, Sum
from dpcli.spec_fields import MAX_RELEASE_EPSILON, MAX_RHO, short

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

    def halfwidth(self, confidence: float) -> int:
        """Smallest k with P(|noise| <= k) >= confidence (grid units)."""
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
class StatisticPlan:
    statistic: Statistic
    epsilon: Fraction  # pure epsilon charged (0 in a zCDP release)
    components: tuple[NoiseComponent, ...]
    cells: int
    dimension_keys: tuple[tuple[str, ...] | None, ...]  # per dimension: declared keys, or None for numeric bins
    rho: Fraction = Fraction(0)  # zCDP rho charged (0 in a pure release)
    reported_epsilon: Fraction | None = None  # the output's epsilon column: the share, or rho converted at delta

    @property
    def mechanism(self) -> str:
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
        return self.spec.privacy.delta

    @cached_property
    def epsilon_at_delta(self) -> Fraction | None:
        """The release's (epsilon, delta) guarantee: epsilon for a pure release, rho converted at the spec's delta."""
        if self.rho == 0:
            return self.epsilon
        if self.delta is None:
            return None
        return zcdp_to_epsilon(self.rho, self.delta)

    def cost_text(self) -> str:
        if self.rho == 0:
            return f"ε={format_decimal(self.epsilon, 10)}"
        at = self.epsilon_at_delta
        conv = f" (≈ ε={format_decimal(at, 6)} at δ={format_decimal(self.delta, 6)})" if at is not None else ""  # type: ignore[arg-type]
        return f"ρ={format_decimal(self.rho, 10)} zCDP{conv}"

    @property
    def dimensions(self) -> tuple[str, ...]:
        return self.spec.dimensions


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
    # refused by the MAX_SCALE check (this used to divide by zero, an internal error instead of exit 2)
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
    """Split the spec's budget over its statistics (the loader has checked how they share it: dpcli.spec._privacy).

    A zCDP release's rho is ``privacy.rho``, or ``privacy.epsilon`` with ``delta`` converted to the largest rho whose
    (epsilon, delta) conversion fits (closed form, rounded down), or, with neither, the sum of the named rhos. Named
    shares (every statistic's epsilon or rho) are taken as they are and may add up to less than the budget, never
    more; otherwise the budget is split by weight (default 1), exactly.
    """
    p = spec.privacy
    if p.accounting == "zcdp":
        budget = p.rho
        if budget is None and p.epsilon is not None and p.delta is not None:
            budget = epsilon_delta_to_rho(p.epsilon, p.delta)
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
    keys: list[tuple[str, ...] | None] = [spec.columns[d].keys for d in stat.by]
    if isinstance(stat, Histogram):
        column = spec.columns[stat.column]
        keys.append(None if column.numeric else column.keys)
    return tuple(keys)


def bin_count(spec: Spec, stat: Histogram) -> int:
    column = spec.columns[stat.column]
    return stat.bins.count if column.numeric and stat.bins is not None else len(column.keys)


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
        from dpcli.spec import printable

        raise exc.in_file(printable(spec.source)) from None


def _make_plan(spec: Spec) -> Plan:
    plans = []
    neighbours = spec.privacy.neighbours
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
            cells *= len(spec.columns[d].keys)
        if isinstance(stat, Histogram):
            cells *= bin_count(spec, stat)
            _check_bins_on_grid(path, spec, stat)
        if isinstance(stat, Count):
            comps: tuple[NoiseComponent, ...] = (_count_component(path, stat, neighbours, budget, "the count"),)
        elif isinstance(stat, Histogram):
            comps = (_count_component(path, stat, neighbours, budget, "the histogram"),)
        elif isinstance(stat, Sum):
            column = spec.columns[stat.column]
            comps = (_sum_component(path, stat, column, neighbours, budget, centred=False),)
        else:  # mean: half the share to the centred sum, half to the count of rows with a value
            column = spec.columns[stat.column]
            half = budget.half()
            comps = (
                _sum_component(path, stat, column, neighbours, half, centred=True),
                _count_component(path, stat, neighbours, half, f"the count of rows with a {column.name}"),
            )
        if zcdp:
            delta = spec.privacy.delta
            reported = zcdp_to_epsilon(share, delta) if delta is not None else None
            if stat.mechanism != "gaussian":
                reported = budget.amount  # a Laplace statistic is pure epsilon-DP on its own
            plans.append(StatisticPlan(stat, Fraction(0), comps, cells, _dimension_keys(spec, stat), share, reported))
        else:
            plans.append(StatisticPlan(stat, share, comps, cells, _dimension_keys(spec, stat), Fraction(0), share))
    return Plan(spec, tuple(plans))


def bin_label(bins: EdgeBins | GridBins, i: int) -> str:
    """A histogram bin written as its interval, e.g. '[17, 25)'."""
    return f"[{format_exact(bins.edge(i))}, {format_exact(bins.edge(i + 1))})"


# ---------------------------------------------------------------------------------------------------------------
# The release's size, known before anything is read or spent

# Public limits on one release, functions of the spec alone (never of the data): a release over either is refused
# with exit 2 before the input is read, so a spend is never followed by a release too large to finish.
MAX_RELEASE_CELLS = 10_000_000
MAX_RELEASE_MEMORY_MB = 1024
# The estimate: a fixed part (interpreter, polars, numpy, the ledger; the scan of a small input) plus bytes per cell
# by kind, measured with /usr/bin/time (peak RSS of `dpcli release`, 10^5 to 10^7 cells; docs/benchmarks.md) and
# rounded up: 26 B/cell for counts, 23-46 for histograms, 66 for sums, 125 for means (exact and noisy arrays, the
# mean's parts, the int64 columns and one chunk of text). The scan of a large input needs more on its own.
MEMORY_BASE_MB = 200
MEMORY_BYTES_PER_CELL = {"count": 48, "histogram": 48, "sum": 80, "mean": 144}


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
    per_cell = sum(sp.cells * MEMORY_BYTES_PER_CELL[sp.statistic.kind] for sp in plan.statistics)
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
