"""Run leases in the team PostgreSQL: whoever runs a session holds its lease, CLI or service.

A lease is a session-level advisory lock keyed by the session id, on one connection per
process. PostgreSQL drops a dead process's locks with its connection, so a session marked
`running` whose lease is free has lost its runner, and a service replica may continue it
(server/cluster.py). Holds are counted: the service holds a session from the moment it queues
it, the Runner again while it drives the graph; the lock goes at the last release.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

#: Advisory-lock namespace of run leases: `pg_try_advisory_lock(LEASE_NS, hashtext(id))`.
LEASE_NS = 0x5049


class LeaseTaken(RuntimeError):
    """Another live process runs this session."""


class RunLeases:
    def __init__(self, url: str) -> None:
        self._conn = psycopg.connect(url, autocommit=True)
        self._mu = threading.Lock()
        self._counts: dict[str, int] = {}

    def held(self, session_id: str) -> bool:
        return session_id in self._counts

    def try_hold(self, session_id: str) -> bool:
        with self._mu:
            if session_id in self._counts:
                self._counts[session_id] += 1
                return True
            row = self._conn.execute(
                "select pg_try_advisory_lock(%s, hashtext(%s))", [LEASE_NS, session_id]
            ).fetchone()
            if row and row[0]:
                self._counts[session_id] = 1
                return True
            return False

    def release(self, session_id: str) -> None:
        with self._mu:
            n = self._counts.get(session_id, 0)
            if n > 1:
                self._counts[session_id] = n - 1
                return
            if n == 0:
                return
            del self._counts[session_id]
            with contextlib.suppress(psycopg.Error):  # connection gone: so is the lock
                self._conn.execute(
                    "select pg_advisory_unlock(%s, hashtext(%s))", [LEASE_NS, session_id]
                )

    @contextmanager
    def holding(self, session_id: str) -> Iterator[None]:
        if not self.try_hold(session_id):
            raise LeaseTaken(f"session {session_id} is being run by another process")
        try:
            yield
        finally:
            self.release(session_id)

    def close(self) -> None:
        with self._mu:
            self._counts.clear()
            self._conn.close()
