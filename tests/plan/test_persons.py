"""Issue 12 before any data is read: the person unit and open keys in the spec, the plan's sensitivities from K, G
and R (checked against a brute-force search over everything one person can contribute), the partition-selection
threshold (checked against an independent high-precision evaluation), and the ledger's delta accounting."""

from __future__ import annotations

import itertools
import json
from fractions import Fraction as F
from pathlib import Path

import mpmath
import pytest

from dpcli.core.accounting import Budget, Cap, selection_delta, selection_threshold, zcdp_to_epsilon
from dpcli.errors import BudgetRefused, SpecError, UsageError
from dpcli.ledger import JsonlLedger
from dpcli.ledger.base import check_pin
from dpcli.plan.model import make_plan
from dpcli.specs.load import parse_spec
from tests.helpers import run_in_process
from tests.spec_builder import spec_text


def spec(privacy: str, columns: str, statistics: str) -> str:
    return spec_text(columns, statistics, privacy=privacy, dataset="d")


UNIT = "{id: pid, max_rows: 4, max_groups: 2, max_rows_per_group: 3, missing_id: drop}"
COLUMNS = (
    "  c: {type: category, categories: open}\n"
    "  s: {type: category, categories: [a, b, c]}\n"
    "  x: {type: int, bounds: [-2, 5]}\n"
)


def error(text: str) -> str:
    with pytest.raises(SpecError) as exc:
        make_plan(parse_spec(text))
    return str(exc.value)


# -- the spec ----------------------------------------------------------------------------------------------------


def test_a_person_unit_and_open_keys_load_as_declared() -> None:
    s = parse_spec(spec(
        f"{{epsilon: 1, delta: 1e-6, unit: {UNIT}}}",
        COLUMNS + "  o: {type: category, categories: open, max_length: 8}\n",
        "  - {name: n, kind: count, of: persons}\n  - {name: k, kind: count, by: [o, s]}\n"
        "  - {name: m, kind: mean, column: x, clamp: person}\n",
    ))
    unit = s.privacy.person
    assert unit is not None
    assert (unit.id, unit.max_rows, unit.max_groups, unit.max_rows_per_group) == ("pid", 4, 2, 3)
    assert s.privacy.unit == "person"
    assert s.privacy.pinned_unit == "person:pid"
    assert s.id_column == "pid"
    assert s.columns["o"].open
    assert s.columns["o"].max_length == 8
    assert s.columns["c"].max_length == 64
    assert s.statistics[0].of == "persons"
    assert s.statistics[2].clamp == "person"  # type: ignore[union-attr]


@pytest.mark.parametrize(("privacy", "columns", "statistics", "message"), [
    ("{epsilon: 1, delta: 1e-6}", COLUMNS, "  - {name: t, kind: sum, column: x, by: [c]}\n",
     "statistics[0].by: open keys ('c') are released only by counts and histograms (a key is released with its "
     "noisy count)"),
    ("{epsilon: 1, delta: 1e-6}", COLUMNS + "  o: {type: category, categories: open}\n",
     "  - {name: t, kind: count, by: [c, o]}\n", "statistics[0].by: at most one open column per statistic ('c', 'o')"),
    ("{epsilon: 1}", COLUMNS, "  - {name: t, kind: count, by: [c]}\n",
     "privacy.delta: required: statistics[0] has open keys, whose partition selection spends a delta"),
    ("{epsilon: 1, delta: 1e-6}", COLUMNS, "  - {name: t, kind: count, by: [c], mechanism: gaussian}\n",
     "statistics[0].mechanism: open keys are selected with discrete Laplace noise: use laplace"),
    ("{epsilon: 1}", COLUMNS, "  - {name: t, kind: count, by: [s], delta: 1e-7}\n",
     "statistics[0].delta: only for a statistic with open keys (its partition selection's delta)"),
    ("{epsilon: 1}", COLUMNS, "  - {name: t, kind: count, of: persons}\n",
     "statistics[0].of: needs a person unit (privacy.unit: {id: FIELD, ...})"),
    ("{epsilon: 1}", COLUMNS, "  - {name: t, kind: sum, column: x, clamp: person}\n",
     "statistics[0].clamp: needs a person unit (privacy.unit: {id: FIELD, ...})"),
    (f"{{epsilon: 1, unit: {UNIT}}}", COLUMNS, "  - {name: t, kind: sum, column: x}\n",
     "statistics[0].clamp: required under a person unit: row (clamp each row's value) or person (clamp each "
     "person's total)"),
    ("{epsilon: 1, unit: {id: x, max_rows: 2, missing_id: drop}}", COLUMNS, "  - {name: t, kind: count}\n",
     "privacy.unit.id: 'x' is a declared column: person ids are not public, leave it undeclared"),
    ("{epsilon: 1, unit: {id: pid, max_rows: 2}}", COLUMNS, "  - {name: t, kind: count}\n",
     "privacy.unit.missing_id: required field is missing"),
    ("{epsilon: 1, unit: {id: pid, max_rows: 0, missing_id: drop}}", COLUMNS, "  - {name: t, kind: count}\n",
     "privacy.unit.max_rows: the value must be in [1, 1000000], got 0"),
    ("{epsilon: 1, unit: {id: pid, max_rows: '2.5', missing_id: drop}}", COLUMNS, "  - {name: t, kind: count}\n",
     "privacy.unit.max_rows: '2.5' is not written as an integer: an integer field takes digits only, with no sign, "
     "decimal point, exponent or fraction"),
    ("{epsilon: 1, unit: person}", COLUMNS, "  - {name: t, kind: count}\n",
     "privacy.unit: 'person' is not a unit: row, or a person unit {id: FIELD, max_rows: K, missing_id: drop or "
     "person}"),
    ("{epsilon: 1}", "  s: {type: category, categories: [a], max_length: 3}\n", "  - {name: t, kind: count}\n",
     "columns.s.max_length: only for an open column (categories: open)"),
    ("{epsilon: 1, delta: 1e-6}", "  s: {type: category, categories: open, other: a}\n", "  - {name: t, kind: count}\n",
     "columns.s.other: not allowed for an open column (its keys come from the data)"),
    ("{epsilon: 1, delta: 1e-6}", COLUMNS, "  - {name: t, kind: count, by: [c]}\n"
     "  - {name: g, kind: count, mechanism: gaussian}\n",
     "statistics[0].delta: required in a zCDP release: the delta this statistic's partition selection spends (the "
     "rest of privacy.delta goes to the zCDP conversion)"),
    ("{epsilon: 1, delta: 1e-6}", COLUMNS, "  - {name: t, kind: count, by: [c], delta: 1e-6}\n"
     "  - {name: g, kind: count, mechanism: gaussian}\n",
     "statistics[0].delta: the selections' deltas add up to 0.000001, which leaves nothing of privacy.delta = "
     "0.000001 for the zCDP conversion"),
    ("{epsilon: 1, delta: 1e-6}", COLUMNS, "  - {name: t, kind: count, by: [c], delta: 2e-6}\n",
     "statistics[0].delta: the selections' deltas add up to 0.000002, more than privacy.delta = 0.000001"),
    ("{epsilon: 1, delta: 1e-6}", COLUMNS, "  - {name: t, kind: count, by: [c], delta: 1e-7}\n"
     "  - {name: u, kind: histogram, column: c}\n",
     "statistics[1].delta: either every open-key statistic names its delta, or none does (privacy.delta is then "
     "split evenly)"),
])
def test_the_rules_of_persons_and_open_keys(privacy: str, columns: str, statistics: str, message: str) -> None:
    assert error(spec(privacy, columns, statistics)) == message


def test_without_a_header_line_the_id_must_be_a_named_field() -> None:
    body = spec(
        f"{{epsilon: 1, unit: {UNIT}}}", "  s: {type: category, categories: [a]}\n", "  - {name: t, kind: count}\n"
    )
    assert error(body + "csv: {header: false}\n") == (
        "privacy.unit.id: 'pid' is not among the input's fields: name it in csv.header"
    )
    assert parse_spec(body + "csv: {header: [s, pid]}\n").id_column == "pid"


# -- the plan's sensitivities against everything one person can do -----------------------------------------------


def contributions(cells: int, k: int, g: int | None, r: int | None, persons: bool) -> list[tuple[int, ...]]:
    """Every vector of per-cell counts one person can add once bounded: at most K rows, in at most G cells, at most
    R in each (a count of persons: 0 or 1 per cell)."""
    per = 1 if persons else min(k, r or k)
    out = []
    for v in itertools.product(range(per + 1), repeat=cells):
        if sum(1 for x in v if x) > min(g or k, k) or (not persons and sum(v) > k):
            continue
        out.append(v)
    return out


def sums(v: tuple[int, ...], lo: int, hi: int, per_person: bool) -> list[tuple[int, ...]]:
    """The extreme per-cell sums of a contribution: each cell at its lowest or highest (row clamp: c rows at L or
    U; person clamp: the person's total at L or U)."""
    options = [((0,) if c == 0 else (lo, hi) if per_person else (c * lo, c * hi)) for c in v]
    return list(itertools.product(*options))


def worst(vectors: list[tuple[int, ...]], replace: bool) -> tuple[int, int]:
    """(max L1, max L2²) of a contribution (add/remove) or of the difference of two (replace)."""
    pairs = itertools.product(vectors, vectors) if replace else ((tuple(0 for _ in v), v) for v in vectors)
    l1 = l2 = 0
    for a, b in pairs:
        d = [y - x for x, y in zip(a, b, strict=True)]
        l1, l2 = max(l1, sum(abs(x) for x in d)), max(l2, sum(x * x for x in d))
    return l1, l2


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
@pytest.mark.parametrize("neighbours", ["add_remove", "replace"])
@pytest.mark.parametrize(("k", "g", "r"), [(1, None, None), (3, None, None), (4, 2, None), (4, None, 2), (5, 2, 2),
                                           (3, 3, 1)])
@pytest.mark.parametrize("bounds", [(0, 3), (-2, 3)])
def test_sensitivities_cover_every_contribution_one_person_can_make(
    mechanism: str, neighbours: str, k: int, g: int | None, r: int | None, bounds: tuple[int, int]
) -> None:
    """A brute-force search over what one bounded person adds to each statistic (3 cells, or none) never exceeds the
    plan's L1 (Laplace) and L2² (Gaussian), and reaches them for counts under add/remove (tight there)."""
    parts = [f"id: pid, max_rows: {k}", "missing_id: drop"]
    parts += [f"max_groups: {g}"] if g else []
    parts += [f"max_rows_per_group: {r}"] if r else []
    lo, hi = bounds
    budget = "epsilon: 1" if mechanism == "laplace" else "rho: 1"
    statistics = (
        "  - {name: rows, kind: count, by: [s]}\n  - {name: persons, kind: count, of: persons, by: [s]}\n"
        "  - {name: rsum, kind: sum, column: x, clamp: row, by: [s]}\n"
        "  - {name: psum, kind: sum, column: x, clamp: person, by: [s]}\n"
        "  - {name: total, kind: count}\n  - {name: tsum, kind: sum, column: x, clamp: row}\n"
        "  - {name: tpsum, kind: sum, column: x, clamp: person}\n"
        "  - {name: vsq, kind: variance, column: x, by: [s]}\n  - {name: tvsq, kind: std, column: x}\n"
    ).replace("}\n", f", mechanism: {mechanism}}}\n")
    text = spec(
        f"{{{budget}, neighbours: {neighbours}, unit: {{{', '.join(parts)}}}}}",
        f"  s: {{type: category, categories: [a, b, c]}}\n  x: {{type: int, bounds: [{lo}, {hi}]}}\n", statistics
    )
    # a variance's or std's sum of squares: its second part (each row's rounded centred square in [0, Q])
    plan = {sp.statistic.name: sp.components[1 if sp.statistic.name in ("vsq", "tvsq") else 0]
            for sp in make_plan(parse_spec(text)).statistics}
    centre = (lo + hi) // 2
    largest_square = max(centre - lo, hi - centre) ** 2
    replace = neighbours == "replace"
    rows, persons = contributions(3, k, g, r, False), contributions(3, k, g, r, True)
    single = [(n,) for n in range(k + 1)]
    found = {
        "rows": worst(rows, replace),
        "persons": worst(persons, replace),
        "rsum": worst([s for v in rows for s in sums(v, lo, hi, False)], replace),
        "psum": worst([s for v in rows for s in sums(v, lo, hi, True)], replace),
        "total": worst(single, replace),
        "tsum": worst([s for v in single for s in sums(v, lo, hi, False)], replace),
        "tpsum": worst([s for v in single for s in sums(v, lo, hi, True)], replace),
        "vsq": worst([s for v in rows for s in sums(v, 0, largest_square, False)], replace),
        "tvsq": worst([s for v in single for s in sums(v, 0, largest_square, False)], replace),
    }
    for name, (l1, l2) in found.items():
        comp = plan[name]
        if mechanism == "laplace":
            assert l1 <= comp.sensitivity, (name, l1, comp.sensitivity)
            if not replace and name in ("rows", "persons", "total"):
                assert l1 == comp.sensitivity, (name, l1, comp.sensitivity)
        else:
            assert l2 <= comp.l2_squared, (name, l2, comp.l2_squared)
            if not replace and name in ("rows", "persons", "total"):
                assert l2 == comp.l2_squared, (name, l2, comp.l2_squared)


def test_the_plan_prints_how_k_g_and_r_make_each_sensitivity() -> None:
    plan = make_plan(parse_spec(spec(
        f"{{rho: 1, unit: {UNIT}}}", COLUMNS, "  - {name: k, kind: count, by: [s], mechanism: gaussian}\n"
    )))
    comp = plan.statistics[0].components[0]
    assert comp.sensitivity == 4
    assert comp.l2_squared == 10  # 4 rows: 3 in one cell and 1 in another
    assert comp.derivation == (
        "add/remove one person (K=4, G=2, R=3): one person has at most 4 rows (K=4), in at most g=2 cells, r=3 in "
        "each, so the count changes by L1 4 (L2² 10)"
    )


# -- the partition selection's threshold -------------------------------------------------------------------------


def true_delta(t: F, keys: int, per_key: int, tau: int) -> mpmath.mpf:
    """g q^(tau - r) / (1 + q) at 60 digits, without the interval arithmetic the plan uses."""
    with mpmath.workdps(60):
        q = mpmath.exp(-mpmath.mpf(t.denominator) / t.numerator)
        return keys * q ** (tau - per_key) / (1 + q)


@pytest.mark.parametrize(("t", "keys", "per_key", "delta"), [
    (F(1), 1, 1, F(1, 10**6)), (F(2), 1, 1, F(1, 10**9)), (F(10, 3), 4, 3, F(1, 10**7)), (F(1, 7), 2, 1, F(1, 100)),
    (F(1000), 30, 5, F(1, 10**12)),
])
def test_the_threshold_is_the_smallest_whose_delta_fits(t: F, keys: int, per_key: int, delta: F) -> None:
    tau = selection_threshold(t, keys, per_key, delta)
    with mpmath.workdps(60):
        def mp(x: F) -> mpmath.mpf:
            return mpmath.mpf(x.numerator) / x.denominator

        assert true_delta(t, keys, per_key, tau) <= mp(delta)
        assert true_delta(t, keys, per_key, tau - 1) > mp(delta) or tau == per_key + 1
        # the bound the plan records is rigorous and tight
        exact, spent = true_delta(t, keys, per_key, tau), mp(selection_delta(t, keys, per_key, tau))
        assert exact <= spent <= exact * (1 + mpmath.mpf(10) ** -20)


def test_open_key_plans_carry_the_threshold_from_the_count_scale_and_the_persons_reach() -> None:
    plan = make_plan(parse_spec(spec(
        f"{{epsilon: 1, delta: 1e-6, unit: {UNIT}}}", COLUMNS,
        "  - {name: k, kind: count, by: [c]}\n  - {name: p, kind: count, by: [c], of: persons}\n",
    )))
    rows, persons = plan.statistics
    assert rows.selection is not None
    assert persons.selection is not None
    assert (rows.selection.keys, rows.selection.per_key) == (2, 3)  # G=2 keys, R=3 rows in each
    assert (persons.selection.keys, persons.selection.per_key) == (2, 1)
    for sp in (rows, persons):
        sel = sp.selection
        assert sel is not None
        assert sel.delta == F(1, 2 * 10**6)  # privacy.delta split evenly
        scale = sp.components[0].scale
        assert scale is not None
        assert sel.threshold == selection_threshold(scale, sel.keys, sel.per_key, sel.delta)
    assert plan.selection_delta == F(1, 10**6)
    assert plan.cost_text() == "ε=1, δ=0.000001"


def test_a_zcdp_release_converts_at_what_the_selections_leave() -> None:
    plan = make_plan(parse_spec(spec(
        "{epsilon: 1, delta: 1e-6}", COLUMNS,
        "  - {name: k, kind: count, by: [c], delta: 4e-7}\n  - {name: g, kind: count, mechanism: gaussian}\n",
    )))
    assert plan.selection_delta == F(4, 10**7)
    assert plan.conversion_delta == F(6, 10**7)
    assert plan.epsilon_at_delta == zcdp_to_epsilon(plan.rho, F(6, 10**7))
    assert plan.epsilon_at_delta <= 1


# -- the ledger --------------------------------------------------------------------------------------------------


def test_selection_deltas_add_up_against_the_caps_delta(tmp_path: Path) -> None:
    book = JsonlLedger(tmp_path / "l.jsonl")
    book.set_cap("d", Cap(F(10), F(3, 10**6)), allow_raise=False)
    book.spend("d", Budget(F(1), selection_delta=F(2, 10**6)))
    status = book.status("d")
    assert status is not None
    assert status.delta_spent == F(2, 10**6)
    assert status.spent == 1
    with pytest.raises(BudgetRefused) as exc:
        book.spend("d", Budget(F(1), selection_delta=F(2, 10**6)))
    assert str(exc.value) == (
        "budget refused for dataset 'd': its partition selections spend δ=0.000002, and the cap's δ=0.000003 has "
        "δ=0.000001 left"
    )
    assert book.status("d") == status
    # zCDP spends are converted at what the selections left of the cap's delta
    book.spend("d", Budget(F(0), rho=F(1, 100)))
    after = book.status("d")
    assert after is not None
    assert (after.spent == min(
        F(1) + zcdp_to_epsilon(F(1, 100), F(1, 10**6)), zcdp_to_epsilon(F(1, 100) + F(1, 2), F(1, 10**6))
    ))
    with pytest.raises(BudgetRefused, match="would leave no δ of the cap"):
        book.spend("d", Budget(F(0), selection_delta=F(1, 10**6)))
    spends = [json.loads(line) for line in (tmp_path / "l.jsonl").read_text().splitlines() if '"spend"' in line]
    assert [s.get("delta") for s in spends] == ["0.000002", None]


def test_a_selection_against_a_cap_without_delta_is_refused(tmp_path: Path) -> None:
    book = JsonlLedger(tmp_path / "l.jsonl")
    book.set_cap("d", Cap(F(10), F(0)), allow_raise=False)
    with pytest.raises(BudgetRefused, match="has δ=0 left"):
        book.spend("d", Budget(F(1), selection_delta=F(1, 10**9)))


def test_the_person_unit_is_pinned_with_its_id_field(tmp_path: Path) -> None:
    book = JsonlLedger(tmp_path / "l.jsonl")
    book.set_cap("d", Cap(F(10), F(0)), allow_raise=False, unit="person:pid", neighbours="add_remove")
    status = book.status("d")
    check_pin(status, "d", "person:pid", "add_remove", book.name)
    with pytest.raises(UsageError, match="accounted under unit 'person:pid'"):
        check_pin(status, "d", "row", "add_remove", book.name)
    led = str(tmp_path / "l.jsonl")
    result = run_in_process(
        "budget", "set", "e", "--epsilon", "1", "--neighbours", "add_remove", "--unit", "person:pid", "--ledger", led
    )
    assert result.returncode == 0, result.stderr
    bad = run_in_process("budget", "set", "e", "--epsilon", "1", "--unit", "people", "--ledger", led)
    assert bad.returncode == 2
    assert "--unit: 'people' is not a unit (row, or person:FIELD)" in bad.stderr.decode()
