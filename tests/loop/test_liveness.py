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


#: A process that sits in uninterruptible sleep ("D") for ~2 s: a vfork parent waits in the
#: kernel until its child execs or exits. A server exec'd from a cold disk passes through D too.
VFORK_PARENT = """
import ctypes, sys, time
libc = ctypes.CDLL(None)
print("vforking", flush=True)
if libc.vfork() == 0:
    libc.usleep(2000000)
    libc._exit(0)
time.sleep(60)
"""


def test_uninterruptible_sleep_is_alive_not_dead(tmp_path: Path) -> None:
    """The flaky two-slot night ("trial-2 died: exited after 0.0s with no fatal line") came
    from reading state D as dead on the first tick after a launch."""
    script = tmp_path / "vfork_parent.py"
    script.write_text(VFORK_PARENT, encoding="utf-8")
    log = str(tmp_path / "d.log")
    res = launcher.start(HOST, f"python3 {script}", str(tmp_path), {}, log, f"d-{tmp_path.name}")
    assert res.ok and res.pid, res.error
    try:
        deadline = time.monotonic() + 5
        state = ""
        while time.monotonic() < deadline:
            state = Path(f"/proc/{res.pid}/status").read_text().split("State:")[1].split()[0]
            if state == "D":
                break
            time.sleep(0.01)
        assert state == "D", f"the vfork parent never showed state D (saw {state!r})"
        assert launcher._alive(HOST, res.pid)
        t0 = time.monotonic()
        v = launcher.watch_until_ready(
            HOST, res.pid, log, f"http://127.0.0.1:{free_port()}/", ready_s=1.0, stall_s=30
        )
        assert v.state == "timeout", v  # alive all along: never "died"
        assert time.monotonic() - t0 >= 1.0
    finally:
        launcher.stop(HOST, res.pid, None, grace_s=0.5)
    assert not launcher._alive(HOST, res.pid)
