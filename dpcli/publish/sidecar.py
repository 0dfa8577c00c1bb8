"""The metadata sidecar written beside a released table: public facts only (the spec's public parameters, the release
id and time, the ledger record and head), its path, its write and its JSON Schema.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpcli.core.accounting import format_exact
from dpcli.core.files import atomic_write
from dpcli.core.version import __version__
from dpcli.errors import InternalError
from dpcli.ledger.base import RENEWING_NOTE
from dpcli.plan.model import Plan, StatisticPlan
from dpcli.plan.scales import CONFIDENCE
from dpcli.plan.sensitivity import NoiseComponent
from dpcli.publish.table import CONTRACT
from dpcli.specs.model import Column, Count, EdgeBins, GridBins, Mean, Quantile, Sum, TopK

if TYPE_CHECKING:
    from dpcli.ledger import Record


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + ".meta.json")


def write_sidecar(path: Path, metadata: dict[str, Any], meta_path: Path | None = None) -> None:
    """The sidecar at ``meta_path`` (``release --meta``), else beside the table at ``path``."""
    text = json.dumps(metadata, indent=2, sort_keys=False) + "\n"
    atomic_write(meta_path or sidecar_path(path), lambda fh: fh.write(text.encode("utf-8")))


def _with_postprocess(plan: Plan, statistics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each statistic's sidecar entry with its `postprocess` block when the spec declares one
    (dpcli.postprocess.consistency)."""
    if not plan.spec.postprocess:
        return statistics
    from dpcli.postprocess.consistency import sidecar_blocks

    blocks = sidecar_blocks(plan)
    return [{**meta, "postprocess": blocks[meta["name"]]} if meta["name"] in blocks else meta for meta in statistics]


# The sidecar's JSON Schema (draft 2020-12), shipped in the package: `dpcli schema --sidecar` prints it
SIDECAR_SCHEMA = Path(__file__).parent / "schemas" / "sidecar.schema.json"


def sidecar_schema_text() -> str:
    return SIDECAR_SCHEMA.read_text(encoding="utf-8")


def release_metadata(plan: Plan, spend: Record, head: str, contract: str = CONTRACT) -> dict[str, Any]:
    """The sidecar: public facts only. The spec's hash and its public parameters (bounds, bins, keys, mechanisms,
    scales, shares), the release id, the time of the spend (UTC, from the ledger record: the same on a re-issue)
    and the ledger record and head. Never anything computed from the input's bytes (no input hash, row count or
    size) and no path of the operator's machine (threat model, contract). Its schema: SIDECAR_SCHEMA."""
    spec = plan.spec
    return {
        "contract": contract,
        "release_id": spend.get("release_id"),
        "release_time": release_time(spend),
        "dpcli_version": __version__,
        "dataset": spec.dataset,
        "spec_sha256": spec.sha256,
        "unit": spec.privacy.unit,
        "neighbours": spec.privacy.neighbours,
        "accounting": spec.privacy.accounting,
        "epsilon": format_exact(plan.epsilon),
        "rho": format_exact(plan.rho),
        "delta": None if plan.delta is None else format_exact(plan.delta),
        "confidence": format_exact(plan.confidence),
        **_person_meta(plan),
        "columns": {name: _column_meta(column) for name, column in spec.columns.items()},
        "statistics": _with_postprocess(plan, [_statistic_meta(sp) for sp in plan.statistics]),
        "ledger": {"record": spend.seq, "release_id": spend.get("release_id"), "head": head, **_period_meta(spend)},
    }


def _period_meta(spend: Record) -> dict[str, Any]:
    """A spend charged to a renewing cap's declared period (issue 26): the period, and what such a cap means."""
    if spend.get("period") is None:
        return {}
    return {"period": spend.get("period"), "cap_note": RENEWING_NOTE}


def release_time(spend: Record) -> str | None:
    """When the release was paid for: the ledger record's UTC time to the second ('2026-11-24T18:14:13Z'). The
    record's milliseconds are left out: they would time the scan before the spend more finely than anyone needs."""
    time = spend.get("time")
    return None if time is None else time[:19] + "Z"


def _person_meta(plan: Plan) -> dict[str, Any]:
    """A person-level release's unit: the id field's name (never an id), K, G, R and what a missing id means."""
    person = plan.spec.privacy.person
    if person is None:
        return {}
    return {
        "person": {
            "id": person.id,
            "max_rows": person.max_rows,
            "max_groups": person.max_groups,
            "max_rows_per_group": person.max_rows_per_group,
            "missing_id": person.missing_id,
        }
    }


def _statistic_meta(sp: StatisticPlan) -> dict[str, Any]:
    stat = sp.statistic
    meta: dict[str, Any] = {
        "name": stat.name,
        "kind": stat.kind,
        "column": stat.column,
        "by": list(stat.by),
        "bins": _bins_meta(stat.bins),
        "mechanism": sp.mechanism,
        "epsilon": format_exact(sp.epsilon),
        "rho": format_exact(sp.rho),
        "cells": sp.cells,
        "noise": [_component_meta(c) for c in sp.components],
    }
    if sp.bounding is not None:  # person unit: what each person may contribute here
        if isinstance(stat, Count):
            meta["of"] = stat.of
        if isinstance(stat, Sum | Mean):
            meta["clamp"] = stat.clamp or "row"
        b = sp.bounding
        meta["bounding"] = {"max_rows": b.max_rows, "max_groups": b.groups, "max_rows_per_group": b.rows_per_group}
    if isinstance(stat, Quantile):
        meta["q"] = [format_exact(q) for q in stat.levels]
        meta["step"] = None if stat.step is None else format_exact(stat.step)
    if isinstance(stat, TopK):
        meta["k"] = stat.k
        meta["released"] = "the keys ranked by their counts: value = rank (1 = the largest); no interval"
    if sp.selection is not None:
        sel = sp.selection
        meta["selection"] = {
            "keys": "data-selected",
            "dimension": stat.dimensions[sel.dimension],
            "threshold": sel.threshold,
            "delta": format_exact(sel.delta),
            "max_length": sel.max_length,
            "rule": "an entry is released when its noisy count >= threshold; the released value is that noisy count",
        }
    return meta


def _column_meta(column: Column) -> dict[str, Any]:
    meta: dict[str, Any] = {"type": column.type}
    if column.bounds is not None:
        meta["bounds"] = [format_exact(b) for b in column.bounds]
    if column.precision is not None and column.type == "float":
        meta["precision"] = format_exact(column.precision)
    if column.type == "category" and column.open:  # keys come from the data, through partition selection
        meta["categories"] = "open"
        meta["max_length"] = column.max_length
    elif column.type == "category":
        meta["categories"] = list(column.keys)
    if column.other is not None:
        meta["other"] = column.other
    if column.impute is not None:
        meta["impute"] = column.impute if isinstance(column.impute, str) else format_exact(column.impute)
    return meta


def _bins_meta(bins: EdgeBins | GridBins | None) -> dict[str, str] | list[str] | None:
    if isinstance(bins, GridBins):  # a million-bin grid stays three numbers, as in the spec
        return {"start": format_exact(bins.start), "stop": format_exact(bins.stop), "step": format_exact(bins.step)}
    if isinstance(bins, EdgeBins):
        return [format_exact(e) for e in bins.edges]
    return None


def _component_meta(c: NoiseComponent) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "part": c.role, "mechanism": c.mechanism, "sensitivity": c.sensitivity, "unit": format_exact(c.unit),
    }
    if c.mechanism == "discrete_gaussian":
        if c.variance is None:
            raise InternalError(f"noise part {c.role}: a discrete Gaussian without its variance")
        meta.update(l2_sensitivity_squared=c.l2_squared, variance=format_exact(c.variance), rho=format_exact(c.rho))
    elif c.scale is None:
        raise InternalError(f"noise part {c.role}: a {c.mechanism} mechanism without its scale")
    elif c.mechanism == "exponential" and not c.draws:  # a quantile level: its accuracy as a rank bound (public)
        meta.update(
            scale=format_exact(c.scale), epsilon=format_exact(c.epsilon), candidates=c.candidates,
            rank_error95=format_exact(c.halfwidth(CONFIDENCE) * c.unit),
        )
    else:
        meta.update(scale=format_exact(c.scale), epsilon=format_exact(c.epsilon))
    if c.mechanism == "exponential" and c.draws:  # a top_k: scale is the temperature; epsilon each draw's
        meta.update(draws=c.draws, choices=c.choices)
    return meta
