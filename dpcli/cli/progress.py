"""The bar of bytes read while a release reads its input, on a terminal a person watches."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TextIO

from dpcli.cli.layout import fancy

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


def progress_wanted(stream: TextIO, *, quiet: bool, as_json: bool) -> bool:
    """Whether a person is watching ``stream`` and asked for no silence: a terminal, not ``--quiet`` or ``--json``
    (a script reads that stream), not CI (``$CI`` set to anything: a CI log that records a terminal keeps every
    frame), not ``TERM=dumb`` (no cursor movement) and not ``NO_COLOR`` (the contract: no bar then either)."""
    env = os.environ
    return not quiet and not as_json and fancy(stream) and not env.get("CI") and env.get("TERM") != "dumb"


class InputBar:
    """The bar of bytes read while the input is read: ``on_bytes(read, total)`` is the callback the library calls
    (``total`` None for a stream: bytes read, no total); ``close()`` takes the bar off the terminal.

    It shows the bytes read, the total and their ratio, nothing else: the input's size is public (threat model),
    while a rate, an ETA or an elapsed time would print how long the scan took so far, a per-phase time that
    depends on the data (the parser's speed varies with the cells: quoted fields, long lines, bad numbers). The
    bar's movement shows that to someone watching the terminal, but no figure of it can be copied into a log.
    No row count and no cell ever reach it: the library reports bytes only.

    Transient: it erases itself when ``read`` reaches ``total`` (release() ends its reports with one where they are
    equal) and at ``close()``, so what follows starts on a clean line: the summary, the one ``dpcli: error:`` line,
    or a table written to standard output on the same terminal (which would otherwise start on the bar's line).
    Lines written to stderr meanwhile (``--verbose``) are printed above it by rich."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._progress: Progress | None = None
        self._task: TaskID  # set with _progress
        self._done = False

    def on_bytes(self, read: int, total: int | None) -> None:
        if self._done:
            return
        if total is not None and read >= total:
            self.close()
            return
        if self._progress is None:
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, Progress, TaskProgressColumn, TextColumn

            self._progress = Progress(
                TextColumn("reading input"), BarColumn(), TaskProgressColumn(), DownloadColumn(),
                console=Console(file=self._stream, highlight=False), transient=True,
                redirect_stdout=False,  # stdout is the table: never through rich
            )
            self._task = self._progress.add_task("input", total=total, completed=read)
            self._progress.start()  # drawn now, not at the first refresh tick
        else:
            self._progress.update(self._task, completed=read, total=total)

    def close(self) -> None:
        self._done = True
        progress, self._progress = self._progress, None
        if progress is not None:
            progress.stop()


@contextlib.contextmanager
def input_bar(stream: TextIO, wanted: bool) -> Iterator[Callable[[int, int | None], None] | None]:
    """``with input_bar(sys.stderr, wanted) as on_bytes:`` the callback for ``release(on_input_bytes=...)`` (None
    when not ``wanted``); the bar is off the terminal when the block ends, however it ends (an error, a signal)."""
    if not wanted:
        yield None
        return
    # the bar draws on its own copy of the terminal's descriptor: while the input is read, the engine points fd 2 at
    # /dev/null (a Rust panic's text could quote a cell: dpcli.engine.lines.reading), which would hide the bar too
    try:
        terminal: TextIO = os.fdopen(os.dup(stream.fileno()), "w", encoding=stream.encoding or "utf-8",
                                     errors="replace")
    except (OSError, ValueError, AttributeError):
        yield None  # no descriptor to copy (a stream without one): no bar
        return
    bar = InputBar(terminal)
    try:
        yield bar.on_bytes
    finally:
        bar.close()
        terminal.close()
