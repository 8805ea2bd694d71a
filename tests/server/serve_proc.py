"""`pivot serve` as a real process (so a test can SIGKILL it and start it again on the same home
and port), and a Chromium page that records every console error."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: Chromium logs a refused connection to the console itself; the page retries on purpose
#: while the test has killed the server. Only these, and only during that outage, are allowed.
REFUSED = "net::ERR_CONNECTION_REFUSED"


@dataclass
class Served:
    home: Path
    port: int
    proc: subprocess.Popen[str] | None = None
    lines: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self, *extra: str) -> list[str]:
        env = {**os.environ, "PIVOT_HOME": str(self.home), "PYTHONUNBUFFERED": "1"}
        env.pop("PIVOT_LLM_BASE_URL", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agent.cli", "serve", "--port", str(self.port), *extra],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        out: list[str] = []
        while not any("docs" in line for line in out):
            line = self.proc.stdout.readline()
            assert line, f"pivot serve exited: {out}"
            out.append(line.rstrip())
        self.lines += out
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(self.url + "api/health", timeout=2).status_code == 200:
                    return out
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "pivot serve did not answer"
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs, as when the machine or the process dies."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
            self.proc = None


def sign_in_link(lines: list[str]) -> str:
    return next(line for line in lines if "#token=" in line).split()[-1]


class Console:
    """Every console error and uncaught page error, with the time it happened."""

    def __init__(self, page: Any) -> None:
        self.errors: list[tuple[float, str]] = []
        page.on(
            "console",
            lambda m: m.type == "error" and self.errors.append((time.monotonic(), m.text)),
        )
        page.on("pageerror", lambda e: self.errors.append((time.monotonic(), f"pageerror: {e}")))

    def outside(self, windows: list[tuple[float, float]]) -> list[str]:
        """Errors other than refused connections inside the given outage windows."""
        return [
            text for t, text in self.errors
            if not (REFUSED in text and any(a <= t <= b for a, b in windows))
            and not (text.startswith("Failed to load resource") and any(a <= t <= b for a, b in windows))
        ]  # fmt: skip


def pick_host(page: Any, name: str) -> None:
    """Choose `name` in the page's host picker the way a user does: type, then tap the entry."""
    from playwright.sync_api import expect

    box = page.locator("#host")
    box.click()
    box.fill(name)
    page.locator(f'#host-list [role="option"][data-value="{name}"]').click()
    expect(box).to_have_value(name)
    expect(page.locator("#host-list")).to_be_hidden()
