"""The synth: section of a spec (issue 27; docs/spec.md, "Synthetic data"): what it loads as, and every refusal
(exit 2, one line naming the field) before anything is read or spent."""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.errors import SpecError
from dpcli.specs.load import parse_spec
from dpcli.specs.meaning import release_meaning
from dpcli.specs.model import EdgeBins, GridBins, synth_sizes
from dpcli.specs.schema import spec_schema

COLUMNS = """\
  age: {type: int, bounds: [17, 90]}
  sex: {type: category, categories: [Female, Male]}
  hours: {type: float, bounds: [0, 100], precision: 0.5}
  ok: {type: bool}
"""
SYNTH_COLUMNS = """\
    age: {bins: [17, 25, 35, 45, 55, 65, 91]}
    sex: {}
"""


def synth_text(synth_columns: str = SYNTH_COLUMNS, *, privacy: str = "{unit: row, neighbours: add_remove, rho: 0.5}",
               columns: str = COLUMNS, synth_extra: str = "", extra: str = "") -> str:
    return (f"version: 1\ndataset: adult\nprivacy: {privacy}\ncolumns:\n{columns}synth:\n  method: mst\n"
            f"{synth_extra}  columns:\n{synth_columns}{extra}")


def refusal(text: str) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(text)
    return str(info.value)


def test_a_synth_spec_loads_with_its_codes() -> None:
    spec = parse_spec(synth_text("""\
    age: {bins: [17, 25, 35, 45, 55, 65, 91], values: mid}
    sex: {}
    hours: {bins: {start: 0, stop: 120, step: 20}, missing: keep}
    ok: {missing: keep}
""", synth_extra="  rows: 500\n  shares: {one_way: 1/4, select: 1/4, measure: 1/2}\n  max_cells: 1000\n"))
    assert spec.statistics == ()
    synth = spec.synth
    assert synth is not None
    assert [c.name for c in synth.columns] == ["age", "sex", "hours", "ok"]
    assert synth.columns[0].bins == EdgeBins(tuple(Fraction(e) for e in (17, 25, 35, 45, 55, 65, 91)))
    assert synth.columns[0].values == "mid"
    assert synth.columns[2].bins == GridBins(Fraction(0), Fraction(120), Fraction(20))
    assert (synth.rows, synth.max_cells) == (500, 1000)
    assert synth.shares == (Fraction(1, 4), Fraction(1, 4), Fraction(1, 2))
    # age: 6 bins; sex: 2 keys; hours: 6 bins + missing; ok: false, true + missing
    assert synth_sizes(spec) == (6, 2, 7, 3)


def test_defaults() -> None:
    synth = parse_spec(synth_text()).synth
    assert synth is not None
    assert (synth.method, synth.rows, synth.max_cells) == ("mst", None, 1_000_000)
    assert synth.shares == (Fraction(1, 3),) * 3
    assert [(c.values, c.missing) for c in synth.columns] == [("uniform", "drop"), ("uniform", "drop")]


def test_epsilon_with_delta_is_a_zcdp_budget() -> None:
    spec = parse_spec(synth_text(privacy="{unit: row, neighbours: replace, epsilon: 1, delta: 1e-6}"))
    assert spec.privacy.accounting == "zcdp"
    assert spec.privacy.neighbours == "replace"


@pytest.mark.parametrize(("text", "expected"), [
    (synth_text(privacy="{unit: row, neighbours: add_remove, epsilon: 1}"),
     "privacy.epsilon: synth is a zCDP mechanism: give privacy.rho, or epsilon and delta"),
    (synth_text(privacy="{unit: {id: pid, max_rows: 3, missing_id: drop}, rho: 1}"),
     "privacy.unit: a person unit is not available for synth"),
    (synth_text(columns=COLUMNS + "  country: {type: category, categories: open}\n",
                synth_columns=SYNTH_COLUMNS + "    country: {}\n"),
     "synth.columns.country: 'country' is open"),
    (synth_text(extra="series: {periods: 3, period: {column: p}}\n"),
     "series: a synthetic CSV is one release, not a series"),
    (synth_text(extra="statistics:\n  - {name: n, kind: count}\n"),
     "statistics: a spec publishes statistics or a synthetic CSV, not both"),
    (synth_text().replace("dataset: adult\n", "dataset: adult\ninput: data/{period}.csv\n"),
     "input: a template ({date}, {period}) names one file per period of a series"),
    (synth_text("    age: {}\n    sex: {}\n"),
     "synth.columns.age.bins: required for a numeric column, covering its bounds [17, 90]: edges, e.g. "
     "{bins: [17, ..., 91]}, or a grid {bins: {start: 17, stop: 91, step: S}}"),
    (synth_text("    age: {bins: [17, 50, 90]}\n    sex: {}\n"),
     "synth.columns.age.bins: the bins [17, 90) must cover the column's bounds [17, 90]"),
    (synth_text("    age: {bins: [18, 50, 91]}\n    sex: {}\n"),
     "synth.columns.age.bins: the bins [18, 91) must cover the column's bounds [17, 90]"),
    (synth_text("    age: {bins: [0, 10, 50, 91]}\n    sex: {}\n"),
     "synth.columns.age.bins[1]: bin [0, 10) holds no value of the column's grid within its bounds"),
    (synth_text("    age: {bins: {start: 0, stop: 100, step: 10}}\n    sex: {}\n"),
     "synth.columns.age.bins: a bin lies outside the column's bounds"),
    (synth_text("    age: {bins: [17, 91]}\n    sex: {bins: [0, 1]}\n"),
     "synth.columns.sex.bins: only for a numeric column"),
    (synth_text().replace("method: mst", "method: aim"), "synth.method: aim is not built in this version: use mst"),
    (synth_text().replace("method: mst", "method: pgm"), "synth.method: 'pgm' is not a synthesis method"),
    (synth_text(synth_extra="  shares: {one_way: 1/3, select: 1/3, measure: 1/2}\n"),
     "synth.shares: the shares must add up to 1, got 7/6"),
    (synth_text(synth_extra="  shares: {one_way: 0, select: 1/2, measure: 1/2}\n"),
     "synth.shares.one_way: a share must be in (0, 1], got 0"),
    (synth_text("    sex: {}\n"),
     "synth.columns: synthesises 2 to 64 columns (the marginals are pairs of them), got 1"),
    (synth_text(SYNTH_COLUMNS + "    hour: {}\n"),
     "synth.columns.hour: 'hour' is not a declared column; did you mean 'hours'?"),
    (synth_text(synth_extra="  rows: 0\n"), "synth.rows: the value must be in [1, 1000000000], got 0"),
    (synth_text(synth_extra="  max_cells: 20000000\n"), "synth.max_cells: the value must be in [1, 10000000]"),
    (synth_text("    age: {bins: [17, 91], missing: maybe}\n    sex: {}\n"),
     "synth.columns.age.missing: 'maybe' is not one of: drop, keep"),
    (synth_text().replace("version: 1\n", "version: 1\nexpected_rows: 10\n"), "expected_rows: planning of statistics"),
])
def test_refusals_name_the_field(text: str, expected: str) -> None:
    assert expected in refusal(text)


def test_a_spec_without_statistics_or_synth_is_refused() -> None:
    text = "version: 1\ndataset: d\nprivacy: {rho: 1}\ncolumns:\n  a: {type: bool}\n"
    assert "statistics: required field is missing" in refusal(text)


def test_a_user_cannot_write_the_internal_marginal_kind() -> None:
    text = ("version: 1\ndataset: d\nprivacy: {rho: 1}\ncolumns:\n  a: {type: bool}\n"
            "statistics:\n  - {name: m, kind: marginal}\n")
    assert "'marginal' is not a statistic kind" in refusal(text)
    assert "marginal" not in str(spec_schema()["$defs"]["statistic"])


def test_the_synth_section_is_part_of_the_meaning() -> None:
    base = release_meaning(parse_spec(synth_text()))
    assert release_meaning(parse_spec(synth_text().replace("mst\n", "mst\n  rows: 100\n"))) != base
    assert release_meaning(parse_spec(synth_text("    age: {bins: [17, 50, 91]}\n    sex: {}\n"))) != base
    swapped = "    sex: {}\n    age: {bins: [17, 25, 35, 45, 55, 65, 91]}\n"
    assert release_meaning(parse_spec(synth_text(swapped))) != base
    assert release_meaning(parse_spec(synth_text(SYNTH_COLUMNS.replace("{}", "{missing: keep}")))) != base
    # only meaning counts: the same section written otherwise is the same release
    respelled = "    age: {bins: [17, 25, 35, 45, 55, 65, 91.0]}\n    sex: \n"
    assert release_meaning(parse_spec(synth_text(respelled))) == base


def test_the_schema_declares_synth_and_requires_one_of_the_two_sections() -> None:
    schema = spec_schema()
    assert "synth" in schema["properties"]
    base = ["version", "dataset", "privacy", "columns"]
    assert schema["oneOf"] == [{"required": [*base, "statistics"]}, {"required": [*base, "synth"]}]
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    jsonschema.validate(yaml.safe_load(synth_text()), schema)


def test_dpcli_check_refuses_with_exit_2(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(synth_text(privacy="{unit: row, epsilon: 1}"))
    run = subprocess.run([sys.executable, "-m", "dpcli", "check", str(spec)], capture_output=True, text=True,
                         check=False)
    assert run.returncode == 2, run.stderr
    assert "privacy.epsilon: synth is a zCDP mechanism" in run.stdout + run.stderr


def test_a_series_with_a_bad_field_is_reported_not_a_crash() -> None:
    """Found by the schema's generated documents once `statistics:` stopped being required at the top (synth): a
    series section whose `periods` or `period` failed its field rule was handed, partial, to its cross-field rules,
    which looked the field up (KeyError, an internal error) instead of reporting it."""
    from dpcli.specs.load import parse_errors

    base = ("version: 1\ndataset: d\nprivacy: {epsilon: 1}\ncolumns:\n  a: {type: int, bounds: [0, 9]}\n"
            "statistics:\n  - {name: c, kind: count}\n")
    for series in ("series: {periods: zero, period: {column: day}}\n", "series: {periods: 3, period: 7}\n"):
        errors = [str(e) for e in parse_errors(base + series)]
        assert len(errors) == 1, errors
        assert errors[0].startswith("series.period"), errors
