"""The hostile-input battery's fixtures: every case starts without DPCLI_ variables, and most in a working directory
holding the battery's spec and data (tests/hostile/battery.py) with a ledger whose cap is set."""

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.hostile.battery import DATA, SPEC


@pytest.fixture(autouse=True)
def _no_dpcli_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("DPCLI_"):
            monkeypatch.delenv(key)


@pytest.fixture
def work(make_work: Callable[..., Path]) -> Path:
    return make_work(SPEC, DATA, cap="100", ledger="ledger.jsonl")
