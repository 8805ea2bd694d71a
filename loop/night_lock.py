"""One night at a time per plan: a second `pivot loop run` on a running plan is refused.

Why: two loops on one plan each recover "the other's leftovers" at start (kill its servers,
revert its config files); every experiment of both then fails and both exit 0. The lock is
taken before recovery, so the second loop touches nothing and names who holds the plan.

- SQLite (one state dir): an owner row per plan in the ledger, stamped every
  `heartbeat_s()`. A holder whose pid is gone (or a zombie) on this machine, or whose stamp is
  older than 3 beats, is dead and its row is taken over: a kill -9 never locks a plan out.
- PostgreSQL (a team database): a session advisory lock, freed by the server the moment the
  holder's connection dies; the holder is named from its connection's application_name.

`pivot loop run --worker` takes neither: the fleet shares one night on purpose.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import BaseModel


class Holder(BaseModel):
    pid: int
    host: str
    since: float
    state_dir: str = ""

    def describe(self) -> str:
        when = datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        where = f" (state {self.state_dir})" if self.state_dir else ""
        return f"pid {self.pid} on {self.host} since {when}{where}"


class NightBusy(Exception):
    """Another loop runs this plan now."""

    def __init__(self, plan_name: str, holder: Holder) -> None:
        self.plan_name = plan_name
        self.holder = holder
        super().__init__(
            f"plan {plan_name!r} is already running: {holder.describe()}; "
            "stop that loop first (pivot loop status shows it), or run workers with --worker"
        )


class Hold(Protocol):
    def release(self) -> None: ...


def _alive_here(pid: int) -> bool:
    """The pid runs on this machine and is not a zombie (a killed loop not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


class SqliteHold:
    """The owner row of `plan_name` in a SQLite ledger, kept fresh by a heartbeat thread."""

    def __init__(self, ledger: Any, plan_name: str, state_dir: str, beat_s: float) -> None:
        self.ledger, self.plan_name, self.beat_s = ledger, plan_name, beat_s
        self.me = Holder(
            pid=os.getpid(), host=socket.gethostname(), since=time.time(), state_dir=state_dir
        )
        self._claim()
        self._done = threading.Event()
        threading.Thread(target=self._beat, daemon=True, name="night-lock").start()

    def _claim(self) -> None:
        db, conn = self.ledger.db, self.ledger.db.conn
        with self.ledger._lock:
            conn.execute("BEGIN IMMEDIATE")  # read and write as one: two claims cannot both win
            try:
                row = db.execute(
                    "select pid, host, since, state_dir, heartbeat from night_owner "
                    "where plan_name = ?",
                    [self.plan_name],
                ).fetchone()
                if row is not None:
                    holder = Holder(pid=row[0], host=row[1], since=row[2], state_dir=row[3] or "")
                    if self._alive(holder, row[4]) and holder.pid != self.me.pid:
                        raise NightBusy(self.plan_name, holder)
                db.execute(
                    "insert or replace into night_owner "
                    "(plan_name, pid, host, since, state_dir, heartbeat) values (?, ?, ?, ?, ?, ?)",
                    [
                        self.plan_name,
                        self.me.pid,
                        self.me.host,
                        self.me.since,
                        self.me.state_dir,
                        time.time(),
                    ],
                )
                conn.commit()
            except BaseException:
                conn.rollback()
                raise

    def _alive(self, holder: Holder, heartbeat: float | None) -> bool:
        if holder.host == self.me.host and not _alive_here(holder.pid):
            return False
        return time.time() - (heartbeat or holder.since) <= 3 * self.beat_s

    def _beat(self) -> None:
        while not self._done.wait(self.beat_s):
            with contextlib.suppress(Exception):  # a busy ledger: the next beat tries again
                self._write(
                    "update night_owner set heartbeat = ? where plan_name = ? and pid = ? "
                    "and host = ?",
                    [time.time(), self.plan_name, self.me.pid, self.me.host],
                )

    def _write(self, sql: str, args: list[Any]) -> None:
        with self.ledger._lock, self.ledger.db.conn:
            self.ledger.db.execute(sql, args)

    def release(self) -> None:
        self._done.set()
        with contextlib.suppress(Exception):
            self._write(
                "delete from night_owner where plan_name = ? and pid = ? and host = ?",
                [self.plan_name, self.me.pid, self.me.host],
            )


class PgHold:
    """A session advisory lock on its own connection, named by its application_name."""

    PREFIX = "pivot-loop-night"

    def __init__(self, url: str, plan_name: str, state_dir: str) -> None:
        import psycopg

        me = Holder(
            pid=os.getpid(), host=socket.gethostname(), since=time.time(), state_dir=state_dir
        )
        # application_name is at most 63 bytes: pid, host and start; the state dir is left out
        name = f"{self.PREFIX} {me.pid} {me.host[:24]} {me.since:.0f}"
        self.conn = psycopg.connect(url, autocommit=True, application_name=name)
        key = f"loop-night:{plan_name}"
        got = self.conn.execute("select pg_try_advisory_lock(hashtext(%s))", [key]).fetchone()
        if got and got[0]:
            return
        row = self.conn.execute(
            """select a.application_name, a.backend_start from pg_locks l
               join pg_stat_activity a on a.pid = l.pid
               where l.locktype = 'advisory' and l.granted and l.objid = hashtext(%s)::oid""",
            [key],
        ).fetchone()
        self.conn.close()
        holder = Holder(pid=0, host="?", since=time.time())
        if row and str(row[0]).startswith(self.PREFIX):
            _, pid, host, since = str(row[0]).split(" ", 3)
            holder = Holder(pid=int(pid), host=host, since=float(since))
        elif row:
            holder = Holder(pid=0, host=str(row[0]) or "?", since=row[1].timestamp())
        raise NightBusy(plan_name, holder)

    def release(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()  # the server frees the session's advisory lock with it


def hold(ledger: Any, plan_name: str, state_dir: str, beat_s: float) -> Hold:
    """Take the plan for this process, or raise NightBusy naming who has it."""
    url = getattr(ledger, "url", None)
    if url:
        return PgHold(url, plan_name, state_dir)
    return SqliteHold(ledger, plan_name, state_dir, beat_s)
