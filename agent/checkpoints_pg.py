"""LangGraph checkpoints in the team's PostgreSQL (`langgraph-checkpoint-postgres`).

Why PostgreSQL and not a file per replica: a session paused for approval or cut short by a dead
replica must resume on any other replica, so its checkpoints live where every replica reads.
The saver's own `setup()` creates its tables; it runs under Pivot's migration advisory lock so
replicas starting together do not race on it.
"""

from __future__ import annotations

from typing import Any

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg_pool import ConnectionPool

from agent.pg import MIGRATION_LOCK, open_pool


def open_postgres_saver(url: str, pool_size: int = 10) -> tuple[PostgresSaver, ConnectionPool[Any]]:
    pool = open_pool(url, max_size=pool_size, name="pivot-checkpoints")
    saver = PostgresSaver(pool)  # type: ignore[arg-type]
    with psycopg.connect(url, autocommit=True) as conn:  # not from the pool: setup() needs one
        conn.execute("select pg_advisory_lock(%s)", [MIGRATION_LOCK])
        try:
            saver.setup()
        finally:
            conn.execute("select pg_advisory_unlock(%s)", [MIGRATION_LOCK])
    return saver, pool
