"""What ``dpcli audit`` audits of a plan, and what each target claims: every statistic (its share of the budget),
each noisy part of a multi-part statistic (its own share), each open-key statistic's partition selection (its δ), and
the release as a whole (the plan's total); and the plan as audited (without the quantiles' interval draws).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from dpcli.core.accounting import zcdp_to_epsilon
from dpcli.plan.model import Plan
from dpcli.specs.model import Marginal, Statistic

# A zCDP spec with a rho and no delta has no (epsilon, delta) claim to test; the audit uses this delta and says so.
ASSUMED_DELTA = Fraction(1, 10**6)


@dataclass(frozen=True)
class Target:
    """What one row of the report audits: a statistic, one part of a mean, or the whole release."""

    label: str  # the statistic's name, "name/sum" or "name/count" for a part, "name/selection", "(release)"
    scope: str  # "statistic" | "component" | "selection" | "release"
    kind: str
    mechanism: str  # "discrete_laplace" | "discrete_gaussian" | "mixed"
    parts: tuple[tuple[int, str], ...]  # (statistic index, component role) whose noisy vectors it covers
    claimed_epsilon: Fraction
    delta: Fraction  # 0 for a pure (Laplace) target
    claimed_loss: Fraction  # the same claim in the unit of the pair loss
    loss_unit: str  # "ε" (pure) | "ρ" (zCDP) | "δ" (a partition selection: P[a key one dataset lacks is released])
    columns: tuple[str, ...]  # the columns its statistics read


def audit_targets(plan: Plan, delta: Fraction) -> list[Target]:
    """Every target of the plan with its claim; ``delta`` is the δ at which ρ is converted to ε (zCDP parts)."""
    spec = plan.spec
    out = []
    for i, sp in enumerate(plan.statistics):
        stat = sp.statistic
        columns = tuple(dict.fromkeys((*stat.by, *([stat.column] if stat.column else []), *marginal_columns(stat))))
        roles = tuple((i, c.role) for c in sp.components)
        if sp.mechanism == "discrete_gaussian":
            claim = (zcdp_to_epsilon(sp.rho, delta), delta, sp.rho, "ρ")
        else:
            eps = sp.reported_epsilon if sp.reported_epsilon is not None else sp.epsilon
            # an open-key statistic is (ε, δ)-DP: δ is what its selection spends on keys one dataset lacks
            sel_delta = sp.selection.delta if sp.selection is not None else Fraction(0)
            claim = (eps, sel_delta, eps, "ε")
        out.append(Target(stat.name, "statistic", stat.kind, sp.mechanism, roles, *claim, columns))
        if sp.selection is not None:
            # the selection on its own: the pair whose keys held by one dataset only are likeliest to be released
            out.append(
                Target(
                    f"{stat.name}/selection", "selection", f"{stat.kind} (key selection)", sp.mechanism, roles,
                    claim[0], sp.selection.delta, sp.selection.delta, "δ", columns,
                )
            )
        if len(sp.components) > 1:
            # each part is charged its own share; the statistic's total has slack when no pair moves both parts at
            # their worst, which can hide a part whose own sensitivity is wrong
            for comp in sp.components:
                if comp.mechanism == "discrete_gaussian":
                    claim = (zcdp_to_epsilon(comp.rho, delta), delta, comp.rho, "ρ")
                else:
                    claim = (comp.epsilon, Fraction(0), comp.epsilon, "ε")
                out.append(
                    Target(
                        f"{stat.name}/{comp.role}", "component", f"{stat.kind} ({comp.role} part)", comp.mechanism,
                        ((i, comp.role),), *claim, columns,
                    )
                )
    mechanisms = {sp.mechanism for sp in plan.statistics}
    mechanism = mechanisms.pop() if len(mechanisms) == 1 else "mixed"
    columns = tuple(dict.fromkeys(c for t in out if t.scope == "statistic" for c in t.columns))
    if spec.synth is not None:
        out.append(_synth_measurement(plan, delta, columns))
        return out
    parts = tuple((i, c.role) for i, sp in enumerate(plan.statistics) for c in sp.components)
    selections = sum((sp.selection.delta for sp in plan.statistics if sp.selection is not None), Fraction(0))
    if spec.privacy.accounting == "pure":
        claim = (plan.epsilon, selections, plan.epsilon, "ε")
    else:
        # the selections' deltas come out of the release's delta; the zCDP conversion gets the rest (dpcli.plan.model)
        claim = (zcdp_to_epsilon(plan.rho, delta - selections), delta, plan.rho, "ρ")
    out.append(Target("(release)", "release", f"{len(plan.statistics)} statistics", mechanism, parts, *claim, columns))
    return out


def marginal_columns(stat: Statistic) -> tuple[str, ...]:
    """A synth marginal's columns (its cells' dimensions); none for any other statistic (its by: and column)."""
    return stat.columns if isinstance(stat, Marginal) else ()


def _synth_measurement(plan: Plan, delta: Fraction, columns: tuple[str, ...]) -> Target:
    """A synth spec's engine plan (dpcli.plan.synth: the d one-way marginals, then every candidate pair) has no
    release of all its statistics: MST measures the d one-ways and the d - 1 pairs the selection chose. Given the
    selection (adaptive composition) that is one Gaussian release of d + d - 1 marginals, charged rho_one_way +
    rho_measure whichever spanning tree was chosen (every pair costs the same); audited here on one of them, the star
    of the first column (the first d - 1 candidates). Every pair is audited on its own as well."""
    d = sum(1 for sp in plan.statistics if len(sp.statistic.dimensions) == 1)
    measured = range(2 * d - 1)
    parts = tuple((i, c.role) for i in measured for c in plan.statistics[i].components)
    rho = sum((plan.statistics[i].rho for i in measured), Fraction(0))
    return Target("(measurement)", "release", f"{d} one-ways + {d - 1} pairs", "discrete_gaussian", parts,
                  zcdp_to_epsilon(rho, delta), delta, rho, "ρ", columns)


def without_interval_draws(plan: Plan) -> tuple[Plan, list[str]]:
    """The plan without its quantiles' interval draws, and the statistics that had them. Those draws run at levels
    computed from the noisy count (data-dependent), which the audit's fixed-level utilities cannot follow: they are
    left out, and their epsilon (rho) with them, so each claim covers only the parts audited."""
    kept, skipped = [], []
    for sp in plan.statistics:
        draws = [c for c in sp.components if c.role.startswith("q=") and c.role.endswith((" low", " high"))]
        if not draws:
            kept.append(sp)
            continue
        eps = sum((c.epsilon for c in draws), Fraction(0))
        rho = sum((c.rho for c in draws), Fraction(0))
        kept.append(replace(
            sp, components=tuple(c for c in sp.components if c not in draws),
            epsilon=sp.epsilon - eps if sp.epsilon else sp.epsilon, rho=sp.rho - rho if sp.rho else sp.rho,
            reported_epsilon=None if sp.reported_epsilon is None else sp.reported_epsilon - eps,
        ))
        skipped.append(sp.statistic.name)
    return replace(plan, statistics=tuple(kept)), skipped
