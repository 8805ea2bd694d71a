"""LangGraph checkpoints: a SQLite file in the home, or the team's PostgreSQL
(`langgraph-checkpoint-postgres`); `store.factory.open_checkpointer` picks one.

Why PostgreSQL and not a file per replica: a session paused for approval or cut short by a dead
replica must resume on any other replica, so its checkpoints live where every replica reads.
The saver's own `setup()` creates its tables; it runs under Pivot's migration advisory lock so
replicas starting together do not race on it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.sqlite import SqliteSaver

if TYPE_CHECKING:
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg_pool import ConnectionPool


def open_sqlite_saver(path: str | Path) -> tuple[SqliteSaver, sqlite3.Connection]:
    conn = sqlite3.connect(str(path), check_same_thread=False, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    return SqliteSaver(conn), conn


def open_postgres_saver(url: str, pool_size: int = 10) -> tuple[PostgresSaver, ConnectionPool[Any]]:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

    from store.pg import MIGRATION_LOCK, open_pool

    pool = open_pool(url, max_size=pool_size, name="pivot-checkpoints")
    saver = PostgresSaver(pool)  # type: ignore[arg-type]
    with psycopg.connect(url, autocommit=True) as conn:  # not from the pool: setup() needs one
        conn.execute("select pg_advisory_lock(%s)", [MIGRATION_LOCK])
        try:
            saver.setup()
        finally:
            conn.execute("select pg_advisory_unlock(%s)", [MIGRATION_LOCK])
    return saver, pool
