"""A series' plan (issue 26), from the spec alone: the charge, the horizon and design, each part's plan and its
derivation, which periods' rows the run of a period reads, and the expected errors at chosen periods.

- per_period: each period's statistics at the per-period budget (the whole budget; 1 - running_share under design
  both), from that period's rows only. Each row lies in one period (dpcli filters rows on their own field), so by
  parallel composition the T periods cost one charge. The sensitivities are the statistics' with the period as a
  leading ``by:`` key (dpcli.specs.model.periodic): under replace a row can move between periods (a count: L1 2).
  The running total to date is the sum of the released periods: its error is the sum of t independent noises.
- running_totals: a binary tree of dyadic blocks (dpcli.plan.tree), h = ceil(log2(T + 1)) levels; a row is in one
  block per level, so each block is drawn at 1/h of the running totals' budget (epsilon/h, rho/h), its derivation
  the same by:[period] one at each level (a count under replace: L1 2 per block, 2h over the tree).
- both: the budget split by running_share.
- ``method: factorization`` (running totals under Gaussian zCDP, add_remove): instead of the tree, one noisy
  product per period, (C x)_t + z_t with C the square root of the all-ones lower-triangular matrix rounded onto an
  integer lattice (dpcli.plan.factorization); a row changes the products by one column of C, so each product is
  drawn at 1 / |c_1|^2 of the running totals' rho (|c_1|^2 the largest column's squared norm, an exact integer).

A series' charge is its whole budget, once: the sum of the per-period plan's and h (or |c_1|^2) times the block
plan's.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from dpcli.core.accounting import Budget, format_exact
from dpcli.errors import InternalError, UsageError
from dpcli.plan.factorization import BITS, column_norm_squared
from dpcli.plan.model import Plan, make_plan
from dpcli.plan.tree import Block, ending_at, levels
from dpcli.specs.model import Series, Spec

__all__ = ["SeriesPlan", "check_series_runnable", "make_series_plan", "periods_read", "series_of"]


def series_of(spec: Spec) -> Series:
    if spec.series is None:
        raise InternalError("a series plan is made of a spec with a series")
    return spec.series


@dataclass(frozen=True)
class SeriesPlan:
    """A series' plan: its horizon, design, levels, the plan of its per-period values and of its tree's blocks."""

    spec: Spec
    series: Series
    levels: int  # h = ceil(log2(T + 1))
    per_period: Plan | None  # each period's statistics (designs per_period and both)
    blocks: Plan | None  # each block of the tree, or each product (designs running_totals and both)

    @property
    def factorized(self) -> bool:
        """The running totals are the factorisation's products (``method: factorization``), not the tree's blocks."""
        return self.series.running and self.series.method == "factorization"

    @property
    def multiplicity(self) -> int:
        """How many shares of one draw the running totals' part makes: h blocks per row (the tree), or |c_1|^2
        (the factorisation: each product's plan is at 1 / |c_1|^2 of the part)."""
        return column_norm_squared(self.series.periods) if self.factorized else self.levels

    @property
    def charge(self) -> Budget:
        """The series' whole charge, made once when its first period is released."""
        eps, rho, delta = Fraction(0), Fraction(0), Fraction(0)
        if self.per_period is not None:
            eps, rho, delta = self.per_period.epsilon, self.per_period.rho, self.per_period.selection_delta
        if self.blocks is not None:
            eps += self.multiplicity * self.blocks.epsilon
            rho += self.multiplicity * self.blocks.rho
        return Budget(eps, rho, delta)

    @property
    def main(self) -> Plan:
        """The plan whose statistics a period's table lists (the per-period one, else the blocks')."""
        plan = self.per_period or self.blocks
        if plan is None:
            raise InternalError("a series plans per-period values, a tree, or both")
        return plan

    def derivation(self) -> list[str]:
        """How the charge follows from the spec, line by line (``dpcli plan`` prints it)."""
        s = self.series
        relation = self.spec.privacy.neighbours
        out = [f"horizon: T = {s.periods} periods; design {s.design}"]
        if relation == "replace":
            out.append("neighbours replace: a row may move from one period to another, so each statistic's "
                       "sensitivity is its own with by: [period] over the T periods (a count: L1 2, not 1)")
        else:
            out.append("neighbours add_remove: each row lies in one period (its own field puts it there), so the "
                       "periods compose in parallel")
        if self.per_period is not None:
            part = "the whole budget" if self.blocks is None else (
                f"1 - running_share = {format_exact(1 - (s.running_share or Fraction(0)))} of the budget")
            if self.spec.privacy.person is not None:  # check_series_cap: only on a renewing cap
                out.append(f"per-period values: each period from its own rows at {part}, charged to that period's "
                           "own cap (a cap that renews per declared period, which a person unit needs: one person "
                           "may have rows in many periods); a person present in k periods has k times the budget "
                           "(k·ε)")
            else:
                out.append(f"per-period values: each period from its own rows at {part}, "
                           "charged once for all T periods (parallel composition; on a dataset whose cap renews per "
                           "declared period, once to each period's cap: a person present in k periods has k·ε)")
        if self.blocks is not None and self.factorized:
            share = Fraction(1) if self.per_period is None else (s.running_share or Fraction(0))
            norm = self.multiplicity
            out.append(f"running totals: the square-root factorisation on the lattice C = round(2^{BITS} L) (L the "
                       "square root of the all-ones lower-triangular matrix, coefficients of (1 - x)^(-1/2)); one "
                       "noisy product per period, (C x)_t + z_t, from the rows of periods 1..t")
            out.append(f"a row in period s changes the products by column s of C: the largest column's squared norm "
                       f"|c_1|^2 = {norm} (exact), so each product is drawn at {format_exact(share)}/|c_1|^2 of the "
                       f"rho: sigma^2 = |c_1|^2 Delta^2 / (2 rho_statistic), Delta the statistic's per-row L2")
            for sp in self.blocks.statistics:
                variances = ", ".join(f"{c.role} {format_exact(c.required_variance())}" for c in sp.components)
                out.append(f"  {sp.statistic.name}: sigma^2 per product cell = {variances}")
        elif self.blocks is not None:
            share = Fraction(1) if self.per_period is None else (s.running_share or Fraction(0))
            unit = "rho" if self.spec.privacy.accounting == "zcdp" else "epsilon"
            out.append(f"running totals: a binary tree of dyadic blocks, h = ceil(log2(T + 1)) = {self.levels} levels; "
                       f"a row is in one block per level, so each block gets {format_exact(share)}/{self.levels} of "
                       f"the {unit}")
        if self.spec.privacy.person is None:
            out.append("unit row: a series protects one row (one visit, one admission); a person with k rows "
                       "spends k times the budget on themselves: use a person unit for person data")
        return out

    def reads(self, t: int) -> list[int]:
        """``periods_read`` of this series."""
        return periods_read(self.series, t)


def periods_read(series: Series, t: int) -> list[int]:
    """The periods whose rows the run of period t reads when periods come in order: its own (per_period), the
    periods of the tree's blocks that end at t (each drawn from every row of its periods), or every period 1..t (the
    factorisation's product t weighs them all)."""
    first = t
    if series.running and series.method == "factorization":
        first = 1
    elif series.running:
        blocks: list[Block] = ending_at(t)
        first = min(b.first for b in blocks)
    return list(range(first, t + 1))


def check_series_runnable(spec: Spec, engine: str | None = None) -> None:
    """What a series' run refuses of its spec before anything is read or spent (exit 2), so that ``dpcli check``
    refuses it too: the Spark engine (it does not filter rows by their period). What a series asks of its dataset's
    cap (a person unit needs a renewing cap; a renewing cap takes per_period only) is
    dpcli.run.prepare.check_series_cap's, with the ledger."""
    series_of(spec)
    if (engine or spec.engine) == "spark":
        raise UsageError("a series runs on the polars engine: Spark does not filter rows by their period yet",
                         hint="use --engine polars")


def make_series_plan(spec: Spec) -> SeriesPlan:
    """The plan of a spec with a series: its per-period plan and its tree's block plan, each at its part."""
    series = series_of(spec)
    h = levels(series.periods)
    share = series.running_share or Fraction(0)
    per_period = blocks = None
    if series.design == "per_period":
        per_period = make_plan(spec)
    elif series.design == "running_totals":
        blocks = make_plan(spec, Fraction(1, _draws(series, h)))
    else:
        per_period = make_plan(spec, 1 - share)
        blocks = make_plan(spec, share / _draws(series, h))
    return SeriesPlan(spec, series, h, per_period, blocks)


def _draws(series: Series, h: int) -> int:
    """What one draw of the running totals gets of their part: 1/h (a tree's block) or 1/|c_1|^2 (a product)."""
    return column_norm_squared(series.periods) if series.method == "factorization" else h
