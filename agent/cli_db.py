"""`pivot db migrate` and `pivot db copy`: bring a database to the current schema, and move a
home's SQLite files into the team's PostgreSQL (docs/scale.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

db_app = typer.Typer(help="The storage backend: migrations, and moving a home into PostgreSQL.")


@db_app.command("migrate")
def migrate_cmd(
    url: Annotated[
        str | None, typer.Option("--url", help="postgresql://… (default: PIVOT_DATABASE_URL)")
    ] = None,
) -> None:
    """Apply every named migration not yet applied (memory, ledger, checkpoints); idempotent."""
    from agent.settings import get_settings

    settings = get_settings()
    url = url or settings.database_url
    if url:
        from agent.checkpoints_pg import open_postgres_saver
        from agent.dbcopy import _migrate_ledger
        from agent.memory_pg import PgMemory
        from agent.pg import open_pool

        PgMemory(url, pool_size=1).close()
        _migrate_ledger(url)
        _, pool = open_postgres_saver(url, pool_size=1)
        pool.close()
        pool = open_pool(url, max_size=1)
        with pool.connection() as conn:
            names = [r["name"] for r in conn.execute("select name from _migrations order by name")]
        pool.close()
        typer.echo(f"postgresql: {len(names)} migrations applied: {', '.join(names)}")
        return
    from agent.memory import Memory

    mem = Memory(settings.memory_path)
    names = [r["name"] for r in mem.db["_migrations"].rows]
    mem.close()
    typer.echo(
        f"sqlite {settings.memory_path}: {len(names)} migrations applied: {', '.join(names)}"
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
    from agent.dbcopy import copy_home
    from agent.pg import is_postgres_url
    from agent.settings import get_settings

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
