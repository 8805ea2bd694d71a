"""Hangs are provable (issue 10, item 2): a staged process stuck in a fake collective, dumped
over a real sshd by `py_stacks`, logged in as root and as an unprivileged user.

The staged process imports `all_reduce` from `torch/distributed/distributed_c10d.py` in a temp
package tree and blocks in it, as a rank whose peer never arrives does. The real py-spy (pinned
in requirements.lock) is put where operators install it: in the server's venv beside its
interpreter, or on PATH. The unprivileged user may ptrace its own server (no yama here); another
user's (root's) process is refused, and then the result must say the Python stacks are unknown,
why, and how to get them. These FAIL, never skip, without sshd (tests/live/conftest.py).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sshd import Sshd
from tools.py_stacks import SPEC
from tools.ssh_host import SSHHost

PY = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
PY_SPY = Path(sys.executable).parent / "py-spy"

C10D = """\
import threading


def _wait_for_peers(timeout):
    # the NCCL kernel that never completes: the peer rank never arrives
    threading.Event().wait(timeout)


def all_reduce(tensor, group=None, async_op=False):
    _wait_for_peers(3600)
    return tensor
"""
RANK = """\
import threading, time
from torch.distributed.distributed_c10d import all_reduce


def heartbeat():
    while True:
        time.sleep(1)


def forward_batch(x):
    return all_reduce(x)


threading.Thread(target=heartbeat, name="watchdog", daemon=True).start()
print("rank 0 entering all_reduce", flush=True)
forward_batch([1.0])
"""
FRAME = "    all_reduce (torch/distributed/distributed_c10d.py:10)"


@dataclass
class Stage:
    root: Path
    venv_bin: Path
    procs: list[subprocess.Popen[bytes]]

    def start(self, user: str, *, venv: bool) -> subprocess.Popen[bytes]:
        """The hung rank, run as `user`, by the venv's interpreter or the system one."""
        pw = pwd.getpwnam(user)
        exe = str(self.venv_bin / "python3") if venv else PY
        proc = subprocess.Popen(
            [exe, "rank.py"],
            cwd=self.root,
            env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            user=pw.pw_uid,
            group=pw.pw_gid,
            extra_groups=[],
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"rank 0 entering all_reduce\n"
        return proc


@pytest.fixture
def stage() -> Iterator[Stage]:
    assert PY_SPY.exists(), "py-spy is pinned in requirements.lock: run scripts/install.sh"
    root = Path(tempfile.mkdtemp(prefix="pivot-hang-"))
    pkg = root / "torch" / "distributed"
    pkg.mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "distributed_c10d.py").write_text(C10D)
    (root / "rank.py").write_text(RANK)
    # the server's venv: its interpreter and py-spy side by side (pip install py-spy there)
    venv_bin = root / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python3").symlink_to(PY)
    shutil.copy2(PY_SPY, venv_bin / "py-spy")
    for p in root.rglob("*"):
        if not p.is_symlink():
            p.chmod(0o755 if p.is_dir() or p.name == "py-spy" else 0o644)
    root.chmod(0o755)
    s = Stage(root=root, venv_bin=venv_bin, procs=[])
    yield s
    for proc in s.procs:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, 9)
        proc.wait()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def py_spy_on_path(live: tuple[SSHHost, Sshd]) -> Iterator[Path]:
    """py-spy on the SSH user's PATH (the sshd's fake_bin dir), removed afterwards."""
    _, server = live
    dest = server.fake_bin / "py-spy"
    shutil.copy2(PY_SPY, dest)
    dest.chmod(0o755)
    yield dest
    dest.unlink(missing_ok=True)


def _user_is_root(server: Sshd) -> bool:
    return server.user == "root"


def test_a_rank_hung_in_a_collective_is_proven_by_its_stacks(
    live: tuple[SSHHost, Sshd], stage: Stage
) -> None:
    """The operator's own server (run as the SSH user), py-spy in its venv, not on PATH."""
    host, server = live
    rank = stage.start(server.user, venv=True)
    r = SPEC.call(host, {"pid": rank.pid})
    lines = r.lines()
    assert r.ok and r.method == "py-spy", lines
    # found beside the server's interpreter, and named
    assert r.command == f"{stage.venv_bin}/py-spy dump --pid {rank.pid}"
    assert r.waiting_in == "collective"
    assert r.collective_frame == FRAME
    assert f'Thread {rank.pid} (idle): "MainThread"' in lines
    assert FRAME in lines and "    forward_batch (rank.py:11)" in lines
    assert r.waiting_thread == f'Thread {rank.pid} (idle): "MainThread"'
    names = {t.name: t for t in r.threads}
    assert set(names) == {"MainThread", "watchdog"}
    assert names["watchdog"].waiting_in != "collective"
    # what a rule would cite is a line of the observation
    assert r.collective_frame in lines


def test_native_frames_over_ssh(live: tuple[SSHHost, Sshd], stage: Stage) -> None:
    host, server = live
    rank = stage.start(server.user, venv=True)
    r = SPEC.call(host, {"pid": rank.pid, "native": True})
    assert r.method == "py-spy" and r.command.endswith(f"--pid {rank.pid} --native")
    assert r.collective_frame == FRAME
    assert any(f.native for t in r.threads for f in t.frames)


def test_another_users_process(
    live: tuple[SSHHost, Sshd], stage: Stage, py_spy_on_path: Path
) -> None:
    """A rank owned by root: root dumps it; the unprivileged user is refused by ptrace, and the
    result says the Python stacks are unknown, why, and the three ways to get them."""
    host, server = live
    rank = stage.start("root", venv=False)
    r = SPEC.call(host, {"pid": rank.pid})
    lines = r.lines()
    if _user_is_root(server):
        assert r.method == "py-spy" and r.command == f"py-spy dump --pid {rank.pid}", lines
        assert r.waiting_in == "collective" and r.collective_frame == FRAME
        assert FRAME in lines
        return
    assert r.ok and r.method == "proc", lines
    assert r.denied and not r.py_spy_missing
    assert "ptrace is not permitted" in (r.py_spy_error or "")
    assert "Permission Denied" in (r.py_spy_error or "")  # py-spy's own words
    fix = r.fix or ""
    assert f"sudo py-spy dump --pid {rank.pid}" in fix
    assert "--cap-add SYS_PTRACE" in fix and "kernel.yama.ptrace_scope=0" in fix
    # nothing about Python is claimed; the kernel view is given for what it is
    assert r.waiting_in != "collective" and r.collective_frame is None and r.threads == []
    assert r.alive is True and r.state == "S (sleeping)"
    assert "State:\tS (sleeping)" in lines
    assert lines[0].startswith(f"# Python stacks of pid {rank.pid}: UNKNOWN, py-spy was not used")
    assert any(ln.startswith("# fix: ") and "SYS_PTRACE" in ln for ln in lines)
    assert any(f"/proc/{rank.pid}/stack not read" in ln for ln in lines)  # root only


def test_no_py_spy_on_the_host(live: tuple[SSHHost, Sshd], stage: Stage) -> None:
    """Not on PATH, not in ~/.local/bin, not beside the system interpreter: say so, and how."""
    host, server = live
    rank = stage.start(server.user, venv=False)
    r = SPEC.call(host, {"pid": rank.pid})
    assert r.ok and r.method == "proc" and r.py_spy_missing and not r.denied, r.lines()
    assert "py-spy is not installed" in (r.py_spy_error or "")
    assert "pip install py-spy" in (r.fix or "")
    assert r.state == "S (sleeping)" and r.waiting_in != "collective"
    if _user_is_root(server):
        assert r.kernel_stack, "root reads /proc/PID/stack"
        assert any("futex" in ln for ln in r.kernel_stack)


def test_a_rank_that_is_gone(
    live: tuple[SSHHost, Sshd], stage: Stage, py_spy_on_path: Path
) -> None:
    host, server = live
    rank = stage.start(server.user, venv=False)
    os.kill(rank.pid, 9)
    rank.wait()
    r = SPEC.call(host, {"pid": rank.pid})
    assert not r.ok and r.alive is False and "not running" in (r.error or ""), r.lines()


SHM_BROADCAST = """\
import threading


def acquire_read(timeout):
    # a message-queue read: nothing has been written for this reader
    threading.Event().wait(timeout)


def dequeue(timeout=3600):
    acquire_read(timeout)
"""
EXECUTOR = """\
from vllm.distributed.device_communicators.shm_broadcast import dequeue


def get_response():
    return dequeue()


def collective_rpc(method):
    return get_response()


def worker_busy_loop():
    while True:
        dequeue()
"""
ENGINE = """\
from vllm.v1.executor.multiproc_executor import collective_rpc
print("engine waiting for replies", flush=True)
collective_rpc("determine_available_memory")
"""
WORKER = """\
from vllm.v1.executor.multiproc_executor import worker_busy_loop
print("worker idle", flush=True)
worker_busy_loop()
"""


def test_an_engine_waiting_on_replies_its_idle_workers_gave_is_no_collective_hang(
    live: tuple[SSHHost, Sshd],
) -> None:
    """Round 31 live: an engine blocked in its RPC's reply read and a worker idle in its
    command loop, both in vLLM's shared-memory queue read that looks like a collective, dumped
    by the real py-spy over the real sshd. Each says which side it waits on, and together they
    prove no hang: the reply is owed by a member that is not here."""
    from agent.facts import Facts
    from agent.rules.guardrails import stall_proof
    from agent.rules.hang import awaited_elsewhere
    from agent.state import Observation

    host, server = live
    root = Path(tempfile.mkdtemp(prefix="pivot-rpc-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for rel, text in {
            "vllm/distributed/device_communicators/shm_broadcast.py": SHM_BROADCAST,
            "vllm/v1/executor/multiproc_executor.py": EXECUTOR,
            "engine.py": ENGINE,
            "worker.py": WORKER,
        }.items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        for d in [root, *root.rglob("*")]:
            if d.is_dir() and d != root:
                (d / "__init__.py").touch()
        for p in [root, *root.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        venv_bin = root / "venv" / "bin"
        venv_bin.mkdir(parents=True)
        (venv_bin / "python3").symlink_to(PY)
        shutil.copy2(PY_SPY, venv_bin / "py-spy")
        (venv_bin / "py-spy").chmod(0o755)
        pw = pwd.getpwnam(server.user)
        obs = []
        for i, (script, said) in enumerate(
            (("engine.py", b"engine waiting for replies\n"), ("worker.py", b"worker idle\n"))
        ):
            proc = subprocess.Popen(
                [str(venv_bin / "python3"), script],
                cwd=root,
                env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
                stdout=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                user=pw.pw_uid,
                group=pw.pw_gid,
                extra_groups=[],
            )
            procs.append(proc)
            assert proc.stdout is not None and proc.stdout.readline() == said
            r = SPEC.call(host, {"pid": proc.pid})
            assert r.ok and r.method == "py-spy", r.lines()
            obs.append(
                Observation(
                    id=f"o{i}",
                    tool="py_stacks",
                    args={"pid": proc.pid},
                    ok=True,
                    lines=r.lines(),
                    data=r.model_dump(),
                    round=1,
                )  # fmt: skip
            )
        engine, worker = (o["data"] for o in obs)
        assert engine["awaits"] == "replies" and "get_response" in engine["awaits_frame"]
        assert worker["awaits"] == "work" and "worker_busy_loop" in worker["awaits_frame"]
        assert awaited_elsewhere(obs) is not None
        assert stall_proof(obs, Facts()) is None
        assert stall_proof(obs[:1], Facts()) == "stacks"  # the engine's wait read alone
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, 9)
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)
