"""Exact aggregates. The only package that imports polars.

``aggregate(plan, path)`` returns, per statistic, the exact per-cell counts and fixed-point sums that the
mechanisms will perturb. It never decides anything public: cells are the plan's declared cells, values are
clamped to the declared bounds, and cells nobody falls in are zeros, not missing rows. The one exception is an
open-key statistic (``categories: open``): one entry per observed (declared cell, key), which only the mechanism's
partition selection may publish. A person-level release (``privacy.unit: {id: ...}``) bounds each person's rows
first, under a per-release secret (``aggregate(..., secret=...)``; ``dpcli.engine.persons``).
"""

from dpcli.engine.cells import ExactStatistic
from dpcli.engine.csv_header import check_header, read_header
from dpcli.engine.polars_engine import aggregate, check_input
from dpcli.engine.source import input_format

__all__ = ["ExactStatistic", "aggregate", "check_header", "check_input", "input_format", "read_header"]
