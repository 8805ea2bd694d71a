"""Which process writes the log under investigation, as a live box shows it (issue 11, item 1).

The log is tied to its process on any fd (a logging FileHandler writes on fd 3+, not stdout) and
through a pipe (`server 2>&1 | tee LOG`: tee writes the file, the server writes the pipe). A
launch whose fds we could read and that writes elsewhere is another launch: it can neither keep
a dead server "alive" nor be taken for it. Each server here runs as the SSH user (root and the
unprivileged test user), so its fds are readable, as an operator's own server is.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.facts import derive
from agent.observe import run_many
from tests.sshd import Sshd, free_port
from tools.ssh_host import SSHHost

PY = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable

#: a fake `python -m sglang.launch_server`: logs a start-up line and loads forever; with
#: --log-file it writes through a FileHandler-like open file (fd 3+) and keeps stdout quiet
SERVER = """\
import sys, time
args = sys.argv
port = args[args.index("--port") + 1]
out = open(args[args.index("--log-file") + 1], "a", buffering=1) if "--log-file" in args else sys.stdout
print("server_args=ServerArgs(model_path='/models/fake-llama', port=%s)" % port, file=out, flush=True)
while True:
    print("Loading safetensors checkpoint shards: 1/200", file=out, flush=True)
    time.sleep(0.3)
"""


class Staged:
    """Servers started as the SSH user, killed after the test."""

    def __init__(self, sshd: Sshd) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="pivot-writers-"))
        self.root.chmod(0o755)
        pkg = self.root / "sglang"
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        (pkg / "launch_server.py").write_text(SERVER)
        for p in self.root.rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        self.logs = self.root / "logs"
        self.logs.mkdir()
        self.pw = pwd.getpwnam(sshd.user)
        os.chown(self.logs, self.pw.pw_uid, self.pw.pw_gid)
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self, argv: list[str], *, stdout: object = subprocess.DEVNULL
    ) -> subprocess.Popen[bytes]:
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(self.root), "HOME": "/tmp"}
        p = subprocess.Popen(
            argv,
            cwd=self.root,
            env=env,
            stdout=stdout,  # type: ignore[arg-type]
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            user=self.pw.pw_uid,
            group=self.pw.pw_gid,
        )
        self.procs.append(p)
        return p

    def server_argv(self, *extra: str) -> list[str]:
        return [PY, "-m", "sglang.launch_server", "--model-path", "/models/fake-llama"] + [
            "--port",
            str(free_port()),
            *extra,
        ]

    def cleanup(self) -> None:
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        import shutil

        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def staged(live: tuple[SSHHost, Sshd]) -> Iterator[Staged]:
    s = Staged(live[1])
    try:
        yield s
    finally:
        s.cleanup()


def _wait(cond: Callable[[], object], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "staging timed out"
        time.sleep(0.05)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""  # gone since: a busy box starts and ends processes all the time


def _children(ppid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == ppid:
                out.append(int(entry))
    return out


def _uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None  # gone since


def _observe(host: SSHHost, log: Path) -> list:  # type: ignore[type-arg]
    calls = [
        ("processes", {"link_gpu": False, "logs": [str(log)]}),
        ("log_tail", {"path": str(log)}),
    ]
    return run_many(host, calls, 1, 0)


def _grown(log: Path) -> Callable[[], bool]:
    return lambda: log.exists() and b"1/200" in log.read_bytes()


def test_a_live_launch_writing_elsewhere_cannot_keep_a_dead_server_alive(
    live: tuple[SSHHost, Sshd], staged: Staged
) -> None:
    host, _ = live
    log = staged.logs / "server.log"
    with log.open("wb") as fh:
        ours = staged.start(staged.server_argv(), stdout=fh)
    os.chown(log, staged.pw.pw_uid, staged.pw.pw_gid)
    _wait(_grown(log))
    other = staged.start(staged.server_argv())  # another launch: output to /dev/null
    _wait(lambda: other.poll() is None and Path(f"/proc/{other.pid}/fd/1").exists())
    os.kill(ours.pid, signal.SIGKILL)
    ours.wait()

    obs = _observe(host, log)
    data = obs[0]["data"]
    assert data["log_writers"] == {str(log): []}, obs[0]["lines"]
    row = next(r for r in data["processes"] if r["pid"] == other.pid)
    assert row["server"] == "sglang" and row["ours"] is False, obs[0]["lines"]
    f = derive(obs)
    assert other.pid not in f.server_pids
    # on a shared box another user's servers (whose fds an unprivileged user cannot read) stay
    # unknown, never "not ours": only when none runs is the verdict "no server alive"
    unknown = [r for r in data["processes"] if r["server"] and r["ours"] is None]
    assert all(_uid(r["pid"]) != staged.pw.pw_uid for r in unknown), obs[0]["lines"]
    if not unknown:
        assert f.server_alive is False, obs[0]["lines"]
    assert other.poll() is None


def test_a_server_piped_into_tee_is_the_writer_of_its_log(
    live: tuple[SSHHost, Sshd], staged: Staged
) -> None:
    host, _ = live
    log = staged.logs / "server.log"
    line = " ".join(staged.server_argv()) + f" 2>&1 | tee {log}"
    shell = staged.start(["bash", "-c", line])
    _wait(_grown(log))
    server = next(p for p in _children(shell.pid) if b"sglang.launch_server" in _cmdline(p))
    other = staged.start(staged.server_argv())

    obs = _observe(host, log)
    writers = set(obs[0]["data"]["log_writers"][str(log)])
    assert server in writers, obs[0]["lines"]  # the server writes the pipe into tee
    assert other.pid not in writers
    f = derive(obs)
    assert f.server_alive is True and server in f.server_pids, obs[0]["lines"]
    assert other.pid not in f.server_pids


def test_a_log_written_through_a_file_handler_is_tied_on_any_fd(
    live: tuple[SSHHost, Sshd], staged: Staged
) -> None:
    host, _ = live
    log = staged.logs / "server.log"
    server = staged.start(staged.server_argv("--log-file", str(log)))  # stdout: /dev/null
    _wait(_grown(log))
    other = staged.start(staged.server_argv())

    obs = _observe(host, log)
    assert obs[0]["data"]["log_writers"] == {str(log): [server.pid]}, obs[0]["lines"]
    f = derive(obs)
    assert f.server_alive is True and f.server_main_pids == [server.pid], obs[0]["lines"]
    assert other.pid not in f.server_pids
