"""A command's own peak RSS, for the benchmarks: ``measured(argv, peak_file)`` wraps ``argv`` in a small launcher
that forks once more and writes the grandchild's peak (os.wait4's ru_maxrss, KiB) to ``peak_file``.

Why a launcher: Linux folds the high-water mark of the image a process replaces at exec into its ru_maxrss, so a
command started straight from a benchmark that holds data (or polars) would report at least the benchmark's own
peak. tests/helpers.py has the same launcher for the tests (the tests do not import bench/)."""

from __future__ import annotations

import sys
from pathlib import Path

LAUNCHER = (
    "import os, sys\n"
    "peak_file, argv = sys.argv[1], sys.argv[2:]\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.execv(argv[0], argv)\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "with open(peak_file, 'w') as fh:\n"
    "    fh.write(str(usage.ru_maxrss))\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def measured(argv: list[str], peak_file: Path) -> list[str]:
    """``argv`` (argv[0] a full path) run so that its own peak RSS, in KiB, lands in ``peak_file``."""
    return [sys.executable, "-c", LAUNCHER, str(peak_file), *argv]


def peak_bytes(peak_file: Path) -> int:
    """The peak RSS the launcher wrote, in bytes."""
    return int(peak_file.read_text()) * 1024
