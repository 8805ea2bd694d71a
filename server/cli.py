"""`pivot serve`: the service on embedded defaults (SQLite under ~/.pivot, rulebook brain unless
PIVOT_LLM_BASE_URL is set, hosts from ~/.ssh/config plus the shipped cards as replay hosts)."""

from __future__ import annotations

from typing import Annotated

import typer


def serve(
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to bind")] = 8765,
    new_token: Annotated[
        bool, typer.Option(help="replace the stored token and print the new one")
    ] = False,
) -> None:
    """Serve the API and the web page. The bearer token is printed once, on first start."""
    import uvicorn

    from server.app import create_app
    from server.auth import TokenVerifier, ensure_token, load_stored, reset_token
    from server.config import ServeConfig

    config = ServeConfig.from_settings()
    if new_token:
        fresh: str | None = reset_token(config.home)
        stored = load_stored(config.home)
        assert stored is not None
        verifier = TokenVerifier(stored)
    else:
        verifier, fresh = ensure_token(config.home)
    if fresh:
        typer.echo(f"API token (shown once; stored hashed in {config.home}): {fresh}")
    typer.echo(f"Pivot on http://{host}:{port}/  (memory: {config.home})")
    uvicorn.run(create_app(config, verifier=verifier), host=host, port=port, log_level="warning")


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
