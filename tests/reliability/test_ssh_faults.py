"""SSH faults tests/test_ssh_host.py does not already cover, against the real test sshd.

Covered there (not repeated): unknown and changed host key, refused auth, closed port, a
silent server, a hanging command, a gigabyte flood (tracemalloc), dropped connections and sshd
killed mid-command. Added here: the process's real RSS across repeated floods (paramiko's and
the kernel's buffers are invisible to tracemalloc), a host that silently drops every packet
(a network namespace whose link drops all egress), and an investigation that goes on when some
of the host's commands hang.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.runner import investigate
from agent.settings import Budget, Settings
from tests.reliability._figures import figure, rss_kb
from tests.sshd import Sshd, start_sshd
from tools.ssh_host import SSHHost

ROOT = Path(__file__).resolve().parents[2]
REAL_OOM = ROOT / "tests" / "fixtures" / "logs" / "cuda-oom.too-big.log"


@pytest.fixture
def own_sshd() -> Iterator[Sshd]:
    server = start_sshd()
    yield server
    server.stop()


def test_repeated_floods_keep_rss_bounded(ssh_host: SSHHost) -> None:
    ssh_host.run("true")
    ssh_host.run("yes pivot | head -c 50M", max_bytes=200_000)  # warm allocator and buffers
    before = rss_kb()
    t0 = time.monotonic()
    for i in range(10):
        r = ssh_host.run(f"yes flood{i} | head -c 2G", max_bytes=200_000)
        assert r.truncated and len(r.stdout) == 200_000, r.error
        assert "test-sshd" in (r.error or "") and r.fix
    grown_mb = (rss_kb() - before) / 1024
    elapsed = time.monotonic() - t0
    figure("ssh flood RSS", floods=10, each="2 GB offered", rss_growth_mb=round(grown_mb, 1),
           seconds=round(elapsed, 1))  # fmt: skip
    assert grown_mb < 30, f"RSS grew {grown_mb:.1f} MB over 10 floods"
    assert elapsed < 15


def _sh(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=10)


@contextlib.contextmanager
def _netns_sshd(server: Sshd) -> Iterator[tuple[str, int, str]]:
    """A second sshd (same keys) inside a fresh network namespace behind a veth pair.

    Yields (address, port, our end of the link). Skips with the reason when namespaces or
    links cannot be made here (no root, no CAP_NET_ADMIN, no `ip`).
    """
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        pytest.skip("packet-drop test needs root with `ip` and `tc` (network namespaces)")
    tag = f"pv{os.getpid() % 100000}"
    ns, ours, theirs = f"{tag}ns", f"{tag}a", f"{tag}b"
    net = 100 + os.getpid() % 150
    addr = f"10.213.{net}.2"
    steps = [
        ("ip", "netns", "add", ns),
        ("ip", "link", "add", ours, "type", "veth", "peer", "name", theirs, "netns", ns),
        ("ip", "addr", "add", f"10.213.{net}.1/30", "dev", ours),
        ("ip", "link", "set", ours, "up"),
        ("ip", "-n", ns, "addr", "add", f"{addr}/30", "dev", theirs),
        ("ip", "-n", ns, "link", "set", theirs, "up"),
        ("ip", "-n", ns, "link", "set", "lo", "up"),
    ]
    proc = None
    try:
        for argv in steps:
            r = _sh(*argv)
            if r.returncode != 0:
                pytest.skip(f"cannot build a network namespace here ({' '.join(argv)}: "
                            f"{r.stderr.strip()})")  # fmt: skip
        cfg = server.root / "sshd_config.netns"
        cfg.write_text(
            server.config.read_text()
            .replace("ListenAddress 127.0.0.1", f"ListenAddress {addr}")
            .replace("sshd.pid", "sshd-netns.pid")
        )
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, "/usr/sbin/sshd", "-D", "-e", "-f", str(cfg)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        yield addr, server.port, ours
    finally:
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait(5)
        _sh("ip", "link", "del", ours)
        _sh("ip", "netns", "del", ns)


def test_host_that_drops_every_packet(own_sshd: Sshd, tmp_path: Path) -> None:
    with _netns_sshd(own_sshd) as (addr, port, link):
        pub = own_sshd.host_key.with_suffix(".pub").read_text().split()
        kh = tmp_path / "known_hosts"
        kh.write_text(f"[{addr}]:{port} {pub[0]} {pub[1]}\n")
        kw = {
            "hostname": addr, "port": port, "user": own_sshd.user,
            "key_filename": str(own_sshd.client_key), "known_hosts": str(kh),
            "ssh_config_path": "/dev/null", "allow_agent": False, "connect_timeout": 2.0,
        }  # fmt: skip
        up = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the namespaced sshd takes a moment to listen
            h = SSHHost("gpu-lossy", **kw)
            up = h.run("echo up", timeout=3)
            h.close()
            if up.ok:
                break
            time.sleep(0.2)
        assert up is not None and up.ok, up.error if up else "never tried"

        host = SSHHost("gpu-lossy", **kw)
        assert host.run("true").ok
        r = _sh("tc", "qdisc", "add", "dev", link, "root", "pfifo", "limit", "0")
        if r.returncode != 0:
            pytest.skip(f"cannot drop packets on the link here: {r.stderr.strip()}")
        before = rss_kb()
        # An established connection: the command's packets vanish; the timeout still holds.
        t0 = time.monotonic()
        mid = host.run("echo hi", timeout=2)
        mid_s = time.monotonic() - t0
        assert not mid.ok and "gpu-lossy" in (mid.error or "") and mid.fix, mid
        assert mid_s < 2 + 3, f"a command on a lossy host took {mid_s:.1f}s past a 2s timeout"
        # A new connection: refused fast by the connect timeout, naming host and fix.
        fresh = SSHHost("gpu-lossy", **kw)
        t0 = time.monotonic()
        cold = fresh.run("true", timeout=2)
        cold_s = time.monotonic() - t0
        fresh.close()
        assert not cold.ok and "gpu-lossy" in (cold.error or "") and cold.fix, cold
        assert cold_s < 2 + 3, f"connecting to a lossy host took {cold_s:.1f}s"
        grown_mb = (rss_kb() - before) / 1024
        # The link heals: the host is usable again without a restart of anything.
        _sh("tc", "qdisc", "del", "dev", link, "root")
        back = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            back = host.run("echo back", timeout=3)
            if back.ok:
                break
        host.close()
        figure("ssh packet drop", established_cmd_s=round(mid_s, 2), new_conn_s=round(cold_s, 2),
               rss_growth_mb=round(grown_mb, 1), recovered=bool(back and back.ok))  # fmt: skip
        assert back is not None and back.ok and back.stdout == "back\n", back
        assert grown_mb < 20


def test_investigation_goes_on_when_some_commands_hang(
    own_sshd: Sshd, ssh_host_factory, tmp_path: Path
) -> None:
    """dmesg never returns on this host (a stuck driver); each tool waits its own 15 s timeout,
    so one hanging command is enough to show the run goes on and nothing is left behind."""
    for name in ("dmesg",):
        script = own_sshd.fake_bin / name
        script.write_text("#!/bin/sh\nexec sleep 1000\n")
        script.chmod(0o755)
    log = own_sshd.scratch / "server.log"
    log.write_text("INFO starting server\n" + REAL_OOM.read_text())
    log.chmod(0o644)
    host = ssh_host_factory(alias="gpu-stuck", server=own_sshd)
    settings = Settings(home=tmp_path / "home", budget=Budget(max_seconds=60))
    t0 = time.monotonic()
    r = investigate(host, "my server died at start, why?", settings=settings, logs=[str(log)])
    elapsed = time.monotonic() - t0
    figure("investigation with hanging commands", status=r.status, root_cause=r.root_cause,
           seconds=round(elapsed, 1))  # fmt: skip
    assert r.status != "error" and r.status in ("concluded", "insufficient_evidence")
    assert r.root_cause and any("CUDA out of memory" in e.line for e in r.evidence)
    assert elapsed < 60
    # Nothing of ours is left running on the host.
    time.sleep(0.5)
    left = host.run("pgrep -f 'sleep 100[0]' || true")  # [0]: not this shell's own line
    assert left.ok and left.stdout.strip() == "", left.stdout
