"""A broken internal invariant in the table or the audit is an InternalError, not an assert (issue 24, 6).

`assert` vanishes under `python -O`: the table's and the audit's "cannot happen" checks (a statistic's noisy values
drawn, a noise part's scale set) were asserts, so an optimised run went on past a broken plan into a numpy or
Fraction error, or a wrong number. They are explicit checks now, raising dpcli's InternalError (exit 1, "a bug in
dpcli") in the same place. No spec reaches them: the plans here are broken on purpose.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpcli.errors import InternalError
from dpcli.plan.model import make_plan
from dpcli.publish.table import number_columns
from dpcli.specs.load import parse_spec

SPEC = """\
version: 1
dataset: d
privacy: {neighbours: add_remove, epsilon: 1}
columns:
  age: {type: int, bounds: [0, 100]}
statistics:
  - {name: n, kind: count}
  - {name: s, kind: sum, column: age}
"""


def test_a_count_released_without_its_noisy_counts_is_an_internal_error() -> None:
    count, total = make_plan(parse_spec(SPEC)).statistics
    with pytest.raises(InternalError, match="statistic n: its noisy counts were not drawn"):
        number_columns(count, None, None, None)
    with pytest.raises(InternalError, match="statistic s: its noisy sums were not drawn"):
        number_columns(total, np.zeros(1, dtype=np.int64), None, None)
