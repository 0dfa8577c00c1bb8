"""Input handling: which input a release reads, and that input as a regular file the engine can scan.

The input is a path, or standard input (``-`` or none given). A path that is a FIFO or a character device, and
standard input, are streams: they are spooled to a private copy first, with an idle timeout and a size cap. The
public API, used by dpcli.run.release:
- ``input_path(explicit, from_spec)``: the path to read, or None for standard input;
- ``check_input_timeout(seconds)`` and ``parse_size(text)``: the timeout and the cap, validated;
- ``with InputFile(path, timeout, max_bytes) as src: engine(src.path)``: the file to scan (``src.name`` for
  messages).

The copy is sensitive data. It lives in a private directory (mode 0700, made by ``tempfile.mkdtemp`` under
$TMPDIR) and is removed when the ``with`` block ends, on every path: success, an error, a timeout, a full disk, the
size cap, and SIGINT/SIGTERM/SIGHUP (the CLI turns those into exceptions, so the block's cleanup runs). Only
SIGKILL can leave it behind (docs/spec.md, "Limits"). Past the size cap (the CLI's ``--max-input-bytes``) the run
ends with exit 3 before anything is spent.

Messages name "standard input" or the FIFO as given, never the spool's own path.
"""

from __future__ import annotations

import math
import os
import select
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from dpcli.errors import InputError, UsageError

CHUNK = 1 << 20
# Idle timeout on a streamed input (stdin, a FIFO): no byte for this many seconds ends the run with exit 3, before
# anything is spent. 0 or None waits forever. CLI: --input-timeout (or $DPCLI_INPUT_TIMEOUT), whose default this is.
DEFAULT_INPUT_TIMEOUT = 60.0
# poll() takes milliseconds in a C int: 10^6 s (11.6 days) is far below its 2^31 ms and far above any real wait
MAX_INPUT_TIMEOUT = 1_000_000.0
# A spooled input is a copy of the data on local disk; 16 GiB is ~300 million rows of a typical census extract.
DEFAULT_MAX_INPUT_BYTES = 16 << 30
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def check_input_timeout(seconds: float | None) -> float | None:
    """A usable idle timeout (None: wait forever); UsageError (exit 2) for inf, nan, negatives and huge values."""
    if seconds is None:
        return None
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_INPUT_TIMEOUT:
        raise UsageError(
            f"must be between 0 and {MAX_INPUT_TIMEOUT:.0f} seconds (0 waits forever)",
            argument="input_timeout", option="--input-timeout",
        )
    return seconds or None


def parse_size(text: str | int) -> int:
    """Bytes from ``1073741824``, ``512M``, ``16G`` or ``16GiB`` (binary units); UsageError when it is not a size."""
    if isinstance(text, int):
        value = text
    else:
        t = text.strip().lower().removesuffix("ib").removesuffix("b")
        unit = t[-1:] if t[-1:] in _UNITS and not t[-1:].isdigit() else ""
        digits = t[: len(t) - len(unit)] if unit else t
        if not digits.isdigit() or len(digits) > 20:
            raise UsageError(
                f"'{text[:40]}' is not a size (e.g. 16G, 512M, 1000000)",
                argument="max_input_bytes", option="--max-input-bytes",
            )
        value = int(digits) * _UNITS[unit]
    if value <= 0:
        raise UsageError("must be positive", argument="max_input_bytes", option="--max-input-bytes")
    return value


def input_path(explicit: str | Path | None, from_spec: str | Path | None) -> Path | None:
    """The input to read: ``explicit`` (the CLI's --input), else the spec's ``input:``; None for standard input
    (neither given, or ``-``)."""
    value = explicit if explicit is not None else from_spec
    if value is None or str(value) == "-":
        return None
    return Path(value)


def is_stream(path: Path) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


class InputFile:
    """``with InputFile(source) as src: engine(src.path)``; ``source`` None is standard input."""

    def __init__(
        self,
        source: Path | None,
        timeout: float | None = DEFAULT_INPUT_TIMEOUT,
        max_bytes: int = DEFAULT_MAX_INPUT_BYTES,
        on_bytes: Callable[[int, int | None], None] | None = None,
    ):
        self.source = source
        self.on_bytes = on_bytes  # hears the bytes spooled so far (no total: a stream's size is known at its end)
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._dir: str | None = None
        self._spool_name: str | None = None  # the spool's path, replaced by ``name`` in error messages
        self.path: Path = source if source is not None else Path("-")

    @property
    def name(self) -> str:
        return "standard input" if self.source is None else str(self.source)

    @property
    def spooled(self) -> bool:
        return self._dir is not None

    def __enter__(self) -> InputFile:
        if self.source is None or is_stream(self.source):
            try:
                self.path = self._spool()
            except BaseException:
                self.close()
                raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
        if isinstance(exc, InputError) and self._spool_name and self._spool_name in str(exc):
            # the engine names the file it was given: say "standard input", never the spool's path
            exc.args = (str(exc).replace(self._spool_name, self.name),)
            exc.fact = exc.fact.replace(self._spool_name, self.name)

    def _spool(self) -> Path:
        # the private directory first, inside this method's caller's cleanup: nothing is ever written outside it
        self._dir = tempfile.mkdtemp(prefix="dpcli-")
        # a FIFO's copy keeps its name, so that what its name decides (a .tsv's tab) is decided the same for the copy
        target = Path(self._dir) / (self.source.name if self.source is not None and self.source.name else "input.csv")
        self._spool_name = str(target)
        if self.source is None:
            if sys.stdin is None:
                raise InputError("cannot read input from standard input: it is closed")
            try:
                rfd, own = sys.stdin.fileno(), False
            except (OSError, ValueError):
                raise InputError("cannot read input from standard input: it is closed") from None
        else:
            try:
                # O_NONBLOCK: opening a FIFO must not hang until a writer appears; the idle timeout covers that wait
                rfd, own = os.open(self.source, os.O_RDONLY | os.O_NONBLOCK), True
            except OSError as exc:
                raise InputError(f"cannot read input {self.name}: {exc.strerror or 'read failed'}") from None
        total = 0
        if self.on_bytes is not None:
            self.on_bytes(0, None)
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                while chunk := _read_chunk(rfd, self.timeout, self.name):
                    if self.on_bytes is not None:
                        self.on_bytes(total + len(chunk), None)
                    total += len(chunk)
                    if total > self.max_bytes:
                        raise InputError(
                            f"{self.name} is larger than the input cap ({self.max_bytes} bytes): nothing was spent",
                            hint="raise --max-input-bytes or pass a file path",
                        )
                    out.write(chunk)
        except OSError as exc:
            raise InputError(
                f"cannot spool {self.name} to a private temporary file: {exc.strerror or 'write failed'}; "
                "nothing was spent"
            ) from None
        finally:
            if own:
                os.close(rfd)
        return target

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)


def _read_chunk(fd: int, timeout: float | None, name: str) -> bytes:
    """The next chunk of a stream (b"" at its end); InputError when no byte arrives for ``timeout`` seconds."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    wait_ms = int(timeout * 1000) if timeout else -1
    while True:
        if not poller.poll(wait_ms):
            raise InputError(
                f"no data from {name} for {timeout:g} s: giving up before anything was spent",
                hint="raise --input-timeout (0 waits forever)",
            )
        try:
            return os.read(fd, CHUNK)
        except (BlockingIOError, InterruptedError):
            continue
