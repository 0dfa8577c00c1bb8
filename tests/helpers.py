"""Shared test helpers: the real `dpcli` command in a subprocess, with a clean environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


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
