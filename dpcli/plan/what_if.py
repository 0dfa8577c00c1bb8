"""What-if planning: "how much epsilon?" answered from the spec alone (docs/spec.md, "Planning: confidence, targets
and what-if budgets"). Nothing here reads data or spends budget.

- ``plan_at``: the spec's plan at another total budget, every statistic's share scaled by the same factor (its
  split kept). A pure spec's total is epsilon; a zCDP spec's is epsilon at its ``privacy.delta``, converted to rho
  as the loader does (the partition selections' delta set aside).
- ``expected_error``: a statistic's error in its own units at a confidence: a count's, histogram's or sum's noise
  half-width; a mean's bound from its two parts given the rows with a value per cell (``expected_rows``).
- ``with_expected_rows``: the plan with ``plan --expected-rows`` (every mean's, or one's by name).
- ``find_epsilon``: the smallest total epsilon on the grid EPSILON_GRID meeting every target (errors only fall as
  epsilon grows: every scale is sensitivity / share rounded up, and a half-width grows with its scale).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from dpcli.core.accounting import epsilon_delta_to_rho
from dpcli.errors import SpecError, UsageError
from dpcli.plan.model import Plan, StatisticPlan, make_plan
from dpcli.specs.kinds import KINDS
from dpcli.specs.model import Mean, Target
from dpcli.specs.v1 import MAX_EXPECTED_ROWS, MAX_RELEASE_EPSILON

# plan --target rounds the smallest epsilon up to this grid (and searches at most MAX_RELEASE_EPSILON)
EPSILON_GRID = Fraction(1, 1000)
TARGET_KINDS = tuple(name for name, kind in KINDS.items() if kind.target)  # one error figure in their units


def plan_at(plan: Plan, epsilon: Fraction) -> Plan:
    """The plan of the same spec at total budget ``epsilon`` (see the module's docstring)."""
    spec = plan.spec
    privacy = spec.privacy
    if plan.frequency_only:
        raise UsageError("a release of frequency estimates spends nothing: there is no ε to compare")
    if privacy.accounting == "pure":
        factor = epsilon / plan.epsilon
        unit = "epsilon"
        new_privacy = dataclasses.replace(
            privacy, epsilon=None if privacy.epsilon is None else privacy.epsilon * factor
        )
    else:
        if privacy.delta is None:
            raise UsageError(
                "a zCDP spec without privacy.delta states rho only: add privacy.delta to compare epsilons"
            )
        named = sum((s.delta for s in spec.statistics if s.delta is not None), Fraction(0))
        factor = epsilon_delta_to_rho(epsilon, privacy.delta - named) / plan.rho
        unit = "rho"
        new_privacy = dataclasses.replace(
            privacy,
            epsilon=None if privacy.epsilon is None else epsilon,
            rho=None if privacy.rho is None else privacy.rho * factor,
        )
    stats = tuple(
        s if getattr(s, unit) is None else dataclasses.replace(s, **{unit: getattr(s, unit) * factor})
        for s in spec.statistics
    )
    return make_plan(dataclasses.replace(spec, privacy=new_privacy, statistics=stats))


def total_epsilon(plan: Plan) -> Fraction:
    """The budget ``plan_at`` takes: epsilon (pure), or epsilon at the spec's delta (zCDP)."""
    if plan.rho == 0:
        return plan.epsilon
    if plan.epsilon_at_delta is None:
        raise UsageError("a zCDP spec without privacy.delta states rho only: add privacy.delta to compare epsilons")
    return plan.epsilon_at_delta


def with_expected_rows(plan: Plan, every: int | None, own: dict[str, int]) -> Plan:
    """The plan with ``dpcli plan --expected-rows``: ``every`` for every mean, ``own`` for the means it names (over
    ``every``); both over the spec's ``expected_rows``. Planning only: nothing spent depends on it."""
    means = {sp.statistic.name for sp in plan.statistics if isinstance(sp.statistic, Mean)}
    for name in own:
        if name not in means:
            what = "a mean" if name in {sp.statistic.name for sp in plan.statistics} else "a statistic"
            raise UsageError(f"--expected-rows: '{name[:60]}' is not {what} of the spec (expected rows are a mean's)")
    if every is None and not own:
        return plan
    if not means:
        raise UsageError("--expected-rows: the spec has no mean (expected rows give a mean's error in its units)")
    for rows in (every, *own.values()):
        if rows is not None and not 1 <= rows <= MAX_EXPECTED_ROWS:
            raise UsageError(f"--expected-rows: give a whole number of rows from 1 to {MAX_EXPECTED_ROWS}")
    stats = tuple(
        dataclasses.replace(s, expected_rows=own.get(s.name, s.expected_rows if every is None else every))
        if isinstance(s, Mean) else s
        for s in plan.spec.statistics
    )
    return make_plan(dataclasses.replace(plan.spec, statistics=stats))


def expected_rows(plan: Plan, sp: StatisticPlan) -> int | None:
    """Rows with a value per cell for a mean's error: the statistic's ``expected_rows``, else the spec's."""
    own = sp.statistic.expected_rows
    return own if own is not None else plan.spec.expected_rows


def expected_error(plan: Plan, sp: StatisticPlan, confidence: Fraction) -> Fraction | None:
    """The statistic's error in its units at ``confidence`` (None: no single figure: another kind, a mean without
    expected rows, or too few rows for its count's noise).

    A mean is c + S/N (S the centred sum, |S| <= B N with B the largest centred bound). With |noise of S| <= e_S and
    |noise of N| <= e_N, each at (1 + confidence) / 2 (a union bound, as the table's intervals),
    |(S + a)/(N + b) - S/N| = |a N - b S| / (N (N + b)) <= (e_S + B e_N) / (N - e_N) for N > e_N: a bound, not an
    approximation, with N the expected rows per cell (clipping to the bounds only narrows it)."""
    level = float(confidence)
    if not KINDS[sp.statistic.kind].target:
        return None
    if not isinstance(sp.statistic, Mean):  # a count, histogram or sum: its one noise component's half-width
        comp = sp.components[0]
        return comp.halfwidth(level) * comp.unit
    rows = expected_rows(plan, sp)
    if rows is None:
        return None
    part = (1 + level) / 2
    s, c = sp.component("sum"), sp.component("count")
    count_error = c.halfwidth(part)
    if rows <= count_error:
        return None
    lo, hi = plan.spec.columns[sp.statistic.column].grid_bounds
    biggest = max(abs(lo - s.offset), abs(hi - s.offset))
    return (s.halfwidth(part) + biggest * count_error) * s.unit / (rows - count_error)


def targets_of(plan: Plan, extra: dict[str, Fraction]) -> dict[str, Target]:
    """Each statistic's target: the spec's ``target:``, or ``extra`` (plan --target NAME=X, error95) over it."""
    names = {sp.statistic.name: sp for sp in plan.statistics}
    for name in extra:
        if name not in names:
            raise UsageError(f"--target: '{name[:60]}' is not a statistic of the spec")
    out = {sp.statistic.name: sp.statistic.target for sp in plan.statistics if sp.statistic.target is not None}
    out.update({name: Target(error, Fraction(95, 100)) for name, error in extra.items()})
    for name in out:
        sp = names[name]
        if not KINDS[sp.statistic.kind].target:
            raise UsageError(f"--target: '{name}' is a {sp.statistic.kind}: targets are for {', '.join(TARGET_KINDS)}")
        if isinstance(sp.statistic, Mean) and expected_rows(plan, sp) is None:
            raise SpecError(f"statistics '{name}'", "a mean's target needs expected_rows (on it or at the top level; "
                            "or dpcli plan --expected-rows N, or NAME=N)")
    return out


@dataclass(frozen=True)
class TargetAnswer:
    """The smallest total epsilon on the grid meeting every target (None: not met at MAX_RELEASE_EPSILON)."""

    targets: dict[str, Target]
    epsilon: Fraction | None
    plan: Plan | None  # the plan at that epsilon


def _meets(plan: Plan, targets: dict[str, Target]) -> bool:
    for sp in plan.statistics:
        target = targets.get(sp.statistic.name)
        if target is not None:
            error = expected_error(plan, sp, target.confidence)
            if error is None or error > target.error:
                return False
    return True


def _try_plan(plan: Plan, epsilon: Fraction) -> Plan | None:
    try:
        return plan_at(plan, epsilon)
    except SpecError:  # a share too small to plan at this epsilon (a scale past the samplers' limit): not met
        return None


def find_epsilon(plan: Plan, targets: dict[str, Target]) -> TargetAnswer:
    """Bisection over k EPSILON_GRID, k = 1 .. MAX_RELEASE_EPSILON / EPSILON_GRID (errors fall as epsilon grows)."""
    total_epsilon(plan)  # a zCDP spec without delta is refused here
    lo, hi = 0, int(MAX_RELEASE_EPSILON / EPSILON_GRID)  # invariant: lo fails (or is 0), hi meets (or is the end)
    top = _try_plan(plan, hi * EPSILON_GRID)
    if top is None or not _meets(top, targets):
        return TargetAnswer(targets, None, None)
    best = top
    while hi - lo > 1:
        mid = (lo + hi) // 2
        candidate = _try_plan(plan, mid * EPSILON_GRID)
        if candidate is not None and _meets(candidate, targets):
            hi, best = mid, candidate
        else:
            lo = mid
    return TargetAnswer(targets, hi * EPSILON_GRID, best)


@dataclass(frozen=True)
class ErrorRow:
    """One row of a what-if comparison: a statistic's error figure, or one noise component's half-width (a
    quantile's in rank rows), in each plan compared; None where a mean has more count noise than rows."""

    label: str
    errors: tuple[Fraction | None, ...]


def error_figures(plan: Plan) -> list[tuple[str, Callable[[Plan], Fraction | None]]]:
    """(label, how to get the error from a plan at another budget): a statistic's one figure where it has one, else
    each noise component's half-width (a quantile's in rank rows)."""
    out: list[tuple[str, Callable[[Plan], Fraction | None]]] = []
    for i, sp in enumerate(plan.statistics):
        one_figure = not isinstance(sp.statistic, Mean) or expected_rows(plan, sp) is not None  # a mean: with rows
        if KINDS[sp.statistic.kind].target and one_figure:
            out.append((sp.statistic.name, _statistic_error(i)))
            continue
        for j, c in enumerate(sp.components):
            out.append((f"{sp.statistic.name} ({c.role})", _component_error(i, j)))
    return out


def _statistic_error(i: int) -> Callable[[Plan], Fraction | None]:
    def error(p: Plan) -> Fraction | None:
        return expected_error(p, p.statistics[i], p.confidence)

    return error


def _component_error(i: int, j: int) -> Callable[[Plan], Fraction | None]:
    def error(p: Plan) -> Fraction | None:
        component = p.statistics[i].components[j]
        return component.halfwidth(float(p.confidence)) * component.unit

    return error


def compare_errors(plan: Plan, plans: Sequence[Plan]) -> list[ErrorRow]:
    """``plan``'s error figures (``error_figures``) in each of ``plans``, its spec at other budgets."""
    return [ErrorRow(label, tuple(get(p) for p in plans)) for label, get in error_figures(plan)]


def errors_at(plan: Plan, epsilons: Sequence[Fraction]) -> list[ErrorRow]:
    """The errors at each total epsilon (plan --epsilon), the spec's split scaled (``plan_at``)."""
    return compare_errors(plan, [plan_at(plan, e) for e in epsilons])
