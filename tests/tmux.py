"""A real terminal for CLI tests: a private tmux server, send-keys in, capture-pane out.

Missing tmux is a failure, never a skip: scripts/system-deps.sh installs it in CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

#: how long one wait for the screen may take before the test says what it saw instead
PATIENCE_S = 120.0


def flat(text: str) -> str:
    """`text` with every run of whitespace one space: a line the chat wrapped under its indent
    reads as the one line it was."""
    return " ".join(text.split())


class Terminal:
    def __init__(self, tmp: Path, env: dict[str, str], width: int = 220) -> None:
        exe = shutil.which("tmux")
        if exe is None:
            pytest.fail("tmux is not installed: run scripts/system-deps.sh (Debian package tmux)")
        self.exe, self.env = exe, env
        self.socket = f"pivot-test-{uuid.uuid4().hex[:8]}"
        self.conf = tmp / "tmux.conf"
        self.conf.write_text("set -g history-limit 100000\nset -g remain-on-exit on\n")
        self.width = width
        self.windows = 0

    def tmux(self, *args: str) -> str:
        p = subprocess.run(
            [self.exe, "-L", self.socket, "-f", str(self.conf), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert p.returncode == 0, f"tmux {args[0]}: {p.stderr}"
        return p.stdout

    def start(self, command: str) -> str:
        """Run `command` in a new window; returns its target."""
        name = f"w{self.windows}"
        self.windows += 1
        if self.windows == 1:
            self.tmux(
                "new-session",
                "-d",
                "-s",
                "t",
                "-n",
                name,
                "-x",
                str(self.width),
                "-y",
                "50",
                command,
            )
        else:
            self.tmux("new-window", "-t", "t", "-n", name, command)
        return f"t:{name}"

    def type(self, target: str, text: str) -> None:
        self.tmux("send-keys", "-t", target, "-l", text)
        self.tmux("send-keys", "-t", target, "Enter")

    def screen(self, target: str, escapes: bool = False) -> str:
        """Everything the window printed (scrollback included), wrapped lines joined;
        `escapes`: with its colour sequences, and lines as the terminal shows them."""
        if escapes:
            return self.tmux("capture-pane", "-p", "-e", "-t", target, "-S", "-")
        return self.tmux("capture-pane", "-p", "-J", "-t", target, "-S", "-")

    def wait_for(self, target: str, text: str, after: int = 0) -> str:
        """The screen once `text` shows up past character `after` (a line the chat wrapped counts
        as one); fails with the screen if not."""
        deadline = time.monotonic() + PATIENCE_S
        while True:
            screen = self.screen(target)
            if flat(text) in flat(screen[after:]):
                return screen
            if time.monotonic() > deadline:
                pytest.fail(f"{text!r} never showed; the terminal shows:\n{screen[-4000:]}")
            time.sleep(0.2)

    def close(self) -> None:
        """Stop this test's tmux server (only ours: its own socket) and remove the socket file."""
        subprocess.run(
            [self.exe, "-L", self.socket, "kill-server"],
            env=self.env,
            capture_output=True,
            timeout=30,
        )
        tmpdir = Path(self.env.get("TMUX_TMPDIR") or "/tmp")
        (tmpdir / f"tmux-{os.getuid()}" / self.socket).unlink(missing_ok=True)
