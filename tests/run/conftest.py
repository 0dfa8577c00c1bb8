"""The working directory of the release-safety tests (test_release_safety.py, test_stdin_spool.py,
test_process_limits.py): the toy spec, four rows and a ledger whose cap is 10. test_faults.py defines its own
``work``, which overrides this one in its module."""

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import TOY_SPEC
from tests.run.test_release_safety import DATA


@pytest.fixture
def work(make_work: Callable[..., Path]) -> Path:
    return make_work(TOY_SPEC, DATA, cap="10")
