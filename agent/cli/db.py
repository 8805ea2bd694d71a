"""`pivot db migrate` and `pivot db copy`: bring a database to the current schema, and move a
home's SQLite files into the team's PostgreSQL (docs/scale.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

db_app = typer.Typer(help="The storage backend: migrations, and moving a home into PostgreSQL.")


def _report(backend: str, before: list[str], after: list[str]) -> str:
    """What this run did: the migrations it applied, or that there was nothing to apply."""
    new = [n for n in after if n not in set(before)]
    if not new:
        return f"{backend}: up to date ({len(after)} migrations: {', '.join(after)})"
    return f"{backend}: applied {len(new)} of {len(after)} migrations: {', '.join(new)}"


def _pg_names(url: str) -> list[str]:
    import psycopg

    from store.pg import open_pool

    pool = open_pool(url, max_size=1)
    try:
        with pool.connection() as conn:
            rows = conn.execute("select name from _migrations order by name").fetchall()
        return [r["name"] for r in rows]
    except psycopg.errors.UndefinedTable:
        return []
    finally:
        pool.close()


def _sqlite_names(path: Path) -> list[str]:
    import sqlite3

    if not path.exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [r[0] for r in db.execute("select name from _migrations order by name")]
    except sqlite3.OperationalError:  # no _migrations table yet
        return []
    finally:
        db.close()


@db_app.command("migrate")
def migrate_cmd(
    url: Annotated[
        str | None, typer.Option("--url", help="postgresql://… (default: PIVOT_DATABASE_URL)")
    ] = None,
) -> None:
    """Apply every named migration not yet applied (memory, ledger, checkpoints); idempotent:
    a second run says "up to date"."""
    from agent.settings import get_settings

    settings = get_settings()
    url = url or settings.database_url
    if url:
        from store.checkpoints import open_postgres_saver
        from store.dbcopy import _migrate_ledger
        from store.memory.postgres import PgMemory

        before = _pg_names(url)
        PgMemory(url, pool_size=1).close()
        _migrate_ledger(url)
        _, pool = open_postgres_saver(url, pool_size=1)
        pool.close()
        typer.echo(_report("postgresql", before, _pg_names(url)))
        return
    from store.memory.sqlite import Memory

    before = _sqlite_names(settings.memory_path)
    Memory(settings.memory_path).close()
    typer.echo(
        _report(f"sqlite {settings.memory_path}", before, _sqlite_names(settings.memory_path))
    )


@db_app.command("copy")
def copy_cmd(
    to: Annotated[str, typer.Option("--to", help="postgresql://… of the team database")],
    from_: Annotated[
        str, typer.Option("--from", help="only `sqlite` (this home's files)")
    ] = "sqlite",
    home: Annotated[
        Path | None, typer.Option(help="the home to copy (default: PIVOT_HOME)")
    ] = None,
    loop_state: Annotated[
        Path | None, typer.Option(help="the loop's state dir (default: HOME/loop)")
    ] = None,
) -> None:
    """Copy memory, checkpoints, ledgers and studies into PostgreSQL; verify row for row.

    Safe to run twice: rows already there are kept, nothing is duplicated. Exits 1 if any
    copied table does not hold every source row unchanged."""
    from agent.settings import get_settings
    from store.dbcopy import copy_home
    from store.pg import is_postgres_url

    if from_ != "sqlite" or not is_postgres_url(to):
        raise typer.BadParameter("copy goes --from sqlite --to postgresql://…")
    home = home or get_settings().home
    results = copy_home(home, loop_state or home / "loop", to)
    typer.echo(f"{'source':28} {'table':24} {'sqlite':>8} {'postgres':>9}  equal")
    for r in results:
        typer.echo(
            f"{r.source:28} {r.table:24} {r.sqlite_rows:>8} {r.postgres_rows:>9}  {'yes' if r.equal else 'NO'}"
        )
    if not all(r.equal for r in results):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")
