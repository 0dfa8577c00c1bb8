"""Issue 24 (3): `dpcli check` says valid exactly when `dpcli release` passes every check that needs no data.

One table of every refusal the suite knows that comes before the data (the spec, its plan and size limits, the
consistency cap, reserved dimensions, integer fields, spec numbers, paths and formats, and with --ledger the
ledger's: unit and neighbour pins, the cap, the release id, the chain, the release store), plus cases both accept.
Each runs `dpcli check` (with --ledger only where the case is about the ledger) and `dpcli release` on the same
spec and options, and asserts the same exit code and the same error line; check leaves the ledger's bytes as they
were, and a refused release spends nothing. Both run in process (tests/helpers.py run_in_process)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.core.accounting import Cap
from dpcli.ledger import JsonlLedger
from tests.cli.test_refusals import CSV, PERSON, REFUSED, spec
from tests.helpers import run_in_process
from tests.specs.test_limits import PLAN_REFUSED


@dataclass(frozen=True)
class Case:
    text: str  # the spec; {tmp} is the test's directory
    code: int  # what both commands exit with
    message: str = ""  # a fragment of release's error line (its whole line is what check must say)
    args: tuple[str, ...] = ("-i", "{tmp}/in.csv", "-o", "{tmp}/out.csv")  # given to both commands
    ledger: Callable[[Path], None] | None = None  # the ledger's set-up, and check gets --ledger; None: a cap of 10
    # for release, and check runs without --ledger
    check_args: tuple[str, ...] = field(default=())  # given to both, after the ledger is set up


def _cap(epsilon: str = "10", unit: str | None = None, neighbours: str | None = None) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        JsonlLedger(path).set_cap("people", Cap(Fraction(epsilon), Fraction(0)), False, unit, neighbours)
    return make


def _no_cap(path: Path) -> None:
    JsonlLedger(path).set_cap("other", Cap(Fraction(1), Fraction(0)), False)


def _paid(*, keep_table: bool) -> Callable[[Path], None]:
    """A ledger where release id 'r1' of the case's spec is paid for (by a real release), its table kept or lost."""
    def make(path: Path) -> None:
        _cap()(path)
        tmp = path.parent
        done = run_in_process("release", tmp / "spec.yaml", "-i", tmp / "in.csv", "-o", tmp / "first.csv",
                              "--ledger", path, "--release-id", "r1")
        assert done.returncode == 0, done.stderr
        if not keep_table:
            for table in (tmp / "ledger.jsonl.releases").iterdir():
                table.unlink()
    return make


def _edited(path: Path) -> None:
    _cap()(path)
    path.write_text(path.read_text().replace('"epsilon":"10"', '"epsilon":"99"'))


def _store_a_file(path: Path) -> None:
    _cap()(path)
    path.with_name(path.name + ".releases").write_text("not a directory\n")


LEDGER = "{tmp}/ledger.jsonl"
PINNED_PERSON = _cap(unit="person:other", neighbours="add_remove")

CASES: dict[str, Case] = {
    # the spec alone (check without --ledger)
    **{f"refusals_{name}": Case(text, 2, message) for name, (text, message) in REFUSED.items()},
    **{f"spec_limits_{name}": Case(text, 2, message.partition(": ")[2]) for name, (text, message) in
       PLAN_REFUSED.items()},
    "over_the_memory_estimate": Case(
        spec("  - {name: m, kind: mean, column: age, by: [a, b]}\n",
             "  a: {type: category, categories: [" + ", ".join(f"a{i}" for i in range(2500)) + "]}\n"
             "  b: {type: category, categories: [" + ", ".join(f"b{i}" for i in range(2500)) + "]}\n"),
        2, "MB estimated peak memory; the limits are",
    ),
    "over_the_cell_limit": Case(
        spec("  - {name: h, kind: histogram, column: age, bins: {start: 0, stop: 10000000, step: 1}}\n  - {name: n, "
             "kind: count}\n").replace("bounds: [0, 100]", "bounds: [0, 10000000]"),
        2, "10000001 cell(s)",
    ),
    "shares_over_the_budget": Case(
        spec("  - {name: n, kind: count, epsilon: 0.75}\n  - {name: m, kind: count, by: [sex], epsilon: 0.5}\n"),
        2, "",
    ),
    # where it reads and writes: the options, or the spec's input: and output:
    "output_is_the_spec": Case(spec(), 2, "is the spec", args=("-i", "{tmp}/in.csv", "-o", "{tmp}/spec.yaml")),
    "output_a_directory": Case(spec(), 2, "is a directory", args=("-i", "{tmp}/in.csv", "-o", "{tmp}")),
    "output_directory_missing": Case(spec(), 3, "does not exist",
                                     args=("-i", "{tmp}/in.csv", "-o", "{tmp}/missing/out.csv")),
    "output_parquet": Case(spec(), 2, "dpcli does not write parquet files",
                           args=("-i", "{tmp}/in.csv", "-o", "{tmp}/out.parquet")),
    "spec_output_directory_missing": Case("output: missing/out.csv\ninput: in.csv\n" + spec(), 3, "does not exist",
                                          args=()),
    "spec_input_a_url": Case("input: s3a://bucket/people.csv\noutput: out.csv\n" + spec(), 2,
                             "is a URL: only the Spark engine reads one", args=()),
    "spark_from_standard_input": Case("engine: spark\n" + spec(), 2, "the Spark engine reads files",
                                      args=("-i", "-", "-o", "{tmp}/out.csv")),
    # the ledger (check with --ledger)
    "no_cap": Case(spec(), 4, "no budget cap for dataset 'people'", ledger=_no_cap),
    "over_the_cap": Case(spec(), 4, "budget refused for dataset 'people'", ledger=_cap("0.5")),
    "neighbours_pinned": Case(spec(), 2, "neighbour", ledger=_cap(neighbours="replace")),
    "person_id_pinned": Case(spec(unit=PERSON.format(k=2)), 2, "accounted under unit 'person:other'",
                             ledger=PINNED_PERSON),
    "row_unit_pinned_to_a_person": Case(spec(), 2, "accounted under unit 'person:other'", ledger=PINNED_PERSON),
    "release_id_invalid": Case(spec(), 2, "release id 'no way' is not valid", ledger=_cap(),
                               check_args=("--release-id", "no way")),
    "release_id_paid_table_lost": Case(spec(), 5, "its stored table is missing from the release store",
                                       ledger=_paid(keep_table=False), check_args=("--release-id", "r1")),
    "ledger_edited": Case(spec(), 5, "", ledger=_edited),
    "release_store_a_file": Case(spec(), 5, "is not a directory", ledger=_store_a_file),
    "output_is_the_ledger": Case(spec(), 2, "is the ledger", ledger=_cap(),
                                 args=("-i", "{tmp}/in.csv", "-o", LEDGER)),
    "input_is_the_ledger": Case(spec(), 2, "is the input file", ledger=_cap(), args=("-i", LEDGER, "-o", "{tmp}/o")),
    # accepted by both
    "accepted": Case(spec(), 0),
    "accepted_with_the_ledger": Case(spec(), 0, ledger=_cap()),
    "accepted_person_unit": Case(spec(unit=PERSON.format(k=2).replace("id: pid", "id: other")), 0,
                                 ledger=PINNED_PERSON),
    "accepted_paid_release_id": Case(spec(), 0, ledger=_paid(keep_table=True), check_args=("--release-id", "r1")),
    "accepted_flag_and_quantile_dimensions": Case(
        spec("  - {name: n, kind: count, by: [flag, quantile]}\n",
             "  flag: {type: bool}\n  quantile: {type: category, categories: [x, y]}\n"), 0,
    ),
}

# the default suite's share (~3 s): one case of each kind of check; the whole table runs with -m slow
QUICK = {
    "refusals_finest_table_alone", "refusals_duplicate_name", "refusals_max_rows_exponent", "spec_limits_surrogate",
    "output_is_the_spec", "spec_output_directory_missing", "spec_input_a_url", "no_cap", "over_the_cap",
    "person_id_pinned", "release_id_invalid", "release_id_paid_table_lost", "release_store_a_file", "accepted",
    "accepted_with_the_ledger", "output_is_the_ledger",
}


def _error_lines(stderr: bytes) -> list[str]:
    return [line for line in stderr.decode().splitlines() if line.startswith("dpcli: error: ")]


def _ledger_files(tmp: Path) -> dict[str, bytes | None]:
    return {p.name: (p.read_bytes() if p.is_file() else None) for p in sorted(tmp.glob("ledger.jsonl*"))}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=() if n in QUICK else pytest.mark.slow) for n in sorted(CASES)]
)
def test_check_refuses_exactly_what_release_refuses_before_the_data(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    (tmp_path / "spec.yaml").write_text(case.text)
    (tmp_path / "in.csv").write_text(CSV)
    ledger = tmp_path / "ledger.jsonl"
    (case.ledger or _cap())(ledger)
    args = [a.format(tmp=tmp_path) for a in case.args + case.check_args]
    before = _ledger_files(tmp_path)
    checked = run_in_process("check", tmp_path / "spec.yaml", *args,
                             *(("--ledger", ledger) if case.ledger is not None else ()))
    assert _ledger_files(tmp_path) == before  # read only: not a byte of the ledger, its head or its store changed
    spends = ledger.read_text().count('"type":"spend"') if ledger.exists() else 0
    released = run_in_process("release", tmp_path / "spec.yaml", *args, "--ledger", ledger)

    assert (checked.returncode, released.returncode) == (case.code, case.code), (checked.stderr, released.stderr)
    if case.code == 0:
        assert b"is valid" in checked.stderr
        assert _error_lines(checked.stderr) == []
        return
    said = _error_lines(released.stderr)
    assert len(said) == 1, released.stderr
    assert case.message in said[0], released.stderr
    assert said[0] in _error_lines(checked.stderr)  # check says every error of a spec; release's first among them
    assert (ledger.read_text().count('"type":"spend"') if ledger.exists() else 0) == spends  # nothing spent


def test_check_of_a_randomize_spec_refuses_the_release_options(tmp_path: Path) -> None:
    """A randomize spec's check covers the spec and its input only: --ledger, --output or --release-id would be
    checked by nobody, so they are refused rather than silently passed over."""
    spec_file = Path(__file__).resolve().parents[2] / "configs" / "randomize.yaml"
    done = run_in_process("check", spec_file, "--ledger", tmp_path / "ledger.jsonl")
    assert done.returncode == 2
    assert _error_lines(done.stderr) == [
        "dpcli: error: --output, --ledger and --release-id check a release spec; `dpcli check` of a randomize spec "
        "checks the spec and its input"
    ]
    assert not (tmp_path / "ledger.jsonl").exists()
