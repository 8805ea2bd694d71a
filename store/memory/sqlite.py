"""Memory in SQLite via sqlite-utils, the embedded default (`PgMemory` in
store/memory/postgres.py keeps the same tables in a team's PostgreSQL).

Tables mirror what happened (sessions, events, observations, hypotheses, conclusions, todos,
handoffs). Migrations are named and append-only; WAL keeps concurrent writers (the API, the loop)
from corrupting each other. Conclusions are FTS5-indexed so a recurring signature can be matched
to "seen before on host X on date Y: root cause Z".
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from store.memory.base import ConclusionRow, HandoffRow, MemoryReads, SessionRow, TodoRow
from store.memory.codec import (
    alert_row,
    conclusion_row,
    event_data,
    hypothesis_row,
    load_alert,
    load_event,
    load_observation,
    observation_row,
    session_outcome,
)
from store.records import AlertRow, Event, Report, now
from store.sqlite_db import migration_lock, open_database, sqlite_utils


def _m001_core(db: sqlite_utils.Database) -> None:
    db["sessions"].create(
        {
            "id": str,
            "host": str,
            "symptom": str,
            "brain": str,
            "status": str,
            "created": str,
            "updated": str,
            "root_cause": str,
            "report": str,
        },
        pk="id",
    )
    db["events"].create(
        {"session_id": str, "seq": int, "type": str, "data": str, "at": str},
        pk=("session_id", "seq"),
    )
    db["todos"].create(
        {"id": int, "host": str, "text": str, "done": int, "created": str, "session_id": str},
        pk="id",
    )
    db["handoffs"].create(
        {"id": int, "host": str, "text": str, "created": str, "session_id": str}, pk="id"
    )
    db["conclusions"].create(
        {
            "session_id": str,
            "host": str,
            "root_cause": str,
            "summary": str,
            "evidence": str,
            "created": str,
        },
        pk="session_id",
    )
    db["conclusions"].enable_fts(["root_cause", "summary", "evidence"], create_triggers=True)
    db["todos"].create_index(["host", "done"])
    db["handoffs"].create_index(["host"])


def _m002_observations(db: sqlite_utils.Database) -> None:
    db["observations"].create(
        {
            "session_id": str,
            "id": str,
            "tool": str,
            "args": str,
            "ok": int,
            "lines": str,
            "at": str,
        },
        pk=("session_id", "id"),
    )
    db["hypotheses"].create(
        {
            "session_id": str,
            "label": str,
            "status": str,
            "score": float,
            "statement": str,
            "evidence": str,
            "against": str,
            "check": str,
        },
        pk=("session_id", "label"),
    )


def _m003_host_spec(db: sqlite_utils.Database) -> None:
    """How to reach the session's host again (e.g. `replay:/path/card.yaml`), for resume."""
    db["sessions"].add_column("host_spec", str)


def _m004_alerts(db: sqlite_utils.Database) -> None:
    """The alert that started a session (Alertmanager's webhook), one row per session."""
    db["alerts"].create(
        {
            "session_id": str,
            "group_key": str,
            "host": str,
            "alertname": str,
            "fingerprint": str,
            "status": str,
            "receiver": str,
            "generator_url": str,
            "external_url": str,
            "labels": str,
            "annotations": str,
            "starts_at": str,
            "received": str,
        },
        pk="session_id",
    )
    db["alerts"].create_index(["group_key", "host", "received"])


#: Named, append-only. Never edit an entry; add a new one.
MIGRATIONS: list[tuple[str, Callable[[sqlite_utils.Database], None]]] = [
    ("001_core", _m001_core),
    ("002_observations_hypotheses", _m002_observations),
    ("003_host_spec", _m003_host_spec),
    ("004_alerts", _m004_alerts),
]


class Memory(MemoryReads):
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        with migration_lock(self.path):
            self.db = open_database(self.path)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("PRAGMA busy_timeout=30000")
            self._migrate()

    def _migrate(self) -> None:
        with self._lock:
            if "_migrations" not in self.db.table_names():
                self.db["_migrations"].create({"name": str, "applied": str}, pk="name")
            done = {r["name"] for r in self.db["_migrations"].rows}
            for name, fn in MIGRATIONS:
                if name in done:
                    continue
                with self.db.conn:
                    fn(self.db)
                    self.db["_migrations"].insert({"name": name, "applied": now()})

    # -- sessions --------------------------------------------------------------------------------
    def create_session(
        self, host: str, symptom: str, brain: str, session_id: str | None = None
    ) -> str:
        sid = session_id or uuid.uuid4().hex[:12]
        ts = now()
        row = {"host": host, "symptom": symptom, "brain": brain, "status": "running", "updated": ts}
        with self._lock, self.db.conn:
            # the service may have created the row already: keep its creation time
            if self.get_session(sid) is None:
                self.db["sessions"].insert({"id": sid, "created": ts, **row}, pk="id")
            else:
                self.db["sessions"].update(sid, row)
        return sid

    def set_status(self, session_id: str, status: str) -> None:
        with self._lock, self.db.conn:
            self.db["sessions"].update(session_id, {"status": status, "updated": now()})

    def claim_status(self, session_id: str, expected: str, new: str) -> bool:
        """Move the status only if it still is `expected`: one winner when two replicas (or two
        clicks) act on one session at once."""
        with self._lock, self.db.conn:
            cur = self.db.execute(
                "update sessions set status = ?, updated = ? where id = ? and status = ?",
                [new, now(), session_id, expected],
            )
            return cur.rowcount == 1

    def set_host_spec(self, session_id: str, spec: str) -> None:
        with self._lock, self.db.conn:
            self.db["sessions"].update(session_id, {"host_spec": spec})

    def host_spec(self, session_id: str) -> str | None:
        row = self.db.execute(
            "select host_spec from sessions where id = ?", [session_id]
        ).fetchone()
        return row[0] if row else None

    def get_session(self, session_id: str) -> SessionRow | None:
        try:
            row = self.db["sessions"].get(session_id)
        except sqlite_utils.db.NotFoundError:
            return None
        return SessionRow.model_validate(row)

    def list_sessions(self, host: str | None = None, limit: int = 50) -> list[SessionRow]:
        where, args = ("host = ?", [host]) if host else (None, [])
        rows = self.db["sessions"].rows_where(where, args, order_by="created desc", limit=limit)
        return [SessionRow.model_validate(r) for r in rows]

    def _upsert(self, table: str, row: dict[str, Any], pk: tuple[str, ...]) -> None:
        """One statement, keeping the row's rowid (observations are read back in rowid order):
        sqlite-utils' upsert asks the schema first (sqlite_master, table_info) on every call,
        which was most of the statements an eval ran. The tables and their primary keys are
        the migrations' own, so there is nothing to ask."""
        cols = list(row)
        names = ", ".join(f'"{c}"' for c in cols)
        updates = ", ".join(f'"{c}" = excluded."{c}"' for c in cols if c not in pk)
        keys = ", ".join(f'"{k}"' for k in pk)
        self.db.execute(
            f'insert into "{table}" ({names}) values ({", ".join("?" * len(cols))}) '
            f"on conflict ({keys}) do " + (f"update set {updates}" if updates else "nothing"),
            [row[c] for c in cols],
        )

    def save_report(self, report: Report) -> None:
        """Store the outcome; a concluded report also joins the searchable conclusions."""
        ts = now()
        with self._lock, self.db.conn:
            self.db["sessions"].update(report.session_id, session_outcome(report, ts))
            for h in report.hypotheses:
                self._upsert(
                    "hypotheses", hypothesis_row(report.session_id, h), ("session_id", "label")
                )
            if report.status == "concluded":
                self._upsert("conclusions", conclusion_row(report, ts), ("session_id",))

    def report(self, session_id: str) -> Report | None:
        row = self.db["sessions"].get(session_id) if self.get_session(session_id) else None
        if not row or not row.get("report"):
            return None
        return Report.model_validate_json(row["report"])

    def record_observation(self, session_id: str, obs: dict[str, Any]) -> None:
        with self._lock, self.db.conn:
            self._upsert("observations", observation_row(session_id, obs), ("session_id", "id"))

    def observations(self, session_id: str) -> list[dict[str, Any]]:
        rows = self.db["observations"].rows_where("session_id = ?", [session_id], order_by="rowid")
        return [load_observation(r) for r in rows]

    # -- events ----------------------------------------------------------------------------------
    def append_event(self, event: Event) -> Event:
        """Assign the next seq for the session and store it; returns the stored event.

        One statement picks the seq and inserts: it runs under SQLite's write lock, so two
        processes appending to one session (the service and the CLI) never pick the same seq."""
        with self._lock, self.db.conn:
            row = self.db.execute(
                """insert into events (session_id, seq, type, data, at)
                   values (?, (select coalesce(max(seq), 0) + 1 from events where session_id = ?),
                           ?, ?, ?)
                   returning seq""",
                [
                    event.session_id,
                    event.session_id,
                    event.type,
                    event_data(event),
                    event.at,
                ],
            ).fetchone()
        # the caller's own new Event: numbered in place (a copy per event was a measurable
        # share of an eval, forty events a card)
        event.seq = int(row[0])
        return event

    def events(self, session_id: str, after_seq: int = 0) -> list[Event]:
        rows = self.db["events"].rows_where(
            "session_id = ? and seq > ?", [session_id, after_seq], order_by="seq"
        )
        return [load_event(r) for r in rows]

    # -- todos and handoffs ------------------------------------------------------------------------
    def add_todo(self, host: str, text: str, session_id: str | None = None) -> TodoRow:
        with self._lock, self.db.conn:
            t = self.db["todos"].insert(
                {"host": host, "text": text, "done": 0, "created": now(), "session_id": session_id}
            )
            return TodoRow.model_validate(self.db["todos"].get(t.last_pk))

    def todos(self, host: str, open_only: bool = True) -> list[TodoRow]:
        where = "host = ? and done = 0" if open_only else "host = ?"
        return [
            TodoRow.model_validate(r)
            for r in self.db["todos"].rows_where(where, [host], order_by="id")
        ]

    def close_todo(self, todo_id: int) -> bool:
        with self._lock, self.db.conn:
            cur = self.db.execute("update todos set done = 1 where id = ? and done = 0", [todo_id])
            return cur.rowcount > 0

    def add_handoff(self, host: str, text: str, session_id: str | None = None) -> HandoffRow:
        with self._lock, self.db.conn:
            t = self.db["handoffs"].insert(
                {"host": host, "text": text, "created": now(), "session_id": session_id}
            )
            return HandoffRow.model_validate(self.db["handoffs"].get(t.last_pk))

    def handoffs(self, host: str, limit: int = 10) -> list[HandoffRow]:
        rows = self.db["handoffs"].rows_where("host = ?", [host], order_by="id desc", limit=limit)
        return [HandoffRow.model_validate(r) for r in rows]

    # -- conclusions -------------------------------------------------------------------------------
    def search_conclusions(self, query: str, limit: int = 20) -> list[ConclusionRow]:
        q = " OR ".join(f'"{w}"' for w in query.replace('"', " ").split() if w)
        if not q:
            return []
        try:
            rows = self.db["conclusions"].search(q, limit=limit)
        except sqlite3.OperationalError:
            return []
        return [ConclusionRow.model_validate(r) for r in rows]

    # -- alerts ----------------------------------------------------------------------------------
    def record_alert(self, alert: AlertRow) -> None:
        with self._lock, self.db.conn:
            self.db["alerts"].upsert(alert_row(alert), pk="session_id")

    def alert(self, session_id: str) -> AlertRow | None:
        rows = list(self.db["alerts"].rows_where("session_id = ?", [session_id], limit=1))
        return load_alert(rows[0]) if rows else None

    def last_alert(self, group_key: str, host: str) -> AlertRow | None:
        rows = list(
            self.db["alerts"].rows_where(
                "group_key = ? and host = ?", [group_key, host], order_by="received desc", limit=1
            )
        )
        return load_alert(rows[0]) if rows else None

    def close(self) -> None:
        self.db.conn.close()
