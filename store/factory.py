"""The one place that chooses a backend: the team's PostgreSQL when a database URL is given,
else the embedded SQLite files. Callers pass the URL they were configured with (agent and loop
read `PIVOT_DATABASE_URL` through their settings); the store never reads settings itself.

The backends are imported inside each function, so opening SQLite never loads psycopg, and no
backend imports this module.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from store.leases import RunLeases
    from store.ledger.base import LedgerStore
    from store.memory.base import MemoryStore


def open_memory(database_url: str | None, memory_path: str | Path) -> MemoryStore:
    """The team's PostgreSQL when `database_url` is set, else the home's SQLite file."""
    if database_url:
        from store.memory.postgres import PgMemory

        return PgMemory(database_url)
    from store.memory.sqlite import Memory

    return Memory(memory_path)


def open_ledger(path: str | Path, database_url: str | None) -> LedgerStore:
    """The team's PostgreSQL ledger when `database_url` is set, else the SQLite file at `path`.
    Both answer the same methods (store/ledger/base.py `LedgerStore`)."""
    if database_url:
        from store.ledger.postgres import PgLedger

        return PgLedger(database_url)
    from store.ledger.sqlite import Ledger

    return Ledger(path)


def study_storage(state_dir: str | Path, database_url: str | None) -> str:
    """Optuna's RDB storage URL: the team's PostgreSQL (through psycopg 3) when set, so workers
    on several machines share one study; else a SQLite file beside the ledger."""
    if database_url:
        return "postgresql+psycopg://" + database_url.split("://", 1)[1]
    return f"sqlite:///{state_dir}/optuna.db"


def open_checkpointer(database_url: str | None, path: str | Path) -> tuple[Any, Callable[[], None]]:
    """LangGraph's saver and what closes it: PostgreSQL's when set (any replica resumes a
    session), else a SQLite file in the home."""
    if database_url:
        from store.checkpoints import open_postgres_saver

        saver, pool = open_postgres_saver(database_url)
        return saver, pool.close
    from store.checkpoints import open_sqlite_saver

    saver, conn = open_sqlite_saver(path)
    return saver, conn.close


def open_leases(database_url: str | None) -> RunLeases | None:
    """Run leases live in the team database; a single home's SQLite has one runner and none."""
    if not database_url:
        return None
    from store.leases import RunLeases

    return RunLeases(database_url)
