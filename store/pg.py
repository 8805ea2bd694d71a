"""PostgreSQL plumbing shared by the memory, the loop's ledger and `pivot db`: pools and migrations.

Why one module: every PostgreSQL store opens a psycopg 3 pool the same way and runs named,
append-only migrations the same way. Migrations of all stores share one `_migrations` table in
the team database, their names scoped (`memory/001_core`, `ledger/001_init`), and run under a
transaction-scoped advisory lock so two replicas starting at once never race on CREATE TABLE.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from psycopg import Connection
from psycopg.adapt import Dumper
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

#: Any constant; all Pivot migrations take this advisory lock for the length of their transaction.
MIGRATION_LOCK = 0x5049564F  # "PIVO"

Migration = tuple[str, Callable[[Connection[Any]], None]]


def is_postgres_url(url: str | None) -> bool:
    return bool(url) and str(url).startswith(("postgresql://", "postgres://"))


class NulSafeStr(Dumper):
    """PostgreSQL text cannot hold NUL (SQLite can): a NUL in a string is stored as U+FFFD
    instead of failing the request. JSON columns never see one (json.dumps escapes it)."""

    oid = 0  # "unknown", as psycopg's own str dumper: the server infers the column's type

    def dump(self, obj: str) -> bytes:
        return obj.replace("\x00", "\ufffd").encode()


def nul_safe(conn: Connection[Any]) -> None:
    conn.adapters.register_dumper(str, NulSafeStr)


def open_pool(url: str, max_size: int = 10, name: str = "pivot") -> ConnectionPool[Any]:
    """A pool of autocommit connections with dict rows; callers open `conn.transaction()` to
    group writes. `check` revives connections a restarted server closed under us."""
    pool: ConnectionPool[Any] = ConnectionPool(
        url,
        min_size=1,
        max_size=max_size,
        configure=nul_safe,
        kwargs={"autocommit": True, "row_factory": dict_row},
        check=ConnectionPool.check_connection,
        name=name,
        open=True,
    )
    pool.wait(timeout=30)
    return pool


def migrate(pool: ConnectionPool[Any], scope: str, migrations: Sequence[Migration]) -> list[str]:
    """Apply the scope's migrations not yet recorded; returns the names applied now."""
    applied: list[str] = []
    with pool.connection() as conn, conn.transaction():
        conn.execute("select pg_advisory_xact_lock(%s)", [MIGRATION_LOCK])
        conn.execute(
            "create table if not exists _migrations (name text primary key, applied text not null)"
        )
        done = {r["name"] for r in conn.execute("select name from _migrations").fetchall()}
        for name, fn in migrations:
            full = f"{scope}/{name}"
            if full in done:
                continue
            fn(conn)
            conn.execute(
                "insert into _migrations (name, applied) values (%s, %s)",
                [full, datetime.now(UTC).isoformat(timespec="milliseconds")],
            )
            applied.append(full)
    return applied
