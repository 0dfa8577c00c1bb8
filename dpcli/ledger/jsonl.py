"""JSONL file ledger: one record per line, appended with one write + fsync under a lock on the ledger file itself.

The lock is ``fcntl.flock`` on an open descriptor of the ledger file: exclusive for writers, shared for readers.
It belongs to the file, not to the name it was reached by, so a relative path, an absolute one, ``dir/../dir/L``
and a path through a symlinked directory all share it (a ``L.lock`` beside the ledger was named after the path,
and two hard links locked separately). The head file and the release store are still named after the path, so a
ledger file with more than one name (hard links) is refused. Another tool can hold dpcli off with the same lock:
``flock LEDGER cp LEDGER backup.jsonl``.

Not ``filelock``: its ``FileLock`` cannot be pointed at the ledger itself. filelock 3.13.1 (the oldest release
pyproject allows) opens the lock file with ``O_RDWR | O_CREAT | O_TRUNC`` (filelock/_unix.py, line 38), which
would empty the ledger; 4.2.11 drops O_TRUNC but still opens it read-write (a read-only ledger could not even be
verified), has no shared mode, and falls back to a soft lock that deletes the lock file on release where flock is
missing. ``filelock.lock_descriptor`` (3.30+) is exclusive only and has no timeout. The few lines below do exactly
what is needed, and refuse (exit 5) where the filesystem has no flock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hmac
import json
import os
import random
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

from dpcli.core.files import atomic_write, fsync_directory
from dpcli.errors import LedgerError, UsageError
from dpcli.ledger.base import (
    DEFAULT_LOCK_TIMEOUT,
    GENESIS,
    HEX_HEAD,
    Append,
    Ledger,
    NewFields,
    Record,
    Store,
    check_lock_timeout,
    head_mac,
    lock_timed_out,
    new_record,
    verify_chain,
)

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_MAX_HEAD_BYTES = 4096  # a head file is ~150 bytes; a bigger one is not ours
_MAX_REOPEN = 100  # times the ledger may be replaced under us (renamed over) before we give up


T = TypeVar("T")

def _strerror(exc: OSError, default: str) -> str:
    return exc.strerror or default


def symlinked(name: str) -> UsageError:
    return UsageError(f"ledger {name} is a symbolic link: refusing it", hint="point --ledger at the real file")


class JsonlLedger(Ledger):
    def __init__(self, path: Path, lock_timeout: float = DEFAULT_LOCK_TIMEOUT, key: bytes | None = None):
        self.path = Path(path)
        self.name = str(path)
        self.lock_timeout = check_lock_timeout(lock_timeout)
        self.key = key
        try:
            if self.path.is_symlink():
                raise symlinked(self.name)
            if self.path.exists() and not stat.S_ISREG(self.path.stat().st_mode):
                raise LedgerError(f"ledger {self.name} is not a regular file")
        except OSError as exc:
            raise LedgerError(f"cannot open ledger {self.name}: {_strerror(exc, 'unusable path')}") from None
        # The last known head, kept beside the ledger: replacing the ledger with an older copy (a rollback that
        # would hand back spent budget) leaves a chain that lacks this head, and is refused. With a key it carries
        # an HMAC, so it cannot be forged for a truncated chain.
        self.head_path = self.path.with_name(self.path.name + ".head")
        self._head_staging = self.path.with_name(self.path.name + ".head.new")
        self.store_dir = self.path.with_name(self.path.name + ".releases")

    @property
    def keyed(self) -> bool:
        return self.key is not None

    @property
    def own_paths(self) -> tuple[Path, ...]:
        """Every path this ledger writes (the ledger, its head, the head being staged, the release store): an output
        must be none of them."""
        return (self.path, self.head_path, self._head_staging, self.store_dir)

    @property
    def own_trees(self) -> tuple[Path, ...]:
        return (self.store_dir,)

    @property
    def _directory(self) -> Path:
        return self.path.parent if str(self.path.parent) else Path(".")

    # -- the lock ----------------------------------------------------------------------------------------------

    @overload
    def _open(self, write: Literal[True]) -> int: ...
    @overload
    def _open(self, write: bool) -> int | None: ...
    def _open(self, write: bool) -> int | None:
        """An fd of the ledger file (created empty for a writer); None for a reader when there is no file."""
        flags = _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK  # O_NONBLOCK: a FIFO put in its place must not hang the open
        flags |= (os.O_RDWR | os.O_APPEND | os.O_CREAT) if write else os.O_RDONLY
        try:
            fd = os.open(self.path, flags, 0o644)
        except FileNotFoundError:
            if not write:
                return None
            # a writer never creates directories: a mistyped --ledger must not start a new ledger somewhere else
            raise UsageError(
                f"ledger {self.name}: its directory {self._directory} does not exist (dpcli creates no directories)"
            ) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise symlinked(self.name) from None
            doing = "write" if write else "read"
            raise LedgerError(f"cannot {doing} ledger {self.name}: {_strerror(exc, 'cannot open')}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise LedgerError(f"ledger {self.name} is not a regular file")
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _flock(self, fd: int, write: bool, deadline: float) -> None:
        """flock within the lock timeout: non-blocking attempts with a short, growing, jittered sleep between them."""
        mode = (fcntl.LOCK_EX if write else fcntl.LOCK_SH) | fcntl.LOCK_NB
        pause = 0.001
        while True:
            try:
                fcntl.flock(fd, mode)
                return
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                    # ENOLCK, ENOSYS, EINVAL: no lock on this filesystem; never run without one
                    raise LedgerError(f"cannot lock ledger {self.name}: {_strerror(exc, 'lock failed')}") from None
            left = deadline - time.monotonic()
            if left <= 0:
                raise lock_timed_out(self.name, self.lock_timeout, "another dpcli is using it")
            time.sleep(min(left, pause * random.uniform(0.5, 1.5)))  # jitter: timing only
            pause = min(pause * 2, 0.05)

    @overload
    def _lock(self, write: Literal[True]) -> int: ...
    @overload
    def _lock(self, write: bool) -> int | None: ...
    def _lock(self, write: bool) -> int | None:
        """The ledger file, open and locked; None for a reader when there is no file. Close the fd to unlock."""
        deadline = time.monotonic() + self.lock_timeout
        for _ in range(_MAX_REOPEN):
            fd = self._open(write)
            if fd is None:
                return None
            try:
                self._flock(fd, write, deadline)
                st = os.fstat(fd)
                try:
                    now_there = os.stat(self.path, follow_symlinks=False)
                except FileNotFoundError:
                    now_there = None
                if now_there is None or (now_there.st_dev, now_there.st_ino) != (st.st_dev, st.st_ino):
                    os.close(fd)  # renamed over or deleted while we waited: lock what has the name now
                    continue
                if st.st_nlink > 1:
                    # the lock would be shared, but each name has its own head file and release store
                    raise LedgerError(
                        f"ledger {self.name} has {st.st_nlink} names (hard links): refusing it, since its head file "
                        "and release store are named after the path; remove the other names "
                        f"(find / -xdev -samefile {self.name}) or copy the file"
                    )
            except BaseException:
                os.close(fd)
                raise
            return fd
        raise LedgerError(f"cannot lock ledger {self.name}: it keeps being replaced")

    # -- reading -----------------------------------------------------------------------------------------------

    def _parse(self, data: bytes) -> list[Record]:
        if not data:
            return []
        if not data.endswith(b"\n"):
            raise LedgerError(
                f"ledger {self.name}: the last record is torn (no end of line): the file was cut or edited"
            )
        records = []
        for n, line in enumerate(data.split(b"\n")[:-1]):
            try:
                obj = json.loads(line)
            except (ValueError, UnicodeDecodeError, RecursionError):
                raise LedgerError(f"ledger {self.name}: line {n + 1} is not a JSON record (torn or edited)") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("hash"), str):
                raise LedgerError(f"ledger {self.name}: line {n + 1} is not a ledger record")
            h = obj.pop("hash")
            records.append(Record(obj, h))
        verify_chain(records, self.key, self.name)
        return records

    def _read(self, fd: int) -> list[Record]:
        """All records of the locked file, verified, and checked against the head file."""
        chunks, offset = [], 0
        try:
            while chunk := os.pread(fd, 1 << 20, offset):
                chunks.append(chunk)
                offset += len(chunk)
        except OSError as exc:
            raise LedgerError(f"cannot read ledger {self.name}: {_strerror(exc, 'unreadable')}") from None
        records = self._parse(b"".join(chunks))
        self._check_head(records)
        return records

    def _load_head(self) -> tuple[int, str] | None:
        """The head file's (seq, hash), checked; None when there is none. seq -1 names the empty chain."""
        unreadable = f"ledger {self.name}: its head file {self.head_path} is unreadable"
        try:
            fd = os.open(self.head_path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError:
            raise LedgerError(unreadable) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise LedgerError(unreadable)
            raw = os.read(fd, _MAX_HEAD_BYTES + 1)
        except OSError:
            raise LedgerError(unreadable) from None
        finally:
            os.close(fd)
        try:
            if len(raw) > _MAX_HEAD_BYTES:
                raise ValueError
            known = json.loads(raw)
            seq, head = known["seq"], known["hash"]
            # type checks first: int() of {"seq": 1e400} (inf) raises OverflowError, and a huge int is not a seq
            if type(seq) is not int or not -1 <= seq < 2**63 or not isinstance(head, str):
                raise ValueError
            if not (HEX_HEAD.fullmatch(head) and (seq >= 0 or head == GENESIS)):
                raise ValueError
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError):
            raise LedgerError(unreadable) from None
        if self.key is not None:
            mac = known.get("mac")
            authentic = (
                isinstance(mac, str) and mac.isascii() and hmac.compare_digest(mac, head_mac(self.key, seq, head))
            )
            if not authentic:
                raise LedgerError(
                    f"ledger {self.name}: its head file {self.head_path} is not authenticated with the ledger key "
                    "(forged, or written by dpcli 0.2: see the README, 'The ledger')"
                )
        return seq, head

    def _check_head(self, records: list[Record]) -> None:
        known = self._load_head()
        if known is None:
            if self.key is not None and records:
                # with a key, deleting the head file would otherwise let a truncated chain pass; dpcli writes it
                # before the first record, so a keyed ledger with records always has one
                raise LedgerError(
                    f"ledger {self.name}: its head file {self.head_path} is missing: the ledger cannot be checked "
                    "for a rollback"
                )
            return
        seq, head = known
        if seq >= len(records) or (seq >= 0 and records[seq].hash != head):
            raise LedgerError(
                f"ledger {self.name} is older than its last recorded head (record {seq}): "
                "it was rolled back or replaced with an older copy"
            )

    def records(self) -> list[Record]:
        try:
            if not self.path.parent.is_dir():
                return []  # nothing can be there
        except OSError as exc:
            raise LedgerError(f"cannot read ledger {self.name}: {_strerror(exc, 'unreadable')}") from None
        for attempt in range(3):
            fd = self._lock(write=False)
            if fd is None:
                try:
                    self._check_head([])
                    return []
                except LedgerError:
                    # a writer may have created the ledger and its head after our look: read it, locked
                    if attempt < 2 and os.path.lexists(self.path):
                        continue
                    raise
            try:
                return self._read(fd)
            finally:
                os.close(fd)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- writing -----------------------------------------------------------------------------------------------

    def _head_bytes(self, seq: int, head: str) -> bytes:
        doc: dict[str, Any] = {"seq": seq, "hash": head}
        if self.key is not None:
            doc["mac"] = head_mac(self.key, seq, head)
        return (json.dumps(doc, sort_keys=True) + "\n").encode()

    def _stage_head(self, seq: int, head: str) -> None:
        """Write the next head to LEDGER.head.new and fsync it (renamed over the head once the record is durable).
        Only a writer holding the exclusive lock stages, so one fixed name is enough; a leftover is replaced."""
        with contextlib.suppress(FileNotFoundError):
            self._head_staging.unlink()
        fd = os.open(self._head_staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o644)
        try:
            data = self._head_bytes(seq, head)
            if os.write(fd, data) != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            self._discard_staged_head()
            raise
        os.close(fd)

    def _discard_staged_head(self) -> None:
        with contextlib.suppress(OSError):
            self._head_staging.unlink()

    def _install_head(self) -> None:
        os.replace(self._head_staging, self.head_path)
        self._sync_directory()

    def _sync_directory(self) -> None:
        # errors ignored: if a rename is lost in a crash, the older head stays, and an older head is consistent
        fsync_directory(self._directory)

    def _append(self, fd: int, records: list[Record], fields: NewFields) -> Record:
        """Append one record, durably, or leave the ledger exactly as it was and raise LedgerError.

        Order: the next head is staged (written and fsynced beside the ledger), the record is written and fsynced,
        then the staged head is renamed over the head. A failure before the rename (a full disk, a short write, an
        I/O error) truncates the ledger back to its size before the append; we hold the exclusive lock, so no reader
        has seen the record. A crash between the append and the rename leaves the older head, which is consistent.
        """
        record = new_record(records, fields, self.key)
        full, h = record.fields, record.hash
        data = (json.dumps(record.as_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
        try:
            if not records and not os.path.lexists(self.head_path):
                # the empty chain's head first, so a keyed ledger with records never lacks a head file, crash or not
                self._stage_head(-1, GENESIS)
                self._install_head()
            self._stage_head(full["seq"], h)
        except OSError as exc:
            self._discard_staged_head()
            raise LedgerError(
                f"cannot write the head file of ledger {self.name}: {_strerror(exc, 'write failed')}; "
                "nothing was recorded"
            ) from None
        size = os.fstat(fd).st_size
        committed = False
        try:
            written = os.write(fd, data)  # one write: O_APPEND makes it land whole at the end
            if written != len(data):
                raise OSError(errno.ENOSPC, "short write (disk full?)")
            os.fsync(fd)
            if not records:
                self._sync_directory()  # a new ledger's name is durable before anything relies on it
            os.replace(self._head_staging, self.head_path)
            committed = True  # the head names the record now: from here on it must stay
        except OSError as exc:
            raise LedgerError(
                f"cannot write ledger {self.name}: {_strerror(exc, 'write failed')}; nothing was recorded"
            ) from None
        finally:
            if not committed:  # also on KeyboardInterrupt: the caller never learns of this record, so it must go
                self._truncate(fd, size)
                self._discard_staged_head()
        # committed: raising now would report a recorded spend as not made (a crash keeps the older head)
        with contextlib.suppress(OSError):
            self._sync_directory()  # the head's rename made durable; the record itself already is
        return record

    @staticmethod
    def _truncate(fd: int, size: int) -> None:
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        except OSError:
            # the record (whole or torn) stays; whole, it is only an older head's extra spend (the safe direction)
            pass

    def _write(self, build: Callable[[list[Record]], NewFields], doing: str) -> Record:
        fd = self._lock(write=True)
        try:
            records = self._read(fd)
            return self._append(fd, records, build(records))
        finally:
            os.close(fd)

    def _locked(self, body: Callable[[list[Record], Store, Append], T]) -> T:
        fd = self._lock(write=True)
        try:
            records = self._read(fd)
            return body(records, self.store_table, lambda fields: self._append(fd, records, fields))
        finally:
            os.close(fd)

    def seal_head(self, head: str) -> Record | None:
        """Write an authenticated head for a keyed ledger whose chain ends at ``head`` (the last record's hash, as
        published or noted by the operator): the upgrade of a keyed ledger written by dpcli 0.2, whose head file
        has no HMAC. Refused unless the chain verifies and ends exactly there."""
        if self.key is None:
            raise UsageError(f"ledger {self.name}: sealing its head needs the ledger key")
        fd = self._lock(write=True)
        try:
            chunks, offset = [], 0
            while chunk := os.pread(fd, 1 << 20, offset):
                chunks.append(chunk)
                offset += len(chunk)
            records = self._parse(b"".join(chunks))
            if not records or records[-1].hash != head:
                raise LedgerError(f"ledger {self.name} does not end at head {head[:16]}: not sealing it")
            try:
                self._stage_head(records[-1].seq, head)
                self._install_head()
            except OSError as exc:
                self._discard_staged_head()
                raise LedgerError(
                    f"cannot write the head file of ledger {self.name}: {_strerror(exc, 'write failed')}"
                ) from None
            return records[-1]
        finally:
            os.close(fd)

    # -- the release store -------------------------------------------------------------------------------------

    def _table_path(self, release_key: str) -> Path:
        if not release_key.isalnum():
            raise LedgerError(f"ledger {self.name}: malformed release key")
        return self.store_dir / f"{release_key}.json"

    def check_store(self) -> None:
        """The release store is a directory dpcli can write in, or is absent from a directory where it can be made
        (store_table makes it). access() sees permissions and a read-only mount alike."""
        try:
            st = os.stat(self.store_dir)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            raise LedgerError(
                f"ledger {self.name}: its release store {self.store_dir} is unusable: {_strerror(exc, 'cannot stat')};"
                " nothing was spent"
            ) from None
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise LedgerError(
                f"ledger {self.name}: its release store {self.store_dir} is not a directory, so no released table "
                "could be kept; nothing was spent"
            )
        where = self.store_dir if st is not None else self._directory
        if not os.access(where, os.W_OK | os.X_OK):
            raise LedgerError(
                f"ledger {self.name}: its release store {self.store_dir} cannot be written "
                f"({'read-only or no permission' if st is not None else f'{where} is not writable'}); "
                "nothing was spent"
            )

    def store_table(self, release_key: str, table: bytes) -> None:
        try:
            self.store_dir.mkdir(exist_ok=True)
            atomic_write(self._table_path(release_key), lambda fh: fh.write(table))
        except OSError as exc:
            raise LedgerError(
                f"cannot write the release store {self.store_dir}: {exc.strerror or 'write failed'}"
            ) from None

    def load_table(self, release_key: str) -> bytes | None:
        """The stored table; a name that is not a regular file (a FIFO, a symlink, a directory) is an edited store:
        LedgerError, never a hang, and the id is never drawn again (as for a table that does not match)."""
        path = self._table_path(release_key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._edited_store(path) from None
            raise LedgerError(
                f"cannot read the release store {self.store_dir}: {exc.strerror or 'read failed'}"
            ) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise self._edited_store(path)
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise LedgerError(
                f"cannot read the release store {self.store_dir}: {exc.strerror or 'read failed'}"
            ) from None
        finally:
            os.close(fd)

    def _edited_store(self, path: Path) -> LedgerError:
        return LedgerError(
            f"ledger {self.name}: the stored table {path.name} is not a regular file (the release store was edited); "
            "its release is never drawn again"
        )
