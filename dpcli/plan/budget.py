"""The release's budget and each statistic's share of it, exact, and the one wording of what a release charges."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from dpcli.core.accounting import epsilon_delta_to_rho, format_decimal, zcdp_to_epsilon
from dpcli.errors import SpecError
from dpcli.specs.fields import short
from dpcli.specs.kinds import KINDS, Family
from dpcli.specs.model import Spec, Statistic
from dpcli.specs.v1 import MAX_RELEASE_EPSILON, MAX_RHO

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


@dataclass(frozen=True)
class Budget:
    """The release's budget and each statistic's share of it, exact, in the release's unit: epsilon (pure) or rho
    (zCDP)."""

    unit: str
    total: Fraction
    shares: tuple[Fraction, ...]


def split_budget(spec: Spec) -> Budget:
    """Split the spec's budget over its statistics (the loader has checked how they share it:
    dpcli.specs.model._privacy).

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
