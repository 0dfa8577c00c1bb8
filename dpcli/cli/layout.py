"""Text laid out for the stream it goes to: tables (rich on a terminal, aligned plain text otherwise), prose
wrapped at a terminal's width, budgets as short exact text.

No colour when the stream is not a terminal or when NO_COLOR is set.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from fractions import Fraction
from typing import Protocol, TextIO

from dpcli.core.accounting import format_decimal, format_exact


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def fancy(stream: TextIO) -> bool:
    return _is_tty(stream) and not os.environ.get("NO_COLOR")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], stream: TextIO, title: str | None = None) -> None:
    """A table: rich on a terminal, aligned plain text otherwise (a pipe keeps one line per row, for grep and cut).

    On a terminal no word is ever broken: each column is at least as wide as its longest word, and a table that
    cannot fit the terminal that way is printed as one block per row instead (see ``_blocks``)."""
    if fancy(stream):
        from rich import box
        from rich.console import Console
        from rich.table import Table

        console = Console(file=stream, highlight=False)
        widest = [max(len(word) for cell in (h, *(r[i] for r in rows)) for word in cell.split() or [""])
                  for i, h in enumerate(headers)]
        gap = 2  # the SIMPLE_HEAD box without edges: two spaces between columns
        if sum(widest) + gap * (len(headers) - 1) > console.width:
            _blocks(headers, rows, stream, title, console.width)
            return
        t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
        for h, w in zip(headers, widest, strict=True):
            t.add_column(h, min_width=w, overflow="fold")
        for r in rows:
            t.add_row(*r)
        console.print(t)
        return
    if title:
        stream.write(title + "\n")
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    stream.write("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip() + "\n")
    for r in rows:
        stream.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def _blocks(headers: Sequence[str], rows: Sequence[Sequence[str]], stream: TextIO, title: str | None,
            width: int) -> None:
    """A table too wide for the terminal: per row its first cell, then ``header: value`` pairs wrapped at spaces."""
    import textwrap

    if title:
        stream.write(title + "\n")
    for r in rows:
        stream.write(f"{r[0]}\n")
        pairs = "; ".join(f"{h}: {c}" for h, c in zip(headers[1:], r[1:], strict=True) if c)
        for line in textwrap.wrap(pairs, width - 2, break_long_words=False, break_on_hyphens=False):
            stream.write(f"  {line}\n")


class Say(Protocol):
    """Writes one line of prose; ``indent`` starts each continuation line where it is wrapped."""

    def __call__(self, text: str, indent: str = "  ") -> None: ...


def writer(stream: TextIO) -> Say:
    """A function writing one line of prose: on a terminal wrapped at its width between words (``indent`` starts
    each continuation line), elsewhere as it is."""
    width = None
    if fancy(stream):
        from rich.console import Console

        width = Console(file=stream).width

    def say(text: str, indent: str = "  ") -> None:
        if width is None or len(text) <= width:
            stream.write(text + "\n")
            return
        import textwrap

        # the first line keeps its own leading spaces (textwrap drops whitespace only inside the paragraph)
        for line in textwrap.wrap(text, width, subsequent_indent=indent, break_long_words=False,
                                  break_on_hyphens=False):
            stream.write(line + "\n")

    return say


def eps(x: Fraction | None) -> str:
    if x is None:
        return "-"
    exact = format_exact(x)
    return exact if len(exact) <= 20 else format_decimal(x, 10)
