"""Synthetic data's exact marginals on Spark (issue 27): the same counts as the polars engine, one-ways and every
candidate pair, on the Adult extract (cut into several splits) and on a file of hostile cells; and `dpcli synth
--engine spark` end to end. Marked ``spark`` (`make test-spark`), as tests/engine/test_spark_engine.py."""

from __future__ import annotations

import random

import pytest

from dpcli.plan.synth import make_synth_plan
from dpcli.specs.load import parse_spec
from tests.engine.test_spark_engine import ADULT, assert_parity, hostile_lines
from tests.helpers import run_in_process

pytestmark = pytest.mark.spark

SPEC = """\
version: 1
dataset: adult
privacy: {rho: 1}
columns:
  age:            {type: int, bounds: [17, 90]}
  hours_per_week: {type: float, bounds: [1, 99], precision: 0.5}
  sex:            {type: category, categories: [Female, Male]}
  income:         {type: category, categories: ['<=50K', '>50K']}
  workclass:      {type: category, categories: [Private, State-gov, Federal-gov], other: Private}
synth:
  method: mst
  columns:
    age:            {bins: [17, 30, 45, 65, 91]}
    hours_per_week: {bins: {start: 0, stop: 100, step: 20}, missing: keep}
    sex:            {}
    income:         {missing: keep}
    workclass:      {missing: keep}
"""


def test_adult_marginals_are_the_polars_engines(spark):
    plan = make_synth_plan(parse_spec(SPEC))
    want = assert_parity(spark, plan.exact_plan, ADULT)
    assert len(want) == 5 + 10  # every one-way and every candidate pair


def test_hostile_cells_give_the_polars_engines_marginals(spark, tmp_path):
    header = b"age,hours_per_week,sex,income,workclass"
    rng = random.Random(11)
    lines = [b",".join(rng.choice([*hostile_lines(rng, 1)[0].split(b","), b"", b"40", b"Male", b">50K"])
                       for _ in range(5)) for _ in range(400)]
    data = tmp_path / "h.csv"
    data.write_bytes(header + b"\n" + b"\n".join(lines) + b"\n")
    assert_parity(spark, make_synth_plan(parse_spec(SPEC)).exact_plan, data)


def test_dpcli_synth_with_the_spark_engine_end_to_end(spark, tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    ledger = tmp_path / "l.jsonl"
    assert run_in_process("budget", "set", "adult", "--epsilon", "100", "--delta", "1e-6", "--ledger",
                          ledger).returncode == 0
    done = run_in_process("synth", spec, "--engine", "spark", "--spark-master", "local[2]", "--input", ADULT,
                          "--ledger", ledger, "-o", tmp_path / "o.csv")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "o.csv").read_text().startswith("age,hours_per_week,sex,income,workclass\n")
