"""Liveness watch against real processes: death, hang, false crash, orphan cleanup."""

from __future__ import annotations

import time
from pathlib import Path

from loop import launcher
from tests.loop.conftest import REPO, emulator_cmd, free_port
from tools.local_host import LocalHost

HOST = LocalHost()


def _start(tmp_path: Path, extra: str, env: dict[str, str] | None = None, load_s: float = 0.3):
    port = free_port()
    marker = f"liveness-{tmp_path.name}-{time.monotonic_ns()}"
    log = str(tmp_path / "server.log")
    res = launcher.start(HOST, emulator_cmd(port, load_s, extra), str(REPO), env or {}, log, marker)
    assert res.ok and res.pid, res.error
    return res.pid, log, f"http://127.0.0.1:{port}/health", marker


def test_death_is_noticed_with_its_evidence(tmp_path: Path) -> None:
    pid, log, url, marker = _start(
        tmp_path, "", {"NCCL_MAX_NCHANNELS": "1", "NCCL_BUFFSIZE": "4096"}
    )
    v = launcher.watch_until_ready(HOST, pid, log, url, ready_s=20, stall_s=5)
    assert v.state in ("died", "crashed")
    assert v.evidence and "Not enough memory" in v.evidence
    assert launcher.stop(HOST, pid, marker, grace_s=1) == []


def test_sigkilled_server_is_dead_not_waited_for(tmp_path: Path) -> None:
    pid, log, url, marker = _start(tmp_path, "--emulate-hang --die-after 0.8")
    t0 = time.monotonic()
    v = launcher.watch_until_ready(HOST, pid, log, url, ready_s=30, stall_s=20)
    assert v.state == "died" and time.monotonic() - t0 < 10
    launcher.stop(HOST, pid, marker, grace_s=1)


def test_silent_live_process_is_hung(tmp_path: Path) -> None:
    pid, log, url, marker = _start(tmp_path, "--emulate-hang")
    v = launcher.watch_until_ready(HOST, pid, log, url, ready_s=30, stall_s=1.0)
    assert v.state == "hung" and "alive" in v.detail, (v, Path(log).read_text()[-600:])
    assert launcher.stop(HOST, pid, marker, grace_s=1) == []


def test_exception_in_import_lines_is_not_a_crash(tmp_path: Path) -> None:
    pid, log, url, marker = _start(tmp_path, "")
    v = launcher.watch_until_ready(HOST, pid, log, url, ready_s=20, stall_s=5)
    assert v.state == "ready", v
    assert "Exception: DeepGEMM" in Path(log).read_text()
    assert launcher.stop(HOST, pid, marker, grace_s=1) == []


def test_stop_kills_group_and_reparented_orphan(tmp_path: Path) -> None:
    pid, log, url, marker = _start(tmp_path, "--spawn-orphan")
    assert launcher.watch_until_ready(HOST, pid, log, url, ready_s=20, stall_s=5).state == "ready"
    before = launcher.marked_pids(HOST, marker)
    assert len(before) >= 2  # the server and its double-forked orphan
    assert launcher.stop(HOST, pid, marker, grace_s=1) == []
    assert launcher.marked_pids(HOST, marker) == []
