"""`pivot`: one console command; each area plugs its subcommands in through `register(app)`."""

from __future__ import annotations

import importlib
import sys

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
    "evals.cli",  # pivot eval, pivot capture
    "agent.loop.cli",  # pivot loop run|status|report|demo
    "server.cli",  # pivot serve (the service is the outermost shell; only its CLI is imported)
]

#: Which module a first word belongs to: `pivot investigate` imports only what it runs (the
#: loop's and the tools' CLIs cost ~0.4 s of start-up on their own). Anything else loads them all.
_OWNER = {
    "tools": "tools.cli",
    "investigate": "agent.cli_investigate",
    "todo": "agent.cli_investigate",
    "handoff": "agent.cli_investigate",
    "sessions": "agent.cli_investigate",
    "eval": "evals.cli",
    "capture": "evals.cli",
    "loop": "agent.loop.cli",
    "serve": "server.cli",
}


def _register(names: list[str]) -> None:
    for name in names:
        try:
            importlib.import_module(name).register(app)
        except ModuleNotFoundError as exc:
            if exc.name is None or not name.startswith(exc.name):
                raise


_first = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
_register([_OWNER[_first]] if _first in _OWNER else _PARTS)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
