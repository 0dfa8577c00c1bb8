"""``dpcli audit``'s report as text: the table of statistics, the neighbouring datasets, the notes and the verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from dpcli.cli.layout import table
from dpcli.core.accounting import format_decimal

if TYPE_CHECKING:
    from dpcli.audit.release_audit import AuditReport


def print_audit(report: AuditReport, stream: TextIO) -> None:
    """A dpcli.audit.release_audit.AuditReport as a table, the neighbours, the notes and the verdict."""
    stream.write(
        f"audit of dataset '{report.dataset}' ({report.neighbours} neighbours, {report.accounting}): "
        f"{report.trials} trials per statistic and dataset, every bound at joint confidence {report.confidence}; "
        "synthetic data only: no input read, nothing spent\n"
    )
    table(
        ["statistic", "kind", "mechanism", "claimed ε", "δ", "ε lower bound", "events", "result"],
        [
            [
                s.statistic,
                s.kind,
                s.mechanism,
                format_decimal(s.claimed_epsilon, 6),
                format_decimal(s.delta, 6),
                f"{s.epsilon_lower_bound:.4f}",
                str(len(s.events)),
                "within claim" if s.within_claim else "VIOLATION",
            ]
            for s in report.statistics
        ],
        stream,
    )
    stream.write("neighbouring datasets:\n")
    for s in report.statistics:
        stream.write(f"  {s.statistic}: {s.neighbour}\n")
        if s.worst_event:
            stream.write(f"    strongest event: {s.worst_event}\n")
    for note in report.notes:
        stream.write(f"note: {note}\n")
    verdict = "every statistic is within its claim" if report.ok else "VIOLATION: a claim is provably not met"
    stream.write(f"result: {verdict}\n")
