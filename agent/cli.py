"""`pivot`: one console command; each area plugs its subcommands in through `register(app)`."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="pivot",
    help="Hypothesis-driven debugging agent for GPU LLM inference servers.",
    no_args_is_help=True,
    add_completion=False,
)

#: Modules that add subcommands. Each exposes `register(app: typer.Typer) -> None`.
_PARTS = [
    "tools.cli",  # pivot tools NAME
    "agent.cli_investigate",  # pivot investigate, todo, handoff, sessions
    "agent.cli_db",  # pivot db migrate|copy
    "agent.chat",  # pivot chat
    "agent.cli_fleet",  # pivot sweep --hosts
    "evals.cli",  # pivot eval, pivot capture
    "loop.cli",  # pivot loop run|status|report|demo
    "server.cli",  # pivot serve (the service is the outermost shell; only its CLI is imported)
]

for _name in _PARTS:
    try:
        importlib.import_module(_name).register(app)
    except ModuleNotFoundError as exc:
        if exc.name is None or not _name.startswith(exc.name):
            raise


def main() -> None:
    app()


if __name__ == "__main__":
    main()
