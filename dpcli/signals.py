"""Signals as exceptions, and holding them off while a release is between its spend and its stored table.

The CLI installs handlers that turn SIGINT, SIGTERM and SIGHUP into ``Interrupted``,
so every ``with``/``finally`` cleanup runs (the stdin spool, temporary output files). ``release`` holds the three
signals from just before the spend until the table is stored and its ``released`` record written: a Ctrl-C there is
delivered when the block ends, so it cannot leave a paid release id without its table (which would burn the id).
Until the ledger calls ``Held.hold_from_here`` (under its lock, just before the spend is written), a signal is
handled at once, so a Ctrl-C during the lock wait ends the run with nothing spent. SIGKILL cannot be held or
handled; the ledger's own crash safety covers it.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType

from dpcli.errors import Interrupted

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def install() -> None:
    """SIGINT, SIGTERM and SIGHUP raise Interrupted in the main thread (for the CLI; a library caller keeps its own
    handlers, and release() treats KeyboardInterrupt the same way). A signal the parent set to be ignored (nohup,
    a shell's background job) stays ignored."""

    def raise_interrupted(signum: int, _frame: FrameType | None) -> None:
        raise Interrupted(signum)

    for signum in HELD:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, raise_interrupted)


def signal_name(exc: BaseException) -> str:
    signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
    return signal.Signals(signum).name


def exit_status(exc: BaseException) -> int:
    """The shell's conventional status for a run ended by a signal: 128 + its number."""
    return 128 + (exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT))


class Held:
    """``with Held() as hold: ...; hold.hold_from_here(); ...; hold.release()``: SIGINT, SIGTERM and SIGHUP are
    handled as before until ``hold_from_here()``; from there they wait until ``release()`` or the end of the block,
    whichever comes first, and then the first that came is handled as it would have been.

    Done with Python-level handlers that only take note, not with ``pthread_sigmask``: a process-directed signal
    goes to any thread that does not block it (polars and numpy keep worker threads), while Python always runs its
    handlers in the main thread. So this holds only where handlers can be set, the main thread."""

    def __init__(self) -> None:
        self._old: dict[int, object] = {}
        self._pending: list[int] = []
        self._holding = False

    def __enter__(self) -> Held:
        if threading.current_thread() is threading.main_thread():
            for signum in HELD:
                previous = signal.getsignal(signum)
                if previous is not signal.SIG_IGN and previous is not None:
                    self._old[signum] = signal.signal(signum, self._take_note)
        return self

    def _take_note(self, signum: int, _frame: FrameType | None) -> None:
        self._pending.append(signum)
        if not self._holding:  # not yet holding (the ledger's lock wait): handled at once
            self.release()

    def hold_from_here(self) -> None:
        """Hold signals from now on; one that came before is handled now (its handler raises here)."""
        self._holding = True
        if self._pending:
            self.release()

    def release(self) -> None:
        """Put the handlers back; a signal that came meanwhile is handled now (its handler raises here)."""
        old, self._old = self._old, {}
        for signum, handler in old.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        if self._pending:
            signum = self._pending[0]
            self._pending = []
            handler = old.get(signum)
            if callable(handler):
                handler(signum, None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)  # the default action: the process ends by that signal

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
