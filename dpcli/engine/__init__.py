"""Exact aggregates. The only package that imports polars.

``aggregate(plan, path)`` returns, per statistic, the exact per-cell counts and fixed-point sums that the
mechanisms will perturb. It never decides anything public: cells are the plan's declared cells, values are
clamped to the declared bounds, and cells nobody falls in are zeros, not missing rows. The one exception is an
open-key statistic (``categories: open``): one entry per observed (declared cell, key), which only the mechanism's
partition selection may publish. A person-level release (``privacy.unit: {id: ...}``) bounds each person's rows
first, under a per-release secret (``aggregate(..., secret=...)``; ``dpcli.engine.persons``).

The names below are loaded on first use (PEP 562), as in ``dpcli/__init__.py``: importing a light module of this
package (``dpcli.engine.inputs``, ``csv_header``, ``source``) does not import polars and numpy, so ``dpcli plan``
and ``dpcli --version`` start without them (docs/benchmarks.md, "Start-up").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpcli.engine.cells import ExactStatistic
    from dpcli.engine.csv_header import check_header, read_header
    from dpcli.engine.polars_engine import aggregate, aggregate_periods, check_input
    from dpcli.engine.source import input_format

# name -> the module that defines it
_PUBLIC = {
    "ExactStatistic": "dpcli.engine.cells",
    "check_header": "dpcli.engine.csv_header",
    "read_header": "dpcli.engine.csv_header",
    "aggregate": "dpcli.engine.polars_engine",
    "aggregate_periods": "dpcli.engine.polars_engine",
    "check_input": "dpcli.engine.polars_engine",
    "input_format": "dpcli.engine.source",
}

__all__ = [
    "ExactStatistic", "aggregate", "aggregate_periods", "check_header", "check_input", "input_format", "read_header",
]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value  # once: later look-ups do not come here
        return value
    raise AttributeError(f"module 'dpcli.engine' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
