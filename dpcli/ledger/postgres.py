"""PostgreSQL ledger: the same hash-chained records as the file backend, one row each, appended in SERIALIZABLE
transactions.

Tables (created on the first write when missing; a schema other than ``public`` can be chosen with libpq's
``options=-csearch_path=NAME`` in the URL):

- ``dpcli_ledger(seq, record, hash)``: ``record`` is the record's canonical JSON text (``sort_keys``, no spaces,
  UTF-8), exactly the bytes its ``hash`` covers; kept as text, not jsonb, so nothing is re-encoded by the server;
- ``dpcli_ledger_head(id = 1, seq, hash)``: the last record, updated in the same transaction as every append, so
  deleting records from the end of the chain (which leaves a valid shorter chain) is still detected;
- ``dpcli_release_store(release_id, table_json)``: released tables by release key (its ``release_id`` column holds
  the key: dpcli.ledger.base.release_key), for re-runs under a release id.

Every write (cap, spend, released) is one SERIALIZABLE transaction whose first statement locks the head table
(EXCLUSIVE mode: writers queue, readers pass), then reads and verifies the whole chain, checks the cap in exact
arithmetic and inserts the record and the new head, and commits with ``synchronous_commit = on`` (the spend is
durable before any noise is drawn). A serialization failure, deadlock or a concurrent insert of the same ``seq``
(a writer that skipped the lock) is retried until ``lock_timeout`` seconds have passed; a lock wait that runs out
is a LedgerError (exit 5). Missing tables are created under a transaction-scoped advisory lock. Reads use one
REPEATABLE READ snapshot so the records and the head row always agree. Every transaction, reads included, sets
``lock_timeout`` to what is left of the lock timeout and ``statement_timeout`` to that plus STATEMENT_GRACE_MS: no
statement waits for a lock past it, or runs past it plus the grace (a client holding a lock on a ledger table ends
the command with exit 5, nothing spent).
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from dpcli.errors import DpcliError, LedgerError, UsageError
from dpcli.ledger.base import (
    DEFAULT_LOCK_TIMEOUT,
    Append,
    Ledger,
    NewFields,
    Record,
    Store,
    canonical,
    check_lock_timeout,
    lock_timed_out,
    new_record,
    verify_chain,
)

T = TypeVar("T")

LEDGER_TABLE = "dpcli_ledger"
HEAD_TABLE = "dpcli_ledger_head"
STORE_TABLE = "dpcli_release_store"

# pg_advisory_xact_lock key shared by every dpcli writer of a database: the bytes of "dpcli-lg" as a bigint
ADVISORY_KEY = int.from_bytes(b"dpcli-lg", "big", signed=True)

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {LEDGER_TABLE} (
    seq    bigint PRIMARY KEY CHECK (seq >= 0),
    record text   NOT NULL,
    hash   text   NOT NULL
);
CREATE TABLE IF NOT EXISTS {HEAD_TABLE} (
    id   integer PRIMARY KEY CHECK (id = 1),
    seq  bigint  NOT NULL,
    hash text    NOT NULL
);
CREATE TABLE IF NOT EXISTS {STORE_TABLE} (
    release_id text  PRIMARY KEY,
    table_json bytea NOT NULL
);
"""

# SQLSTATEs worth another attempt: serialization_failure, deadlock_detected, unique_violation (two writers that
# both skipped the advisory lock and picked the same seq: the chain they read is stale, read it again)
RETRYABLE = {"40001", "40P01", "23505"}
LOCK_NOT_AVAILABLE = "55P03"
QUERY_CANCELED = "57014"  # statement_timeout ran out
# What a statement may take beyond the time left of --lock-timeout for its own work, once it holds its locks:
# statement_timeout = the time left + this, so a statement stuck on something lock_timeout does not cover (a stalled
# server, an I/O wait) ends too, without cutting short the reading of a long ledger under a short --lock-timeout.
STATEMENT_GRACE_MS = 10_000


def redact_url(url: str) -> str:
    """The URL with its password (userinfo or ``password=`` parameter) replaced by ``***``: safe for messages."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url.split("://", 1)[0] + "://***"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostinfo = netloc.rpartition("@")
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        netloc = f"{userinfo}@{hostinfo}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(k.lower() == "password" for k, _ in pairs):
            hidden = [(k, "***" if k.lower() == "password" else v) for k, v in pairs]
            query = urlencode(hidden, safe="*/", quote_via=quote)
    # not urlunsplit: it turns "postgresql:///db" (no host: the default socket) into "postgresql:/db"
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "") + (
        f"#{parts.fragment}" if parts.fragment else ""
    )


class PostgresLedger(Ledger):
    def __init__(self, url: str, lock_timeout: float = DEFAULT_LOCK_TIMEOUT, key: bytes | None = None):
        self.url = url
        self.name = redact_url(url)
        self.lock_timeout = check_lock_timeout(lock_timeout)
        self.key = key
        try:
            raw = urlsplit(url).password
        except ValueError:
            raw = None
        self._secrets = sorted({s for s in (raw, unquote(raw or "")) if s}, key=len, reverse=True)
        try:
            import psycopg
            from psycopg.conninfo import conninfo_to_dict
        except ImportError:
            raise LedgerError(
                f"ledger {self.name}: a PostgreSQL ledger needs psycopg 3: install dpcli with its postgres extra "
                f"(from a clone: pip install '.[postgres]'; README.md, Install)"
            ) from None
        self._psycopg = psycopg
        try:
            params = conninfo_to_dict(url)
        except psycopg.Error:
            # not libpq's words: a parse error quotes the part of the URL it could not read, the password included
            raise UsageError(f"ledger {self.name} is not a valid PostgreSQL URL") from None
        if params.get("password"):
            self._secrets = sorted({*self._secrets, str(params["password"])}, key=len, reverse=True)
        self._connect_kwargs: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in params:
            # libpq's unit is whole seconds and it treats anything under 2 as 2
            self._connect_kwargs["connect_timeout"] = max(2, int(self.lock_timeout + 0.999))
        if "application_name" not in params:
            self._connect_kwargs["application_name"] = "dpcli"
        self._conn: Any = None
        self._schema_ok = False

    @property
    def keyed(self) -> bool:
        return self.key is not None

    # -- connection and errors ---------------------------------------------------------------------------------

    def _scrub(self, exc: BaseException) -> str:
        """A driver's message, first line only, never with the password. libpq should never echo it, but be sure,
        without masking it inside the message's own words (password "e" once made every "e" "***", which showed
        its letters): the URL is replaced whole by its redacted form, and a message that still holds the password
        as a word of its own (or a long password anywhere) is withheld whole."""
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        text = text.replace(self.url, self.name)
        for secret in self._secrets:
            as_word = re.search(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", text)
            if as_word or (len(secret) >= 8 and secret in text):
                return f"{type(exc).__name__} (the server's message is withheld: it may hold the password)"
        return text[:300]

    def _connection(self) -> Any:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        try:
            self._conn = self._psycopg.connect(self.url, **self._connect_kwargs)
        except self._psycopg.Error as exc:
            raise LedgerError(f"cannot connect to ledger {self.name}: {self._scrub(exc)}") from None
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # closing a broken connection: whatever it raises, it is gone
                self._conn.close()
            self._conn = None

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        with contextlib.suppress(Exception):  # at interpreter exit, nothing is left to report it to
            self.close()

    def _db_error(self, exc: BaseException, doing: str) -> LedgerError:
        if self._conn is not None and self._conn.closed:
            self._conn = None  # reconnect next time
        return LedgerError(f"ledger {self.name}: {doing} failed: {self._scrub(exc)}")

    # -- transactions ------------------------------------------------------------------------------------------

    def _read_tx(self, body: Callable[[Any], T], doing: str) -> T:
        """``body(cursor)`` in one REPEATABLE READ, READ ONLY snapshot, within the lock timeout: a client holding
        an ACCESS EXCLUSIVE lock on a ledger table once made every read (a release's first step) wait forever."""
        psycopg = self._psycopg
        deadline = time.monotonic() + self.lock_timeout
        conn = self._connection()
        try:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            with conn.transaction(), conn.cursor() as cur:
                self._set_local_timeouts(cur, deadline)
                return body(cur)
        except DpcliError:
            raise
        except psycopg.Error as exc:
            if getattr(exc, "sqlstate", None) in (LOCK_NOT_AVAILABLE, QUERY_CANCELED):
                raise self._waited(exc) from None
            raise self._db_error(exc, doing) from None

    def _write_tx(self, body: Callable[[Any], T], doing: str, lock: bool = True) -> T:
        """``body(cursor)`` in a SERIALIZABLE transaction holding the writers' lock, retried until the deadline.

        The lock is ``LOCK TABLE dpcli_ledger_head IN EXCLUSIVE MODE`` (readers' plain SELECTs still pass), taken
        as the transaction's first statement: a SERIALIZABLE transaction's snapshot is fixed by its first query,
        so a lock taken by a query (``SELECT pg_advisory_xact_lock(...)``) would leave it reading the chain as it
        was before the previous writer committed, and every waiter would fail and retry.
        """
        psycopg = self._psycopg
        deadline = time.monotonic() + self.lock_timeout
        self._ensure_schema(deadline)
        attempt = 0
        while True:
            attempt += 1
            conn = self._connection()
            try:
                conn.isolation_level = psycopg.IsolationLevel.SERIALIZABLE
                conn.read_only = False
                with conn.transaction(), conn.cursor() as cur:
                    self._set_local_timeouts(cur, deadline)
                    if lock:
                        cur.execute(f"LOCK TABLE {HEAD_TABLE} IN EXCLUSIVE MODE")
                    return body(cur)
            except DpcliError:
                raise
            except psycopg.Error as exc:
                state = getattr(exc, "sqlstate", None)
                if state in (LOCK_NOT_AVAILABLE, QUERY_CANCELED):
                    raise self._waited(exc, attempt) from None
                if state in RETRYABLE and time.monotonic() >= deadline:
                    raise self._timeout(attempt) from None
                if state in RETRYABLE:
                    # jittered backoff between serialization retries (timing only; nothing released depends on it)
                    time.sleep(min(0.2, 0.005 * 2 ** min(attempt, 6)) * secrets.randbelow(1000) / 1000)
                    continue
                raise self._db_error(exc, doing) from None

    def _timeout(self, attempts: int) -> LedgerError:
        return lock_timed_out(
            self.name, self.lock_timeout, f"other dpcli runs are writing to it; {attempts} attempt(s)"
        )

    def _waited(self, exc: BaseException, attempts: int = 1) -> LedgerError:
        """A statement that ran out of lock_timeout or statement_timeout: the lock timeout's exit 5."""
        if self._conn is not None and self._conn.closed:
            self._conn = None
        if getattr(exc, "sqlstate", None) == QUERY_CANCELED:
            return lock_timed_out(self.name, self.lock_timeout, "a statement ran past its timeout")
        return lock_timed_out(self.name, self.lock_timeout, f"another client holds a lock on its tables; "
                                                            f"{attempts} attempt(s)")

    @staticmethod
    def _set_local_timeouts(cur: Any, deadline: float) -> None:
        # utility statements: they do not fix the transaction's snapshot. lock_timeout (and statement_timeout) 0
        # would mean "wait forever" to PostgreSQL, so always at least 1 ms. synchronous_commit on: the spend is on
        # disk at COMMIT. Every statement of the transaction then ends within the time left of --lock-timeout
        # when it waits for a lock, and within STATEMENT_GRACE_MS more whatever it waits for.
        left_ms = max(1, int((deadline - time.monotonic()) * 1000))
        cur.execute(f"SET LOCAL lock_timeout = {left_ms:d}")
        cur.execute(f"SET LOCAL statement_timeout = {left_ms + STATEMENT_GRACE_MS:d}")
        cur.execute("SET LOCAL synchronous_commit = on")

    def _ensure_schema(self, deadline: float) -> None:
        """Create the tables when missing (once per ledger object), serialized by a transaction advisory lock."""
        if self._schema_ok:
            return
        psycopg = self._psycopg
        conn = self._connection()
        try:
            conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
            conn.read_only = False
            with conn.transaction(), conn.cursor() as cur:
                self._set_local_timeouts(cur, deadline)
                query = "SELECT to_regclass(%s) IS NOT NULL, to_regclass(%s) IS NOT NULL, to_regclass(%s) IS NOT NULL"
                tables = (LEDGER_TABLE, HEAD_TABLE, STORE_TABLE)
                cur.execute(query, tables)
                if not all(cur.fetchone()):
                    cur.execute("SELECT pg_advisory_xact_lock(%s)", (ADVISORY_KEY,))
                    cur.execute(query, tables)  # READ COMMITTED: a fresh look after the wait
                    has_ledger, has_head, has_store = cur.fetchone()
                    if has_head and not has_ledger:
                        # never lay a fresh, empty chain where one was dropped
                        raise LedgerError(
                            f"ledger {self.name}: the table {LEDGER_TABLE} is gone but its head is recorded "
                            "(the ledger was dropped)"
                        )
                    if not (has_ledger and has_head and has_store):
                        cur.execute(SCHEMA)
        except DpcliError:
            raise
        except psycopg.Error as exc:
            if getattr(exc, "sqlstate", None) in (LOCK_NOT_AVAILABLE, QUERY_CANCELED):
                raise self._waited(exc) from None
            raise self._db_error(exc, "creating the ledger tables") from None
        self._schema_ok = True

    # -- reading -----------------------------------------------------------------------------------------------

    def _tables_exist(self, cur: Any) -> tuple[bool, bool]:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL, to_regclass(%s) IS NOT NULL", (LEDGER_TABLE, HEAD_TABLE))
        ledger, head = cur.fetchone()
        return bool(ledger), bool(head)

    def _read(self, cur: Any) -> list[Record]:
        has_ledger, has_head = self._tables_exist(cur)
        rows = []
        if has_ledger:
            cur.execute(f"SELECT seq, record, hash FROM {LEDGER_TABLE} ORDER BY seq")
            rows = cur.fetchall()
        records: list[Record] = []
        for seq, text, h in rows:
            try:
                obj = json.loads(text)
            except (ValueError, TypeError):
                raise LedgerError(f"ledger {self.name}: row {seq} is not a JSON record (edited)") from None
            if not isinstance(obj, dict) or not isinstance(h, str) or "hash" in obj:
                raise LedgerError(f"ledger {self.name}: row {seq} is not a ledger record")
            if obj.get("seq") != seq:
                raise LedgerError(
                    f"ledger {self.name}: row {seq} holds record {obj.get('seq')!s:.20} "
                    "(records deleted, inserted or swapped)"
                )
            records.append(Record(obj, h))
        verify_chain(records, self.key, self.name)
        head = None
        if has_head:
            cur.execute(f"SELECT seq, hash FROM {HEAD_TABLE} WHERE id = 1")
            head = cur.fetchone()
        if head is None:
            if records:
                raise LedgerError(f"ledger {self.name}: its head row is missing (the ledger was edited)")
        elif not records or records[-1].seq != head[0] or records[-1].hash != head[1]:
            raise LedgerError(
                f"ledger {self.name} does not end at its recorded head (record {head[0]}): "
                "records were deleted or it was restored from an older copy"
            )
        return records

    def records(self) -> list[Record]:
        return self._read_tx(self._read, "reading the ledger")

    # -- writing -----------------------------------------------------------------------------------------------

    def _append(self, cur: Any, records: list[Record], fields: NewFields) -> Record:
        record = new_record(records, fields, self.key)
        full, h = record.fields, record.hash
        text = canonical(full).decode("utf-8")
        cur.execute(f"INSERT INTO {LEDGER_TABLE} (seq, record, hash) VALUES (%s, %s, %s)", (full["seq"], text, h))
        cur.execute(
            f"INSERT INTO {HEAD_TABLE} (id, seq, hash) VALUES (1, %s, %s) "
            "ON CONFLICT (id) DO UPDATE SET seq = EXCLUDED.seq, hash = EXCLUDED.hash",
            (full["seq"], h),
        )
        return record

    def _write(self, build: Callable[[list[Record]], NewFields], doing: str) -> Record:
        def body(cur: Any) -> Record:
            records = self._read(cur)
            return self._append(cur, records, build(records))  # what build raises rolls the transaction back

        return self._write_tx(body, doing)

    def _locked(self, body: Callable[[list[Record], Store, Append], T]) -> T:
        """One transaction: the pieces (or a period's table) and their record commit together, or neither does."""

        def tx(cur: Any) -> T:
            records = self._read(cur)

            def store(key: str, data: bytes) -> None:
                self._check_release_key(key)
                cur.execute(
                    f"INSERT INTO {STORE_TABLE} (release_id, table_json) VALUES (%s, %s) "
                    "ON CONFLICT (release_id) DO UPDATE SET table_json = EXCLUDED.table_json",
                    (key, bytes(data)),
                )

            return body(records, store, lambda fields: self._append(cur, records, fields))

        return self._write_tx(tx, "recording a series' pieces")

    # -- the release store -------------------------------------------------------------------------------------

    def _check_release_key(self, release_key: str) -> None:
        if not release_key.isalnum():
            raise LedgerError(f"ledger {self.name}: malformed release key")

    def check_store(self) -> None:
        """Nothing to check before the spend: the store is a table of the ledger's database, made with the others."""

    def store_table(self, release_key: str, table: bytes) -> None:
        self._check_release_key(release_key)

        def body(cur: Any) -> None:
            cur.execute(
                f"INSERT INTO {STORE_TABLE} (release_id, table_json) VALUES (%s, %s) "
                "ON CONFLICT (release_id) DO UPDATE SET table_json = EXCLUDED.table_json",
                (release_key, bytes(table)),
            )

        self._write_tx(body, "writing the release store", lock=False)

    def load_table(self, release_key: str) -> bytes | None:
        self._check_release_key(release_key)

        def body(cur: Any) -> bytes | None:
            cur.execute("SELECT to_regclass(%s) IS NOT NULL", (STORE_TABLE,))
            if not cur.fetchone()[0]:
                return None
            cur.execute(f"SELECT table_json FROM {STORE_TABLE} WHERE release_id = %s", (release_key,))
            row = cur.fetchone()
            return None if row is None else bytes(row[0])

        return self._read_tx(body, "reading the release store")
