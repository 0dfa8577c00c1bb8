"""The working directory of the end-to-end command tests (test_cli.py, test_no_input_fingerprint.py): the toy spec
and a few rows whose unused column holds a canary value. test_engine_options.py and test_progress.py define their
own ``work``, which overrides this one in their module."""

import csv
import io
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.test_cli import CANARY, ROWS, SPEC


@pytest.fixture
def work(make_work: Callable[..., Path]) -> Path:
    data = io.StringIO()
    w = csv.writer(data, lineterminator="\n")
    w.writerow(["age", "income", "sex", "unused"])
    w.writerows([*r, CANARY] for r in ROWS)
    return make_work(SPEC, data.getvalue())
