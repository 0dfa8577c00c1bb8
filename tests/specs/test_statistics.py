"""The spec's statistics and the epsilon split (dpcli/specs/model.py, dpcli.plan.model.split_budget): a good case and a
bad case of each rule, with the full one-line message."""

from __future__ import annotations

import tracemalloc
from fractions import Fraction

import pytest

from dpcli.plan.budget import split_budget
from dpcli.specs.load import parse_spec
from dpcli.specs.model import EdgeBins, GridBins
from tests.specs.test_model import NOT_A_NUMBER, error, stat, text

# ---------------------------------------------------------------------------------------------------------------
# Statistics


def test_statistics_accepted():
    spec = parse_spec(
        stat(
            "{name: people, kind: count}",
            "{name: by_sex, kind: count, by: [sex, flag]}",
            "{name: age_hist, kind: histogram, column: age, bins: [17, 25, 91]}",
            "{name: age_grid, kind: histogram, column: age, bins: {start: 0, stop: 100, step: 2.5}, by: [sex]}",
            "{name: sex_hist, kind: histogram, column: sex}",
            "{name: total, kind: sum, column: gain, mechanism: laplace}",
            "{name: mean_age, kind: mean, column: age, by: [sex]}",
        )
    )
    s = spec.statistics
    assert [x.name for x in s] == ["people", "by_sex", "age_hist", "age_grid", "sex_hist", "total", "mean_age"]
    assert s[1].by == ("sex", "flag")
    assert s[1].column is None
    assert s[1].bins is None
    assert s[2].bins == EdgeBins((Fraction(17), Fraction(25), Fraction(91)))
    assert s[2].bins.count == 2
    assert s[3].bins == GridBins(Fraction(0), Fraction(100), Fraction(5, 2))
    assert s[3].bins.count == 40
    assert s[3].bins.edge(3) == Fraction(15, 2)
    assert s[3].dimensions == ("sex", "age")
    assert s[4].bins is None
    assert s[4].dimensions == ("sex",)
    assert s[5].mechanism == "laplace"
    assert spec.dimensions == ("sex", "flag", "age")


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            ["{name: a, kind: count}", "{name: a, kind: sum, column: age}"],
            "statistics[1].name: duplicate statistic name 'a'",
        ),
        (
            ["{name: 'a b', kind: count}"],
            "statistics[0].name: 'a b' is not a valid statistic name "
            "(letters, digits, _ . -; starting with a letter or _)",
        ),
        (
            ["{name: a, kind: percentile, column: age}"],
            "statistics[0].kind: 'percentile' is not a statistic kind (one of: count, histogram, sum, mean, quantile, "
            "median, top_k, mode, variance, std, frequency)",
        ),
        (["{name: a, kind: count, column: age}"], "statistics[0].column: a count counts rows: use by: to split it"),
        (["{name: a, kind: sum}"], "statistics[0].column: required for a sum"),
        (["{name: a, kind: mean}"], "statistics[0].column: required for a mean"),
        (["{name: a, kind: histogram}"], "statistics[0].column: required for a histogram"),
        (
            ["{name: a, kind: count}", "{name: b, kind: count}", "{name: c, kind: sum, column: incme}"],
            "statistics[2].column: 'incme' is not a declared column",
        ),
        (
            ["{name: a, kind: sum, column: sex}"],
            "statistics[0].column: a sum needs a numeric column; 'sex' is category",
        ),
        (
            ["{name: a, kind: mean, column: flag}"],
            "statistics[0].column: a mean needs a numeric column; 'flag' is bool",
        ),
        (
            ["{name: a, kind: count, by: [age]}"],
            "statistics[0].by[0]: 'age' is numeric: group by category or bool columns, or use a histogram with bins",
        ),
        (
            ["{name: a, kind: sum, column: age, by: [sex, gain]}"],
            "statistics[0].by[1]: 'gain' is numeric: group by category or bool columns, or use a histogram with bins",
        ),
        (["{name: a, kind: count, by: [sex, sex]}"], "statistics[0].by[1]: 'sex' is used twice"),
        (["{name: a, kind: histogram, column: sex, by: [sex]}"], "statistics[0].by[0]: 'sex' is used twice"),
        (["{name: a, kind: count, by: [race]}"], "statistics[0].by[0]: 'race' is not a declared column"),
        (["{name: a, kind: count, by: []}"], "statistics[0].by: expected at least 1 item"),
        (["{name: a, kind: count, by: sex}"], "statistics[0].by: expected a list"),
        (
            ["{name: a, kind: histogram, column: age}"],
            "statistics[0].bins: required for a histogram of a numeric column (edges or {start, stop, step})",
        ),
        (
            ["{name: a, kind: histogram, column: sex, bins: [0, 1]}"],
            "statistics[0].bins: a histogram of a category or bool column has one bin per declared key",
        ),
        (
            ["{name: a, kind: histogram, column: flag, bins: [0, 1]}"],
            "statistics[0].bins: a histogram of a category or bool column has one bin per declared key",
        ),
        (["{name: a, kind: sum, column: age, bins: [1, 2]}"], "statistics[0].bins: not allowed for a sum"),
        (["{name: a, kind: count, bins: [1, 2]}"], "statistics[0].bins: not allowed for a count (use a histogram)"),
        (
            ["{name: a, kind: count, mechanism: exponential}"],
            "statistics[0].mechanism: 'exponential' is not available (one of: laplace, gaussian)",
        ),
        (["{name: a, kind: count, weight: 0}"], "statistics[0].weight: must be positive, got 0"),
        (["{name: a, kind: count, weight: -1}"], "statistics[0].weight: must be positive, got -1"),
        (["{name: a, kind: count, weight: lots}"], f"statistics[0].weight: 'lots' {NOT_A_NUMBER}"),
    ],
)
def test_statistics_refused(lines, message):
    assert error(stat(*lines)) == message


def test_statistics_empty_list():
    assert error(text(statistics="  []\n")) == "statistics: expected at least 1 item"


@pytest.mark.parametrize(
    ("bins", "message"),
    [
        ("[17, 30, 25, 91]", "statistics[0].bins[2]: bin edges must be increasing"),
        ("[17, 25, 25, 91]", "statistics[0].bins[2]: duplicate bin edge"),
        ("[17]", "statistics[0].bins: expected at least 2 items"),
        ("[17, x]", f"statistics[0].bins[1]: 'x' {NOT_A_NUMBER}"),
        ("{start: 0, stop: 100, step: 3}", "statistics[0].bins.step: (stop - start) must be a whole number of steps"),
        ("{start: 0, stop: 1, step: 0.3}", "statistics[0].bins.step: (stop - start) must be a whole number of steps"),
        ("{start: 100, stop: 0, step: 1}", "statistics[0].bins.stop: must be greater than start"),
        ("{start: 5, stop: 5, step: 1}", "statistics[0].bins.stop: must be greater than start"),
        ("{start: 0, stop: 100, step: 0}", "statistics[0].bins.step: must be positive, got 0"),
        ("{start: 0, stop: 100, step: -1}", "statistics[0].bins.step: must be positive, got -1"),
        ("{start: 0, stop: inf, step: 1}", f"statistics[0].bins.stop: 'inf' {NOT_A_NUMBER}"),
        ("17", "statistics[0].bins: expected a mapping"),
    ],
)
def test_bins_refused(bins, message):
    assert error(stat(f"{{name: h, kind: histogram, column: age, bins: {bins}}}")) == message


def test_bins_accepted():
    spec = parse_spec(stat("{name: h, kind: histogram, column: age, bins: {start: 0, stop: 1, step: 0.1}}"))
    assert spec.statistics[0].bins.count == 10  # exact: 0.1 is 1/10, not a float
    spec = parse_spec(stat("{name: h, kind: histogram, column: age, bins: [-1e3, 0.5, 17, 1e4]}"))
    assert spec.statistics[0].bins.edges == (Fraction(-1000), Fraction(1, 2), Fraction(17), Fraction(10000))


def test_grid_over_ten_million_bins_refused():
    spec_text = stat("{name: h, kind: histogram, column: gain, bins: {start: 0, stop: 100000, step: 0.001}}")
    assert error(spec_text) == "statistics[0].bins.step: 100000000 bins is over the limit of 10000000"


def test_too_many_cells_refused():
    # 5,000,001 bins x 2 sexes
    spec_text = stat("{name: h, kind: histogram, column: gain, by: [sex], bins: {start: 0, stop: 5000001, step: 1}}")
    assert error(spec_text) == "statistics[0]: 10000002 cells is over the limit of 10000000 per statistic"
    spec_text = stat("{name: h, kind: histogram, column: gain, by: [sex], bins: {start: 0, stop: 5000000, step: 1}}")
    assert parse_spec(spec_text).statistics[0].bins.count == 5_000_000


def test_ten_million_bins_accepted():
    spec_text = stat("{name: h, kind: histogram, column: gain, bins: {start: 0, stop: 100000, step: 0.01}}")
    assert parse_spec(spec_text).statistics[0].bins.count == 10_000_000


def test_million_cell_grid_accepted_without_building_it():
    spec_text = stat("{name: h, kind: histogram, column: gain, bins: {start: 0, stop: 1000000, step: 1}}")
    tracemalloc.start()
    try:
        spec = parse_spec(spec_text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert spec.statistics[0].bins.count == 1_000_000
    # the bins are counted, not listed (~50 KB measured): a million edges take 8 MB as float64, more as objects
    assert peak < 1_000_000, peak


@pytest.mark.parametrize(
    "name", ["value", "statistic", "ci_low", "ci_high", "epsilon", "rho", "kind", "column", "bin_low", "bin_high"]
)
def test_dimension_named_like_an_output_column_refused(name):
    # rho is the last column of a zCDP release's table; it is refused in a pure release too, so a spec does not
    # become invalid when its budget changes form
    columns = f"  {name}: {{type: category, categories: [a, b]}}\n  n: {{type: int, bounds: [0, 9]}}\n"
    reserved = (
        f"'{name}' cannot be an output dimension: the table already has a column of that name "
        "(statistic, value, ci_low, ci_high, epsilon, rho, kind, column, bin_low, bin_high; quantile in a release "
        "with a quantile (the level); period in a series (the period); span in a series (a value's span: period "
        "or to_date); flag in a release with a small-cell policy (postprocess: small_cells))"
    )
    by = text(columns=columns, statistics=f"  - {{name: s, kind: count, by: [{name}]}}\n")
    assert error(by) == f"statistics[0].by[0]: {reserved}"
    hist = text(columns=columns, statistics=f"  - {{name: s, kind: histogram, column: {name}}}\n")
    assert error(hist) == f"statistics[0].column: {reserved}"
    # a numeric column of that name may still be summed: it is not a dimension
    numeric = f"  {name}: {{type: int, bounds: [0, 9]}}\n"
    spec = parse_spec(text(columns=numeric, statistics=f"  - {{name: s, kind: sum, column: {name}}}\n"))
    assert spec.dimensions == ()


# ---------------------------------------------------------------------------------------------------------------
# The epsilon split


def test_weights_split_exactly():
    spec = parse_spec(
        stat("{name: a, kind: count, weight: 1}", "{name: b, kind: count, weight: 2}", privacy="{epsilon: 1}")
    )
    assert split_budget(spec).shares == (Fraction(1, 3), Fraction(2, 3))
    assert all(type(s) is Fraction for s in split_budget(spec).shares)
    assert sum(split_budget(spec).shares) == Fraction(1)
    assert spec.privacy.epsilon == Fraction(1)


def test_default_weight_is_one():
    spec = parse_spec(
        stat(
            "{name: a, kind: count}",
            "{name: b, kind: count, weight: 0.5}",
            "{name: c, kind: count}",
            privacy="{epsilon: 0.5}",
        )
    )
    assert split_budget(spec).shares == (Fraction(1, 5), Fraction(1, 10), Fraction(1, 5))
    assert sum(split_budget(spec).shares) == Fraction(1, 2)


def test_explicit_epsilons_add_up_exactly():
    spec = parse_spec(
        stat("{name: a, kind: count, epsilon: 0.1}", "{name: b, kind: count, epsilon: 0.2}", privacy="{epsilon: 0.3}")
    )
    assert split_budget(spec).shares == (Fraction(1, 10), Fraction(1, 5))
    assert sum(split_budget(spec).shares) == Fraction(3, 10)
    assert spec.privacy.epsilon == Fraction(3, 10)


def test_explicit_epsilons_over_the_release_epsilon_refused():
    spec_text = stat(
        "{name: a, kind: count, epsilon: 0.1}", "{name: b, kind: count, epsilon: 0.2000001}", privacy="{epsilon: 0.3}"
    )
    assert (
        error(spec_text, planned=True)
        == "statistics: the statistics' epsilons add up to 0.3000001, more than privacy.epsilon = 0.3"
    )


def test_explicit_epsilons_plus_a_tiny_one_refused():
    spec_text = stat(
        "{name: a, kind: count, epsilon: 0.1}",
        "{name: b, kind: count, epsilon: 0.2}",
        "{name: c, kind: count, epsilon: 0.0000001}",
        privacy="{epsilon: 0.3}",
    )
    # refused on its own already: a share below the minimum epsilon
    assert error(spec_text) == "statistics[2].epsilon: epsilon must be in [0.000001, 100], got 0.0000001"
    spec_text = stat(
        "{name: a, kind: count, epsilon: 0.1}",
        "{name: b, kind: count, epsilon: 0.2}",
        "{name: c, kind: count, epsilon: 0.000001}",
        privacy="{epsilon: 0.3}",
    )
    assert (
        error(spec_text, planned=True)
        == "statistics: the statistics' epsilons add up to 0.300001, more than privacy.epsilon = 0.3"
    )


def test_explicit_epsilons_with_a_long_exact_total_are_named_briefly():
    spec_text = stat(
        "{name: a, kind: count, epsilon: 1/3}",
        "{name: b, kind: count, epsilon: "
        "10000000000000000000000000000000000001/10000000000000000000000000000000000000000000}",
        privacy="{epsilon: 0.3}",
    )
    assert (
        error(spec_text, planned=True)
        == "statistics: the statistics' epsilons add up to 0.333334, more than privacy.epsilon = 0.3"
    )


def test_explicit_epsilons_under_the_release_epsilon_charge_their_sum():
    spec = parse_spec(
        stat("{name: a, kind: count, epsilon: 0.1}", "{name: b, kind: count, epsilon: 0.1}", privacy="{epsilon: 0.3}")
    )
    assert sum(split_budget(spec).shares) == Fraction(1, 5)


def test_explicit_epsilons_without_a_release_epsilon():
    spec = parse_spec(
        stat("{name: a, kind: count, epsilon: 0.1}", "{name: b, kind: count, epsilon: 0.2}", privacy="{unit: row}")
    )
    assert spec.privacy.epsilon is None
    assert split_budget(spec).total == Fraction(3, 10)
    assert sum(split_budget(spec).shares) == Fraction(3, 10)
    spec_text = stat(
        "{name: a, kind: count, epsilon: 60}", "{name: b, kind: count, epsilon: 50}", privacy="{unit: row}"
    )
    assert (
        error(spec_text, planned=True) == "statistics: the statistics' epsilons add up to 110, over the maximum of 100"
    )


def test_mixed_explicit_and_weighted_refused():
    assert error(stat("{name: a, kind: count, epsilon: 0.5}", "{name: b, kind: count}")) == (
        "statistics[1].epsilon: either every statistic names its epsilon, or none does (use weight)"
    )
    assert error(stat("{name: a, kind: count}", "{name: b, kind: count, epsilon: 0.5}")) == (
        "statistics[0].epsilon: either every statistic names its epsilon, or none does (use weight)"
    )


def test_weight_and_epsilon_on_one_statistic_refused():
    assert error(stat("{name: a, kind: count, weight: 1, epsilon: 0.5}")) == (
        "statistics[0].weight: give either weight or epsilon, not both"
    )


def test_statistic_epsilon_range():
    assert (
        error(stat("{name: a, kind: count, epsilon: 0}"))
        == "statistics[0].epsilon: epsilon must be in [0.000001, 100], got 0"
    )
    assert error(stat("{name: a, kind: count, epsilon: nan}")) == f"statistics[0].epsilon: 'nan' {NOT_A_NUMBER}"
