"""One exception hierarchy; each class carries the contract's exit code.

Messages are written for the user and must never contain a data value (a cell, a true aggregate):
only names from the spec, paths, and public numbers (bounds, budgets, scales).
"""

from __future__ import annotations


class DpcliError(Exception):
    """Base of every error dpcli raises on purpose."""

    exit_code = 1


class InternalError(DpcliError):
    """A bug in dpcli. The CLI says so and never prints a traceback that might carry data."""

    exit_code = 1


class UsageError(DpcliError):
    """Bad command-line use, an invalid spec, or a refused path."""

    exit_code = 2


class SpecError(UsageError):
    """The spec is invalid. The message starts with the YAML path of the offending field."""

    def __init__(self, path: str, message: str):
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class InputError(DpcliError):
    """The input data is unusable as a whole (structure, never a cell's value)."""

    exit_code = 3


class BudgetRefused(DpcliError):
    """The ledger refused a spend: the message names requested, remaining and the difference."""

    exit_code = 4


class LedgerError(DpcliError):
    """The ledger is unreadable, its chain is broken, or its lock could not be taken in time."""

    exit_code = 5


class AuditFailed(DpcliError):
    """``dpcli audit`` found a statistic whose empirical privacy-loss lower bound exceeds its claimed epsilon: with
    the report's confidence, a bug in a mechanism (an extension of the contract's exit codes)."""

    exit_code = 6


class OutputError(DpcliError):
    """The output could not be written *after* the spend was recorded (disk full, I/O error).

    Exit 5 like a ledger problem: the budget is spent and stays spent (no refund); no output file is left behind.
    The message names the ledger record that paid for the lost release.
    """

    exit_code = 5


class ReleaseIdPaid(LedgerError):
    """A spend under a release id that an earlier spend record already paid for (same dataset and spec bytes).

    Raised by the ledger under its lock instead of spending twice; ``release`` catches it and returns that earlier
    release's stored table. Exit 5 if it ever escapes: a paid release id is never drawn again.
    """

    def __init__(self, message: str, record_seq: int):
        self.record_seq = record_seq
        super().__init__(message)
