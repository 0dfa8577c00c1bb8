"""Hypothesis profiles for the whole suite.

- dev (the default outside CI): Hypothesis' own example counts and random search, with its example database.
- ci (`make test`, `make test-slow` and .ci/run; also chosen when $CI is set): derandomized, so a run tests the
  same examples every time and a commit that passed cannot fail later by chance (no example database either).
- thorough: 20x the examples, for a deliberate long search: HYPOTHESIS_PROFILE=thorough .venv/bin/python -m pytest ...

$HYPOTHESIS_PROFILE names a profile explicitly (pytest's --hypothesis-profile=NAME overrides it). Every profile
has `deadline=None` and skips the `too_slow` health check: both are wall-clock assertions, and on a shared 2-core
machine they fail by load, not by a bug (the house rule: no timed assertions outside bench/). Tests that set
max_examples themselves keep it; tests/sensitivity_cases.py scales the sensitivity tests' counts with the loaded
profile.
"""

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.helpers import run_in_process
from tests.pg_server import PgServer, PgUnavailable

_UNTIMED = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}

settings.register_profile("dev", **_UNTIMED)
settings.register_profile("ci", derandomize=True, database=None, print_blob=True, **_UNTIMED)
settings.register_profile("thorough", max_examples=2000, **_UNTIMED)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


@pytest.fixture
def make_work(tmp_path: Path) -> Callable[..., Path]:
    """A factory for a test's working directory: ``make_work(spec, data, cap=None, ledger="L.jsonl")`` writes
    spec.yaml and data.csv (text as is, or bytes) in tmp_path and returns it; with ``cap`` (an ε, as text) it first
    sets dataset ``dataset``'s cap in ``ledger`` by `dpcli budget set` (in process, in a clean environment)."""

    def make(
        spec: str, data: str | bytes, *, cap: str | None = None, ledger: str = "L.jsonl", dataset: str = "toy"
    ) -> Path:
        (tmp_path / "spec.yaml").write_text(spec)
        if isinstance(data, bytes):
            (tmp_path / "data.csv").write_bytes(data)
        else:
            (tmp_path / "data.csv").write_text(data)
        if cap is not None:
            r = run_in_process("budget", "set", dataset, "--epsilon", cap, "--ledger", tmp_path / ledger)
            assert r.returncode == 0, r.stderr
        return tmp_path

    return make


# The signals dpcli handles. A run of dpcli.cli.app.main in this process (an in-process test) leaves them ignored once
# its
# outcome is decided (signals.finish: a late signal must not change a finished run), and a child process inherits an
# ignored disposition and keeps it (as it must under nohup or a shell's `&`): a later test that signals a child would
# then test an ignored signal. And `make test` started from a script's `&` starts with SIGINT ignored. So every test
# starts from Python's defaults, and whatever it set is put back after it.
_HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_DEFAULT_DISPOSITIONS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL,
                         signal.SIGHUP: signal.SIG_DFL}


@pytest.fixture(autouse=True)
def _default_signal_dispositions() -> Iterator[None]:
    saved = {signum: signal.getsignal(signum) for signum in _HANDLED_SIGNALS}
    for signum, handler in _DEFAULT_DISPOSITIONS.items():
        signal.signal(signum, handler)
    yield
    for signum, handler in saved.items():
        if handler is not None:
            signal.signal(signum, handler)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One real PostgreSQL server (tests/pg_server.py) for every ledger test of a session (of an xdist worker): each
    test makes its own schema (``create_schema``). Skipped where none can start (`-m "not postgres"` leaves them
    out)."""
    server = PgServer()
    try:
        server.start()
    except PgUnavailable as exc:
        server.stop()
        pytest.skip(f"no PostgreSQL server for the ledger tests: {exc}")
    try:
        yield server
    finally:
        server.stop()
