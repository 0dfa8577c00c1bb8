"""The CLI's messages on stderr: one ``dpcli: error:`` line (one JSON object with --json), warnings and notices; and
stdout and stderr set to write any text, whatever their encoding."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

from dpcli.cli.documents import STDOUT_COMMANDS, error_fields, format_name

# What a stream whose encoding lacks a character writes instead (PYTHONIOENCODING=ascii, or LC_ALL=C with
# PYTHONUTF8=0, made `dpcli plan` and `budget show` exit 1 on their ε): the symbols dpcli prints spelled in ASCII,
# anything else as a backslash escape. Only text streams change: tables go to stdout as UTF-8 bytes
# (dpcli/publish/table.py).
_ASCII_SPELLING = {
    "ε": "eps", "ρ": "rho", "δ": "delta", "σ": "sigma", "Δ": "Delta", "≤": "<=", "≥": ">=", "±": "+/-", "≈": "~",
    "×": "x", "√": "sqrt", "²": "^2", "₂": "2", "…": "...", "−": "-", "→": "->",
}
STREAM_ERRORS = "dpcli.ascii"


def _spell_in_ascii(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = exc.object[exc.start:exc.end]
    return "".join(_ASCII_SPELLING.get(c) or c.encode("ascii", "backslashreplace").decode() for c in text), exc.end


def setup_streams() -> None:
    """Let stdout and stderr write any text, whatever their encoding (see _ASCII_SPELLING). Called once by the CLI."""
    import codecs

    codecs.register_error(STREAM_ERRORS, _spell_in_ascii)
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):  # closed, or not a TextIOWrapper underneath
                reconfigure(errors=STREAM_ERRORS)


# Set by the CLI when the command line has --json: errors are then one JSON object (docs/json.md), on stderr, and on
# stdout too for a command whose --json document goes there, unless it already wrote one (`json_command`: the command
# run, `stdout_written`: a document is on stdout).
json_errors = False
json_command: str | None = None
stdout_written = False


def error(message: str, kind: str = "internal", code: int = 1, fields: dict[str, Any] | None = None) -> None:
    """One error line on stderr, ``dpcli: error: MESSAGE``; with --json one object, ``{"format": ..., "exit_code":
    CODE, "error": {"code": CODE, "kind": KIND, "message": MESSAGE, ...fields}}`` (the same message, without the
    prefix), also on stdout for a command whose result goes there (documents.STDOUT_COMMANDS)."""
    if json_errors:
        doc = stamped_error(code, kind, message, fields)
        sys.stderr.write(json.dumps(doc, ensure_ascii=False) + "\n")
        if json_command in STDOUT_COMMANDS and not stdout_written:
            document(doc)
    else:
        sys.stderr.write(f"dpcli: error: {message}\n")


def stamped_error(code: int, kind: str, message: str, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """The --json error object of the command being run."""
    return {"format": format_name(json_command), "exit_code": code,
            "error": error_fields(code, kind, message, fields)}


def document(doc: Any, indent: int | None = None, ensure_ascii: bool = True) -> None:
    """The command's one --json document on stdout."""
    global stdout_written
    sys.stdout.write(json.dumps(doc, ensure_ascii=ensure_ascii, indent=indent) + "\n")
    stdout_written = True


def warning(message: str) -> None:
    """One ``dpcli: warning:`` line on stderr (printed even with --quiet: it points at a budget at risk)."""
    sys.stderr.write(f"dpcli: warning: {message}\n")


def info(message: str) -> None:
    """A summary or notice on stderr (the CLI leaves it out under --quiet)."""
    sys.stderr.write(message + "\n")
