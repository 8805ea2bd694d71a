"""What lets several `pivot serve` replicas share one PostgreSQL, with no broker beside it.

Two jobs, both done by PostgreSQL itself:
- Events: every stored event NOTIFYs `pivot_events` (agent/memory_pg.py). A relay thread here
  LISTENs and hands events of sessions run by *another* replica to this replica's SSE streams.
- Run leases: the replica running a session holds a session-level advisory lock keyed by the
  session id, on one lease connection. PostgreSQL drops a dead process's locks with its
  connection, so a `running` session whose lock can be taken has lost its replica; a scanner
  takes it and continues the run from its checkpoint. No heartbeats, no clocks to agree on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg

from agent.memory_pg import EVENTS_CHANNEL

log = logging.getLogger("pivot.cluster")

#: Advisory-lock namespace of run leases: `pg_try_advisory_lock(LEASE_NS, hashtext(id))`.
LEASE_NS = 0x5049


class Cluster:
    def __init__(self, url: str, scan_s: float = 1.0) -> None:
        self.url = url
        self._on_event: Callable[[str, int], None] = lambda sid, seq: None
        self._on_orphan: Callable[[str], None] = lambda sid: None
        self.scan_s = scan_s
        self._lease = psycopg.connect(url, autocommit=True)
        self._lease_mu = threading.Lock()
        self.held: set[str] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def bind(self, on_event: Callable[[str, int], None], on_orphan: Callable[[str], None]) -> None:
        self._on_event, self._on_orphan = on_event, on_orphan

    def start(self) -> None:
        ready = threading.Event()
        for target, name in ((self._listen, "pivot-relay"), (self._scan, "pivot-lease-scan")):
            args = (ready,) if target == self._listen else ()
            t = threading.Thread(target=target, args=args, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        ready.wait(10)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        with self._lease_mu:
            self._lease.close()

    # -- leases ----------------------------------------------------------------------------------
    def hold(self, session_id: str) -> bool:
        """Take the session's run lease; False if a live replica holds it."""
        with self._lease_mu:
            if session_id in self.held:
                return True
            row = self._lease.execute(
                "select pg_try_advisory_lock(%s, hashtext(%s))", [LEASE_NS, session_id]
            ).fetchone()
            if row and row[0]:
                self.held.add(session_id)
                return True
            return False

    def release(self, session_id: str) -> None:
        with self._lease_mu:
            if session_id not in self.held:
                return
            self.held.discard(session_id)
            self._lease.execute(
                "select pg_advisory_unlock(%s, hashtext(%s))", [LEASE_NS, session_id]
            )

    def _scan(self) -> None:
        """Sessions marked running whose lease is free were left by a dead replica: adopt."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.wait(self.scan_s):
                try:
                    rows = conn.execute(
                        "select id from sessions where status = 'running' order by updated"
                    ).fetchall()
                    for (sid,) in rows:
                        if sid not in self.held and self.hold(sid):
                            log.warning("session %s lost its replica; continuing it here", sid)
                            self._on_orphan(sid)
                except Exception:  # the scanner must outlive a database restart
                    log.exception("lease scan")

    # -- events ----------------------------------------------------------------------------------
    def _listen(self, ready: threading.Event) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"LISTEN {EVENTS_CHANNEL}")
            ready.set()
            while not self._stop.is_set():
                for note in conn.notifies(timeout=0.5):
                    sid, _, seq = note.payload.rpartition(":")
                    try:
                        self._on_event(sid, int(seq))
                    except Exception:
                        log.exception("relaying %s", note.payload)
