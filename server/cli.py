"""`pivot serve`: the service on embedded defaults (SQLite under ~/.pivot, rulebook brain unless
PIVOT_LLM_BASE_URL is set, hosts from ~/.ssh/config plus the shipped cards as replay hosts)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

#: seconds an idle keep-alive connection stays open (above common LB idle timeouts)
KEEP_ALIVE_S = 75


def sign_in_lines(url: str, fresh: str | None, home: Path) -> list[str]:
    """What the terminal says so a person can open the page and get in."""
    if fresh:
        return [
            f"API token (shown once; stored hashed in {home}): {fresh}",
            f"Sign in: open {url}#token={fresh}",
            "  (the page keeps the token and drops it from the address bar)",
        ]
    return [
        f"Open {url} and paste the token printed when this home was first served.",
        "  Lost it? `pivot serve --new-token` prints a fresh sign-in link (the old token stops).",
    ]


def storage_line(database_url: str | None, memory_path: Path) -> str:
    """Where this service keeps sessions: the backend actually in use, never a password."""
    if not database_url:
        return f"memory: SQLite at {memory_path}"
    from urllib.parse import urlsplit

    u = urlsplit(database_url)
    where = f"{u.hostname or 'localhost'}{f':{u.port}' if u.port else ''}{u.path or ''}"
    user = f"{u.username}@" if u.username else ""
    return f"memory: PostgreSQL at {user}{where} (PIVOT_DATABASE_URL)"


def serve(
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to bind")] = 8765,
    new_token: Annotated[
        bool, typer.Option(help="replace the stored token and print the new one")
    ] = False,
    cards: Annotated[
        list[Path] | None,
        typer.Option("--cards", help="a directory of your own incident cards (repeatable)"),
    ] = None,
    read_root: Annotated[
        list[str] | None,
        typer.Option(
            "--read-root", help="a log/config directory or glob the file API may read (repeatable)"
        ),
    ] = None,
) -> None:
    """Serve the API and the web page; prints the URL and how to sign in."""
    import uvicorn

    from agent.settings import get_settings
    from server.app import create_app
    from server.auth import TokenVerifier, ensure_token, load_stored, reset_token
    from server.config import SHIPPED_CARDS, ServeConfig
    from server.file_policy import shipped

    overrides: dict[str, object] = {}
    if cards:
        overrides["card_dirs"] = [SHIPPED_CARDS, *(c.expanduser().resolve() for c in cards)]
    config = ServeConfig.from_settings(**overrides)
    if read_root:
        base = config.read_roots.get("*") or list(shipped().read_roots)
        config.read_roots = {**config.read_roots, "*": [*base, *read_root]}
    if new_token:
        fresh: str | None = reset_token(config.home)
        stored = load_stored(config.home)
        assert stored is not None
        verifier = TokenVerifier(stored)
    else:
        verifier, fresh = ensure_token(config.home)
    url = f"http://{host}:{port}/"
    settings = get_settings()
    typer.echo(f"Pivot on {url}  ({storage_line(settings.database_url, settings.memory_path)})")
    for line in sign_in_lines(url, fresh, config.home):
        typer.echo(line)
    typer.echo(f"API docs (offline): {url}docs")
    # keep idle connections longer than a load balancer's idle timeout (60 s is common) and a
    # polling client's gap: uvicorn's 5 s default closes them under a request that is on its way,
    # which the client sees as "connection reset by peer"
    uvicorn.run(
        create_app(config, verifier=verifier),
        host=host,
        port=port,
        log_level="warning",
        timeout_keep_alive=KEEP_ALIVE_S,
    )


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
