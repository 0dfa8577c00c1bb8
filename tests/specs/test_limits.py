"""The spec's own limits (issue 9): the size of its numbers, lone surrogates, reserved dimension names, what kind of
file a spec may be, and errors that name the spec file. Each case once failed with exit 1, hung, or planned slowly;
through the real command each is now exit 2 with one `dpcli: error:` line. Also: plans and budgets print on an
ASCII-only stdout."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from dpcli.errors import SpecError
from dpcli.plan.budget import split_budget
from dpcli.plan.model import make_plan
from dpcli.specs.fields import number_within_limits
from dpcli.specs.load import MAX_SPEC_BYTES, load_spec, parse_spec
from tests.helpers import clean_env, run_dpcli

ROOT = Path(__file__).resolve().parents[2]

LIMITS = (
    "is beyond the limits of a spec number: at most 40 significant digits and 1e-40 <= |x| < 1e40 (or 0), or a "
    "fraction p/q of at most 40 digits each"
)


def spec_text(
    privacy: str = "{epsilon: 1}", columns: str = "", statistics: str = "  - {name: n, kind: count}\n"
) -> str:
    return (
        "version: 1\ndataset: d\n"
        f"privacy: {privacy}\n"
        "columns:\n"
        "  x: {type: float, bounds: [0, 10], precision: 0.01}\n"
        "  c: {type: category, categories: [a, b]}\n"
        f"{columns}"
        f"statistics:\n{statistics}"
    )


def refused(text: str) -> str:
    with pytest.raises(SpecError) as info:
        make_plan(parse_spec(text))
    message = str(info.value)
    assert "\n" not in message
    assert info.value.exit_code == 2
    return message


def cli_refused(*args: object, fragment: str, timeout: float = 30) -> str:
    """The real command: exit 2, one `dpcli: error:` line on stderr, nothing on stdout, no traceback. A timeout (a
    hang) fails the test."""
    r = run_dpcli(*args, timeout=timeout)
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 2, err
    assert r.stdout == b""
    assert "Traceback" not in err
    assert err.startswith("dpcli: error: "), err
    assert err.count("\n") == 1, err
    assert err.endswith("\n"), err
    assert fragment in err, err
    return err


# ---------------------------------------------------------------------------------------------------------------
# Numbers: at most 40 significant digits and 1e-40 <= |x| < 1e40, or p/q of 40 digits each; text <= 200 characters

LONG = "0." + "1" * 41  # 41 significant digits, in every range below
NUMBER_FIELDS = [
    ("privacy.epsilon", LONG, spec_text(privacy=f"{{epsilon: {LONG}}}")),
    (
        "privacy.delta",
        "0.00" + "1" * 41,
        spec_text(
            privacy=f"{{epsilon: 1, delta: 0.00{'1' * 41}}}",
            statistics="  - {name: n, kind: count, mechanism: gaussian}\n",
        ),
    ),
    ("privacy.rho", LONG, spec_text(privacy=f"{{rho: {LONG}}}")),
    ("statistics[0].weight", LONG, spec_text(statistics=f"  - {{name: n, kind: count, weight: {LONG}}}\n")),
    ("statistics[0].weight", "1" * 41, spec_text(statistics=f"  - {{name: n, kind: count, weight: {'1' * 41}}}\n")),
    ("statistics[0].epsilon", LONG, spec_text(statistics=f"  - {{name: n, kind: count, epsilon: {LONG}}}\n")),
    (
        "statistics[0].rho",
        LONG,
        spec_text(privacy="{unit: row}", statistics=f"  - {{name: n, kind: count, rho: {LONG}}}\n"),
    ),
    ("columns.y.bounds[1]", LONG, spec_text(columns=f"  y: {{type: float, bounds: [0, {LONG}]}}\n")),
    ("columns.y.bounds[0]", "-" + LONG, spec_text(columns=f"  y: {{type: float, bounds: [-{LONG}, 1]}}\n")),
    (
        "columns.y.precision",
        "0.0" + "1" * 41,
        spec_text(columns=f"  y: {{type: float, bounds: [0, 1], precision: 0.0{'1' * 41}}}\n"),
    ),
    ("columns.y.impute", LONG, spec_text(columns=f"  y: {{type: float, bounds: [0, 1], impute: {LONG}}}\n")),
    (
        "statistics[0].bins[1]",
        LONG,
        spec_text(statistics=f"  - {{name: h, kind: histogram, column: x, bins: [0, {LONG}, 10]}}\n"),
    ),
    (
        "statistics[0].bins.start",
        LONG,
        spec_text(
            statistics=f"  - {{name: h, kind: histogram, column: x, bins: {{start: {LONG}, stop: 10, step: 1}}}}\n"
        ),
    ),
    (
        "statistics[0].bins.stop",
        "1" + LONG[1:],
        spec_text(
            statistics=f"  - {{name: h, kind: histogram, column: x, bins: {{start: 0, stop: 1{LONG[1:]}, step: 1}}}}\n"
        ),
    ),
    (
        "statistics[0].bins.step",
        LONG,
        spec_text(
            statistics=f"  - {{name: h, kind: histogram, column: x, bins: {{start: 0, stop: 10, step: {LONG}}}}}\n"
        ),
    ),
]


@pytest.mark.parametrize(("path", "value", "text"), NUMBER_FIELDS, ids=[f"{f[0]}={f[1][:6]}" for f in NUMBER_FIELDS])
def test_every_number_of_a_spec_is_limited_and_the_error_names_its_yaml_path(path: str, value: str, text: str) -> None:
    shown = value if len(value) <= 40 else value[:40] + "…"
    assert refused(text) == f"{path}: '{shown}' {LIMITS}"


def test_a_4200_digit_epsilon_is_refused_before_it_is_planned() -> None:
    # it took 26 s to plan and print; 2,200-digit shares planned and then exploded downstream
    text = spec_text(privacy="{epsilon: 0." + "1" * 4200 + "}")
    assert (
        refused(text)
        == f"privacy.epsilon: '0.{'1' * 18}…' is longer than 200 characters, the most a spec number may have"
    )
    text = spec_text(privacy="{epsilon: 0." + "1" * 190 + "}")
    assert refused(text) == f"privacy.epsilon: '0.{'1' * 38}…' {LIMITS}"


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("0", True),
        ("1e-40", True),
        ("-1e-40", True),
        ("1e-41", False),
        ("9.999e39", True),
        ("1e40", False),
        ("1" * 40, True),
        ("1" * 41, False),
        ("0." + "9" * 40, True),
        ("1.234567890123456789012345678901234567891e-40", True),
        ("1/3", True),
        ("1/" + "7" * 40, True),
        ("1/" + "7" * 41, False),
        ("7" * 40 + "/3", True),
        ("1/" + str(10**40), True),  # a 41-digit denominator, but the decimal 1e-40
        ("1e-390", False),
        ("1e400", False),
    ],
)
def test_the_number_limits_at_their_edges(text: str, ok: bool) -> None:
    from dpcli.core.accounting import parse_exact

    assert number_within_limits(parse_exact(text)) is ok


def test_numbers_at_the_limits_are_accepted_and_plan() -> None:
    spec = parse_spec(spec_text(
        privacy="{epsilon: 0." + "3" * 40 + "}",
        columns="  y: {type: float, bounds: [0, 1e-30], precision: 1e-40}\n",
        statistics="  - {name: n, kind: count, weight: 1/" + "7" * 40 + "}\n"
        "  - {name: s, kind: sum, column: y, weight: 2/" + "7" * 40 + "}\n",
    ))
    plan = make_plan(spec)
    assert plan.epsilon == Fraction("0." + "3" * 40)
    assert spec.columns["y"].bounds == (0, Fraction(1, 10**30))


def test_float_bounds_that_underflow_a_double_are_refused() -> None:
    # [0, 1e-390] parsed to 0 (or a denormal) where the engine reads doubles: an internal error (exit 1) at release
    text = spec_text(
        columns="  y: {type: float, bounds: [0, 1e-390]}\n", statistics="  - {name: s, kind: sum, column: y}\n"
    )
    assert refused(text) == f"columns.y.bounds[1]: '1e-390' {LIMITS}"


def test_a_sum_of_weights_growing_past_150_digits_is_refused() -> None:
    # 40-digit denominators that share no factor: the sum's denominator grows with every statistic
    q = 10**39 + 1
    lines = "".join(f"  - {{name: s{i}, kind: count, weight: 1/{q + i}}}\n" for i in range(4))
    message = refused(spec_text(statistics=lines))
    assert message == (
        "statistics[3].weight: the exact sum of the weights up to here has over 150 digits in its numerator or "
        "denominator: use weights with fewer digits (decimals, or fractions with a common denominator)"
    )
    lines = "".join(f"  - {{name: s{i}, kind: count, epsilon: {10**38}/{q + 2 * i}}}\n" for i in range(4))
    assert refused(spec_text(privacy="{unit: row}", statistics=lines)).startswith(
        "statistics[3].epsilon: the exact sum of the epsilons up to here has over 150 digits"
    )
    # decimals of any size within the limits always add up within it
    lines = "".join(
        f"  - {{name: s{i}, kind: count, weight: {w}}}\n" for i, w in enumerate(["9e39", "1e-40", "0." + "7" * 40])
    )
    assert len(split_budget(parse_spec(spec_text(statistics=lines))).shares) == 3


# ---------------------------------------------------------------------------------------------------------------
# Lone surrogates


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            spec_text(columns='  s: {type: category, categories: [a, "\\ud800"]}\n'),
            "columns.s.categories[1]: holds a lone surrogate (\\ud800), which is not a Unicode character",
        ),
        (
            spec_text(columns='  s: {type: category, categories: [a, b], impute: "\\udfff"}\n'),
            "columns.s.impute: holds a lone surrogate (\\udfff), which is not a Unicode character",
        ),
        (
            spec_text() + 'output: "out\\ud83d\\ude00.csv"\n',  # a pair written as two escapes is two lone surrogates
            "output: holds a lone surrogate (\\ud83d), which is not a Unicode character",
        ),
        (
            spec_text(columns='  "\\ud800": {type: bool}\n'),
            "columns: a key holds a lone surrogate, which is not a Unicode character",
        ),
    ],
    ids=["category", "impute", "pair_of_escapes", "key"],
)
def test_a_lone_surrogate_anywhere_is_refused(text: str, message: str) -> None:
    assert refused(text) == message


def test_a_character_beyond_the_bmp_written_as_one_escape_is_fine() -> None:
    spec = parse_spec(spec_text(columns='  s: {type: category, categories: [a, "\\U0001F600"]}\n'))
    assert spec.columns["s"].keys == ("a", "\U0001f600")


# ---------------------------------------------------------------------------------------------------------------
# The spec file: errors name it; only a regular file of at most 1 MiB


def test_errors_name_the_spec_file_loader_and_planner(tmp_path: Path) -> None:
    p = tmp_path / "spec.yaml"
    p.write_text(spec_text(statistics="  - {name: s, kind: sum, column: nope}\n"))
    with pytest.raises(SpecError) as info:
        load_spec(p)
    assert str(info.value) == f"{p}: statistics[0].column: 'nope' is not a declared column"
    assert (info.value.file, info.value.path) == (str(p), "statistics[0].column")
    # an error found by the planner names the file too
    p.write_text(spec_text(columns="  y: {type: int, bounds: [0, 1000000000000000]}\n",
                           privacy="{epsilon: 0.000001}", statistics="  - {name: s, kind: sum, column: y}\n"))
    with pytest.raises(SpecError) as info:
        make_plan(load_spec(p))
    assert str(info.value).startswith(f"{p}: statistics[0]: noise scale ")
    # a file name cannot break the one-line message
    odd = tmp_path / "a\nb.yaml"
    odd.write_text("version: 2\n")
    with pytest.raises(SpecError) as info:
        load_spec(odd)
    assert str(info.value).startswith(f"{tmp_path}/a\\nb.yaml: ")


def test_a_spec_file_over_1_mib_is_refused_from_its_size(tmp_path: Path) -> None:
    sparse = tmp_path / "huge.yaml"
    with open(sparse, "wb") as fh:
        fh.truncate(10 * 2**30)  # 10 GiB, sparse: refused from fstat, never read
    with pytest.raises(SpecError) as info:
        load_spec(sparse)
    assert str(info.value) == f"{sparse}: the spec is larger than 1024 KiB"
    assert MAX_SPEC_BYTES == 2**20


def test_a_fifo_a_device_and_standard_input_are_not_spec_files(tmp_path: Path) -> None:
    fifo = tmp_path / "spec.fifo"
    os.mkfifo(fifo)
    with pytest.raises(SpecError) as info:
        load_spec(fifo)  # opening a FIFO for reading used to block until a writer came
    assert str(info.value) == f"{fifo}: is not a regular file (a FIFO, device or socket cannot be a spec)"
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    with pytest.raises(SpecError) as info:
        load_spec("/dev/null")
    assert str(info.value) == "/dev/null: is not a regular file (a FIFO, device or socket cannot be a spec)"
    with pytest.raises(SpecError) as info:
        load_spec("-")
    assert str(info.value) == "-: a spec is read from a file, not from standard input: give its path"


# ---------------------------------------------------------------------------------------------------------------
# Through the real command: exit 2 with one line (each of these was exit 1, or a hang, before)


ZCDP_BY_RHO = """\
version: 1
dataset: d
privacy: {rho: 0.5}
columns:
  rho: {type: category, categories: [a, b]}
statistics:
  - {name: n, kind: count, by: [rho], mechanism: gaussian}
"""


PLAN_REFUSED = {
    "surrogate": (
        spec_text(columns='  s: {type: category, categories: [a, "\\ud800"]}\n'),
        "spec.yaml: columns.s.categories[1]: holds a lone surrogate",
    ),
    "underflow": (
        spec_text(
            columns="  y: {type: float, bounds: [0, 1e-390]}\n", statistics="  - {name: s, kind: sum, column: y}\n"
        ),
        f"spec.yaml: columns.y.bounds[1]: '1e-390' {LIMITS}",
    ),
    "rho_dimension": (ZCDP_BY_RHO, "spec.yaml: statistics[0].by[0]: 'rho' cannot be an output dimension"),
    "long_epsilon": (
        spec_text(privacy="{epsilon: 0." + "1" * 4200 + "}"),
        f"spec.yaml: privacy.epsilon: '0.{'1' * 18}…' is longer than 200 characters, the most a spec number may have",
    ),
}


@pytest.mark.parametrize("case", list(PLAN_REFUSED))
def test_refused_by_dpcli_plan_with_exit_2(tmp_path: Path, case: str) -> None:
    text, fragment = PLAN_REFUSED[case]
    (tmp_path / "spec.yaml").write_text(text)
    cli_refused("plan", tmp_path / "spec.yaml", fragment=f"{tmp_path}/{fragment}")


def test_refused_by_dpcli_release_before_anything_is_read_or_spent(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    (tmp_path / "surrogate.yaml").write_text(spec_text(columns='  s: {type: category, categories: [a, "\\ud800"]}\n'))
    (tmp_path / "zcdp.yaml").write_text(ZCDP_BY_RHO)
    os.mkfifo(tmp_path / "fifo.yaml")
    for spec, fragment in [
        ("surrogate.yaml", "holds a lone surrogate"),
        ("zcdp.yaml", "'rho' cannot be an output dimension"),  # made invalid JSON and a duplicate CSV column
        ("fifo.yaml", "fifo.yaml: is not a regular file"),  # hung
    ]:
        cli_refused("release", tmp_path / spec, "--input", "-", "--output", "-", "--ledger", ledger, fragment=fragment)
    assert not ledger.exists()


def test_dpcli_plan_of_a_fifo_exits_2_instead_of_hanging(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "spec.yaml")
    cli_refused("plan", tmp_path / "spec.yaml", fragment=f"{tmp_path / 'spec.yaml'}: is not a regular file", timeout=20)


# ---------------------------------------------------------------------------------------------------------------
# Output on a stream that cannot hold ε, ρ, ≤ (it was exit 1: UnicodeEncodeError)

ASCII_ENVIRONMENTS = [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C"}, {"LC_ALL": "C", "PYTHONUTF8": "0"}]
ASCII_IDS = ["PYTHONIOENCODING=ascii", "LC_ALL=C", "LC_ALL=C,PYTHONUTF8=0"]


def run_in(env: dict, *args: object) -> subprocess.CompletedProcess:
    """The real command with the locale and encoding variables of this environment replaced by ``env``."""
    base = {
        k: v
        for k, v in clean_env().items()
        if k not in ("PYTHONUTF8", "PYTHONIOENCODING", "LANG", "LC_ALL", "LC_CTYPE")
    }
    return subprocess.run(
        [sys.executable, "-m", "dpcli", *map(str, args)], capture_output=True, env=base | env, timeout=60
    )


@pytest.mark.parametrize("env", ASCII_ENVIRONMENTS, ids=ASCII_IDS)
def test_plan_prints_on_an_ascii_stdout(env: dict) -> None:
    r = run_in(env, "plan", ROOT / "configs" / "example.yaml")
    assert r.returncode == 0, r.stderr
    assert r.stderr == b""
    assert r.stdout.startswith(b"plan for dataset 'people'")


def test_budget_commands_print_on_an_ascii_stdout(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    r = run_in({"PYTHONIOENCODING": "ascii"}, "budget", "set", "people", "--epsilon", "3", "--ledger", ledger)
    assert r.returncode == 0, r.stderr
    assert r.stderr == b"dpcli: cap for 'people' set to eps=3; spent 0, remaining 3\n"
    for env in ASCII_ENVIRONMENTS:
        r = run_in(env, "budget", "show", "--ledger", ledger)
        assert r.returncode == 0, (env, r.stderr)
        assert b"people" in r.stdout
        assert r.stderr == b""
        if env.get("PYTHONIOENCODING") == "ascii":
            assert r.stdout.isascii()
            assert b"cap eps" in r.stdout
