"""One exception hierarchy; each class carries the contract's exit code.

Messages are written for the user and must never contain a data value (a cell, a true aggregate):
only names from the spec, paths, and public numbers (bounds, budgets, scales).

A library error states the fact in the library's words (its keyword arguments, never a command-line flag). What a
command-line user can do about it travels beside the message, and only the CLI says it:
- ``hint``: the remedy naming flags (``raise --lock-timeout``), which the CLI appends after ``; ``;
- ``option`` with ``argument``: the message is about the keyword argument ``argument`` (``str(exc)`` starts with
  it); the CLI names the flag ``option`` in its place (``--input-timeout: must be between ...``).
"""

from __future__ import annotations


class DpcliError(Exception):
    """Base of every error dpcli raises on purpose."""

    exit_code = 1

    def __init__(
        self, message: str = "", *, hint: str | None = None, option: str | None = None, argument: str | None = None
    ):
        self.fact = message
        self.hint = hint
        self.option = option
        super().__init__(f"{argument}: {message}" if argument else message)

    def fields(self) -> dict[str, str | int | bool | None]:
        """The public facts the message states, as fields for ``--json`` (docs/json.md): a script reads the numbers
        here rather than parsing the message. Exact quantities are their exact text (``"1/7"``), counts integers."""
        return {}


class InternalError(DpcliError):
    """A bug in dpcli. The CLI says so and never prints a traceback that might carry data."""

    exit_code = 1


# Out of file descriptors before the spend (`ulimit -n 5`): polars panics starting its threads. Not a bug, and not
# about the input, spec or ledger: a ResourceError (exit 1) with this message (docs/spec.md, "Runs, paths and
# failures").
TOO_MANY_FILES = "too many open files (raise `ulimit -n`): polars cannot start its threads; nothing was spent"


class ResourceError(DpcliError):
    """A limit of the process, not a fault of the input, the spec or the ledger, reached before the spend: out of file
    descriptors (``ulimit -n``), an address-space limit (``ulimit -v``) below what the release needs, out of memory.
    Exit 1, like an internal error, but said as what it is; after the spend the same causes are SpentThenFailed."""

    exit_code = 1


class UsageError(DpcliError):
    """Bad command-line use, an invalid spec, or a refused path."""

    exit_code = 2


class SpecError(UsageError):
    """The spec is invalid. The message starts with the spec file when it came from one (``file``), then the YAML
    path of the offending field (``path``): ``spec.yaml: statistics[2].column: 'incme' is not a declared column``."""

    def __init__(self, path: str, message: str, file: str | None = None):
        self.path, self.detail, self.file = path, message, file
        where = ": ".join(part for part in (file, path) if part)
        super().__init__(f"{where}: {message}" if where else message)

    def fields(self) -> dict[str, str | int | bool | None]:
        return {"file": self.file, "path": self.path}

    def in_file(self, file: str) -> SpecError:
        """The same error naming the spec file it came from (itself if it already names one)."""
        return self if self.file is not None else SpecError(self.path, self.detail, file)


class InputError(DpcliError):
    """The input data is unusable as a whole (structure, never a cell's value)."""

    exit_code = 3


class BudgetRefused(DpcliError):
    """The ledger refused a spend: the message names requested, remaining and the difference.

    The numbers travel as attributes too (exact text, None where the refusal has none): ``dataset``, ``ledger``;
    ``requested``, ``remaining``, ``cap`` and ``short_by`` in ε; ``requested_delta``, ``remaining_delta`` and
    ``cap_delta`` for a refusal of δ; ``record``, the seq of the ledger record that set the cap in force; ``period``,
    of a renewing cap, the declared period whose cap refused."""

    exit_code = 4

    def __init__(
        self, message: str, *, hint: str | None = None, dataset: str | None = None, ledger: str | None = None,
        requested: str | None = None, remaining: str | None = None, cap: str | None = None,
        short_by: str | None = None, requested_delta: str | None = None, remaining_delta: str | None = None,
        cap_delta: str | None = None, record: int | None = None, period: str | None = None,
    ):
        super().__init__(message, hint=hint)
        self.dataset, self.ledger, self.record = dataset, ledger, record
        self.requested, self.remaining, self.cap, self.short_by = requested, remaining, cap, short_by
        self.requested_delta, self.remaining_delta, self.cap_delta = requested_delta, remaining_delta, cap_delta
        self.period = period

    def fields(self) -> dict[str, str | int | bool | None]:
        return {
            "dataset": self.dataset, "ledger": self.ledger, "requested": self.requested, "remaining": self.remaining,
            "cap": self.cap, "short_by": self.short_by, "requested_delta": self.requested_delta,
            "remaining_delta": self.remaining_delta, "cap_delta": self.cap_delta, "record": self.record,
            "period": self.period,
        }


class LedgerError(DpcliError):
    """The ledger is unreadable, its chain is broken, or its lock could not be taken in time."""

    exit_code = 5


class AuditFailed(DpcliError):
    """``dpcli audit`` found a statistic whose empirical privacy-loss lower bound exceeds its claimed epsilon: with
    the report's confidence, a bug in a mechanism (an extension of the contract's exit codes)."""

    exit_code = 6


class SpentThenFailed(DpcliError):
    """Anything that went wrong *after* the spend was recorded: a full disk, an I/O error, memory, a bug, or
    SIGINT/SIGTERM/SIGHUP. Exit 5 like a ledger problem: the budget is spent and stays spent (no refund), no output
    file is left behind, and the one-line message names the ledger record that paid (and whether the table was
    stored, so that ``--release-id`` can write it).

    ``record`` (the paying record's seq), ``release_id`` and ``stored`` carry the same facts as fields (None when
    unknown)."""

    exit_code = 5

    def __init__(
        self, message: str = "", *, hint: str | None = None, record: int | None = None,
        release_id: str | None = None, stored: bool | None = None,
    ):
        super().__init__(message, hint=hint)
        self.record, self.release_id, self.stored = record, release_id, stored

    def fields(self) -> dict[str, str | int | bool | None]:
        return {"record": self.record, "release_id": self.release_id, "stored": self.stored}


class OutputError(SpentThenFailed):
    """The output could not be written after the spend was recorded (disk full, I/O error)."""


class Interrupted(BaseException):
    """SIGINT, SIGTERM or SIGHUP, raised by the CLI's handler (a library caller's SIGINT stays Python's
    KeyboardInterrupt, which release() treats the same way). A BaseException like
    KeyboardInterrupt, so that no ``except Exception`` swallows it. Before the spend the run ends with the signal's
    conventional status (128 + its number); after it, ``release`` turns it into SpentThenFailed (exit 5)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signum)


class ReleaseIdPaid(LedgerError):
    """A spend under a release id that an earlier spend record already paid for, with a spec of the same meaning.

    Raised by the ledger under its lock instead of spending twice; ``release`` catches it and returns that earlier
    release's stored table. Exit 5 if it ever escapes: a paid release id is never drawn again.
    """

    def __init__(self, message: str, record_seq: int):
        self.record_seq = record_seq
        super().__init__(message)

    def fields(self) -> dict[str, str | int | bool | None]:
        return {"record": self.record_seq}


class ReleaseIdTaken(UsageError):
    """A release id that an earlier spend paid for (the same dataset and spec name) with a spec of another meaning.

    A release id is paid for once, whatever happens to the spec: the run is refused before anything is read, nothing
    spent, and the message names the record that paid (``record_seq``). Another ``name:`` or release id is the way.
    """

    def __init__(self, message: str, record_seq: int, *, hint: str | None = None):
        self.record_seq = record_seq
        super().__init__(message, hint=hint)

    def fields(self) -> dict[str, str | int | bool | None]:
        return {"record": self.record_seq}
