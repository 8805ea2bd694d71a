"""Move a home's SQLite files into a team PostgreSQL without losing a row, and prove it.

Why not pgloader or a dump: the two schemas are ours and named alike, so a copy is "same table,
shared columns"; what matters is the proof afterwards. Each table is copied with
`insert … on conflict do nothing` (a second copy adds nothing and loses nothing), serial
counters are moved past the copied ids, and then every copied table is read back from both
sides and compared row for row. Checkpoints go through LangGraph's own saver API (the two
savers store them in different tables), compared by (thread, checkpoint id).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from store.pg import migrate, open_pool

#: Memory's tables in store/memory/sqlite.py and store/memory/postgres.py (FTS shadow tables are
#: derived).
MEMORY_TABLES = [
    "sessions", "events", "todos", "handoffs", "conclusions", "observations", "hypotheses",
    "alerts",
]  # fmt: skip
#: The loop's ledger (store/ledger/sqlite.py). A pair is (SQLite table, PostgreSQL table): the
#: ledger's night events share the team database with memory's `events`, so there they are
#: `night_events` (store/ledger/postgres.py).
LEDGER_TABLES: list[str | tuple[str, str]] = [
    "nights", "experiments", "baseline_files", ("events", "night_events"),
]  # fmt: skip
BATCH = 2000


class TableCopy(BaseModel):
    source: str
    table: str
    sqlite_rows: int
    postgres_rows: int
    copied: int
    equal: bool


def _pg_columns(conn: Any, table: str) -> list[str]:
    rows = conn.execute(
        """select column_name from information_schema.columns
           where table_schema = 'public' and table_name = %s and is_generated = 'NEVER'
           order by ordinal_position""",
        [table],
    ).fetchall()
    return [r["column_name"] for r in rows]


def _norm(v: Any) -> Any:
    if isinstance(v, memoryview):
        return bytes(v)
    if isinstance(v, bool | int):  # SQLite may hand back 1 where PostgreSQL says 1.0
        return float(v)
    return v


def copy_table(
    src: sqlite3.Connection, pool: Any, table: str, source: str, dst: str | None = None
) -> TableCopy:
    """Copy one table's shared columns (into `dst`, else the table of the same name), then
    compare both sides as multisets of rows."""
    src_table, table = table, dst or table
    src_cols = [r[1] for r in src.execute(f'pragma table_info("{src_table}")')]
    with pool.connection() as conn:
        cols = [c for c in _pg_columns(conn, table) if c in src_cols]
        col_sql = ", ".join(f'"{c}"' for c in cols)
        copied = 0
        cur = src.execute(f'select {col_sql} from "{src_table}" order by rowid')
        with conn.transaction():
            # COPY into a scratch table, then one INSERT … ON CONFLICT DO NOTHING: COPY's speed,
            # and a second run still adds nothing.
            conn.execute(
                f'create temp table _copy on commit drop as select {col_sql} from "{table}" '
                "with no data"
            )
            with conn.cursor() as pc, pc.copy(f"copy _copy ({col_sql}) from stdin") as cp:
                while batch := cur.fetchmany(BATCH):
                    for row in batch:
                        cp.write_row(row)
                    copied += len(batch)
            conn.execute(
                f'insert into "{table}" ({col_sql}) select {col_sql} from _copy '
                f"order by ctid on conflict do nothing"
            )
            serial = (
                "id" in cols
                and conn.execute(
                    "select pg_get_serial_sequence(%s, 'id') as seq", [f'"{table}"']
                ).fetchone()
            )
            if serial and serial["seq"]:
                conn.execute(
                    f'select setval(%s, greatest((select max(id) from "{table}"), 1))',
                    [serial["seq"]],
                )
        with conn.transaction(), conn.cursor(name="pivot_verify") as sc:
            sc.itersize = BATCH
            sc.execute(f'select {col_sql} from "{table}"')
            theirs = _digests(tuple(r.values()) for r in sc)
    ours = _digests(src.execute(f'select {col_sql} from "{src_table}"'))
    # The team database may already hold other homes' rows: ours must all be there, unchanged.
    equal = all(theirs.get(d, 0) >= n for d, n in ours.items())
    return TableCopy(
        source=source,
        table=table,
        sqlite_rows=sum(ours.values()),
        postgres_rows=sum(theirs.values()),
        copied=copied,
        equal=equal,
    )


def _digests(rows: Iterable[tuple[Any, ...]]) -> Counter[bytes]:
    """A multiset of row digests: compares tables of any size in little memory."""
    out: Counter[bytes] = Counter()
    for row in rows:
        out[
            hashlib.blake2b(repr(tuple(_norm(v) for v in row)).encode(), digest_size=16).digest()
        ] += 1
    return out


def copy_sqlite_file(
    path: Path, url: str, tables: Sequence[str | tuple[str, str]], source: str
) -> list[TableCopy]:
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    pool = open_pool(url, max_size=2, name="pivot-copy")
    try:
        have = {r[0] for r in src.execute("select name from sqlite_master where type = 'table'")}
        pairs = [(t, t) if isinstance(t, str) else t for t in tables]
        return [copy_table(src, pool, s, source, d) for s, d in pairs if s in have]
    finally:
        pool.close()
        src.close()


def copy_checkpoints(path: Path, url: str) -> TableCopy:
    """Every checkpoint and pending write of every thread, through the savers' own API."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    from store.checkpoints import open_postgres_saver

    src = sqlite3.connect(str(path), check_same_thread=False)
    saver_in = SqliteSaver(src)
    saver_out, pool = open_postgres_saver(url, pool_size=2)
    try:
        copied = 0
        ours: set[tuple[str, str, str]] = set()
        for tup in saver_in.list(None):
            conf = tup.config["configurable"]
            parent = tup.parent_config or {
                "configurable": {
                    "thread_id": conf["thread_id"],
                    "checkpoint_ns": conf.get("checkpoint_ns", ""),
                }
            }
            saver_out.put(parent, tup.checkpoint, tup.metadata, tup.checkpoint["channel_versions"])
            by_task: dict[str, list[tuple[str, Any]]] = {}
            for task_id, channel, value in tup.pending_writes or []:
                by_task.setdefault(task_id, []).append((channel, value))
            for task_id, writes in by_task.items():
                saver_out.put_writes(tup.config, writes, task_id)
            ours.add((conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"]))
            copied += 1
        theirs = {
            (
                t.config["configurable"]["thread_id"],
                t.config["configurable"].get("checkpoint_ns", ""),
                t.config["configurable"]["checkpoint_id"],
            )
            for t in saver_out.list(None)
        }
        return TableCopy(
            source=path.name,
            table="checkpoints",
            sqlite_rows=len(ours),
            postgres_rows=len(theirs),
            copied=copied,
            equal=ours <= theirs,
        )
    finally:
        pool.close()
        src.close()


def copy_studies(path: Path, url: str) -> list[TableCopy]:
    """Optuna studies, by Optuna's own `copy_study`; compared by trial count and values."""
    import optuna

    from_storage = f"sqlite:///{path}"
    to_storage = "postgresql+psycopg://" + url.split("://", 1)[1]
    out = []
    existing = {s.study_name for s in optuna.get_all_study_summaries(to_storage)}
    for summary in optuna.get_all_study_summaries(from_storage):
        name = summary.study_name
        if name not in existing:
            optuna.copy_study(
                from_study_name=name, from_storage=from_storage, to_storage=to_storage
            )
        a = optuna.load_study(study_name=name, storage=from_storage).trials
        b = optuna.load_study(study_name=name, storage=to_storage).trials
        same = [(t.params, t.values, t.state) for t in a] == [
            (t.params, t.values, t.state) for t in b
        ]
        out.append(
            TableCopy(
                source=str(path.parent.name) + "/optuna.db",
                table=f"study:{name}",
                sqlite_rows=len(a),
                postgres_rows=len(b),
                copied=len(a) if name not in existing else 0,
                equal=same,
            )
        )
    return out


def copy_home(home: Path, loop_state: Path, url: str) -> list[TableCopy]:
    """Memory, checkpoints, and every night's ledger and study under the loop's state dir."""
    from store.memory.postgres import PgMemory

    PgMemory(url, pool_size=1).close()  # the schema exists before rows arrive
    _migrate_ledger(url)
    out: list[TableCopy] = []
    if (home / "memory.db").exists():
        out += copy_sqlite_file(home / "memory.db", url, MEMORY_TABLES, "memory.db")
    if (home / "checkpoints.db").exists():
        out.append(copy_checkpoints(home / "checkpoints.db", url))
    for ledger in sorted(loop_state.glob("*/ledger.db")):
        out += copy_sqlite_file(ledger, url, LEDGER_TABLES, f"{ledger.parent.name}/ledger.db")
    for study in sorted(loop_state.glob("*/optuna.db")):
        out += copy_studies(study, url)
    return out


def _migrate_ledger(url: str) -> list[str]:
    from store.ledger.postgres import MIGRATIONS

    pool = open_pool(url, max_size=1, name="pivot-migrate")
    try:
        return migrate(pool, "ledger", MIGRATIONS)
    finally:
        pool.close()
