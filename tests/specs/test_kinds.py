"""The table of statistic kinds (dpcli/specs/kinds.py) is complete: every kind the spec accepts has one entry, every
entry
sets every trait, and the modules that dispatch on a trait's values handle each value."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from dpcli.specs.kinds import INTERNAL_KINDS, KINDS, Family, Kind
from dpcli.specs.load import parse_spec
from dpcli.specs.model import Statistic
from dpcli.specs.rules import STATISTIC_BUILDERS
from dpcli.specs.v1 import POSTPROCESS_KINDS, STATISTIC, STATISTIC_KINDS
from tests.spec_builder import spec_text

# one statistic of each kind, as a spec writes it (a frequency reads a randomized file: no budget of its own)
EXAMPLES = {
    "count": "{name: s, kind: count}",
    "histogram": "{name: s, kind: histogram, column: sex}",
    "sum": "{name: s, kind: sum, column: age}",
    "mean": "{name: s, kind: mean, column: age}",
    "quantile": "{name: s, kind: quantile, column: age, q: [0.5]}",
    "median": "{name: s, kind: median, column: age}",
    "top_k": "{name: s, kind: top_k, column: sex, k: 1}",
    "mode": "{name: s, kind: mode, column: sex}",
    "variance": "{name: s, kind: variance, column: age}",
    "std": "{name: s, kind: std, column: age}",
    "frequency": "{name: s, kind: frequency, column: sex, randomized: {epsilon: 1}}",
}


def spec_of(kind: str) -> str:
    privacy = "{unit: row}" if kind == "frequency" else "{unit: row, neighbours: add_remove, epsilon: 1}"
    columns = {"age": "{type: int, bounds: [0, 100]}", "sex": "{type: category, categories: [F, M]}"}
    return spec_text(columns, [EXAMPLES[kind]], privacy=privacy, dataset="d")


def test_the_spec_accepts_exactly_the_kinds_of_the_table() -> None:
    # the internal kinds (a synth spec's marginals: dpcli.plan.synth) are planning's, never a spec's
    assert tuple(k for k in KINDS if k not in INTERNAL_KINDS) == STATISTIC_KINDS
    assert [v.tag for v in STATISTIC.variants] == list(STATISTIC_KINDS)  # the declaration: one variant per kind
    assert set(EXAMPLES) == set(STATISTIC_KINDS)
    assert set(STATISTIC_BUILDERS) == set(STATISTIC_KINDS)  # each kind's typed statistic


@pytest.mark.parametrize("name", list(STATISTIC_KINDS))
def test_each_kind_loads_as_the_statistic_of_its_entry(name: str) -> None:
    (stat,) = parse_spec(spec_of(name)).statistics
    assert stat.kind == name
    assert KINDS[stat.kind].name == name


def test_every_statistic_class_is_a_kind_of_the_table() -> None:
    for cls in typing.get_args(Statistic):
        # TopK's kind is a field ("top_k" or "mode"); the others' a class constant
        kind = cls.kind if isinstance(cls.__dict__.get("kind"), str) else cls.__dataclass_fields__["kind"].default
        assert kind in KINDS, cls


def test_every_trait_is_required() -> None:
    # a default would let an entry leave the trait out unnoticed
    defaulted = [f.name for f in dataclasses.fields(Kind)
                 if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING]
    assert defaulted == []


def test_an_entry_without_a_trait_is_refused() -> None:
    traits = {f.name: getattr(KINDS["count"], f.name) for f in dataclasses.fields(Kind)}
    for name in traits:
        with pytest.raises(TypeError, match=name):
            Kind(**{k: v for k, v in traits.items() if k != name})


@pytest.mark.parametrize("name", list(KINDS))
def test_every_trait_is_set_to_a_value_of_its_type(name: str) -> None:
    hints = typing.get_type_hints(Kind)
    kind = KINDS[name]
    assert kind.name == name
    for field in dataclasses.fields(Kind):
        value = getattr(kind, field.name)
        assert isinstance(value, hints[field.name]), (name, field.name, value)
    assert kind.memory_per_cell > 0


def test_the_traits_agree_with_each_other() -> None:
    for kind in KINDS.values():
        assert not kind.sums_squares or kind.sums_column, kind.name
        assert not (kind.nonnegative or kind.rounded or kind.consistent) or kind.postprocess, kind.name
    assert tuple(name for name, kind in KINDS.items() if kind.postprocess) == POSTPROCESS_KINDS
    # `postprocess:` is one of the fields of exactly those kinds' variants
    assert [v.tag for v in STATISTIC.variants if "postprocess" in v.allowed] == list(POSTPROCESS_KINDS)


def test_every_family_has_its_draw() -> None:
    from dpcli.mechanisms.noise import DRAWS

    assert set(DRAWS) == set(Family)
