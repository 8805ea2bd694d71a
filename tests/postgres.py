"""Start and stop a REAL PostgreSQL server (Debian's `postgresql` package) for tests and benchmarks.

Why a real one: the PostgreSQL backend's locking, full-text search and LISTEN/NOTIFY are the
point of it; a mock would test our SQL against our own idea of PostgreSQL. Each instance is an
`initdb` cluster in its own temp dir, listening on 127.0.0.1 on a free port, run by `pg_ctl` as an
unprivileged user (PostgreSQL refuses to run as root): when the tests run as root that user is a
dedicated system user, as tests/sshd.py does for sshd. Durability is off (fsync, full pages):
a test cluster never survives a crash and the 2-core CI box pays for every fsync.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

PG_USER = "pivot-pg"


class PostgresUnavailable(RuntimeError):
    """PostgreSQL cannot start here; the fixture turns this into a test FAILURE, never a skip."""


def pg_bindir() -> Path:
    """Debian puts the server binaries under /usr/lib/postgresql/<major>/bin; take the newest."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name)
    )
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).resolve().parent
    raise PostgresUnavailable("initdb not found: run scripts/system-deps.sh (Debian `postgresql`)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ensure_user() -> pwd.struct_passwd:
    """Ourselves when unprivileged; as root, a dedicated system user (created on first use)."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid())
    try:
        return pwd.getpwnam(PG_USER)
    except KeyError:
        r = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_USER],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise PostgresUnavailable(f"cannot create user {PG_USER}: {r.stderr.strip()}") from None
        return pwd.getpwnam(PG_USER)


@dataclass
class Postgres:
    """A running test cluster; `url()` names its default database, `new_database()` a fresh one."""

    port: int
    root: Path
    bindir: Path
    uid: int
    gid: int
    host: str = "127.0.0.1"
    superuser: str = "postgres"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{self.superuser}@{self.host}:{self.port}/{dbname}"

    def new_database(self, prefix: str = "pivot") -> str:
        """A fresh, empty database (one per test keeps tests apart); returns its URL."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def _pg_ctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            user=self.uid,
            group=self.gid,
            cwd=self.root,
        )

    def stop(self) -> None:
        self._pg_ctl("stop", "-m", "immediate", "-w")
        shutil.rmtree(self.root, ignore_errors=True)


def start_postgres() -> Postgres:
    """initdb + pg_ctl start in a fresh temp dir; raises PostgresUnavailable with the server's log."""
    bindir = pg_bindir()
    pw = _ensure_user()
    root = Path(tempfile.mkdtemp(prefix="pivot-pg-"))
    os.chown(root, pw.pw_uid, pw.pw_gid)
    root.chmod(0o700)
    pg = Postgres(port=_free_port(), root=root, bindir=bindir, uid=pw.pw_uid, gid=pw.pw_gid)
    r = subprocess.run(
        [
            str(bindir / "initdb"),
            "-D",
            str(root / "data"),
            "-U",
            pg.superuser,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-sync",
        ],
        capture_output=True,
        text=True,
        user=pw.pw_uid,
        group=pw.pw_gid,
        cwd=root,
        timeout=120,
    )
    if r.returncode != 0:
        raise PostgresUnavailable(f"initdb failed: {r.stderr.strip()[-2000:]}")
    opts = (
        f"-c port={pg.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={root} "
        "-c fsync=off -c full_page_writes=off -c synchronous_commit=off -c max_connections=300 "
        "-c shared_buffers=64MB"
    )
    log = root / "server.log"
    r = pg._pg_ctl("start", "-w", "-t", "60", "-l", str(log), "-o", opts, timeout=90)
    if r.returncode != 0:
        text = log.read_text(errors="replace")[-2000:] if log.exists() else r.stderr
        raise PostgresUnavailable(f"pg_ctl start failed: {text}")
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection((pg.host, pg.port), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise PostgresUnavailable("PostgreSQL did not accept connections") from None
            time.sleep(0.05)
    return pg
