"""The release's size, known before anything is read or spent: its cells and a memory estimate from the spec alone,
and the public limits on both."""

from __future__ import annotations

from dataclasses import dataclass

from dpcli.errors import SpecError
from dpcli.plan.model import Plan
from dpcli.specs.kinds import KINDS

# Public limits on one release, functions of the spec alone (never of the data): a release over either is refused
# with exit 2 before the input is read, so a spend is never followed by a release too large to finish.
MAX_RELEASE_CELLS = 10_000_000
MAX_RELEASE_MEMORY_MB = 1024
# The estimate: a fixed part (interpreter, polars, numpy, the ledger; the scan of a small input) plus bytes per cell
# by kind (its ``memory_per_cell``, measured with /usr/bin/time: dpcli/specs/kinds.py). The scan of a large input needs
# more on its own.
MEMORY_BASE_MB = 200


@dataclass(frozen=True)
class ReleaseCost:
    """What a release will hold in memory, from its spec alone."""

    cells: int  # rows of the output table: every declared cell of every statistic
    memory_mb: int  # estimated peak memory of `dpcli release` in MiB, before the input's own scan

    @property
    def over_limit(self) -> bool:
        return self.cells > MAX_RELEASE_CELLS or self.memory_mb > MAX_RELEASE_MEMORY_MB

    def text(self) -> str:
        return f"{self.cells} cell(s), ~{self.memory_mb} MB estimated peak memory"


def release_cost(plan: Plan) -> ReleaseCost:
    """Cells and memory estimate of a plan: a function of the spec only (declared keys, bins and kinds)."""
    cells = sum(sp.cells for sp in plan.statistics)
    per_cell = sum(sp.cells * KINDS[sp.statistic.kind].memory_per_cell for sp in plan.statistics)
    return ReleaseCost(cells, MEMORY_BASE_MB + -(-per_cell // 2**20))


def check_cost(plan: Plan) -> ReleaseCost:
    """The plan's cost, or SpecError (exit 2) when it is over a public limit: raised before anything is read or spent,
    instead of a MemoryError after the spend."""
    cost = release_cost(plan)
    if cost.over_limit:
        raise SpecError(
            "statistics",
            f"the release has {cost.text()}; the limits are {MAX_RELEASE_CELLS} cells and "
            f"{MAX_RELEASE_MEMORY_MB} MB: split it into smaller releases or use coarser bins or fewer keys",
        )
    return cost
