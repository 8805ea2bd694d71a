"""The shell around the page: a brain that cannot start fails the session by name, /docs works
offline, security headers on every response, a favicon, deep links, and `pivot serve` says how
to sign in."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import SEED, Live, free_port


def test_brain_that_cannot_start_fails_the_session(live: Live) -> None:
    with live.client() as c:
        r = c.post("/api/sessions", json={"host": SEED, "symptom": "x", "brain": "llm"})
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert detail["status"] == "error" and "PIVOT_LLM_BASE_URL" in detail["error"]
        sid = detail["session_id"]
        d = c.get(f"/api/sessions/{sid}").json()
        assert d["status"] == "error"
        assert [e["type"] for e in d["events"]] == ["error"]
        assert "PIVOT_LLM_BASE_URL" in d["events"][0]["data"]["error"]
        listed = {s["session_id"]: s["status"] for s in c.get("/api/sessions").json()}
        assert listed[sid] == "error"
        with c.stream("GET", f"/api/sessions/{sid}/events", timeout=10) as resp:
            body = resp.read().decode()  # the stream ends: nothing more will come
        assert "event: error" in body


def test_security_headers_everywhere(live: Live) -> None:
    with httpx.Client(base_url=live.base_url) as anon, live.client() as c:
        for resp in (anon.get("/"), anon.get("/api/health"), anon.get("/api/sessions"),
                     c.get("/api/sessions"), anon.get("/s/abc123"), anon.get("/docs")):  # fmt: skip
            h = resp.headers
            assert h["x-frame-options"] == "DENY", resp.url
            assert h["x-content-type-options"] == "nosniff"
            csp = h["content-security-policy"]
            assert "frame-ancestors 'none'" in csp and "script-src 'self';" in csp
        assert "unsafe-inline" not in anon.get("/").headers["content-security-policy"]


def test_docs_favicon_and_deep_link_served_locally(live: Live) -> None:
    with httpx.Client(base_url=live.base_url) as anon:
        docs = anon.get("/docs")
        assert docs.status_code == 200 and "/_docs/swagger-ui-bundle.js" in docs.text
        assert "cdn" not in docs.text.lower()
        js = anon.get("/_docs/swagger-ui-bundle.js")
        assert js.status_code == 200 and len(js.content) > 500_000
        assert anon.get("/_docs/swagger-ui.css").status_code == 200
        fav = anon.get("/favicon.ico")
        assert fav.status_code == 200 and fav.headers["content-type"].startswith("image/svg+xml")
        page = anon.get("/s/abc123")
        assert page.status_code == 200 and '<script src="/app.js"' in page.text
        assert anon.get("/s/..%2Fetc").status_code in (404, 422)


def _serve(home: Path, port: int, *extra: str) -> tuple[subprocess.Popen[str], list[str]]:
    env = {**os.environ, "PIVOT_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "serve", "--port", str(port), *extra],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    while not any("docs" in line for line in lines):
        line = proc.stdout.readline()
        assert line, f"serve exited: {lines}"
        lines.append(line.rstrip())
    return proc, lines


def _wait_up(url: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "api/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "serve did not come up"
        time.sleep(0.1)


def test_serve_prints_the_url_and_a_sign_in_link(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    proc, lines = _serve(tmp_path / "home", port)
    try:
        from server.cli import storage_line

        db = os.environ.get("PIVOT_DATABASE_URL")  # the suite may run on PostgreSQL
        assert f"({storage_line(db, tmp_path / 'home' / 'memory.db')})" in lines[0], lines
        link = next(line for line in lines if "#token=" in line).split()[-1]
        assert link.startswith(url + "#token=")
        _wait_up(url)
        token = link.split("#token=")[1]
        r = httpx.get(url + "api/sessions", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    mine = tmp_path / "my-cards"
    mine.mkdir()
    logs = tmp_path / "mylogs"
    logs.mkdir()
    (logs / "engine.txt").write_text("engine said hello\n")
    # second start: no token to show, say how; the user's own cards and log directory
    proc, lines = _serve(tmp_path / "home", port, "--cards", str(mine), "--read-root", str(logs))
    try:
        assert any(f"Open {url} and paste the token printed" in line for line in lines), lines
        assert not any("#token=" in line for line in lines)
        _wait_up(url)
        auth = {"Authorization": f"Bearer {token}"}
        dirs = httpx.get(url + "api/evals/dirs", headers=auth).json()
        assert [d["name"] for d in dirs] == ["incidents", "my-cards"]
        r = httpx.get(
            url + "api/hosts/local/file", params={"path": str(logs / "engine.txt")}, headers=auth
        )
        assert r.status_code == 200 and "engine said hello" in r.json()["text"]
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.parametrize(
    "url,line",
    [(None, "memory: SQLite at /h/memory.db"),
     ("postgresql://pivot:s3cret@db.internal:5433/pivot", "memory: PostgreSQL at pivot@db.internal:5433/pivot (PIVOT_DATABASE_URL)"),
     ("postgresql:///pivot?host=/run/postgresql", "memory: PostgreSQL at localhost/pivot (PIVOT_DATABASE_URL)")],
)  # fmt: skip
def test_the_banner_names_the_storage_in_use(url: str | None, line: str) -> None:
    from server.cli import storage_line

    assert storage_line(url, Path("/h/memory.db")) == line
    assert "s3cret" not in line


def test_a_run_lost_to_a_killed_service_ends_failed_by_name(tmp_path: Path) -> None:
    """SIGKILL the service mid-run: the next start ends that run as failed with the reason,
    instead of leaving it "running" forever; a CLI run of the same home is not touched."""
    from tests.server.serve_proc import Served, sign_in_link

    served = Served(tmp_path / "home", free_port())
    token = sign_in_link(served.start()).split("#token=")[1]
    auth = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.Client(base_url=served.url, headers=auth, timeout=30) as c:
            sid = c.post("/api/sessions", json={"host": "local", "symptom": "is it up?"}).json()
            sid = sid["session_id"]
            with c.stream("GET", f"/api/sessions/{sid}/events") as resp:
                for line in resp.iter_lines():
                    if line.startswith("event: observation"):
                        break
            assert c.get(f"/api/sessions/{sid}").json()["status"] == "running"
        served.kill()
        served.start()
        with httpx.Client(base_url=served.url, headers=auth, timeout=30) as c:
            d = c.get(f"/api/sessions/{sid}").json()
            assert d["status"] == "error", d["status"]
            assert "interrupted" in d["events"][-1]["data"]["error"]
            listed = {s["session_id"]: s["status"] for s in c.get("/api/sessions").json()}
            assert listed[sid] == "error"
    finally:
        served.stop()
