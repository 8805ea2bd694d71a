"""Bearer-token auth: refused without/with a wrong token, accepted with the right one; the token
is stored only hashed; `pivot serve` prints it once, on first start."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx

from server.auth import TOKEN_FILE, TokenVerifier, ensure_token, load_stored
from tests.server.conftest import Live, free_port

ROUTES = [
    ("GET", "/api/sessions"),
    ("GET", "/api/approvals"),
    ("GET", "/api/hosts"),
    ("GET", "/api/hosts/local/todos"),
    ("GET", "/api/conclusions?q=memory"),
    ("GET", "/api/loop/ledger"),
    ("GET", "/api/sessions/abc/events"),
    ("POST", "/api/sessions"),
    ("POST", "/api/approvals/x"),
    ("GET", "/api/no-such-route"),
]


def test_health_needs_no_token(live: Live) -> None:
    with live.client(token=None) as c:
        r = c.get("/api/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_token_refused_and_accepted(live: Live) -> None:
    with live.client(token=None) as anon, live.client(token="wrong") as bad, live.client() as ok:
        for method, path in ROUTES:
            r = anon.request(method, path, json={})
            assert r.status_code == 401, (method, path, r.status_code)
            assert r.headers["www-authenticate"] == "Bearer"
            assert bad.request(method, path, json={}).status_code == 401, (method, path)
        r = anon.post(
            "/api/sessions", content=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 401  # refused before the body is even parsed
        assert ok.get("/api/sessions").status_code == 200
        assert ok.get("/api/approvals").status_code == 200
        r = anon.get("/api/sessions", headers={"Authorization": f"Basic {live.token}"})
        assert r.status_code == 401


def test_page_is_served_without_token(live: Live) -> None:
    with live.client(token=None) as c:
        r = c.get("/")
        assert r.status_code == 200 and "<title>Pivot</title>" in r.text
        assert c.get("/app.js").status_code == 200


def test_token_stored_hashed(tmp_path: Path) -> None:
    verifier, token = ensure_token(tmp_path)
    assert token and len(token) >= 40
    path = tmp_path / TOKEN_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert token not in path.read_text()
    again, none = ensure_token(tmp_path)
    assert none is None  # printed once: the second start has nothing to show
    assert verifier(token) and again(token)
    assert not again(token[:-1] + ("x" if token[-1] != "x" else "y"))
    assert not again(None) and not again("")
    stored = load_stored(tmp_path)
    assert stored is not None and TokenVerifier(stored)(token)


def _serve(home: Path, port: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PIVOT_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )


def _first_lines(proc: subprocess.Popen[str], base: str) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/api/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.1)
    proc.terminate()
    out, _ = proc.communicate(timeout=10)
    return out


def test_pivot_serve_prints_token_once(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _serve(tmp_path, port)
    try:
        deadline = time.monotonic() + 30
        token = None
        assert proc.stdout is not None
        while token is None and time.monotonic() < deadline:
            m = re.search(r"API token .*: (\S+)", proc.stdout.readline())
            token = m.group(1) if m else None
        assert token
        while True:
            try:
                r = httpx.get(f"{base}/api/hosts", headers={"Authorization": f"Bearer {token}"})
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert r.status_code == 200
        names = [h["name"] for h in r.json()]
        assert any(n.startswith("replay:") for n in names)  # the shipped cards
        assert httpx.get(f"{base}/api/hosts").status_code == 401
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    second = _first_lines(_serve(tmp_path, port), base)
    assert "API token" not in second and token not in second
