"""What the audit requires of the plan it reads: a noise part's scale or variance, a numeric column's grid, a
quantile's statistic. The plan always sets them where the audit reads them; a missing one is a bug in dpcli
(InternalError, raised before any noise is drawn or anything is reported), never something a spec can cause.
"""

from __future__ import annotations

from fractions import Fraction

from dpcli.errors import InternalError
from dpcli.plan.model import StatisticPlan
from dpcli.plan.sensitivity import NoiseComponent
from dpcli.specs.model import Column, Quantile


def scale(comp: NoiseComponent) -> Fraction:
    """A discrete Laplace or exponential part's scale (its temperature)."""
    if comp.scale is None:
        raise InternalError(f"noise part {comp.role}: a {comp.mechanism} mechanism without its scale")
    return comp.scale


def variance(comp: NoiseComponent) -> Fraction:
    """A discrete Gaussian part's variance."""
    if comp.variance is None:
        raise InternalError(f"noise part {comp.role}: a discrete Gaussian without its variance")
    return comp.variance


def precision(column: Column) -> Fraction:
    """A numeric column's grid step."""
    if column.precision is None:
        raise InternalError("a numeric column without its grid")
    return column.precision


def quantile(sp: StatisticPlan) -> Quantile:
    """The statistic of a quantile's part (a level, or its interval count)."""
    stat = sp.statistic
    if not isinstance(stat, Quantile):
        raise InternalError(f"statistic {stat.name}: a quantile's part on a {stat.kind}")
    return stat
