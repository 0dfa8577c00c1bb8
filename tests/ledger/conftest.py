"""The working directory of the ledger-hardening tests (test_hardening.py, test_authenticated_head.py,
test_read_only.py, test_soak.py): the toy spec and four rows, no cap. test_jsonl.py and test_postgres.py define
their own ``work``, which overrides this one in their module."""

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import TOY_SPEC


@pytest.fixture
def work(make_work: Callable[..., Path]) -> Path:
    return make_work(TOY_SPEC, "age\n34\n71\n15\n52\n")
