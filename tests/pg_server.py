"""A throwaway PostgreSQL cluster for tests: initdb into a temporary directory, start it on a free loopback port
(unix socket in the same directory), hand out fresh databases and schemas, stop and delete everything at the end.

Not a test file. ``PgServer.start()`` raises ``PgUnavailable`` with a readable reason when no server can be run
(no initdb/pg_ctl, root without a ``postgres`` user, initdb or start failing): the fixture turns that into a skip.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


class PgUnavailable(Exception):
    pass


def find_binary(name: str) -> str | None:
    """``name`` on PATH, else in the newest /usr/lib/postgresql/*/bin (where Debian puts the server tools)."""
    found = shutil.which(name)
    if found:
        return found

    def version(path: str) -> tuple[int, ...]:
        part = Path(path).parts[-3]
        return tuple(int(x) for x in part.split(".") if x.isdigit())

    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=version, reverse=True)
    return candidates[0] if candidates else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """One cluster. ``url(db)`` has a password (scram-sha-256 over TCP), like a real deployment's URL."""

    user = "postgres"

    def __init__(self) -> None:
        self.password = "pw-" + secrets.token_hex(8)
        self.dir: Path | None = None
        self.port: int | None = None
        self.started = False
        self._prefix: list[str] = []
        self._owner: pwd.struct_passwd | None = None
        self._dbs = 0
        self._schemas = 0
        self._shared_db = ""

    # -- running the server tools as a non-root user ---------------------------------------------------------

    def _run_as(self) -> list[str]:
        if os.geteuid() != 0:
            return []
        try:
            self._owner = pwd.getpwnam("postgres")
        except KeyError:
            raise PgUnavailable("running as root and there is no 'postgres' user to run initdb as") from None
        runuser = shutil.which("runuser")
        if runuser:
            return [runuser, "-u", "postgres", "--"]
        su = shutil.which("su")
        if su:
            return [su, "postgres", "-s", "/bin/sh", "-c", '"$0" "$@"']
        raise PgUnavailable("running as root and neither runuser nor su is available to drop to 'postgres'")

    def _run(self, args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "LANG": "C"}
        return subprocess.run(
            [*self._prefix, *args], capture_output=True, text=True, env=env, cwd=str(self.dir), timeout=timeout
        )

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> None:
        initdb, pg_ctl = find_binary("initdb"), find_binary("pg_ctl")
        if not initdb or not pg_ctl:
            raise PgUnavailable(
                "PostgreSQL server tools (initdb, pg_ctl) not found on PATH or in /usr/lib/postgresql/*/bin: "
                "install Debian's 'postgresql' package"
            )
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise PgUnavailable(
                "psycopg is not installed: pip install 'psycopg[binary]>=3.1' (the test extra)"
            ) from None
        self._prefix = self._run_as()
        atexit.register(self.stop)  # also when the session ends abnormally (an interrupt)
        # not under pytest's tmp dirs: those are 0700 to root, and the server runs as 'postgres'
        self.dir = Path(tempfile.mkdtemp(prefix="dpcli-pg-"))
        pwfile = self.dir / "pw"
        pwfile.write_text(self.password + "\n")
        if self._owner is not None:
            os.chown(self.dir, self._owner.pw_uid, self._owner.pw_gid)
            os.chown(pwfile, self._owner.pw_uid, self._owner.pw_gid)
        pwfile.chmod(0o600)
        data = self.dir / "data"
        r = self._run(
            [initdb, "-D", str(data), "-U", self.user, f"--pwfile={pwfile}", "--auth-host=scram-sha-256",
             "--auth-local=trust", "-E", "UTF8", "--no-locale", "--no-sync"],
            timeout=120,
        )
        pwfile.unlink()
        if r.returncode != 0:
            raise PgUnavailable(f"initdb failed: {(r.stderr or r.stdout).strip()[-500:]}")
        last = ""
        for _ in range(3):  # a free port can be taken between our probe and the server's bind
            self.port = free_port()
            opts = (
                f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off "
                "-c full_page_writes=off -c max_connections=100 -c shared_buffers=16MB"
            )
            r = self._run([pg_ctl, "-D", str(data), "-l", str(self.dir / "log"), "-w", "-t", "60", "-o", opts, "start"],
                          timeout=90)
            if r.returncode == 0:
                self.started = True
                break
            try:
                last = (self.dir / "log").read_text()[-500:]
            except OSError:
                last = (r.stderr or r.stdout)[-500:]
        if not self.started:
            raise PgUnavailable(f"pg_ctl start failed: {last.strip()}")
        self._pg_ctl = pg_ctl

    def stop(self) -> None:
        if self.started:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                self._run([self._pg_ctl, "-D", str(self.dir / "data"), "-m", "immediate", "-w", "stop"], timeout=60)
            self.started = False
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    # -- databases -------------------------------------------------------------------------------------------

    def url(self, db: str = "postgres", password: str | None = None, schema: str | None = None) -> str:
        pw = self.password if password is None else password
        query = f"?options=-csearch_path%3D{schema}" if schema else ""
        return f"postgresql://{self.user}:{pw}@127.0.0.1:{self.port}/{db}{query}"

    def create_database(self) -> str:
        """A new, empty database; returns its URL."""
        import psycopg

        self._dbs += 1
        name = f"dpcli_t{self._dbs}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def create_schema(self) -> str:
        """A new, empty schema in one shared database, and a URL whose search_path is that schema (libpq's
        ``options``): much cheaper than a database each (creating and deleting one copies ~1,000 files)."""
        import psycopg

        if not self._shared_db:
            self._shared_db = self.create_database().rsplit("/", 1)[1]
        self._schemas += 1
        name = f"t{self._schemas}"
        with psycopg.connect(self.url(self._shared_db), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return self.url(self._shared_db, schema=name)
