"""The CLI's messages on stderr: one ``dpcli: error:`` line (one JSON object with --json), warnings and notices; and
stdout and stderr set to write any text, whatever their encoding."""

from __future__ import annotations

import contextlib
import json
import sys

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


# Set by the CLI when the command line has --json: errors are then one JSON object on stderr (docs/exit-codes.md).
json_errors = False


def error(message: str, kind: str = "internal", code: int = 1) -> None:
    """One error line on stderr, ``dpcli: error: MESSAGE``; with --json one object,
    ``{"error": {"code": CODE, "kind": KIND, "message": MESSAGE}}`` (the same message, without the prefix)."""
    if json_errors:
        doc = {"error": {"code": code, "kind": kind, "message": message}}
        sys.stderr.write(json.dumps(doc, ensure_ascii=False) + "\n")
    else:
        sys.stderr.write(f"dpcli: error: {message}\n")


def warning(message: str) -> None:
    """One ``dpcli: warning:`` line on stderr (printed even with --quiet: it points at a budget at risk)."""
    sys.stderr.write(f"dpcli: warning: {message}\n")


def info(message: str) -> None:
    """A summary or notice on stderr (the CLI leaves it out under --quiet)."""
    sys.stderr.write(message + "\n")
