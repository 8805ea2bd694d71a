"""A real uvicorn serving the real app (real Runner, real Memory) on a free 127.0.0.1 port.

The module-wide `live` server runs each module twice: on SQLite under its home, and on a real
PostgreSQL database (tests/postgres.py), so every API test covers both storage backends.

Cards come from the repo's evals/incidents/ (the shipped replay hosts), falling back to the
shared seed set while that folder fills up. Each module gets its own server and temp home.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from agent.settings import Settings
from server.app import create_app
from server.config import SHIPPED_CARDS, ServeConfig

TOKEN = "test-token-0123456789"
SEED_ID = "seed-sglang-fewchan-kv-oom"


def card_dir() -> Path:
    return SHIPPED_CARDS


SEED = f"replay:{SEED_ID}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Live:
    base_url: str
    token: str
    home: Path
    app: Any
    server: uvicorn.Server
    thread: threading.Thread

    def client(self, token: str | None = "default", **kw: Any) -> httpx.Client:
        tok = self.token if token == "default" else token
        headers = {"Authorization": f"Bearer {tok}"} if tok else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30, **kw)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


ENV = "env"


def start_live(home: Path, database_url: str | None = ENV, **overrides: Any) -> Live:
    """`database_url`: ENV reads PIVOT_DATABASE_URL as users do; None forces SQLite."""
    settings = (
        Settings(home=home)
        if database_url == ENV
        else Settings(home=home, database_url=database_url)
    )
    cfg = {
        "home": home,
        "card_dirs": [card_dir()],
        "allowed_roots": settings.allowed_roots,
        "loop_state": home / "loop",  # hermetic: never the user's real ledger
    }
    cfg.update(overrides)
    app = create_app(ServeConfig.model_validate(cfg), settings=settings, token=TOKEN)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    return Live(f"http://127.0.0.1:{port}", TOKEN, home, app, server, thread)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def live(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Live]:
    url = (
        request.getfixturevalue("postgres").new_database() if request.param == "postgres" else None
    )
    srv = start_live(tmp_path_factory.mktemp("pivot-home"), database_url=url)
    yield srv
    srv.stop()


@dataclass
class SSE:
    seq: int
    type: str
    data: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


def read_stream(
    client: httpx.Client,
    session_id: str,
    last_event_id: int | None = None,
    stop: Any = None,
    timeout: float = 60,
) -> list[SSE]:
    """Read a session's SSE as it streams (httpx stream + iter_lines over real TCP).

    Returns when the server ends the stream, or when `stop(events)` says enough.
    """
    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    out: list[SSE] = []
    cur: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    with client.stream(
        "GET", f"/api/sessions/{session_id}/events", headers=headers, timeout=timeout
    ) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if time.monotonic() > deadline:
                raise TimeoutError(f"stream of {session_id} still open after {timeout}s")
            if line == "":
                if "data" in cur:
                    ev = json.loads(cur["data"])
                    out.append(SSE(int(cur["id"]), cur["event"], ev))
                    assert ev["seq"] == int(cur["id"]) and ev["type"] == cur["event"]
                    if stop is not None and stop(out):
                        return out
                cur = {}
                continue
            if line.startswith(":"):
                continue
            k, _, v = line.partition(":")
            cur[k] = v[1:] if v.startswith(" ") else v
    return out


def wait_status(
    client: httpx.Client, session_id: str, statuses: tuple[str, ...], timeout: float = 60
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        d = client.get(f"/api/sessions/{session_id}").json()
        if d["status"] in statuses:
            return d
        if time.monotonic() > deadline:
            raise TimeoutError(f"{session_id} is {d['status']}, wanted {statuses}")
        time.sleep(0.05)
