"""What lets several `pivot serve` replicas share one PostgreSQL, with no broker beside it.

Two jobs, both done by PostgreSQL itself:
- Events: every stored event NOTIFYs `pivot_events` (store/memory/postgres.py). A relay thread here
  LISTENs and hands events of sessions run by *another* replica to this replica's SSE streams.
- Run leases (store/leases.py): whoever runs a session, a replica or the CLI, holds a
  session-level advisory lock keyed by its id. PostgreSQL drops a dead process's locks with its
  connection, so a `running` session whose lease can be taken has lost its runner; the scanner
  here takes it and continues the run from its checkpoint. No heartbeats, no clocks to agree on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg

from store.leases import RunLeases
from store.memory.postgres import EVENTS_CHANNEL

log = logging.getLogger("pivot.cluster")


class Cluster:
    def __init__(self, url: str, leases: RunLeases, scan_s: float = 1.0) -> None:
        self.url = url
        self.leases = leases
        self._on_event: Callable[[str, int], None] = lambda sid, seq: None
        self._on_orphan: Callable[[str], None] = lambda sid: None
        self.scan_s = scan_s
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

    # -- leases (store/leases.py; the Runner holds them too, counted) --------------------------
    def hold(self, session_id: str) -> bool:
        """Take (or take again) the session's run lease; False if another process holds it."""
        return self.leases.try_hold(session_id)

    def release(self, session_id: str) -> None:
        self.leases.release(session_id)

    def _scan(self) -> None:
        """Sessions marked running whose lease is free were left by a dead replica: adopt."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.wait(self.scan_s):
                try:
                    rows = conn.execute(
                        "select id from sessions where status = 'running' order by updated"
                    ).fetchall()
                    for (sid,) in rows:
                        if not self.leases.held(sid) and self.hold(sid):
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
