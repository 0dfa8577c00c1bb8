"""Did-you-mean suggestions for a name that is not among the known ones, as the command line gives them for its own
commands and options (Typer and Click: ``difflib.get_close_matches`` with its defaults, at most 3 names whose
similarity ratio is at least 0.6, closest first).

Callers offer only names that are not data: a spec's fields and columns, a file's header or schema (its names, never
a cell)."""

from __future__ import annotations

from collections.abc import Iterable
from difflib import get_close_matches


def close_names(name: str, known: Iterable[str]) -> list[str]:
    """The known names closest to ``name`` (at most 3, closest first; none when nothing is close)."""
    return get_close_matches(name, list(known))


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``did you mean 'income'?`` (several names, closest first: ``'a', 'b' or 'c'``), or "" when no known name is
    close to ``name``."""
    quoted = [repr_name(m) for m in close_names(name, known)]
    if not quoted:
        return ""
    return f"did you mean {quoted[0] if len(quoted) == 1 else ', '.join(quoted[:-1]) + ' or ' + quoted[-1]}?"


def repr_name(name: str) -> str:
    """A name as the messages quote it: in single quotes, cut at 60 characters."""
    return f"'{name[:60]}'"
