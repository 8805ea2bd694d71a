"""Watched launches on the service: `pivot watch --serve` reports, GET /api/watches reads back.

The reports go through the real reporter (watch/serve_report.py) and the real CLI against a real
uvicorn; the launch the CLI watches is a real local process (an HTTP server that answers, or a
`sleep` that is killed), and its investigation lands in the served home's memory, so the
verdict's link opens a session the service has.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import Live, free_port, start_live
from watch.live import LaunchReport, ended
from watch.outcome import Diagnosis, EtaSample, Outcome, Status, Target
from watch.serve_report import ServeReporter

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    srv = start_live(tmp_path_factory.mktemp("pivot-home"), database_url=None)
    yield srv
    srv.stop()


def _loading(watch_id: str) -> LaunchReport:
    return LaunchReport(
        watch_id=watch_id,
        target=Target(host="gpu-7", pid=48211, log="/data/logs/llama.log", port=30000),
        status="watching",
        live=True,
        engine="sglang",
        phase="load_weights",
        progress="Loading safetensors checkpoint shards: 11/30 at 5.6 s each: 1.8 min left",
        eta_s=106.4,
        elapsed_s=66.0,
    )


def test_a_watch_reports_progress_then_its_verdict(served: Live) -> None:
    rep = ServeReporter(served.base_url, served.token)
    rep.update(_loading("w-progress"))
    outcome = Outcome(
        status=Status.died,
        detail="pid 48211 exited after 70.2 s in phase load_weights",
        target=_loading("w").target,
        phase="load_weights",
        etas=[EtaSample(elapsed_s=66.0, done=11, total=30, eta_s=106.4)],
        diagnosis=Diagnosis(session_id="abc123", status="concluded", root_cause="host_oom_kill"),
    )
    assert rep.close() is None and rep.sent >= 1
    with served.client() as c:
        (w,) = [x for x in c.get("/api/watches").json() if x["watch_id"] == "w-progress"]
        assert (w["status"], w["live"], w["phase"], w["eta_s"]) == (
            "watching", True, "load_weights", 106.4,
        )  # fmt: skip
        first_seen = w["first_seen"]
        r = c.put("/api/watches/w-progress", json=ended("w-progress", outcome).model_dump())
        assert r.status_code == 200, r.text
        (w,) = [x for x in c.get("/api/watches").json() if x["watch_id"] == "w-progress"]
        assert (w["status"], w["live"]) == ("died", False) and w["first_seen"] == first_seen
        assert w["diagnosis"]["session_id"] == "abc123" and "exited after" in w["detail"]
        assert c.get("/api/watches").json()[0]["watch_id"] == "w-progress"  # newest first


def test_watch_reports_need_the_token_and_one_id(served: Live) -> None:
    body = _loading("w-auth").model_dump()
    with httpx.Client(base_url=served.base_url) as anon:
        assert anon.put("/api/watches/w-auth", json=body).status_code == 401
        assert anon.get("/api/watches").status_code == 401
    problem = ServeReporter(served.base_url, "wrong-token")
    problem.update(_loading("w-auth"))
    assert "HTTP 401" in (problem.close() or "")
    with served.client() as c:
        assert c.put("/api/watches/other", json=body).status_code == 422
        assert c.put("/api/watches/bad%20id", json=body).status_code == 422
        assert c.put("/api/watches/w-auth", json={**body, "status": "exploded"}).status_code == 422


def _watch(served: Live, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PIVOT_HOME": str(served.home), "PYTHONPATH": str(ROOT)}
    env.pop("PIVOT_LLM_BASE_URL", None)
    env.pop("PIVOT_DATABASE_URL", None)
    env["PIVOT_SERVE_TOKEN"] = served.token
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", "watch", "--local", "--serve", served.base_url,
         "--json", *args],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=240,
    )  # fmt: skip


def _reported(served: Live, pid: int) -> dict[str, object]:
    with served.client() as c:
        (w,) = [x for x in c.get("/api/watches").json() if x["target"]["pid"] == pid]
    return w


def test_pivot_watch_serve_lists_a_ready_launch(served: Live, tmp_path: Path) -> None:
    port = free_port()
    srv = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], cwd=tmp_path,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        res = _watch(served, "--pid", str(srv.pid), "--url", f"http://127.0.0.1:{port}/")
        assert res.returncode == 0, res.stderr
        w = _reported(served, srv.pid)
        assert (w["status"], w["live"]) == ("ready", False) and "ready after" in str(w["detail"])
    finally:
        srv.terminate()
        srv.wait(timeout=10)


def test_pivot_watch_serve_links_a_death_to_its_investigation(served: Live, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("Loading safetensors checkpoint shards:  10% Completed | 1/10\n")
    victim = subprocess.Popen(["sleep", "300"])
    killer = subprocess.Popen(
        [sys.executable, "-c", f"import os,time; time.sleep(2); os.kill({victim.pid}, 9)"]
    )
    try:
        res = _watch(served, "--pid", str(victim.pid), "--log", str(log), "--stall-base", "60")
        assert res.returncode == 1, res.stderr
        w = _reported(served, victim.pid)
        assert (w["status"], w["live"]) == ("died", False), w
        diag = w["diagnosis"]
        assert isinstance(diag, dict) and diag["session_id"]
        with served.client() as c:  # the service shares the home: the verdict's session is there
            d = c.get(f"/api/sessions/{diag['session_id']}").json()
            assert d["status"] == diag["status"] and "exited" in d["symptom"]
    finally:
        for p in (victim, killer):
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait(timeout=10)
