"""ports: ss, netstat and /proc/net/tcp parsing; a real listener found through each path."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cardkit import minimal_card as _card
from tools.local_host import LocalHost
from tools.ports import SPEC, parse_netstat, parse_proc_net_tcp, parse_socket_fds, parse_ss

FIX = Path(__file__).resolve().parent.parent / "fixtures"
SYN = FIX / "synthetic-facts"


def test_parse_ss() -> None:
    ls = parse_ss((SYN / "ss-ltnp.txt").read_text())
    got = [(x.addr, x.port, x.pid, x.process) for x in ls]
    assert ("0.0.0.0", 30000, 41208, "python3") in got
    assert ("127.0.0.1", 29500, 41208, "python3") in got
    assert ("::", 22, 812, "sshd") in got and ("*", 8000, 5121, "vllm") in got


def test_parse_netstat() -> None:
    ls = parse_netstat((SYN / "netstat-ltnp.txt").read_text())
    got = {(x.addr, x.port): (x.pid, x.process) for x in ls}
    assert got[("0.0.0.0", 8000)] == (5121, "python3")
    assert got[("127.0.0.1", 29500)] == (None, None)
    assert got[("::", 22)][0] == 812


def test_parse_proc_net_tcp_real_device() -> None:
    ls = parse_proc_net_tcp((FIX / "h200-device" / "proc-net-tcp.busy.txt").read_text())
    assert ("127.0.0.1", 30123, 15471) in [(x.addr, x.port, x.inode) for x in ls]
    idle = parse_proc_net_tcp((FIX / "h200-device" / "proc-net-tcp.idle.txt").read_text())
    assert 30123 not in [x.port for x in idle]


def test_parse_proc_net_tcp6_and_fds() -> None:
    ls = parse_proc_net_tcp((SYN / "proc-net-tcp6.txt").read_text())
    assert [(x.addr, x.port) for x in ls] == [("::", 22), ("::1", 8000)]  # ESTABLISHED skipped
    fds = (FIX / "h200-device" / "proc-fd-listener.txt").read_text()
    assert parse_socket_fds("/proc/701/fd:\n" + fds) == {15471: 701}
    assert parse_socket_fds("junk -> socket:[5]\n/proc/9/fd:\nx -> socket:[6]\n") == {6: 9}


def test_replay_ss_from_card_commands(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    line = 'LISTEN 0      2048         0.0.0.0:4400      0.0.0.0:*    users:(("python",pid=41208,fd=27))'
    h = replay_host_factory(_card({"commands": {"ss -ltnp | grep 4400": line + "\n"}}))
    r = SPEC.call(h, {"port": 4400})
    assert r.ok and r.port_free is False and r.listeners[0].pid == 41208
    assert line in r.lines() and "# port 4400 is IN USE" in r.lines()


def test_replay_nothing_to_list(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    r = SPEC.call(
        replay_host_factory(_card({"commands": {"cat /proc/driver/nvidia/version": "NVRM\n"}}))
    )
    assert not r.ok and "ss -ltnp: not" in (r.error or "") and r.fix


@pytest.fixture
def listener() -> Iterator[int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


def test_local_ss(listener: int, local_host: LocalHost) -> None:
    if not shutil.which("ss"):
        pytest.skip("no ss here")
    r = SPEC.call(local_host, {"port": listener})
    assert r.source == "ss -ltnp" and r.port_free is False
    mine = [x for x in r.listeners if x.port == listener]
    assert mine and mine[0].addr == "127.0.0.1" and mine[0].pid is not None


def test_local_proc_fallback_like_the_h200(
    listener: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real H200 had no ss, netstat nor lsof: only cat, ls and grep on PATH here."""
    for tool in ("cat", "ls", "grep"):
        (tmp_path / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    monkeypatch.setenv("PATH", str(tmp_path))
    r = SPEC.call(LocalHost(), {"port": listener})
    assert r.ok and r.source == "/proc/net/tcp" and r.port_free is False
    mine = [x for x in r.listeners if x.port == listener]
    import os

    assert mine[0].pid == os.getpid() and mine[0].process
    free = SPEC.call(LocalHost(), {"port": 1})
    assert free.port_free is True and "# port 1 is free" in free.lines()
