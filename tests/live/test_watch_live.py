"""`pivot watch` and `pivot launch` against real staged launches (tests/live/staging.py).

The launches are real processes writing real logs; the watch is the real CLI in a subprocess,
locally and over the real test sshd; the webhook is a real HTTP server. No timing is asserted
here beyond order and the launch's own pace (bench/watch_death.py times death to verdict).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.live.staging import (
    IMPORT_WARNING,
    JIT_FATAL,
    JIT_TRACEBACK,
    LOADED,
    PIVOT_PY,
    PY,
    ROOT,
    Stage,
    gone,
    new_stage,
    pivot_env,
    startup,
    wait_for,
)
from tests.sshd import Sshd

READY = "[2025-06-01 10:00:20] The server is fired up and ready to roll!\n"
BAR = "\rLoading safetensors checkpoint shards: {pct:3d}% Completed | {i}/{n} [{el}<{eta}]"
#: harmless lines a grep for "Exception"/"Error" would call a crash (seen in real launches)
NOISE = (
    IMPORT_WARNING + "\n"
    "Exception ignored in: <function _after_fork at 0x7f3a2c1e0>\n"
    "/usr/lib/python3/dist-packages/torch/cuda/__init__.py:61: FutureWarning: The pynvml package "
    "is deprecated. ImportError fallback in use.\n"
)


@pytest.fixture
def stage(live_user_server: Sshd) -> Iterator[Stage]:
    s = new_stage(live_user_server)
    yield s
    s.cleanup()


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PIVOT_HOME": str(tmp_path / "pivot"), "PYTHONPATH": str(ROOT), **extra}
    env.pop("PIVOT_LLM_BASE_URL", None)
    return env


def _pivot(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PIVOT_PY, "-m", "agent.cli", *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _done(p: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str, str]:
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


def _watch_json(p: subprocess.Popen[str]) -> tuple[int, dict[str, Any], str]:
    rc, out, err = _done(p)
    assert out.strip(), f"no JSON (rc {rc}): {err[-3000:]}"
    return rc, json.loads(out), err


def _log_has(log: Path, text: str) -> bool:
    return log.exists() and text in log.read_text(errors="replace")


def test_a_slow_loader_becomes_ready_with_an_eta(stage: Stage, tmp_path: Path) -> None:
    log = stage.logs / "slow.log"
    server = stage.start_server(
        [["out", startup()], ["loop", BAR, 0.8, 6], ["out", LOADED], ["out", READY]], log
    )
    p = _pivot(
        ["watch", "--local", "--pid", str(server.pid), "--log", str(log), "--json"],
        _env(tmp_path),
    )
    rc, o, err = _watch_json(p)
    assert rc == 0 and o["status"] == "ready", (o, err[-2000:])
    assert o["engine"] == "sglang" and o["evidence"] == READY.strip()
    assert "6/6" in o["progress"], o["progress"]
    assert "load_weights" in err  # the phase was shown while it loaded
    # the ETA shown half-way predicted the end of the load from the loader's measured rate
    by_done = {s["done"]: s for s in o["etas"]}
    mid, end = by_done[3], by_done[6]
    assert mid["eta_s"] is not None and "seconds left" in err
    predicted, actual = mid["elapsed_s"] + mid["eta_s"], end["elapsed_s"]
    assert abs(predicted - actual) <= 0.5 * (actual - mid["elapsed_s"]), o["etas"]


def test_import_warnings_and_error_words_never_make_a_crash(stage: Stage, tmp_path: Path) -> None:
    log = stage.logs / "noisy.log"
    server = stage.start_server(
        [
            ["out", startup()],
            ["out", NOISE],
            ["loop", BAR, 1.0, 3],
            ["out", LOADED],
            ["out", READY],
        ],
        log,
    )
    p = _pivot(
        ["watch", "--local", "--pid", str(server.pid), "--log", str(log), "--json"],
        _env(tmp_path),
    )
    rc, o, err = _watch_json(p)
    # the noise sat in the log for over 3 s, past the 2 s a fatal line is given
    assert rc == 0 and o["status"] == "ready", (o, err[-2000:])
    assert "fatal line" not in err and o["diagnosis"] is None


def test_a_launch_killed_mid_load_is_diagnosed_over_ssh(
    stage: Stage, tmp_path: Path, live_user_server: Sshd
) -> None:
    log = stage.logs / "killed.log"
    server = stage.start_server([["out", startup()], ["loop", BAR, 0.5, 40]], log)
    env = pivot_env(tmp_path / "home", live_user_server, "gpu-box")
    p = _pivot(
        ["watch", "--host", "gpu-box", "--pid", str(server.pid), "--log", str(log)]
        + ["--brain", "rulebook", "--json"],
        env,
    )
    wait_for(lambda: _log_has(log, "| 3/40 "), 30, "shard 3 of the staged load")
    time.sleep(0.5)
    stage.kill9(server)
    rc, o, err = _watch_json(p)
    assert rc == 1 and o["status"] == "died", (o, err[-3000:])
    assert o["target"]["host"] == "gpu-box" and o["phase"] == "load_weights"
    assert "exited after" in o["detail"] and "shard" in (o["progress"] or "")
    d = o["diagnosis"]
    assert d and d["session_id"] and d["status"] == "concluded", (d, err[-3000:])
    assert d["root_cause"] and o["exit_code"] == 1


def test_a_stall_is_called_only_after_its_own_window(stage: Stage, tmp_path: Path) -> None:
    log = stage.logs / "stall.log"
    steps: list[list[Any]] = [["out", startup(import_warning=False)]]
    for i in range(3):  # a launch that goes quiet 2.5 s between lines, then for good
        steps += [["sleep", 2.5], ["out", f"[2025-06-01 10:00:1{i} TP0] step {i} of the init\n"]]
    server = stage.start_server(steps, log)
    p = _pivot(
        ["watch", "--local", "--pid", str(server.pid), "--log", str(log), "--json"]
        + ["--stall-base", "1", "--brain", "rulebook"],
        _env(tmp_path),
    )
    rc, o, err = _watch_json(p)
    assert rc == 1 and o["status"] == "stalled", (o, err[-2000:])
    # it sat through three 2.5 s silences (its base window is 1 s) and called the fourth
    assert o["evidence"].endswith("step 2 of the init"), o
    assert o["window_s"] >= 3.5, o
    assert o["diagnosis"] is not None


class _Hook(BaseHTTPRequestHandler):
    got: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.got.append({"type": self.headers["Content-Type"], "body": json.loads(body)})
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *a: object) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    _Hook.got = []
    srv = HTTPServer(("127.0.0.1", 0), _Hook)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/hooks/pivot", _Hook.got
    srv.shutdown()
    srv.server_close()


def test_pivot_launch_of_a_failing_command_is_diagnosed_and_notified(
    stage: Stage, tmp_path: Path, hook: tuple[str, list[dict[str, Any]]], live_user_server: Sshd
) -> None:
    """Over the test sshd as the unprivileged user: this shared box's own kernel log (other
    jobs' OOM kills) is not the staged launch's story."""
    url, got = hook
    log = stage.logs / "launch.log"
    script = [["out", startup()], ["out", LOADED], ["sleep", 0.3], ["out", JIT_TRACEBACK]]
    server = [PY, "-m", "sglang.launch_server", "--model-path", "/models/m", "--port", "30999"]
    p = _pivot(
        ["launch", "--host", "gpu-box", "--log", str(log), "--brain", "rulebook"]
        + ["--notify", url, "--", "env", f"PYTHONPATH={stage.root}"]
        + [f"FAKE_SERVER_SCRIPT={json.dumps([*script, ['exit', 1]])}", *server],
        pivot_env(tmp_path / "home", live_user_server, "gpu-box"),
    )
    rc, out, err = _done(p)
    assert rc == 1, (out[-3000:], err[-3000:])
    assert out.startswith("pivot launch: pid ") and f"log {log}" in out
    assert JIT_FATAL in log.read_text() and JIT_FATAL in out  # teed: in the log and on screen
    assert "Root cause: unsupported_gpu_arch" in out, out[-3000:]
    assert "\a" in err  # the bell
    assert len(got) == 1 and got[0]["type"] == "application/json"
    body = got[0]["body"]
    assert body["text"].startswith("DIED: ") and "unsupported_gpu_arch" in body["text"]
    assert body["status"] == "died" and body["exit_code"] == 1
    assert body["diagnosis"]["root_cause"] == "unsupported_gpu_arch"
    assert body["target"]["port"] == 30999 and body["evidence"] == JIT_FATAL


def test_ctrl_c_stops_the_launch_process_group(tmp_path: Path) -> None:
    log = tmp_path / "long.log"
    # it keeps printing (a loader at work): on a slow CI box a launch silent after one line is
    # rightly called stalled and diagnosed before the Ctrl-C lands, which is not what this tests
    code = (
        "import os, subprocess, sys, time\n"
        "kid = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print('pids', os.getpid(), kid.pid, flush=True)\n"
        "for i in range(1200):\n"
        "    print('Loading shard', i, flush=True)\n"
        "    time.sleep(0.5)\n"
    )
    p = _pivot(["launch", "--log", str(log), "--", PY, "-c", code], _env(tmp_path))
    wait_for(lambda: _log_has(log, "pids "), 30, "the launch's first line")
    time.sleep(1.0)  # Ctrl-C while it is being watched (the start is covered too)
    pids = [int(x) for x in log.read_text().split("pids ", 1)[1].split()[:2]]
    p.send_signal(signal.SIGINT)
    rc, out, err = _done(p, timeout=60)
    assert rc == 130, (out[-2000:], err[-2000:])
    assert "STOPPED" in out
    wait_for(lambda: all(gone(x) for x in pids), 10, "the launch's processes to end")


def test_nothing_to_watch_is_bad_input(tmp_path: Path) -> None:
    rc, out, err = _done(_pivot(["watch", "--local", "--json"], _env(tmp_path)))
    assert rc == 2 and json.loads(out)["status"] == "bad_input" and "nothing to watch" in err
