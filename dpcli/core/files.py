"""Durable file writes, shared by the output writer and the JSONL ledger (neither imports the other).

A file is replaced whole or not at all: written to a temporary file in the same directory, fsynced, renamed over
its name, and the directory fsynced so that the rename survives a crash.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, body: Callable[[IO[bytes]], object]) -> None:
    """Write via a temporary file in the same directory, fsync it, rename it over ``path``, fsync the directory."""
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        # mkstemp creates 0600; a published table gets the usual mode for new files (0666 less the umask)
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            body(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_directory(directory)


def fsync_directory(directory: Path) -> None:
    """Make a rename or a new name in ``directory`` durable; best effort (some filesystems refuse a directory fd)."""
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
