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


@app.callback()
def _group() -> None:
    """Hypothesis-driven debugging agent for GPU LLM inference servers."""
    # A callback keeps `pivot` a group even when only one part is registered (`pivot chat`
    # registers one command; typer would otherwise run it bare and reject the word "chat").


#: Modules that add subcommands, and the commands each adds. Each exposes
#: `register(app: typer.Typer) -> None`. The names are declared here so `pivot investigate` imports
#: only its own part: the others pull in sqlite-utils' plugins, numpy, the loop and the service,
#: which cost a third of a second before the first read of an urgent investigation.
#: tests/agent/test_cli_imports.py checks that each part adds exactly these names.
PARTS: dict[str, tuple[str, ...]] = {
    "tools.cli": ("tools",),
    "agent.cli_investigate": ("investigate", "todo", "handoff", "sessions"),
    "agent.cli_db": ("db",),
    "agent.chat": ("chat",),
    "agent.cli_fleet": ("sweep",),
    "evals.cli": ("eval", "capture"),
    "loop.cli": ("loop",),
    "watch.cli": ("watch", "launch"),
    "server.cli": ("serve",),  # the service is the outermost shell; only its CLI is imported
}


_registered: set[str] = set()


def register(names: list[str] | None = None) -> None:
    """Plug in the parts that provide `names` (all parts when None: help, completion, typos)."""
    for module, commands in PARTS.items():
        if module in _registered or (names is not None and not set(commands) & set(names)):
            continue
        _registered.add(module)
        try:
            importlib.import_module(module).register(app)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module.startswith(exc.name):
                raise


def _wanted(argv: list[str]) -> list[str] | None:
    """The command named on the line, when it is one we know; None means every part."""
    first = next((a for a in argv if not a.startswith("-")), None)
    known = {c for commands in PARTS.values() for c in commands}
    return [first] if first in known and "--help" not in argv[:1] else None


def full_app() -> typer.Typer:
    """The app with every command (tests, docs): what `pivot --help` shows."""
    register()
    return app


def main() -> None:
    register(_wanted(sys.argv[1:]))
    app()


if __name__ == "__main__":
    main()
