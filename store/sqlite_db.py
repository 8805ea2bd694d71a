"""The SQLite file both embedded stores open the same way: one shared connection, and one
process at a time migrating (memory, store/memory/sqlite.py; the loop's ledger,
store/ledger/sqlite.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import sqlite_utils


def open_database(path: Path) -> sqlite_utils.Database:
    """One connection shared by the threads of a process, its upsert support settled up front.

    sqlite-utils decides whether SQLite has `ON CONFLICT` the first time an upsert runs, by
    creating and dropping a scratch table on the connection; on a connection another thread is
    reading through, that drop fails with "database table is locked" (seen with fifty sessions
    at once). Asking once here, before any thread uses the connection, keeps the probe out of
    the race."""
    conn = sqlite3.connect(str(path), check_same_thread=False, timeout=30.0)
    db = sqlite_utils.Database(conn)
    _ = db.supports_on_conflict
    return db


@contextlib.contextmanager
def migration_lock(path: Path) -> Iterator[None]:
    """One process at a time sets WAL and migrates: two processes creating the same tables at
    once (the service and the loop starting together) fail with "database is locked", because
    SQLite does not wait when a reader must upgrade to writer mid-transaction."""
    if str(path) == ":memory:":
        yield
        return
    with open(f"{path}.migrate.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
