"""The team backend of memory: the same tables and answers as store/memory/sqlite.py, in PostgreSQL.

Chosen when `PIVOT_DATABASE_URL` is a postgresql:// URL, so a team's investigations share one
memory ("seen before on node-17 last Tuesday" from a colleague's session). Columns keep the
SQLite types (ISO timestamps as text, booleans as integers) so `pivot db copy` moves rows
unchanged and both backends return equal rows. Conclusions carry a generated `tsvector` with a
GIN index in place of FTS5. Every stored event also NOTIFYs `pivot_events` in its transaction,
so another replica's live SSE stream hears it on commit (server/relay.py).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from psycopg import Connection

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
from store.pg import Migration, migrate, open_pool
from store.records import AlertRow, Event, Report, now

#: The channel every stored event is announced on; payload `<session_id>:<seq>`.
EVENTS_CHANNEL = "pivot_events"


def _m001_core(conn: Connection[Any]) -> None:
    conn.execute(
        """
        create table sessions (
            id text primary key, host text, symptom text, brain text, status text,
            created text, updated text, root_cause text, report text);
        create table events (
            session_id text not null, seq integer not null, type text, data text, at text,
            primary key (session_id, seq));
        create table todos (
            id bigserial primary key, host text, text text, done integer, created text,
            session_id text);
        create table handoffs (
            id bigserial primary key, host text, text text, created text, session_id text);
        create table conclusions (
            session_id text primary key, host text, root_cause text, summary text,
            evidence text, created text,
            tsv tsvector generated always as (to_tsvector('english',
                coalesce(root_cause, '') || ' ' || coalesce(summary, '') || ' '
                || coalesce(evidence, ''))) stored);
        create index conclusions_tsv on conclusions using gin (tsv);
        create index todos_host_done on todos (host, done);
        create index handoffs_host on handoffs (host);
        create index sessions_created on sessions (created);
        """
    )


def _m002_observations(conn: Connection[Any]) -> None:
    conn.execute(
        """
        create table observations (
            session_id text not null, id text not null, tool text, args text, ok integer,
            lines text, at text, ord bigserial, primary key (session_id, id));
        create table hypotheses (
            session_id text not null, label text not null, status text, score double precision,
            statement text, evidence text, against text, "check" text,
            primary key (session_id, label));
        """
    )


def _m003_host_spec(conn: Connection[Any]) -> None:
    conn.execute("alter table sessions add column host_spec text")


def _m004_alerts(conn: Connection[Any]) -> None:
    conn.execute(
        """
        create table alerts (
            session_id text primary key, group_key text, host text, alertname text,
            fingerprint text, status text, receiver text, generator_url text,
            external_url text, labels text, annotations text, starts_at text, received text);
        create index alerts_group on alerts (group_key, host, received);
        """
    )


#: Named, append-only, and named like their SQLite twins in store/memory/sqlite.py.
MIGRATIONS: list[Migration] = [
    ("001_core", _m001_core),
    ("002_observations_hypotheses", _m002_observations),
    ("003_host_spec", _m003_host_spec),
    ("004_alerts", _m004_alerts),
]
_ALERT_COLS = (
    "session_id, group_key, host, alertname, fingerprint, status, receiver, generator_url, "
    "external_url, labels, annotations, starts_at, received"
)

_SESSION_COLS = "id, host, symptom, brain, status, created, updated, root_cause"


class PgMemory(MemoryReads):
    def __init__(self, url: str, pool_size: int = 10) -> None:
        self.url = url
        self.pool = open_pool(url, max_size=pool_size, name="pivot-memory")
        migrate(self.pool, "memory", MIGRATIONS)

    def _one(self, sql: str, args: list[Any]) -> dict[str, Any] | None:
        with self.pool.connection() as conn:
            return conn.execute(sql, args).fetchone()

    def _all(self, sql: str, args: list[Any]) -> list[dict[str, Any]]:
        with self.pool.connection() as conn:
            return conn.execute(sql, args).fetchall()

    # -- sessions --------------------------------------------------------------------------------
    def create_session(
        self, host: str, symptom: str, brain: str, session_id: str | None = None
    ) -> str:
        sid = session_id or uuid.uuid4().hex[:12]
        ts = now()
        with self.pool.connection() as conn:
            conn.execute(
                """insert into sessions (id, host, symptom, brain, status, created, updated)
                   values (%s, %s, %s, %s, 'running', %s, %s)
                   on conflict (id) do update set host = excluded.host,
                     symptom = excluded.symptom, brain = excluded.brain,
                     status = excluded.status, updated = excluded.updated""",
                [sid, host, symptom, brain, ts, ts],
            )
        return sid

    def set_status(self, session_id: str, status: str) -> None:
        with self.pool.connection() as conn:
            conn.execute(
                "update sessions set status = %s, updated = %s where id = %s",
                [status, now(), session_id],
            )

    def claim_status(self, session_id: str, expected: str, new: str) -> bool:
        with self.pool.connection() as conn:
            cur = conn.execute(
                "update sessions set status = %s, updated = %s where id = %s and status = %s",
                [new, now(), session_id, expected],
            )
            return cur.rowcount == 1

    def set_host_spec(self, session_id: str, spec: str) -> None:
        with self.pool.connection() as conn:
            conn.execute("update sessions set host_spec = %s where id = %s", [spec, session_id])

    def host_spec(self, session_id: str) -> str | None:
        row = self._one("select host_spec from sessions where id = %s", [session_id])
        return row["host_spec"] if row else None

    def get_session(self, session_id: str) -> SessionRow | None:
        row = self._one(f"select {_SESSION_COLS} from sessions where id = %s", [session_id])
        return SessionRow.model_validate(row) if row else None

    def list_sessions(self, host: str | None = None, limit: int = 50) -> list[SessionRow]:
        where, args = ("where host = %s", [host]) if host else ("", [])
        rows = self._all(
            f"select {_SESSION_COLS} from sessions {where} order by created desc limit %s",
            [*args, limit],
        )
        return [SessionRow.model_validate(r) for r in rows]

    def save_report(self, report: Report) -> None:
        ts = now()
        with self.pool.connection() as conn, conn.transaction():
            conn.execute(
                """update sessions set status = %(status)s, updated = %(updated)s,
                     root_cause = %(root_cause)s, report = %(report)s where id = %(id)s""",
                {**session_outcome(report, ts), "id": report.session_id},
            )
            for h in report.hypotheses:
                conn.execute(
                    """insert into hypotheses (session_id, label, status, score, statement,
                         evidence, against, "check") values (%(session_id)s, %(label)s,
                         %(status)s, %(score)s, %(statement)s, %(evidence)s, %(against)s,
                         %(check)s)
                       on conflict (session_id, label) do update set status = excluded.status,
                         score = excluded.score, statement = excluded.statement,
                         evidence = excluded.evidence, against = excluded.against,
                         "check" = excluded."check" """,
                    hypothesis_row(report.session_id, h),
                )
            if report.status == "concluded":
                conn.execute(
                    """insert into conclusions (session_id, host, root_cause, summary, evidence,
                         created) values (%(session_id)s, %(host)s, %(root_cause)s,
                         %(summary)s, %(evidence)s, %(created)s)
                       on conflict (session_id) do update set host = excluded.host,
                         root_cause = excluded.root_cause, summary = excluded.summary,
                         evidence = excluded.evidence, created = excluded.created""",
                    conclusion_row(report, ts),
                )

    def report(self, session_id: str) -> Report | None:
        row = self._one("select report from sessions where id = %s", [session_id])
        if not row or not row["report"]:
            return None
        return Report.model_validate_json(row["report"])

    def record_observation(self, session_id: str, obs: dict[str, Any]) -> None:
        with self.pool.connection() as conn:
            conn.execute(
                """insert into observations (session_id, id, tool, args, ok, lines, at)
                   values (%(session_id)s, %(id)s, %(tool)s, %(args)s, %(ok)s, %(lines)s, %(at)s)
                   on conflict (session_id, id) do update set tool = excluded.tool,
                     args = excluded.args, ok = excluded.ok, lines = excluded.lines,
                     at = excluded.at""",
                observation_row(session_id, obs),
            )

    def observations(self, session_id: str) -> list[dict[str, Any]]:
        rows = self._all(
            """select session_id, id, tool, args, ok, lines, at from observations
               where session_id = %s order by ord""",
            [session_id],
        )
        return [load_observation(r) for r in rows]

    # -- events ----------------------------------------------------------------------------------
    def append_event(self, event: Event) -> Event:
        """Next seq under a per-session advisory lock (two replicas may append to one session);
        the NOTIFY is delivered when the insert commits, never before."""
        with self.pool.connection() as conn, conn.transaction():
            conn.execute("select pg_advisory_xact_lock(hashtext(%s))", [event.session_id])
            row = conn.execute(
                "select coalesce(max(seq), 0) as seq from events where session_id = %s",
                [event.session_id],
            ).fetchone()
            ev = event.model_copy(update={"seq": int(row["seq"]) + 1 if row else 1})
            conn.execute(
                "insert into events (session_id, seq, type, data, at) values (%s, %s, %s, %s, %s)",
                [ev.session_id, ev.seq, ev.type, event_data(ev), ev.at],
            )
            conn.execute("select pg_notify(%s, %s)", [EVENTS_CHANNEL, f"{ev.session_id}:{ev.seq}"])
        return ev

    def events(self, session_id: str, after_seq: int = 0) -> list[Event]:
        rows = self._all(
            """select session_id, seq, type, data, at from events
               where session_id = %s and seq > %s order by seq""",
            [session_id, after_seq],
        )
        return [load_event(r) for r in rows]

    # -- todos and handoffs ----------------------------------------------------------------------
    def add_todo(self, host: str, text: str, session_id: str | None = None) -> TodoRow:
        row = self._one(
            """insert into todos (host, text, done, created, session_id)
               values (%s, %s, 0, %s, %s) returning *""",
            [host, text, now(), session_id],
        )
        return TodoRow.model_validate(row)

    def todos(self, host: str, open_only: bool = True) -> list[TodoRow]:
        where = "host = %s and done = 0" if open_only else "host = %s"
        rows = self._all(f"select * from todos where {where} order by id", [host])
        return [TodoRow.model_validate(r) for r in rows]

    def close_todo(self, todo_id: int) -> bool:
        with self.pool.connection() as conn:
            cur = conn.execute("update todos set done = 1 where id = %s and done = 0", [todo_id])
            return cur.rowcount > 0

    def add_handoff(self, host: str, text: str, session_id: str | None = None) -> HandoffRow:
        row = self._one(
            """insert into handoffs (host, text, created, session_id)
               values (%s, %s, %s, %s) returning *""",
            [host, text, now(), session_id],
        )
        return HandoffRow.model_validate(row)

    def handoffs(self, host: str, limit: int = 10) -> list[HandoffRow]:
        rows = self._all(
            "select * from handoffs where host = %s order by id desc limit %s", [host, limit]
        )
        return [HandoffRow.model_validate(r) for r in rows]

    # -- conclusions -----------------------------------------------------------------------------
    def search_conclusions(self, query: str, limit: int = 20) -> list[ConclusionRow]:
        """Any of the words, best match first: the same contract as the FTS5 search."""
        words = re.findall(r"\w[\w.]*", query)
        if not words:
            return []
        rows = self._all(
            """select session_id, host, root_cause, summary, evidence, created,
                 ts_rank(tsv, q) as rank
               from conclusions, websearch_to_tsquery('english', %s) as q
               where tsv @@ q order by rank desc, created desc limit %s""",
            [" or ".join(words), limit],
        )
        return [ConclusionRow.model_validate(r) for r in rows]

    # -- alerts ----------------------------------------------------------------------------------
    def record_alert(self, alert: AlertRow) -> None:
        row = alert_row(alert)
        cols = _ALERT_COLS.split(", ")
        sets = ", ".join(f"{c} = excluded.{c}" for c in cols if c != "session_id")
        with self.pool.connection() as conn:
            conn.execute(
                f"""insert into alerts ({_ALERT_COLS})
                    values ({", ".join(f"%({c})s" for c in cols)})
                    on conflict (session_id) do update set {sets}""",
                row,
            )

    def alert(self, session_id: str) -> AlertRow | None:
        row = self._one(f"select {_ALERT_COLS} from alerts where session_id = %s", [session_id])
        return load_alert(row) if row else None

    def last_alert(self, group_key: str, host: str) -> AlertRow | None:
        row = self._one(
            f"""select {_ALERT_COLS} from alerts where group_key = %s and host = %s
                order by received desc limit 1""",
            [group_key, host],
        )
        return load_alert(row) if row else None

    def close(self) -> None:
        self.pool.close()
