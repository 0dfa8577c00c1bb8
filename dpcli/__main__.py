"""The entry point of `dpcli` and `python -m dpcli` (pyproject.toml's console script names ``main``).

Its first act is the signal handlers, before typer, polars or numpy are imported (a second or so): a signal at any
moment of a run then ends it with one line that says whether anything was spent. Its second is the allocators'
settings, before any thread starts (dpcli/core/resources.py).
"""

from __future__ import annotations

import os
import sys
import warnings

from dpcli.core import signals
from dpcli.core.version import __version__
from dpcli.errors import Interrupted


def main() -> None:
    signals.install()
    warnings.simplefilter("ignore")  # no warning's source line on stderr (dpcli.cli.app._quiet_warnings says why)
    try:
        if sys.argv[1:] == ["--version"] and _version_written():
            signals.finish(last=True)
            return
        from dpcli.core import resources

        resources.set_allocators()
        from dpcli.cli.app import main as run
    except (KeyboardInterrupt, Interrupted) as exc:
        _interrupted_while_starting(exc)
    run()


def _version_written() -> bool:
    """``dpcli --version`` alone, the one answer that needs no command line: written here, before typer and the
    commands are loaded (docs/benchmarks.md, "Start-up"). One unbuffered write of a short line: where it cannot be
    made (standard output closed, full, a closed pipe) nothing was written, and the command line answers as before."""
    try:
        os.write(1, f"dpcli {__version__}\n".encode())
    except OSError:
        return False
    return True


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
