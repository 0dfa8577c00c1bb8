"""`dpcli plan`'s rows (dpcli.cli.render_plan.plan_rows) check the plan's invariants with an explicit InternalError, not
an `assert` that `python -O` drops: a Gaussian component carries its variance, every other one its scale."""

from __future__ import annotations

import dataclasses
import re

import pytest

from dpcli.cli.render_plan import plan_rows
from dpcli.errors import InternalError
from dpcli.plan.model import Plan, make_plan
from dpcli.spec.load import parse_spec

SPEC = """\
version: 1
dataset: toy
privacy: {{unit: row, neighbours: add_remove, {privacy}}}
columns:
  age: {{type: int, bounds: [17, 91]}}
statistics:
  - {{name: people, kind: count{mechanism}}}
"""


def without(plan: Plan, field: str) -> Plan:
    """The plan with its one component's ``field`` missing: what no plan builder makes."""
    (sp,) = plan.statistics
    (component,) = sp.components
    broken = dataclasses.replace(sp, components=(dataclasses.replace(component, **{field: None}),))
    return dataclasses.replace(plan, statistics=(broken,))


@pytest.mark.parametrize(
    ("privacy", "mechanism", "field", "message"),
    [
        ("epsilon: 1, delta: 1e-6", ", mechanism: gaussian", "variance", "is Gaussian without a variance"),
        ("epsilon: 1", "", "scale", "(discrete_laplace) has no scale"),
    ],
)
def test_a_component_without_its_noise_parameter_is_an_internal_error(
    privacy: str, mechanism: str, field: str, message: str
) -> None:
    plan = make_plan(parse_spec(SPEC.format(privacy=privacy, mechanism=mechanism)))
    assert plan_rows(plan)  # the plan as built renders
    with pytest.raises(InternalError, match=re.escape(f"the plan's count of 'people' {message}")):
        plan_rows(without(plan, field))
