"""Real `pivot serve` processes on one real PostgreSQL, for the replica tests and bench/replicas.py.

Each replica is its own OS process (so SIGKILL means what it says), bound to a free 127.0.0.1
port, sharing the home's token file and the team database. Their `local` host finds a slow
`nvidia-smi` first on PATH (the H200 replay behind a sleep), so a local investigation lasts
long enough to kill its replica in the middle of it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.sshd import FAKE_BIN

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slow_gpu_bin(where: Path, delay_s: float) -> Path:
    """A dir whose `nvidia-smi` sleeps, then replays the H200 capture."""
    where.mkdir(parents=True, exist_ok=True)
    script = where / "nvidia-smi"
    script.write_text(f'#!/bin/sh\nsleep {delay_s}\nexec "{FAKE_BIN}/nvidia-smi" "$@"\n')
    script.chmod(0o755)
    return where


@dataclass
class Replica:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    token: str
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, **kw: object) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
            **kw,  # type: ignore[arg-type]
        )

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs, its connections just drop."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_replica(
    name: str, home: Path, url: str | None, token: str, slow_bin: Path | None = None
) -> Replica:
    """`pivot serve` as a child process; returns once /api/health answers. With no `url` it runs
    on SQLite under `home`, as a lone service does."""
    port = _free_port()
    env = {
        **os.environ,
        "PIVOT_HOME": str(home),
        "PIVOT_DATABASE_URL": url,
        "PIVOT_LOOP_STATE": str(home / "loop"),
        "PIVOT_FAKE_GPU_STATE": "idle",
        "PYTHONPATH": str(ROOT),
        "PATH": os.pathsep.join(
            [str(p) for p in (slow_bin, FAKE_BIN) if p] + [os.environ.get("PATH", "")]
        ),
    }
    env.pop("PIVOT_LLM_BASE_URL", None)
    if url is None:
        env.pop("PIVOT_DATABASE_URL")
    log = home / f"replica-{name}.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "serve", "--port", str(port)],
        env=env,
        cwd=home,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    rep = Replica(name, port, proc, token, log)
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"replica {name} exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{rep.base_url}/api/health", timeout=1).status_code == 200:
                return rep
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            rep.stop()
            raise RuntimeError(f"replica {name} did not answer: {log.read_text()[-2000:]}")
        time.sleep(0.1)


def shared_home(home: Path) -> str:
    """A home whose token every replica accepts; returns the token."""
    from server.auth import reset_token

    home.mkdir(parents=True, exist_ok=True)
    return reset_token(home)
