"""The file API reads host logs and configs only: never Pivot's own files, never credentials,
and a CLI run beside the server loses no row (the server never opens its databases to read)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from server.auth import ensure_token
from tests.server.conftest import Live, card_dir, start_live

CARD = "h200-port-in-use"


def _get(srv: Live, path: str) -> tuple[int, str]:
    with srv.client() as c:
        r = c.get("/api/hosts/local/file", params={"path": path})
    return r.status_code, r.text


def _pivot(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PIVOT_HOME": str(home)}
    env.pop("PIVOT_LLM_BASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], env=env, capture_output=True, text=True
    )


def _counts(home: Path) -> dict[str, int]:
    db = sqlite3.connect(home / "memory.db")
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return {
            t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("sessions", "todos")
        }
    finally:
        db.close()


@pytest.mark.parametrize("roots", [None, ["/"]], ids=["default-roots", "root-slash"])
def test_every_file_under_pivot_home_is_refused(tmp_path: Path, roots: list[str] | None) -> None:
    """Even with `/` as a read root, PIVOT_HOME, its databases and hard links to them are refused."""
    home = tmp_path / "home"
    ensure_token(home)  # the stored (hashed) token `pivot serve` keeps in its home
    srv = start_live(home, **({"read_roots": {"*": roots}} if roots else {}))
    try:
        with srv.client() as c:  # let the server write: a session, a todo, WAL files
            sid = c.post("/api/sessions", json={"host": f"replay:{CARD}", "symptom": "x"}).json()
            assert sid["session_id"]
            assert c.post("/api/hosts/local/todos", json={"text": "t"}).status_code == 201
        files = [p for p in home.rglob("*") if p.is_file()]
        assert {"memory.db", "server-token.json"} <= {p.name for p in files}
        logs = tmp_path / "logs"
        logs.mkdir()
        os.link(home / "memory.db", logs / "engine.log")  # same inode, innocent name
        os.symlink(home / "server-token.json", logs / "server.log")
        (logs / "fine.log").write_text("Not enough memory\n")
        for p in [*files, logs / "engine.log", logs / "server.log"]:
            status, text = _get(srv, str(p))
            assert status == 403, (p, status, text)
            assert "SQLite" not in text and "digest" not in text
        if roots:  # the same policy lets an ordinary log through
            status, text = _get(srv, str(logs / "fine.log"))
            assert status == 200 and "Not enough memory" in text
    finally:
        srv.stop()


@pytest.mark.parametrize(
    "path",
    ["/etc/shadow", "/etc/gshadow", "/root/.bashrc", "/root/.ssh/id_rsa", "/etc/passwd",
     "/tmp/pivot-token", "/tmp/api_token.txt", "/home/u/.aws/credentials", "/tmp/x/state.db"],
)  # fmt: skip
def test_credentials_and_non_logs_refused_by_default(live: Live, path: str) -> None:
    status, text = _get(live, path)
    assert status == 403, text
    assert "root:" not in text


def test_logs_and_configs_readable_by_default(
    live: Live, tmp_path_factory: pytest.TempPathFactory
) -> None:
    d = Path("/tmp") / f"pivot-file-api-{os.getpid()}"
    d.mkdir(exist_ok=True)
    try:
        (d / "sglang.log").write_text("line\nCUDA out of memory\n")
        status, text = _get(live, str(d / "sglang.log"))
        assert status == 200 and "CUDA out of memory" in text
        (d / "token.txt").write_text("secret\n")
        assert _get(live, str(d / "token.txt"))[0] == 403
    finally:
        for p in d.iterdir():
            p.unlink()
        d.rmdir()


def test_no_row_lost_across_cli_and_server_writers(tmp_path: Path) -> None:
    """CLI runs write the same memory.db while the server writes and is asked to read it; after a
    restart every row of both writers is there and the database is intact."""
    home = tmp_path / "home"
    srv = start_live(home)
    cli_runs, server_runs, todos = 3, 3, 10
    results: list[subprocess.CompletedProcess[str]] = []

    def cli() -> None:
        for i in range(cli_runs):
            results.append(
                _pivot(home, "investigate", f"cli run {i}", "--replay", str(card_dir() / f"{CARD}.yaml"), "--json", "--yes")
            )  # fmt: skip

    t = threading.Thread(target=cli)
    t.start()
    try:
        with srv.client() as c:
            for i in range(server_runs):
                r = c.post("/api/sessions", json={"host": f"replay:{CARD}", "symptom": f"srv {i}"})
                assert r.status_code == 201
                for p in home.glob("memory.db*"):  # the exact read that used to drop the locks
                    assert (
                        c.get("/api/hosts/local/file", params={"path": str(p)}).status_code == 403
                    )
            for i in range(todos):
                assert (
                    c.post("/api/hosts/local/todos", json={"text": f"todo {i}"}).status_code == 201
                )
            t.join(timeout=300)
            deadline = 0
            while any(s["status"] in ("queued", "running") for s in c.get("/api/sessions").json()):
                deadline += 1
                assert deadline < 600
                threading.Event().wait(0.1)
    finally:
        t.join(timeout=300)
        srv.stop()
    assert [r.returncode for r in results] == [0] * cli_runs, [r.stderr[-400:] for r in results]
    restarted = start_live(home)
    try:
        with restarted.client() as c:
            listed = c.get("/api/sessions", params={"limit": 500}).json()
            assert len(listed) == cli_runs + server_runs
            assert len(c.get("/api/hosts/local/todos").json()) == todos
    finally:
        restarted.stop()
    assert _counts(home) == {"sessions": cli_runs + server_runs, "todos": todos}


@pytest.mark.parametrize(
    "path,glob,hit",
    [
        ("/var/log/syslog", "/var/log", True),
        ("/var/logs/x", "/var/log", False),
        ("/tmp/a/b/sglang.log", "/tmp/**/*.log", True),
        ("/tmp/sglang.log", "/tmp/**/*.log", True),
        ("/tmp/sglang.log.txt", "/tmp/**/*.log", False),
        ("/tmp/a.out", "/tmp/**/*.{log,out}", True),
        ("/etc/shadow-", "/etc/{shadow,gshadow}*", True),
        ("/etc/x/shadow", "/etc/{shadow,gshadow}*", False),
        ("/var/log/x.log.3", "/var/**/*.log.[0-9]", True),
        ("/a/.ssh/config", "**/.ssh/**", True),
    ],
)
def test_glob_cases(path: str, glob: str, hit: bool) -> None:
    from server.file_policy import matches, shipped

    assert shipped().read_roots and shipped().deny  # the shipped policy loads and validates
    assert matches(path, glob) is hit
