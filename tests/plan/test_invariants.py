"""The invariants of the plan, the mechanisms and post-processing are explicit InternalErrors, not asserts: they
hold under ``python -O`` too, and those a plan can break are raised when the plan is made, before any spend."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from fractions import Fraction

import pytest

from dpcli.errors import InternalError
from dpcli.plan.model import Plan, make_plan
from dpcli.plan.sensitivity import NoiseComponent
from dpcli.postprocess.consistency import check_plan
from dpcli.specs.load import parse_spec

SPEC = """version: 1
dataset: d
privacy: {epsilon: 1}
postprocess: {small_cells: {max_relative_width: 1, action: flag}}
columns:
  sex: {type: category, categories: [F, M]}
statistics:
  - {name: by_sex, kind: count, by: [sex]}
"""


def test_a_component_without_its_noise_parameter_is_refused_when_it_is_planned() -> None:
    with pytest.raises(InternalError, match="no noise parameter"):
        NoiseComponent("count", 1, "why", Fraction(1), None, Fraction(1))  # Laplace without a scale
    with pytest.raises(InternalError, match="no noise parameter"):  # Gaussian without a variance
        NoiseComponent("count", 1, "why", Fraction(0), None, Fraction(1), 0, "discrete_gaussian", Fraction(1))


def test_a_small_cell_policy_without_its_width_is_refused_before_the_spend() -> None:
    plan = make_plan(parse_spec(SPEC))
    check_plan(plan)
    policy = dataclasses.replace(plan.spec.postprocess["by_sex"], max_relative_width=None)
    broken = Plan(dataclasses.replace(plan.spec, postprocess={"by_sex": policy}), plan.statistics, plan.confidence)
    with pytest.raises(InternalError, match="max_relative_width"):
        check_plan(broken)  # prepare() runs it before the spend; the sidecar, after it, can no longer fail here


# Each line breaks one invariant; under -O an assert would let it through (a wrong draw, a silent pass)
UNDER_O = """
from types import SimpleNamespace
import numpy as np
from dpcli.errors import InternalError
from dpcli.mechanisms.noise import exact_noisy
from dpcli.mechanisms.quantiles import rank_counts
open_keys = SimpleNamespace(counts=np.array([1]), sums=None, squares=None, keys=((0, "a"),))  # the engine unloaded
checks = [
    lambda: rank_counts(np.zeros((1, 3), dtype=np.int64), 1, 4),  # bins for 3 candidates, the plan has 4
    lambda: exact_noisy([open_keys]),  # open keys without the plan
]
for check in checks:
    try:
        check()
        print("passed")
    except InternalError:
        print("InternalError")
"""


def test_the_mechanisms_invariants_hold_under_python_O() -> None:
    done = subprocess.run([sys.executable, "-O", "-c", UNDER_O], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["InternalError", "InternalError"], done.stderr
