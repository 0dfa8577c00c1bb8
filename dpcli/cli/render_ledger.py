"""``dpcli budget show`` and ``dpcli ledger show``: the budgets per dataset and the ledger's records, as a table or
JSON."""

from __future__ import annotations

import json
from typing import TextIO

from dpcli.cli.layout import eps, table
from dpcli.core.accounting import format_exact
from dpcli.ledger import BudgetStatus, Record
from dpcli.ledger.base import RENEWING_NOTE, SeriesStatus

# how many of a renewing cap's periods `budget show` prints (the latest charged); --json lists every one
SHOWN_PERIODS = 5


def budget_json(statuses: dict[str, BudgetStatus], series: list[SeriesStatus] | None = None) -> str:
    """Each dataset's budget; a dataset that hosts a series also lists them (``series``: how far each has gone)."""
    doc = [
        {
            "dataset": s.dataset,
            "cap": None if s.cap is None else format_exact(s.cap),
            "spent": format_exact(s.spent),
            "remaining": None if s.remaining is None else format_exact(s.remaining),
            "releases": s.releases,
            "cap_delta": format_exact(s.cap_delta),
            "spent_delta": format_exact(s.delta_spent),  # partition selections' delta (open keys)
            "spent_pure_epsilon": format_exact(s.pure),
            "spent_rho": format_exact(s.rho),
            "unit": s.unit,
            "neighbours": s.neighbours,
            **_renewing_json(s),
            **({"series": [series_doc(x) for x in series or [] if x.dataset == s.dataset]}
               if any(x.dataset == s.dataset for x in series or []) else {}),
        }
        for s in statuses.values()
    ]
    return json.dumps(doc, indent=2) + "\n"


def _renewing_json(s: BudgetStatus) -> dict[str, object]:
    """A renewing cap's kind, every period charged (in the order first charged) and the note; nothing for a
    lifetime cap (its object is as before)."""
    if not s.per_period:
        return {}
    return {
        "per": "period",
        "periods_seen": len(s.periods),
        "periods": [
            {
                "period": key, "spent": format_exact(p.spent),
                "remaining": None if p.remaining is None else format_exact(p.remaining), "releases": p.releases,
                "spent_rho": format_exact(p.rho), "spent_delta": format_exact(p.delta_spent),
            }
            for key, p in s.periods.items()
        ],
        "note": RENEWING_NOTE,
    }


def series_doc(s: SeriesStatus) -> dict[str, object]:
    return {"name": s.name, "charge_record": s.charge, "periods": s.periods, "design": s.design,
            "released": list(s.released), "pieces": s.pieces}


def print_series(series: list[SeriesStatus], stream: TextIO) -> None:
    """How far each series has gone: one line each (nothing when the ledger has none)."""
    for s in series:
        name = f" '{s.name}'" if s.name else ""
        done = _ranges(s.released) or "none yet"
        stream.write(f"series{name} of '{s.dataset}': charged once by record {s.charge} ({s.design}); "
                     f"{len(s.released)} of {s.periods} periods released ({done}); {s.pieces} piece(s) drawn\n")


def _ranges(periods: tuple[int, ...]) -> str:
    """1,2,3,5 -> '1-3, 5'."""
    out: list[str] = []
    start = prev = None
    for t in (*periods, None):
        if t is not None and prev is not None and t == prev + 1:
            prev = t
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = t
    return ", ".join(out)


def print_budget(statuses: dict[str, BudgetStatus], stream: TextIO) -> None:
    if not statuses:
        stream.write("no datasets in this ledger yet (set a cap with `dpcli budget set DATASET --epsilon E`)\n")
        return
    selections = any(s.delta_spent for s in statuses.values())  # the column shows only where open keys spent δ
    table(
        ["dataset", "neighbours", "cap ε", "cap δ", "spent ε", "remaining ε", "releases", "of which zCDP ρ"]
        + (["spent δ"] if selections else []),
        [
            [
                s.dataset, s.neighbours or "(not pinned)", eps(s.cap) + (" per period" if s.per_period else ""),
                eps(s.cap_delta), eps(s.spent), "per period" if s.per_period else eps(s.remaining),
                str(s.releases), eps(s.rho),
            ] + ([eps(s.delta_spent)] if selections else [])
            for s in statuses.values()
        ],
        stream,
    )
    for s in statuses.values():
        if s.per_period:
            _print_periods(s, stream)
    if selections:
        stream.write("spent δ: partition selections (open keys), taken off the cap's δ\n")
    if any(s.rho for s in statuses.values()):
        stream.write("spent ε includes zCDP spends converted at the cap's δ (Canonne, Kamath & Steinke 2020)\n")


def _print_periods(s: BudgetStatus, stream: TextIO) -> None:
    """A renewing cap's latest periods, each one's spend and what it has left, and what that cap means."""
    shown = list(s.periods.items())[-SHOWN_PERIODS:]
    stream.write(
        f"dataset '{s.dataset}': ε={eps(s.cap)} per declared period; {len(s.periods)} period(s) charged, spent ε "
        "is their sum" + (f"; the latest {len(shown)}:" if shown else "") + "\n"
    )
    if shown:
        table(
            ["period", "spent ε", "remaining ε", "releases"],
            [[key, eps(p.spent), eps(p.remaining), str(p.releases)] for key, p in shown],
            stream,
        )
    stream.write(f"note: {RENEWING_NOTE}\n")


def ledger_json(records: list[Record]) -> str:
    return json.dumps([r.as_dict() for r in records], indent=2) + "\n"


def print_ledger(records: list[Record], stream: TextIO) -> None:
    if not records:
        stream.write("the ledger is empty\n")
        return
    rows = []
    for r in records:
        if r.type == "cap":
            what = (f"cap ε={r.get('epsilon')}" + (" per period" if r.get("per") == "period" else "")
                    + (" (raised)" if r.get("raise") else ""))
        elif r.type == "spend":
            rid = f" [release id {r.get('release_id')}]" if r.get("release_key") else ""
            rid += f" [period {r.get('period')}]" if r.get("period") is not None else ""
            what = f"spend ε={r.get('epsilon')}{rid}: {', '.join(r.get('statistics') or [])}"
            facts = r.get("series")
            if isinstance(facts, dict):
                what += f" (a series of {facts.get('periods')} periods, {facts.get('design')})"
        elif r.type == "pieces":
            ids = [str(p.get("id")) for p in r.get("pieces") or []]
            what = f"series pieces {', '.join(ids)[:60]} (charge record {r.get('charge')})"
        else:
            what = f"released {str(r.get('release_id'))[:40]}, table sha256 {str(r.get('table_sha256'))[:12]}"
        rows.append([str(r.seq), str(r.get("time", "")), str(r.get("dataset", "")), r.type, what, r.hash[:12]])
    table(["seq", "time", "dataset", "type", "what", "hash"], rows, stream)
