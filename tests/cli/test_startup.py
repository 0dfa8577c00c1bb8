"""Start-up: a command's process imports only what the command needs (docs/benchmarks.md, "Start-up").

polars and numpy cost more than the interpreter itself here, so `dpcli --version`, `dpcli -h`, `dpcli plan` and the
ledger's read-only commands must not load them; `--version` loads not even typer. Each case is a real child
process running the console script's entry point (dpcli.__main__.main, what `dpcli` runs) and then reporting which
modules it holds: an import added at the top of a module on a command's path shows up here, whatever imports it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import clean_env

ROOT = Path(__file__).resolve().parents[2]

# The third-party packages a command may pull in, heaviest first: polars and numpy (~0.15 s each), then the ones of
# single features (Spark, zstd inputs, the audit's scipy, mpmath's zCDP conversion, the CSPRNG, the schema checks)
HEAVY = (
    "polars", "numpy", "pyarrow", "pyspark", "pandas", "scipy", "mpmath", "cryptography", "jsonschema", "psycopg",
    "matplotlib", "zstandard",
)

# Runs `dpcli ARGS` in this child as the console script does, then writes the modules it imported, as JSON, to the
# file named first (standard output and error stay the command's own)
_RUN = (
    "import json, sys\n"
    "report, sys.argv = sys.argv[1], ['dpcli', *sys.argv[2:]]\n"
    "from dpcli.__main__ import main\n"
    "code = 0\n"
    "try:\n"
    "    main()\n"
    "except SystemExit as exc:\n"
    "    code = exc.code\n"
    "with open(report, 'w') as fh:\n"
    "    json.dump({'code': code, 'modules': sorted(sys.modules)}, fh)\n"
)


def imported_by(tmp_path: Path, *args: str) -> tuple[object, set[str], str]:
    """The exit code, the top-level packages imported, and the standard output of `dpcli ARGS` in a child process."""
    report = tmp_path / "modules.json"
    r = subprocess.run(
        [sys.executable, "-c", _RUN, str(report), *args],
        capture_output=True, text=True, env=clean_env(), cwd=ROOT, timeout=120,
    )
    found = json.loads(report.read_text(encoding="utf-8"))
    return found["code"], {m.partition(".")[0] for m in found["modules"]}, r.stdout


def test_version_imports_nothing_heavy_not_even_typer(tmp_path: Path) -> None:
    import dpcli

    code, modules, out = imported_by(tmp_path, "--version")
    assert (code, out) == (0, f"dpcli {dpcli.__version__}\n")
    assert sorted(modules & {*HEAVY, "typer", "pydantic", "yaml"}) == []


@pytest.mark.parametrize(
    "args",
    [
        ("-h",),  # the command line itself (typer and every command's options), nothing run
        ("plan", "configs/example.yaml"),  # the spec's checks and the plan: no data, no table
        ("budget", "show", "--ledger", "{ledger}"),
    ],
    ids=["help", "plan", "budget-show"],
)
def test_a_command_that_reads_no_data_imports_neither_polars_nor_numpy(tmp_path: Path, args: tuple[str, ...]) -> None:
    argv = [a.format(ledger=tmp_path / "ledger.jsonl") for a in args]
    code, modules, out = imported_by(tmp_path, *argv)
    assert code == 0
    assert out  # it did its work: the help, the plan, the (empty) ledger's statuses
    assert sorted(modules & set(HEAVY)) == []
