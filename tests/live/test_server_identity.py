"""Which process is the server, on a box with other jobs running (issue 11, item 1 and 8).

A fake SGLang server is staged for real: `python3 -m sglang.launch_server --model-path ... --port
N` (a module in a temp dir), writing its log, with two scheduler children titled
`sglang::scheduler_TP0` / `_TP1` that die with it. Beside it run an unrelated `python3 -m
http.server`, `bash -c 'sleep 600 # vllm'`, a `cc1plus` compile stand-in whose arguments mention
sglang, a stand-in for pivot itself (`python3 -m agent.cli investigate ...`) and this pytest
process. Only the staged server and its children may count, and once it is SIGKILLed the verdict
is "no server alive" with every unrelated job still running.
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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agent.facts import derive
from agent.observe import run_many
from tests.live.staging import gone
from tests.sshd import Sshd, free_port
from tools.ssh_host import SSHHost

PY = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable

SERVER = """\
import os, subprocess, sys, time
port = sys.argv[sys.argv.index("--port") + 1]
print("server_args=ServerArgs(model_path='/models/fake-llama', port=%s, tp_size=2)" % port, flush=True)
child = "import os,time;p=os.getppid();[time.sleep(0.05) for _ in iter(lambda: p != 1 and os.getppid()==p, False)]"
kids = [
    subprocess.Popen(["sglang::scheduler_TP%d" % r, "-c", child], executable=sys.executable)
    for r in range(2)
]
for r in range(2):
    print("[2025-06-01 10:00:0%d TP%d] Load weight begin. avail mem=139.10 GB" % (r, r), flush=True)
while True:
    time.sleep(0.5)
    print("[2025-06-01 10:00:09 TP0] Loading safetensors checkpoint shards: 1/%d" % 200, flush=True)
"""

PIVOT_STANDIN = "import time\ntime.sleep(600)\n"


@dataclass
class Box:
    """Everything staged for one test: the server and the unrelated jobs, killed by pid after."""

    root: Path
    log: Path
    port: int
    server: subprocess.Popen[bytes] | None = None
    others: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def server_tree(self) -> set[int]:
        assert self.server is not None
        return {self.server.pid, *_children(self.server.pid)}


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry))
    return out


def _wait(cond, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out waiting for the staged processes"
        time.sleep(0.05)


@pytest.fixture
def box(live: tuple[SSHHost, Sshd]) -> Iterator[Box]:
    _, server = live
    root = Path(tempfile.mkdtemp(prefix="pivot-live-"))
    root.chmod(0o755)
    (root / "sglang").mkdir()
    (root / "sglang" / "__init__.py").write_text("")
    (root / "sglang" / "launch_server.py").write_text(SERVER)
    (root / "agent").mkdir()
    (root / "agent" / "__init__.py").write_text("")
    (root / "agent" / "cli.py").write_text(PIVOT_STANDIN)
    for p in root.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    logs = root / "logs"
    logs.mkdir(mode=0o777)
    logs.chmod(0o777)
    log = logs / "server.log"
    b = Box(root=root, log=log, port=free_port())
    # the server runs as the SSH user (the operator's own server); the other jobs as root
    pw = pwd.getpwnam(server.user)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "HOME": "/tmp"}
    with log.open("wb") as fh:
        b.server = subprocess.Popen(
            [PY, "-m", "sglang.launch_server", "--model-path", "/models/fake-llama"]
            + ["--tp", "2", "--port", str(b.port)],
            cwd=root,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            user=pw.pw_uid,
            group=pw.pw_gid,
        )
    os.chown(log, pw.pw_uid, pw.pw_gid)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "cwd": root, "env": env}
    b.others["http.server"] = subprocess.Popen(
        [PY, "-m", "http.server", "0", "--bind", "127.0.0.1"], **quiet
    )
    b.others["sleep # vllm"] = subprocess.Popen(["bash", "-c", "sleep 600 # vllm"], **quiet)
    b.others["cc1plus"] = subprocess.Popen(
        ["/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus", "-c", "import time; time.sleep(600)"]
        + ["-quiet", "/src/sglang/srt/layers/sglang.launch_server.cpp", "-o", "/tmp/x.s"],
        executable=PY,
        **quiet,
    )
    b.others["pivot"] = subprocess.Popen(
        [PY, "-m", "agent.cli", "investigate", "--host", "gpu-box-3", "--log", str(log)]
        + ["vllm serve died, sglang.launch_server --port", str(b.port)],
        **quiet,
    )
    _wait(lambda: len(_children(b.server.pid)) == 2 and b"TP1" in log.read_bytes())
    try:
        yield b
    finally:
        for p in [b.server, *b.others.values()]:
            if p is not None and p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)
                p.wait()
        import shutil

        shutil.rmtree(root, ignore_errors=True)


def _observe(host: SSHHost, box: Box, *, logs: bool = True) -> list:  # type: ignore[type-arg]
    args = {"link_gpu": False, **({"logs": [str(box.log)]} if logs else {})}
    return run_many(host, [("processes", args), ("log_tail", {"path": str(box.log)})], 1, 0)


@pytest.mark.parametrize("with_log", [True, False], ids=["log-given", "ps-only"])
def test_only_the_staged_server_and_its_children_are_the_server(
    live: tuple[SSHHost, Sshd], box: Box, with_log: bool
) -> None:
    host, _ = live
    assert box.server is not None
    tree = box.server_tree()
    obs = _observe(host, box, logs=with_log)
    assert obs[0]["ok"], obs[0]["lines"]
    data = obs[0]["data"]
    # the box is shared (CI runs other suites, other users run servers): the staged tree is
    # all there, none of the staged unrelated jobs counts, and no server of another launch is
    # taken for ours
    staged = {p.pid for p in box.others.values()}
    assert tree <= set(data["servers"]) and not staged & set(data["servers"]), obs[0]["lines"]
    rows = {r["pid"]: r for r in data["processes"]}
    foreign = set(data["servers"]) - tree
    assert all(rows[p]["ours"] is not True for p in foreign), obs[0]["lines"]
    assert box.server.pid in data["mains"]
    assert not (set(data["mains"]) - foreign) - {box.server.pid}
    for name, p in box.others.items():
        assert p.poll() is None, f"{name} died"
        assert p.pid not in data["servers"], f"{name} taken for the server"
    if with_log:
        # the operator's own server (its children inherit its stdout): readable as root and as
        # its own user
        assert data["log_writers"] == {str(box.log): sorted(tree)}
        ours = {p["pid"]: p["ours"] for p in data["processes"] if p["server"]}
        assert {p: o for p, o in ours.items() if o is True} == dict.fromkeys(tree, True)
    f = derive(obs)
    assert f.server_alive is True
    # without the log, a server of another launch on a shared box cannot be told apart: the
    # facts are ours plus those, never an unrelated job's
    assert set(f.server_pids) - foreign == tree
    assert set(f.server_main_pids) - foreign == {box.server.pid}
    assert sorted(set(f.server_worker_pids) - foreign) == sorted(tree - {box.server.pid})
    assert f.ranks_gone == []
    if not foreign:
        assert f.server_engine == "sglang" and f.log_ranks == [0, 1]
        assert [(r.rank, r.state) for r in f.ranks] == [(0, "alive"), (1, "alive")]


def test_killed_server_is_no_server_alive_beside_unrelated_jobs(
    live: tuple[SSHHost, Sshd], box: Box
) -> None:
    host, _ = live
    assert box.server is not None
    tree = box.server_tree()
    os.kill(box.server.pid, signal.SIGKILL)
    box.server.wait()
    # a zombie child not yet reaped by init is dead too (init reaps when it gets to it)
    _wait(lambda: all(gone(p) for p in tree))
    for logs in (True, False):
        obs = _observe(host, box, logs=logs)
        f = derive(obs)
        assert f.ps_available and f.server_alive is False, obs[0]["lines"]
        assert f.server_pids == [] and f.ranks_gone == []
        # on a quiet box the tool says so itself; on a shared one other launches may run (the
        # facts above still hold: their ports and fds say they are not this launch)
        others = [r for r in obs[0]["data"]["processes"] if r["server"] and not r["zombie"]]
        if not others:
            assert "# no inference-server process is running" in obs[0]["lines"]
        if logs:
            assert obs[0]["data"]["log_writers"] == {str(box.log): []}
    assert all(p.poll() is None for p in box.others.values())


def test_one_rank_killed_is_rank_gone_while_the_server_runs(
    live: tuple[SSHHost, Sshd], box: Box
) -> None:
    host, _ = live
    assert box.server is not None
    by_title = {
        Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0]: p
        for p in _children(box.server.pid)
    }
    rank1 = by_title[b"sglang::scheduler_TP1"]
    os.kill(rank1, signal.SIGKILL)
    # the fake server does not reap it, as a real one blocked in a collective would not: defunct
    _wait(lambda: "Z" in Path(f"/proc/{rank1}/stat").read_text().rsplit(")", 1)[1].split()[0])
    f = derive(_observe(host, box))
    assert f.server_alive is True
    # a zombie's title is gone from ps ("[sglang::schedul] <defunct>"): rank 1 is gone, and the
    # zombie is still told apart as the server's defunct child
    assert {(r.rank, r.state) for r in f.ranks} == {(0, "alive"), (1, "gone")}
    assert f.ranks_gone == [1]
    assert rank1 in f.server_defunct_pids and rank1 not in f.server_pids
