"""Shared test helpers: the real `dpcli` command in a subprocess, with a clean environment."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def clean_env(extra: dict | None = None) -> dict:
    """This environment without any DPCLI_* variable (a developer's DPCLI_LEDGER must not leak into a test)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPCLI_")}
    env.update(extra or {})
    return env


def run_dpcli(
    *args: object, stdin: bytes | None = None, env: dict | None = None, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """`python -m dpcli ARGS`, output captured as bytes."""
    return subprocess.run(
        [sys.executable, "-m", "dpcli", *map(str, args)],
        input=stdin, capture_output=True, env=clean_env(env), cwd=cwd, timeout=timeout,
    )


@contextlib.contextmanager
def mounted_tmpfs(path: Path, options: str) -> Iterator[Path]:
    """A real small (or read-only) filesystem at ``path``, e.g. options "size=64k" or "ro,size=64k"; the test skips
    where mounting is not allowed (it needs root with CAP_SYS_ADMIN)."""
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.decode().strip()[:80]}): needs root with CAP_SYS_ADMIN")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


# The toy release of the ledger, safety and fault tests: one int column, one count, epsilon 0.25 per run.
TOY_SPEC = """\
version: 1
dataset: toy
privacy: {unit: row, neighbours: add_remove, epsilon: 0.25}
columns:
  age: {type: int, bounds: [0, 100]}
statistics:
  - {name: n, kind: count}
"""
