"""The SQLite file both embedded stores open the same way: one shared connection, and one
process at a time migrating (memory, store/memory/sqlite.py; the loop's ledger,
store/ledger/sqlite.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

#: what sqlite-utils imports at start-up only to map these libraries' scalar types to column types
_OPTIONAL_TYPES = ("numpy", "pandas")


def _import_sqlite_utils() -> ModuleType:
    """sqlite-utils without its numpy and pandas type mappings.

    `sqlite_utils.db` imports numpy (and pandas) whenever they are installed, only to add
    `np.int64: "INTEGER"`-style entries to its column-type table; numpy alone is ~0.1 s of CPU
    on the `pivot investigate` path, before the answer. Pivot never stores a numpy or pandas
    value, so for the duration of this one import they read as not installed; a later
    `import numpy` (anyone's) works as usual, and one already imported is used as is."""
    blocked = [m for m in _OPTIONAL_TYPES if m not in sys.modules]
    for m in blocked:
        sys.modules[m] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        return importlib.import_module("sqlite_utils")
    finally:
        for m in blocked:
            if sys.modules.get(m, ...) is None:
                del sys.modules[m]


sqlite_utils = _import_sqlite_utils()


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
