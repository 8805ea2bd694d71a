"""`pivot` starts without the graph machinery: investigate overlaps its first reads with that
import (agent.observe.Prefetch), and every other command skips it. A top-level import of the
runner in any CLI module undoes both, so it is caught here, not by a stopwatch."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_cli_does_not_load_langgraph() -> None:
    code = "import sys, agent.cli; print(sorted(m for m in sys.modules if m.startswith(('langgraph', 'agent.runner'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_each_part_adds_exactly_the_commands_it_declares() -> None:
    """`pivot X` imports only the part that declares X, so a declaration that drifts from what
    the part registers would hide a command; each part is checked on an app of its own."""
    import importlib

    import typer

    from agent.cli import PARTS

    for module, declared in PARTS.items():
        app = typer.Typer()
        importlib.import_module(module).register(app)
        names = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
        assert names == set(declared), (module, names, declared)


def test_investigate_imports_neither_the_loop_nor_the_service() -> None:
    code = (
        "import sys, agent.cli as c; c.register(c._wanted(['investigate', '--host', 'h'])); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('loop', 'server', 'evals')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_help_and_unknown_words_show_every_command() -> None:
    for argv in (["--help"], [], ["nosuch"]):
        out = subprocess.run(
            [sys.executable, "-m", "agent.cli", *argv], capture_output=True, text=True
        )
        text = out.stdout + out.stderr
        if argv == ["nosuch"]:
            assert "No such command" in text, text
            continue
        for cmd in ("investigate", "loop", "serve", "eval", "sweep", "db", "chat", "tools"):
            assert cmd in text, (argv, cmd, text[-800:])


def test_a_part_with_one_command_is_still_called_by_its_name() -> None:
    """`pivot serve --help` registers only the service's part, a single command: the app must stay
    a group, or typer runs that command bare and rejects the word "serve"."""
    for cmd in ("serve", "chat", "sweep", "loop", "db"):
        out = subprocess.run(
            [sys.executable, "-m", "agent.cli", cmd, "--help"], capture_output=True, text=True
        )
        assert out.returncode == 0 and "Usage:" in out.stdout, (cmd, out.stdout, out.stderr)
        assert "unexpected extra argument" not in out.stdout + out.stderr


def test_the_memory_store_does_not_load_numpy() -> None:
    """sqlite-utils imports numpy (and pandas) for a type mapping Pivot never uses: ~0.1 s of
    the investigate path. store/sqlite_db.py imports it without them; numpy still imports after."""
    code = (
        "import sys, store.memory.sqlite, store.ledger.sqlite; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'pandas'))); "
        "import importlib.util; print(importlib.util.find_spec('numpy') is not None)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[0] == "[]", out.stdout
    assert out.stdout.split("\n")[1] == "True", out.stdout
