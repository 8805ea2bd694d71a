"""The night's ledger in the team's PostgreSQL: the same rows and answers as store/ledger/sqlite.py.

Chosen by `open_ledger` when `PIVOT_DATABASE_URL` is set, so the morning report, the service
and workers on other machines read one ledger. Every phase change is still committed before
the phase starts (each statement commits on its own), which is what a restart after
`kill -9` relies on.
"""

from __future__ import annotations

import time
from typing import Any

from psycopg import Connection

from store.ledger.base import Event, ExperimentRow, NightRow, Phase
from store.ledger.codec import (
    baseline_file,
    dump_experiment,
    dump_night,
    experiment_fields,
    load_experiment,
    load_night,
    new_night,
    night_fields,
)
from store.pg import Migration, migrate, open_pool


def _m001_init(conn: Connection[Any]) -> None:
    conn.execute(
        """
        create table nights (
            id text primary key, plan_name text, plan_digest text, state_dir text,
            started double precision, ended double precision, status text,
            noise double precision, best text, final_pid integer, final_host text, note text);
        create table experiments (
            id text primary key, night_id text, seq integer, name text, kind text, host text,
            change text, diff text, expect text, status text, phase text,
            metric_mean double precision, metric_spread double precision, metric_values text,
            gain double precision, duration_s double precision, label text, evidence text,
            diagnosis text, log_path text, pid integer, attempts integer, trial_number integer,
            started double precision, ended double precision);
        create index experiments_night_seq on experiments (night_id, seq);
        create table baseline_files (
            night_id text not null, host text not null, path text not null, sha256 text,
            content bytea, primary key (night_id, host, path));
        """
    )


def _m002_left_in_place(conn: Connection[Any]) -> None:
    conn.execute("alter table nights add column left_in_place text")


def _m003_liveness_events(conn: Connection[Any]) -> None:
    # SQLite's `events`: memory's `events` (store/memory/postgres.py) already has the name here.
    # The key is the whole row, so a second `pivot db copy` of the same ledger adds nothing.
    conn.execute(
        """
        alter table nights add column heartbeat double precision;
        alter table nights add column loop_pid integer;
        alter table nights add column loop_host text;
        create table night_events (
            night_id text not null, at double precision not null, kind text not null,
            detail text not null, primary key (night_id, at, kind, detail));
        create index night_events_night_at on night_events (night_id, at);
        """
    )


def _m004_metrics_slo(conn: Connection[Any]) -> None:
    conn.execute(
        """
        alter table experiments add column metrics text;
        alter table experiments add column slo text;
        """
    )


def _m005_intervals(conn: Connection[Any]) -> None:
    conn.execute(
        """
        alter table experiments add column ci_low double precision;
        alter table experiments add column ci_high double precision;
        alter table experiments add column stats text;
        alter table experiments add column remeasured integer;
        """
    )


def _m006_run_launch(conn: Connection[Any]) -> None:
    conn.execute("alter table experiments add column run_launch text")


#: Named like their SQLite twins in store/ledger/sqlite.py.
MIGRATIONS: list[Migration] = [
    ("001_init", _m001_init),
    ("002_left_in_place", _m002_left_in_place),
    ("003_liveness_events", _m003_liveness_events),
    ("004_metrics_slo", _m004_metrics_slo),
    ("005_intervals", _m005_intervals),
    ("006_run_launch", _m006_run_launch),
]


def _set(fields: dict[str, Any]) -> tuple[str, list[Any]]:
    cols = ", ".join(f'"{k}" = %s' for k in fields)
    return cols, list(fields.values())


class PgLedger:
    def __init__(self, url: str) -> None:
        self.url = url
        self.pool = open_pool(url, max_size=4, name="pivot-ledger")
        migrate(self.pool, "ledger", MIGRATIONS)

    def _all(self, sql: str, args: list[Any]) -> list[dict[str, Any]]:
        with self.pool.connection() as conn:
            return conn.execute(sql, args).fetchall()

    def _exec(self, sql: str, args: list[Any] | dict[str, Any]) -> None:
        with self.pool.connection() as conn:
            conn.execute(sql, args)

    # nights
    def open_night(self, plan_name: str, digest: str, state_dir: str) -> tuple[NightRow, bool]:
        with self.pool.connection() as conn, conn.transaction():
            conn.execute("select pg_advisory_xact_lock(hashtext(%s))", [f"night:{plan_name}"])
            rows = conn.execute(
                """select * from nights where plan_name = %s and status = 'running'
                   order by started desc limit 1""",
                [plan_name],
            ).fetchall()
            if rows:
                return load_night(rows[0]), True
            night = new_night(plan_name, digest, state_dir)
            d = dump_night(night)
            conn.execute(
                f"insert into nights ({', '.join(d)}) values ({', '.join(['%s'] * len(d))})",
                list(d.values()),
            )
            return night, False

    def night(self, night_id: str | None = None) -> NightRow | None:
        if night_id:
            rows = self._all("select * from nights where id = %s", [night_id])
        else:
            rows = self._all("select * from nights order by started desc limit 1", [])
        return load_night(rows[0]) if rows else None

    def update_night(self, night_id: str, **fields: Any) -> None:
        cols, args = _set(night_fields(fields))
        self._exec(f"update nights set {cols} where id = %s", [*args, night_id])

    # night events
    def add_event(self, night_id: str, kind: str, detail: str) -> None:
        self._exec(
            """insert into night_events (night_id, at, kind, detail) values (%s, %s, %s, %s)
               on conflict do nothing""",
            [night_id, time.time(), kind, detail],
        )

    def events(self, night_id: str) -> list[Event]:
        rows = self._all("select * from night_events where night_id = %s order by at", [night_id])
        return [Event(**r) for r in rows]

    # baseline files
    def save_baseline_file(self, night_id: str, host: str, path: str, content: bytes) -> None:
        self._exec(
            """insert into baseline_files (night_id, host, path, sha256, content)
               values (%(night_id)s, %(host)s, %(path)s, %(sha256)s, %(content)s)
               on conflict (night_id, host, path)
               do update set sha256 = excluded.sha256, content = excluded.content""",
            baseline_file(night_id, host, path, content),
        )

    def baseline_files(self, night_id: str, host: str) -> dict[str, bytes]:
        rows = self._all(
            "select path, content from baseline_files where night_id = %s and host = %s",
            [night_id, host],
        )
        return {r["path"]: bytes(r["content"]) for r in rows}

    # experiments
    def add(self, row: ExperimentRow) -> ExperimentRow:
        d = dump_experiment(row)
        self._exec(
            f"""insert into experiments ({", ".join(d)}) values ({", ".join(["%s"] * len(d))})
                on conflict (id) do nothing""",
            list(d.values()),
        )
        return self.get(row.id) or row

    def get(self, exp_id: str) -> ExperimentRow | None:
        rows = self._all("select * from experiments where id = %s", [exp_id])
        return load_experiment(rows[0]) if rows else None

    def experiments(self, night_id: str) -> list[ExperimentRow]:
        rows = self._all("select * from experiments where night_id = %s order by seq", [night_id])
        return [load_experiment(r) for r in rows]

    def update(self, exp_id: str, **fields: Any) -> None:
        cols, args = _set(experiment_fields(fields))
        self._exec(f"update experiments set {cols} where id = %s", [*args, exp_id])

    def set_phase(self, exp_id: str, phase: Phase) -> None:
        self.update(exp_id, phase=phase)

    def next_seq(self, night_id: str) -> int:
        rows = self._all(
            "select coalesce(max(seq), -1) + 1 as n from experiments where night_id = %s",
            [night_id],
        )
        return int(rows[0]["n"])

    def close(self) -> None:
        self.pool.close()
