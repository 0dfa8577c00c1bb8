"""Shared test helpers: the `dpcli` command in process or in a subprocess, with a clean environment."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def clean_env(extra: dict | None = None) -> dict:
    """This environment without any DPCLI_* variable (a developer's DPCLI_LEDGER must not leak into a test)."""
    return clean_env_from(dict(os.environ), extra)


def run_dpcli(
    *args: object, stdin: bytes | None = None, env: dict | None = None, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """`python -m dpcli ARGS`, output captured as bytes."""
    return subprocess.run(
        [sys.executable, "-m", "dpcli", *map(str, args)],
        input=stdin, capture_output=True, env=clean_env(env), cwd=cwd, timeout=timeout,
    )


# A process's peak RSS (os.wait4's ru_maxrss, or its own getrusage) includes the high-water mark of the memory it
# replaced at exec: Linux folds it in, so a child of a pytest process that once held 1 GB reports at least 1 GB (seen
# once the statistical suites ran before the memory tests in one process). A measured command is therefore started
# by this small launcher, which forks once more: the grandchild replaces the launcher's few MB, never pytest's. It
# writes the grandchild's peak (KiB) to the file named first and exits with the grandchild's code.
_MEASURED = (
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
    return [sys.executable, "-c", _MEASURED, str(peak_file), *argv]


def run_in_process(*args: object, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`dpcli ARGS` through dpcli.cli.app.main in this process, as run_dpcli would run it (same result type, output
    as bytes, a clean environment, ``cwd``), without starting an interpreter: ~0.5 s saved per call.

    For what a child process alone can show, use run_dpcli: standard input (the spool needs a real descriptor),
    pipes closed early, signals, the umask, encoding variables read at start-up, ulimits."""
    from dpcli.cli.app import main

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    saved_signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    out, err = io.BytesIO(), io.BytesIO()
    sys.stdout = io.TextIOWrapper(out, encoding="utf-8", newline="\n", write_through=True)
    sys.stderr = io.TextIOWrapper(err, encoding="utf-8", newline="\n", write_through=True)
    sys.stdin = None  # type: ignore[assignment]  # nothing to read: as with a closed standard input
    os.environ.clear()
    os.environ.update(clean_env_from(saved_env, env))
    code: object = 0
    try:
        if cwd is not None:
            os.chdir(cwd)
        main([str(a) for a in args])
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        stdout, stderr = out.getvalue(), err.getvalue()
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        for signum, handler in saved_signals.items():
            signal.signal(signum, handler)
    assert isinstance(code, int), code  # main() always exits with a number
    return subprocess.CompletedProcess(["dpcli", *map(str, args)], code, stdout, stderr)


def clean_env_from(environ: dict, extra: dict | None) -> dict:
    env = {k: v for k, v in environ.items() if not k.startswith("DPCLI_")}
    env.update(extra or {})
    return env


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
