"""The entry point of `dpcli` and `python -m dpcli` (pyproject.toml's console script names ``main``).

Its first act is the signal handlers, before typer, polars or numpy are imported (a second or so): a signal at any
moment of a run then ends it with one line that says whether anything was spent. Its second is the allocators'
settings, before any thread starts (dpcli/core/resources.py).
"""

from __future__ import annotations

import warnings

from dpcli.core import signals
from dpcli.errors import Interrupted


def main() -> None:
    signals.install()
    warnings.simplefilter("ignore")  # no warning's source line on stderr (dpcli.cli.app._quiet_warnings says why)
    try:
        from dpcli.core import resources

        resources.set_allocators()
        from dpcli.cli.app import main as run
    except (KeyboardInterrupt, Interrupted) as exc:
        _interrupted_while_starting(exc)
    run()


def _interrupted_while_starting(exc: BaseException) -> None:
    """A signal while the command line was being loaded: nothing was read or spent."""
    import json
    import sys

    signals.finish()
    code = signals.exit_status(exc)
    message = f"interrupted by {signals.signal_name(exc)}; nothing was spent"
    argv = sys.argv[1:]
    if "--json" in (argv[: argv.index("--")] if "--" in argv else argv):
        line = json.dumps({"error": {"code": code, "kind": "interrupted", "message": message}})
    else:
        line = f"dpcli: error: {message}"
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    sys.exit(code)


if __name__ == "__main__":
    main()
