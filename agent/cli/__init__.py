"""`pivot`: one console command; each area plugs its subcommands in through `register(app)`.

This package holds the command and the investigation's own subcommands (`investigate`, `todo`,
`handoff`, `sessions` in `investigate.py`; `db` in `db.py`; `sweep` in `fleet.py`). The other
rooms' subcommands stay in their rooms (`evals/cli.py`, `loop/cli.py`, `watch/cli.py`,
`server/cli.py`, `tools/cli.py`) and are imported by name only when their command is run, so the
agent imports none of them at module level.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import sys
import threading

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
    "agent.cli.investigate": ("investigate", "todo", "handoff", "sessions"),
    "agent.cli.db": ("db",),
    "agent.chat": ("chat",),
    "agent.cli.fleet": ("sweep",),
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
    try:
        app()
    except SystemExit as exc:
        _exit_now(exc.code)
    _exit_now(0)


def _exit_now(code: object) -> None:
    """End the process the moment the command is done, without the interpreter's teardown.

    Measured on `pivot investigate` over SSH: freeing every module and object of the graph
    machinery (langgraph, pydantic models, a thousand compiled patterns) took 0.35-0.4 s after
    the verdict was printed, a sixth of the whole run, and the operator waits for the prompt.
    Everything the interpreter's exit guarantees is done first, in its order: thread pools are
    told to stop and threads that are not daemons are joined, exit handlers run (logging
    flushes, paramiko joins its transports), the standard streams are flushed; only the freeing
    is skipped.
    """
    if isinstance(code, str):
        sys.stderr.write(code + "\n")
        code = 1
    status = 0 if code is None else code if isinstance(code, int) else 1
    # what Py_FinalizeEx does first, by the same private calls: the thread pools' exit hooks,
    # then a join of every thread that is not a daemon; then the exit handlers
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: the reader is gone
            stream.flush()
    os._exit(status)
