"""What ``dpcli release`` and ``dpcli randomize`` say when they are done: the summary as one JSON object (``--json``),
the notice of a re-issued run (the stored output written again, nothing spent), and the human summary."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dpcli.cli.layout import eps
from dpcli.core.accounting import format_exact
from dpcli.ledger.base import RENEWING_NOTE

if TYPE_CHECKING:
    from dpcli.ledger import BudgetStatus

if TYPE_CHECKING:
    from dpcli.run.randomize import Randomized
    from dpcli.run.release import Release
    from dpcli.run.synth import Synthesized


def release_summary(result: Release, warning: str | None, report: str | None, with_report: bool) -> dict[str, Any]:
    """``--json``'s summary; ``report`` is the --report path, its key present ``with_report`` (--report or
    --summary-md given)."""
    status = result.status
    kinds = {sp.statistic.name: sp.statistic.kind for sp in result.plan.statistics}
    summary: dict[str, Any] = {
        "dataset": result.plan.spec.dataset,
        "statistics": len(result.plan.statistics),  # a count, kept for 0.3's scripts; the list is statistic_list
        "statistic_list": [
            {"statistic": b.statistic, "kind": kinds.get(b.statistic), "rows": len(b)} for b in result.table.blocks
        ],
        "rows": len(result.table),
        "epsilon_spent": format_exact(result.epsilon_spent),
        "rho_spent": format_exact(result.rho_spent),
        "epsilon_remaining": None if status is None or status.remaining is None else format_exact(status.remaining),
        "epsilon_cap": None if status is None or status.cap is None else format_exact(status.cap),
        "output": "-" if result.output is None else str(result.output),
        "ledger": result.ledger,
        "ledger_record": result.spend.seq,
        "ledger_head": result.spend.hash,
        "release_id": result.release_id,
        "reused": result.reused,
        **_period_json(status),
        "warnings": [] if warning is None else [warning],
    }
    if result.period is not None:  # a series' period (issue 26)
        summary["series_period"] = result.period
        summary["series_charged"] = result.charged
    if with_report:
        summary["report"] = report
    return summary


def release_reissued(result: Release) -> str:
    return (
        f"dpcli: release id '{result.release_id}' of this spec was paid for by ledger record {result.spend.seq}: "
        "its table was written again; nothing spent"
    )


def release_text(result: Release) -> str:
    status = result.status
    where = "standard output" if result.output is None else str(result.output)
    spent = result.plan.cost_text(status.cap_delta if status else None)  # a ρ without the spec's δ: at the cap's
    return (
        f"dpcli: released {len(result.plan.statistics)} statistic(s), {len(result.table)} number(s) about "
        f"'{result.plan.spec.dataset}' to {where}\n"
        f"  spent {spent}; {_left_text(status)}\n"
        f"  ledger {result.ledger}, record {result.spend.seq}, head {result.spend.hash[:16]}"
    )


def period_text(result: Release) -> str:
    """A series' period: what it released, whether this run made the series' charge (once) or spent nothing."""
    status = result.status
    where = "standard output" if result.output is None else str(result.output)
    series = result.plan.spec.series
    horizon = f" of {series.periods}" if series is not None else ""
    if result.reused:
        return (f"dpcli: period {result.period}{horizon} of this series was released: its frozen table was written "
                f"again; nothing spent (the series was charged by ledger record {result.spend.seq})")
    if result.charged and status is not None and status.period is not None:  # a renewing cap: each period's own
        cost = f"ε={eps(result.epsilon_spent)}" + (f", ρ={eps(result.rho_spent)}" if result.rho_spent else "")
        charge = f"  charged this period {cost}; {_left_text(status)}"
    elif result.charged:
        cost = f"ε={eps(result.epsilon_spent)}" + (f", ρ={eps(result.rho_spent)}" if result.rho_spent else "")
        charge = (f"  charged the series {cost}, once for all its periods; ε left "
                  f"{eps(status.remaining if status else None)} of {eps(status.cap if status else None)}")
    else:
        charge = f"  spent nothing: the series was charged by ledger record {result.spend.seq}"
    return (
        f"dpcli: released period {result.period}{horizon} of a series, {len(result.table)} number(s) about "
        f"'{result.plan.spec.dataset}' to {where}\n{charge}\n"
        f"  ledger {result.ledger}, series record {result.spend.seq}"
    )


def pages_text(report: str | None, summary_md: str | None) -> str | None:
    """The one line saying what --report and --summary-md wrote (None: neither asked for)."""
    done = ([] if report is None else [f"wrote the report to {report}"]) + (
        [] if summary_md is None else [f"appended the summary to {summary_md}"]
    )
    return "dpcli: " + "; ".join(done) if done else None


def randomize_summary(result: Randomized) -> dict[str, Any]:
    status = result.status
    return {
        "dataset": result.spec.dataset,
        "columns": [c.name for c in result.spec.columns],
        "rows": result.rows,
        "epsilon_spent": format_exact(result.epsilon_spent),
        "epsilon_remaining": None if status is None or status.remaining is None else format_exact(status.remaining),
        "output": "-" if result.output is None else str(result.output),
        "output_sha256": result.output_sha256,
        "ledger": result.ledger,
        "ledger_record": result.spend.seq,
        "release_id": result.release_id,
        "reused": result.reused,
        **_period_json(status),
    }


def _period_json(status: BudgetStatus | None) -> dict[str, Any]:
    """A renewing cap's period this run was charged to, and what that cap means (nothing for a lifetime cap)."""
    if status is None or status.period is None:
        return {}
    return {"period": status.period, "cap_note": RENEWING_NOTE}


def _left_text(status: BudgetStatus | None) -> str:
    """ε left of the cap; of a renewing cap, of the period's, with what that cap means."""
    left = f"ε left {eps(status.remaining if status else None)} of {eps(status.cap if status else None)}"
    if status is None or status.period is None:
        return left
    return f"{left} in period '{status.period}'\n  note: {RENEWING_NOTE}"


def randomize_reissued(result: Randomized) -> str:
    return (
        f"dpcli: release id '{result.release_id}' of this spec was paid for by ledger record {result.spend.seq}: "
        "its randomized file was written again; nothing spent"
    )


def randomize_text(result: Randomized) -> str:
    status = result.status
    where = "standard output" if result.output is None else str(result.output)
    return (
        f"dpcli: randomized {len(result.spec.columns)} column(s) of {result.rows} row(s) of "
        f"'{result.spec.dataset}' to {where}\n"
        f"  spent ε={eps(result.spec.epsilon)} per record; {_left_text(status)}\n"
        f"  ledger {result.ledger}, record {result.spend.seq}, output sha256 {result.output_sha256[:16]}"
    )


def synth_summary(result: Synthesized) -> dict[str, Any]:
    """``dpcli synth --json``'s summary: public facts only (the synthetic row count is declared or noisy, never n)."""
    status = result.status
    return {
        "dataset": result.plan.spec.dataset,
        "method": result.method,
        "columns": list(result.columns),
        "selected": [list(pair) for pair in result.selected],
        "rows": result.rows,
        "rho_spent": format_exact(result.rho_spent),
        "epsilon_remaining": None if status is None or status.remaining is None else format_exact(status.remaining),
        "epsilon_cap": None if status is None or status.cap is None else format_exact(status.cap),
        "output": "-" if result.output is None else str(result.output),
        "marginals": None if result.marginals is None else str(result.marginals),
        "sidecar": None if result.sidecar is None else str(result.sidecar),
        "report": None if result.report is None else str(result.report),
        "ledger": result.ledger,
        "ledger_record": result.spend.seq,
        "release_id": result.release_id,
        "reused": result.reused,
        **_period_json(status),
    }


def synth_reissued(result: Synthesized) -> str:
    return (
        f"dpcli: release id '{result.release_id}' of this spec was paid for by ledger record {result.spend.seq}: "
        "its synthetic data was estimated again from the stored measurements and written; nothing spent"
    )


def synth_text(result: Synthesized) -> str:
    status = result.status
    where = "standard output" if result.output is None else str(result.output)
    tree = ", ".join(f"{a}×{b}" for a, b in result.selected)
    beside = [str(p) for p in (result.marginals, result.sidecar, result.report) if p is not None]
    return (
        f"dpcli: wrote {result.rows} synthetic row(s) of {len(result.columns)} column(s) of "
        f"'{result.plan.spec.dataset}' to {where} ({result.method.upper()}; tree: {tree})\n"
        + (f"  beside it: {', '.join(beside)}\n" if beside else "")
        + f"  spent ρ={eps(result.rho_spent)}; {_left_text(status)}\n"
        f"  ledger {result.ledger}, record {result.spend.seq}, head {result.spend.hash[:16]}"
    )
