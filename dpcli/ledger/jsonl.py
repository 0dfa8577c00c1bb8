"""JSONL file ledger: one record per line, appended with one write + fsync under an exclusive file lock."""

from __future__ import annotations

import json
import os
import stat
from fractions import Fraction
from pathlib import Path
from typing import Any

import filelock

from dpcli.errors import LedgerError, UsageError
from dpcli.ledger.base import (
    GENESIS,
    Ledger,
    Record,
    cap_fields,
    now,
    record_hash,
    spend_fields,
    verify_chain,
)


class JsonlLedger(Ledger):
    def __init__(self, path: Path, lock_timeout: float = 30.0, key: bytes | None = None):
        self.path = Path(path)
        self.name = str(path)
        self.lock_timeout = lock_timeout
        self.key = key
        if self.path.is_symlink():
            raise UsageError(f"ledger {self.name} is a symbolic link: refusing it (point --ledger at the real file)")
        if self.path.exists() and not stat.S_ISREG(self.path.stat().st_mode):
            raise LedgerError(f"ledger {self.name} is not a regular file")
        self._lock = filelock.FileLock(str(self.path) + ".lock", timeout=lock_timeout)
        # The last known head, kept beside the ledger: replacing the ledger with an older copy (a rollback that
        # would hand back spent budget) leaves a chain that lacks this head, and is refused.
        self.head_path = self.path.with_name(self.path.name + ".head")
        self.store_dir = self.path.with_name(self.path.name + ".releases")

    @property
    def keyed(self) -> bool:
        return self.key is not None

    # -- reading -----------------------------------------------------------------------------------------------

    def _read(self) -> list[Record]:
        """All records, verified. Call with the lock held: a writer appends a record and then moves the head file,
        so an unlocked reader could see the new head beside the old records and take it for a rollback."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""  # a new ledger, or a deleted one: the head file (if any) tells them apart
        except OSError as exc:
            raise LedgerError(f"cannot read ledger {self.name}: {exc.strerror or 'unreadable'}") from None
        if not data:
            self._check_head([])
            return []
        if not data.endswith(b"\n"):
            raise LedgerError(f"ledger {self.name}: the last record is torn (no end of line): the file was cut or edited")
        records = []
        for n, line in enumerate(data.split(b"\n")[:-1]):
            try:
                obj = json.loads(line)
            except (ValueError, UnicodeDecodeError):
                raise LedgerError(f"ledger {self.name}: line {n + 1} is not a JSON record (torn or edited)") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("hash"), str):
                raise LedgerError(f"ledger {self.name}: line {n + 1} is not a ledger record")
            h = obj.pop("hash")
            records.append(Record(obj, h))
        verify_chain(records, self.key, self.name)
        self._check_head(records)
        return records

    def _check_head(self, records: list[Record]) -> None:
        try:
            known = json.loads(self.head_path.read_text())
            seq, head = int(known["seq"]), str(known["hash"])
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError):
            raise LedgerError(f"ledger {self.name}: its head file {self.head_path} is unreadable") from None
        if seq >= len(records) or records[seq].hash != head:
            raise LedgerError(
                f"ledger {self.name} is older than its last recorded head (record {seq}): "
                "it was rolled back or replaced with an older copy"
            )

    def _write_head(self, record: Record) -> None:
        from dpcli.output import atomic_write

        text = json.dumps({"seq": record.seq, "hash": record.hash}) + "\n"
        atomic_write(self.head_path, lambda fh: fh.write(text.encode()))

    def records(self) -> list[Record]:
        if not self.path.parent.is_dir():
            return []  # nothing can be there (and a lock file cannot be made there)
        with self._acquire():
            return self._read()

    # -- writing -----------------------------------------------------------------------------------------------

    def _append(self, records: list[Record], fields: dict[str, Any]) -> Record:
        prev = records[-1].hash if records else GENESIS
        full = {"seq": len(records), "prev": prev, "time": now(), **fields}
        if self.key is not None:
            full["mac"] = "hmac-sha256"
        h = record_hash(full, self.key)
        line = json.dumps({**full, "hash": h}, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
        created = not self.path.exists()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as exc:
            raise LedgerError(f"cannot write ledger {self.name}: {exc.strerror or 'unwritable'}") from None
        try:
            data = line.encode("utf-8")
            written = os.write(fd, data)  # one write: O_APPEND makes it land whole at the end
            if written != len(data):
                raise LedgerError(f"ledger {self.name}: short write (disk full?)")
            os.fsync(fd)
        except OSError as exc:
            raise LedgerError(f"cannot write ledger {self.name}: {exc.strerror or 'write failed'}") from None
        finally:
            os.close(fd)
        if created:
            from dpcli.output import fsync_directory

            fsync_directory(self.path.parent if str(self.path.parent) else Path("."))
        record = Record(full, h)
        self._write_head(record)
        return record

    def _acquire(self):  # noqa: ANN202
        try:
            return self._lock.acquire()
        except filelock.Timeout:
            raise LedgerError(
                f"could not lock ledger {self.name} within {self.lock_timeout:g} s (another dpcli is using it); "
                "try again or raise --lock-timeout"
            ) from None
        except OSError as exc:
            raise LedgerError(f"cannot lock ledger {self.name}: {exc.strerror or 'lock failed'}") from None

    def set_cap(
        self, dataset: str, epsilon: Fraction, delta: Fraction, allow_raise: bool,
        unit: str | None = None, neighbours: str | None = None,
    ) -> Record:
        with self._acquire():
            records = self._read()
            return self._append(records, cap_fields(records, self.name, dataset, epsilon, delta, allow_raise, unit, neighbours))

    def spend(self, dataset: str, epsilon: Fraction, details: dict[str, Any], rho: Fraction = Fraction(0)) -> Record:
        with self._acquire():
            records = self._read()
            return self._append(records, spend_fields(records, self.name, dataset, epsilon, rho, details))

    def mark_released(self, release_key: str, details: dict[str, Any]) -> Record:
        with self._acquire():
            records = self._read()
            return self._append(records, {**details, "type": "released", "release_key": release_key})

    def _table_path(self, release_key: str) -> Path:
        if not release_key.isalnum():
            raise LedgerError(f"ledger {self.name}: malformed release key")
        return self.store_dir / f"{release_key}.json"

    def store_table(self, release_key: str, table: bytes) -> None:
        from dpcli.output import atomic_write

        try:
            self.store_dir.mkdir(exist_ok=True)
            atomic_write(self._table_path(release_key), lambda fh: fh.write(table))
        except OSError as exc:
            raise LedgerError(f"cannot write the release store {self.store_dir}: {exc.strerror or 'write failed'}") from None

    def load_table(self, release_key: str) -> bytes | None:
        try:
            return self._table_path(release_key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise LedgerError(f"cannot read the release store {self.store_dir}: {exc.strerror or 'read failed'}") from None
