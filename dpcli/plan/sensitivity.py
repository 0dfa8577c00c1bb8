"""Each statistic's noise components, from the spec alone: a count part and/or a fixed-point sum part (a variance's
squares, a quantile's or a top_k's selection draws), each with its L1 sensitivity *and the derivation*, its share of
the budget, the discrete Laplace scale or discrete Gaussian variance (dpcli.plan.scales). The plan (dpcli.plan.model)
holds them; the engine and the mechanisms never recompute a sensitivity.

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
- under a person unit (``Bounding``: K, g, r, n = min(K, g r)): counts and sums as docs/spec.md's table
  (``_person_count_component``, ``_person_sum_component``); a variance's squares as a count of rows weighted by Q
  (``_person_variance_components``); a quantile level's utility n max(a, b - a) per cell, the cells' draws composing
  to one (dpcli.plan.quantiles.person_utility_sensitivity).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction

from dpcli.core.accounting import format_decimal, format_exact, rho_to_pure_epsilon
from dpcli.errors import InternalError, SpecError
from dpcli.plan.quantiles import person_utility_sensitivity, rank_bound, utility_sensitivity
from dpcli.plan.scales import (
    MAX_SCALE,
    MAX_VARIANCE,
    choice_gap,
    conservative_scale,
    conservative_variance,
    gaussian_halfwidth,
    laplace_halfwidth,
)
from dpcli.plan.squares import centre, largest_square, square_step
from dpcli.specs.grid import candidate_grid
from dpcli.specs.model import (
    Column,
    Count,
    Frequency,
    Histogram,
    Marginal,
    PersonUnit,
    Quantile,
    Spec,
    Statistic,
    Sum,
    TopK,
    Variance,
    clamps_persons,
    counts_persons,
)


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

    def __post_init__(self) -> None:
        # checked when the plan is made, before any spend: a component the mechanisms could not draw is a planner bug
        needed = self.variance if self.mechanism == "discrete_gaussian" else self.scale
        if needed is None:
            raise InternalError(f"noise component {self.role!r} ({self.mechanism}) has no noise parameter")

    def required_scale(self) -> Fraction:
        """The Laplace scale, or the exponential mechanism's temperature, in grid units."""
        if self.scale is None:
            raise InternalError(f"noise component {self.role!r} ({self.mechanism}) has no scale")
        return self.scale

    def required_variance(self) -> Fraction:
        """The discrete Gaussian's sigma^2, in grid units."""
        if self.variance is None:
            raise InternalError(f"noise component {self.role!r} ({self.mechanism}) has no variance")
        return self.variance

    def halfwidth(self, confidence: float) -> int:
        """Smallest k with P(|noise| <= k) >= confidence (grid units). For the exponential mechanism (``scale`` its
        temperature): of a quantile level, how far below the best utility the released candidate's may fall
        (utility units: ``unit`` rows each); of a top_k, the count gap: with that probability every draw's key has a
        count within k of the largest count left at that draw."""
        if self.mechanism == "exponential":
            if self.draws:
                return choice_gap(self.required_scale(), self.choices, self.draws, confidence)
            return rank_bound(self.required_scale(), self.candidates, confidence)
        if self.mechanism == "discrete_gaussian":
            return gaussian_halfwidth(self.required_variance(), confidence)
        return laplace_halfwidth(self.required_scale(), confidence)

    @property
    def parameter_text(self) -> str:
        """The noise parameter as a person reads it: t for Laplace, sigma for Gaussian."""
        if self.mechanism == "discrete_gaussian":
            return f"σ={math.sqrt(self.required_variance()):.6g}"
        return f"t={format_decimal(self.required_scale(), 6)}"


def grid_step(column: Column) -> Fraction:
    """A numeric column's precision: the value of one grid unit (the loader gives every numeric column one)."""
    if column.precision is None:
        raise InternalError(f"column {column.name!r} has no precision")
    return column.precision


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
class Share:
    """A component's share: epsilon for Laplace, rho for Gaussian."""

    mechanism: str
    amount: Fraction

    def half(self) -> Share:
        return Share(self.mechanism, self.amount / 2)


def _component(
    stat_path: str, role: str, sensitivity: int, derivation: str, budget: Share, unit: Fraction, offset: int = 0,
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
    path: str, stat: Statistic, neighbours: str, budget: Share, what: str, b: Bounding, persons: bool
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
    path: str, stat: Statistic, column: Column, neighbours: str, budget: Share, centred: bool, b: Bounding,
) -> NoiseComponent:
    """A sum under a person unit. ``clamp: row``: each row's value in [L, U], one person's rows as in the count of
    rows, so each bound scales by the rows (L1 min(K, g r) max(|L|, |U|), L2² squares max²). ``clamp: person``:
    each person's total in a cell is clamped to [L, U], so the person changes g cells by max(|L|, |U|) each. Under
    replace: L1 doubles; L2² doubles when every value has one sign (a·b >= 0), else quadruples
    (||b - a|| <= ||a|| + ||b||); without cells, a replaced person changes the one sum by at most
    K max(U - L, max(|L|, |U|)) (row clamp) or max(U - L, max(|L|, |U|)) (person clamp)."""
    glo, ghi = column.grid_bounds
    p = grid_step(column)
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


def _count_component(path: str, stat: Statistic, neighbours: str, budget: Share, what: str) -> NoiseComponent:
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
    path: str, stat: Statistic, column: Column, neighbours: str, budget: Share, centred: bool
) -> NoiseComponent:
    glo, ghi = column.grid_bounds
    p = grid_step(column)
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


def quantile_components(
    path: str, spec: Spec, stat: Quantile, neighbours: str, share: Fraction, zcdp: bool, b: Bounding | None = None
) -> tuple[NoiseComponent, ...]:
    """One permute-and-flip draw per level, each with an even share of the statistic's budget: epsilon / k in a pure
    release; in a zCDP release rho / k, whose draw is eps0-DP with eps0 = sqrt(2 rho / k) rounded down (an eps0-DP
    mechanism is eps0^2/2-zCDP; permute-and-flip is not claimed bounded-range, so the exponential mechanism's
    eps0^2/8 of Cesar & Rogers 2021 is not used). The temperature t = 2 D / eps0 is rounded up (never down) onto the
    sampler's domain, numerator and denominator <= 2**48, and at most MAX_SCALE. Under a person unit (``b``) a level's
    utility sensitivity is that of b.rows rows (dpcli.plan.quantiles.person_utility_sensitivity)."""
    column = spec.columns[stat.column]
    _, spacing, candidates = candidate_grid(column, stat.step)
    p = grid_step(column)
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
        if b is None:
            sensitivity, why = utility_sensitivity(q, neighbours, bool(stat.by))
        else:
            sensitivity, why = person_utility_sensitivity(q, neighbours, bool(stat.by), b.rows, b.text())
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
        out.extend(_interval_components(
            path, stat, neighbours, share * stat.interval_share, zcdp, grid, candidates, b
        ))
    return tuple(out)


def _interval_components(
    path: str, stat: Quantile, neighbours: str, share: Fraction, zcdp: bool, grid: str, candidates: int,
    b: Bounding | None,
) -> list[NoiseComponent]:
    """A quantile's value-unit intervals (dpcli.plan.quantiles, "Value-unit intervals"): the interval share split evenly
    over a noisy count of the rows with a value (Laplace; in zCDP its part's rho as epsilon = sqrt(2 rho)) and two
    permute-and-flip draws per level (in zCDP eps0 = sqrt(2 rho) rounded down, as a level's). Their scale (rows) is
    rounded up to a dyadic rational with a 24-bit numerator (dpcli.plan.quantiles.interval_scale), so that the draws'
    temperature scale * D, D the levels' public grid, is a value the sampler takes whatever the noisy count. Under a
    person unit the count is a person-level count of rows and the draws' factor is scaled by the person's rows."""
    from dataclasses import replace

    from dpcli.plan.quantiles import INTERVAL_COUNT, interval_scale, interval_scale_factor

    part = share / (2 * len(stat.levels) + 1)
    budget = Share("laplace", rho_to_pure_epsilon(part) if zcdp else part)
    what = f"the count of rows with a {stat.column}"
    if b is None:
        count = _count_component(path, stat, neighbours, budget, what)
    else:
        count = _person_count_component(path, stat, neighbours, budget, what, b, persons=False)
    out = [replace(count, role=INTERVAL_COUNT, rho=part if zcdp else Fraction(0))]
    eps0 = rho_to_pure_epsilon(part) if zcdp else part
    rows = 1 if b is None else b.rows
    factor = interval_scale_factor(neighbours, bool(stat.by), rows)
    if eps0 <= 0 or Fraction(2 * factor) / eps0 > MAX_SCALE:
        raise SpecError(path, "its interval share is too small to plan: raise it or its epsilon")
    scale = interval_scale(Fraction(2 * factor) / eps0)
    if scale > MAX_SCALE:
        raise SpecError(path, "its interval share is too small to plan: raise it or its epsilon")
    who = "neighbour" if b is None else (
        f"person ({b.text()}: n={rows} rows at most, over the cells"
        f"{'; n leaving and n arriving' if factor == 2 * rows else ''})"
    )
    why = (
        f"the rank distance to level a/b, -max(0, a·n - b·through(c), b·lt(c) - a·n) on the rows rounded down to the "
        f"candidates, changes by at most {factor if factor > 1 else ''}b per {who}; {grid}; permute-and-flip, c "
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


def components(
    path: str, spec: Spec, stat: Statistic, neighbours: str, budget: Share, b: Bounding | None
) -> tuple[NoiseComponent, ...]:
    """A statistic's noise components (a mean: half its share to the centred sum, half to its count)."""
    persons = counts_persons(stat) or clamps_persons(stat)
    if isinstance(stat, Frequency):
        # no noise: the randomized file was paid for by `dpcli randomize` (dpcli.mechanisms.randomized_response)
        return ()
    if isinstance(stat, Marginal):  # a synth spec's marginal: a count over its cells (row unit only)
        return (_count_component(path, stat, neighbours, budget, f"the marginal of {' x '.join(stat.columns)}"),)
    if isinstance(stat, (Count, Histogram, TopK)):  # a top_k here has open keys: ranked after their selection
        what = "the count" if isinstance(stat, Count) else "the histogram" if isinstance(stat, Histogram) else (
            "the counts of the keys (ranked after their partition selection)"
        )
        if b is not None:
            return (_person_count_component(path, stat, neighbours, budget, what, b, persons),)
        return (_count_component(path, stat, neighbours, budget, what),)
    column = spec.columns[stat.column]
    if isinstance(stat, Variance):
        if b is not None:
            return _person_variance_components(path, stat, column, neighbours, budget, b)
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


def choice_component(
    path: str, stat: TopK, neighbours: str, keys: int, share: Fraction, zcdp: bool, b: Bounding | None
) -> NoiseComponent:
    """Permute-and-flip on the keys' counts, peeled k times, in each cell of by: on its own (``keys``: the column's
    keys, the candidates of every draw). Utility: a key's count.

    One cell (no by:): D is what one neighbour changes one count by (1 row, or r = min(K, R) rows of a person).
    Under add_remove the counts only grow (or only shrink) together, a monotone utility: each draw accepting a key
    with probability exp(-eps0 (best - u) / D) is eps0-DP (McKenna & Sheldon 2020, Theorem 1, and Remark 1 for a
    monotone quality score, as OpenDP's proof of its permute-and-flip top-k cites them: d/scale for a monotone
    metric, 2d/scale otherwise); under replace one count may grow while another shrinks: exp(-eps0 (best - u) /
    (2 D)). In zCDP a draw is eps0^2 / 2 (pure eps0-DP; permute-and-flip is not claimed bounded-range).

    With by:, a draw at temperature t over a cell whose counts fall by at most d and rise by at most e (each key's
    own change) loses at most (d + e) / t: pass through the vector with only the falls (monotone, d / t), then add
    the rises (monotone, e / t). The k-th draws of all cells together lose at most the sum over the cells. Under
    add/remove one row is in one cell (sum 1: each cell spends the whole eps0 of a draw, in parallel); one person's
    falls (or rises) over the cells add up to at most their rows n = min(K, g r), so D = n. Under replace the rows
    that leave and those that arrive add up to 2 D, the factor 2 of one cell. The temperature t (the component's
    scale) is factor D / eps0, rounded up."""
    k = stat.k
    if zcdp:
        per_draw = rho_to_pure_epsilon(share / k)  # the largest eps0 with k eps0^2 / 2 <= rho, rounded down
        cost = f"k={k} draws of ε0={format_decimal(per_draw, 6)} each: k·ε0²/2 ≤ ρ={format_decimal(share, 6)}"
    else:
        per_draw = share / k
        each = format_decimal(per_draw, 6)
        cost = f"k={k} draws of ε0 = ε/k = {each} each" if k > 1 else f"one draw of ε0 = ε = {each}"
    if stat.by:
        cost += " in each cell of by:"
        return _cells_choice_component(path, stat, neighbours, keys, per_draw, cost, b)
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
    comp = _component(path, "choice", factor * sensitivity, f"{why}; {cost}", Share("laplace", per_draw),
                      Fraction(1))
    return dataclasses.replace(comp, sensitivity=sensitivity, mechanism="exponential", choices=keys, draws=k)


def _cells_choice_component(
    path: str, stat: TopK, neighbours: str, keys: int, per_draw: Fraction, cost: str, b: Bounding | None
) -> NoiseComponent:
    """A top_k with by: (``choice_component``'s derivation): D = 1 row, or a person's n = min(K, g r) rows, the
    most one neighbour's counts fall (or rise) summed over the cells of by:; factor 2 under replace."""
    sensitivity = 1 if b is None else b.rows
    lemma = (
        "a draw at temperature t over a cell whose counts fall by at most d and rise by at most e loses at most "
        "(d + e)/t (the falls, then the rises: each a monotone change); the draws of all cells lose the sum"
    )
    if b is None:
        reach = "one row is in one cell of by: and changes one key's count there by 1"
    else:
        reach = (f"one person ({b.text()}) has at most n={b.rows} rows, so the largest change of a count in each "
                 f"cell of by:, summed over the cells, is at most D=n={b.rows}")
    if neighbours == "add_remove":
        factor = 1
        why = (
            f"add/remove: {reach}, every count in one direction; {lemma}, at most D/t = ε0 with t = D/ε0 (the "
            f"cells compose in parallel): a key accepted with probability exp(-ε0·(best - count) / D), "
            f"D={sensitivity}"
        )
    else:
        factor = 2
        moved = "a row can leave one cell's key and join another's (one fall, one rise), D=1" if b is None else (
            f"{reach}; their rows leave and another's arrive (falls and rises each summing to at most D)"
        )
        why = (
            f"replace: {moved}; {lemma}, at most (D + D)/t = ε0 with t = 2D/ε0: a key accepted "
            f"with probability exp(-ε0·(best - count) / (2D))"
        )
    comp = _component(path, "choice", factor * sensitivity, f"{why}; {cost}", Share("laplace", per_draw),
                      Fraction(1))
    return dataclasses.replace(comp, sensitivity=sensitivity, mechanism="exponential", choices=keys, draws=stat.k)


# Variance and std: a count, a centred sum and a centred sum of squares on the squares' own grid
def _variance_components(
    path: str, stat: Variance, column: Column, neighbours: str, budget: Share
) -> tuple[NoiseComponent, ...]:
    """Thirds of the statistic's share: the centred sum (as a mean's), the centred sum of squares and the count of
    rows with a value. Squares are non-negative and at most Q = the largest rounded centred square, so one row
    changes their sum by at most Q (added, removed, or replaced within one cell, a missing value included) and a
    row moving between cells changes two cells by Q each (L1 2Q, L2² 2Q²)."""
    third = Share(budget.mechanism, budget.amount / 3)
    p = grid_step(column)
    offset, q, unit = centre(column), largest_square(column), p * p * square_step(column)
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


def _person_variance_components(
    path: str, stat: Variance, column: Column, neighbours: str, budget: Share, b: Bounding
) -> tuple[NoiseComponent, ...]:
    """A variance's three parts under a person unit, each row clamped (a variance takes no ``clamp:``): the centred
    sum as a mean's with ``clamp: row``, the count of rows with a value as a count of rows, and the sum of squares,
    whose rows each add a rounded square in [0, Q]: like a count of rows weighted by at most Q. Add/remove: L1
    min(K, g r) Q, L2² (the count's squared L2 norm) Q²; replace with cells: the leaving person's squares go and
    the arriving one's come, non-negative both, so L1 doubles and L2² at most doubles; replace without cells: the
    person's sum of squares goes from one value in [0, K Q] to another, K Q."""
    third = Share(budget.mechanism, budget.amount / 3)
    p = grid_step(column)
    glo, ghi = column.grid_bounds
    offset, q, unit = centre(column), largest_square(column), p * p * square_step(column)
    grid = f"squares of rows clamped to [{format_exact(glo * p)}, {format_exact(ghi * p)}] centred on "
    grid += f"{format_exact(offset * p)}, on a grid of {format_exact(unit)}"
    l1, l2 = b.rows * q, b.squares * q * q
    reach = f"one person has {_reach_text(b)}, each row's square in [0, Q], Q = {q}"
    if neighbours == "add_remove":
        why = (
            f"add/remove one person ({b.text()}): {reach}, so the sums of squares change by L1 {l1} (L2² {l2}); "
            f"{grid}"
        )
        squares = _component(path, "squares", l1, why, third, unit, offset, l2_squared=l2)
    elif stat.dimensions:
        why = (
            f"replace one person ({b.text()}): {reach}; their cells lose and another's gain as much: L1 2×{l1} = "
            f"{2 * l1}, L2² 2×{l2} = {2 * l2} (squares are non-negative); {grid}"
        )
        squares = _component(path, "squares", 2 * l1, why, third, unit, offset, l2_squared=2 * l2)
    else:
        why = (
            f"replace one person ({b.text()}): {reach}, so their sum of squares lies in [0, K·Q] before and after "
            f"and changes by at most K·Q = {l1}; {grid}"
        )
        squares = _component(path, "squares", l1, why, third, unit, offset, l2_squared=l1 * l1)
    return (
        _person_sum_component(path, stat, column, neighbours, third, True, b),
        squares,
        _person_count_component(
            path, stat, neighbours, third, f"the count of rows with a {column.name}", b, persons=False
        ),
    )
