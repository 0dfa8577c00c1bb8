"""Signals as exceptions, and holding them off while a release is between its spend and its stored table.

The CLI installs handlers that turn SIGINT, SIGTERM and SIGHUP into ``Interrupted``,
so every ``with``/``finally`` cleanup runs (the stdin spool, temporary output files). ``release`` holds the three
signals from just before the spend until the table is stored and its ``released`` record written: a Ctrl-C there is
delivered when the block ends, so it cannot leave a paid release id without its table (which would burn the id).
Until the ledger calls ``Held.hold_from_here`` (under its lock, just before the spend is written), a signal is
handled at once, so a Ctrl-C during the lock wait ends the run with nothing spent. SIGKILL cannot be held or
handled; the ledger's own crash safety covers it.

For the command line (``install``): the handlers are the entry point's first act, before typer, polars or numpy are
imported, so a signal at any moment of a run ends it with one line. Once the run's outcome is decided (a release's
output written, or the line that ends the run said) ``finish`` ignores the three signals through the interpreter's
teardown: a late signal can no longer turn a finished release into an exit that reads "nothing was spent".
polars installs a native SIGINT handler of its own when it is imported (it stops a running query); that handler
would run during a held stretch and where SIGINT was meant to stay ignored, so each disposition is set again as soon
as polars is loaded. polars' handler is in place from its native part's load on, some tenths of a second before the
package is done, so a signal inherited ignored is also blocked for the whole run (``install``): no handler a library
installs can receive it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec, PathFinder
from types import FrameType, ModuleType, TracebackType

from dpcli.errors import Interrupted

# What signal.signal takes and returns: a function, SIG_DFL or SIG_IGN (ints), or None (a handler not set from Python)
Handler = Callable[[int, FrameType | None], object] | int | None

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Run:
    """The command line's state: whether ``install`` ran, and whether the run's outcome is decided."""

    installed = False
    finished = False
    blocked: frozenset[int] = frozenset()  # the inherited-ignored signals ``install`` blocked
    unraisable: Callable[[sys.UnraisableHookArgs], object] = sys.__unraisablehook__  # the hook ``install`` replaced


def _raise_interrupted(signum: int, _frame: FrameType | None) -> None:
    if not _Run.finished:  # once the outcome is decided, a late signal changes nothing
        raise Interrupted(signum)


def _deliver_again(args: sys.UnraisableHookArgs) -> None:
    """A signal that arrived while Python ran a finalizer or a weakref callback (an import lock's, say): the handler's
    Interrupted cannot leave such a function, and Python would print it as "Exception ignored" and drop the signal
    (seen in CI: a SIGTERM at 0.3 s of a release, which then ran to its end). It is delivered again to the main
    thread, where the handler raises it as any other signal."""
    if isinstance(args.exc_value, Interrupted) and not _Run.finished:
        # sent again from another thread a moment later, so that it lands once this function and the finalizer have
        # returned (a signal raised while they run would be dropped the same way)
        timer = threading.Timer(0.01, os.kill, args=(os.getpid(), args.exc_value.signum))
        timer.daemon = True
        timer.start()
        return
    _Run.unraisable(args)


def install() -> None:
    """SIGINT, SIGTERM and SIGHUP raise Interrupted in the main thread (for the CLI; a library caller keeps its own
    handlers, and release() treats KeyboardInterrupt the same way). A signal the parent set to be ignored (nohup,
    a shell's background job) stays ignored. Called first by the entry point, and again by ``cli.main``."""
    _Run.installed, _Run.finished = True, False
    if sys.unraisablehook is not _deliver_again:
        _Run.unraisable, sys.unraisablehook = sys.unraisablehook, _deliver_again
    for signum in HELD:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _raise_interrupted)
    _block_ignored()
    if "polars" in sys.modules:
        reassert()
    elif not any(isinstance(finder, _PolarsWatch) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PolarsWatch())


def _block_ignored() -> None:
    """Block, for the rest of the run, each of the three signals the parent set to be ignored. Ignoring is the
    process's disposition, and a native library may replace it behind Python's back: polars' native part installs
    its SIGINT handler as it loads, some tenths of a second before ``reassert`` can remove it, and a SIGINT meanwhile
    reached that handler (issue 25). A blocked signal reaches no handler in any thread: this runs before any thread
    is started, and every later thread inherits the block. Set again to be ignored, a pending one is dropped."""
    if threading.current_thread() is not threading.main_thread():
        return
    ignored = {signum for signum in HELD if signal.getsignal(signum) is signal.SIG_IGN}
    if ignored:
        already = signal.pthread_sigmask(signal.SIG_BLOCK, ignored)
        _Run.blocked |= ignored - already


def reassert() -> None:
    """Set each signal's disposition again, as Python holds it, at the operating system: this removes a native
    handler a library installed behind Python's back (polars' SIGINT handler, which stops a running query with
    KeyboardInterrupt, also during a held stretch and where SIGINT was inherited ignored)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in HELD:
        handler = signal.getsignal(signum)
        if handler is not None:
            signal.signal(signum, handler)


class _PolarsWatch(MetaPathFinder):
    """Calls ``reassert`` right after polars is imported, wherever that happens (polars is imported lazily: a command
    that needs no table never loads it)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != "polars":
            return None
        spec = PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenReassert(spec.loader)
        return spec


class _ThenReassert(Loader):
    """polars' own loader, which sets the signals again once the package has run; anything else it is asked
    (``get_resource_reader``, ``is_package``, ...) is the wrapped loader's."""

    def __init__(self, loader: Loader) -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> object:
        return getattr(self._loader, name)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        try:
            self._loader.exec_module(module)
        finally:
            reassert()


def finish(*, last: bool = False) -> None:
    """The run's outcome is decided: from here SIGINT, SIGTERM and SIGHUP are ignored, through the interpreter's
    teardown (which would otherwise put back their default action, ending a finished run by the signal). Only for
    the command line: a library caller's handlers are left alone. ``last``: the command line's run is over (its
    line said), so a library call later in this process (a test's) finds its own handlers and sets none."""
    if not _Run.installed:
        return
    _Run.finished = True
    if threading.current_thread() is threading.main_thread():
        for signum in HELD:
            signal.signal(signum, signal.SIG_IGN)
    if last:
        _Run.installed = False
        if _Run.blocked and threading.current_thread() is threading.main_thread():
            # the caller's own mask back (a test's process); ignored now, a pending one is dropped
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _Run.blocked)
            _Run.blocked = frozenset()


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
        self._old: dict[int, Handler] = {}
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
            signal.signal(signum, handler)
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
        if kind is None and self._holding:
            # the block ended after its spend with nothing raised: the release and its output are written, so the
            # run's outcome is decided (first, so that a signal noted meanwhile is dropped, not raised)
            finish()
        self.release()
        if _Run.finished:
            finish()  # release() put back the raising handlers: ignore the three again
