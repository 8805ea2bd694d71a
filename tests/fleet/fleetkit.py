"""A fleet of real hosts on loopback for tests and bench/fleet_sweep.py.

Every answering host is its own real OpenSSH sshd (tests/sshd.py) on its own port, with its own
host key, known_hosts and fake `nvidia-smi`; they are started concurrently. Hosts that do not
answer are real sockets too:
- `refused`: a port nobody listens on (connect refused at once);
- `silent`: a listener that accepts and never says a word (no SSH banner);
- `blackhole`: a listener with a full backlog, so the kernel drops every SYN (packets lost).
`~/.ssh/config` gets one alias per host and `$PIVOT_HOME/fleet.yaml` the groups, so the fleet
is reached exactly as an operator's would be: by alias, through paramiko's SSHConfig.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tests.sshd import Sshd, free_port, start_sshd

#: An `nvidia-smi` that answers after `delay` seconds (a slow driver), then replays the H200.
SLOW_NVIDIA_SMI = """#!/bin/sh
sleep {delay}
exec "$(dirname "$0")/nvidia-smi-h200-fixture-replay" "$@"
"""

#: The log of an unhealthy host, by the label the rulebook must conclude from it.
FAILURES = {
    "cuda_oom_runtime": (
        "[2026-01-01 10:00:00] server_args=ServerArgs(model_path='/models/x')\n"
        "Traceback (most recent call last):\n"
        '  File "/app/run.py", line 1, in <module>\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 139.80 GiB of which 1.00 GiB is free.\n"
    ),
    "port_in_use": "INFO starting\nOSError: [Errno 98] Address already in use\n",
}


@dataclass
class Fleet:
    """The running fleet; `stop()` ends every process and socket it started."""

    root: Path
    ssh_config: Path
    fleet_file: Path
    home: Path
    servers: dict[str, Sshd] = field(default_factory=dict)
    dead: dict[str, str] = field(default_factory=dict)  # alias -> refused | silent | blackhole
    unhealthy: dict[str, str] = field(default_factory=dict)  # alias -> expected label
    slow: dict[str, float] = field(default_factory=dict)  # alias -> nvidia-smi delay
    _sockets: list[socket.socket] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def aliases(self) -> list[str]:
        return list(self.servers) + list(self.dead)

    def log_template(self) -> str:
        return str(self.root / "logs" / "{host}" / "server.log")

    def env(self, pivot_home: Path) -> dict[str, str]:
        """The environment of a `pivot` subprocess that sees this fleet as its own."""
        env = {**os.environ, "HOME": str(self.home), "PIVOT_HOME": str(pivot_home)}
        env.pop("SSH_AUTH_SOCK", None)
        env.pop("PIVOT_SSH_TRUST_ON_FIRST_USE", None)
        return env

    def stop(self) -> None:
        self._stop.set()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()
        for server in self.servers.values():
            server.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def _silent_listener(fleet: Fleet) -> int:
    """Accepts every connection and never answers (a hung sshd, a wrong service)."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(64)
    lsock.settimeout(0.2)
    fleet._sockets.append(lsock)

    def serve() -> None:
        while not fleet._stop.is_set():
            try:
                conn, _ = lsock.accept()
            except (TimeoutError, OSError):
                continue
            fleet._sockets.append(conn)

    threading.Thread(target=serve, daemon=True, name="silent-host").start()
    return lsock.getsockname()[1]


def _blackhole(fleet: Fleet) -> int:
    """A port whose SYNs the kernel drops: backlog 0, filled once, never accepted."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(0)
    port = lsock.getsockname()[1]
    fleet._sockets.append(lsock)
    for _ in range(4):
        s = socket.socket()
        s.settimeout(0.2)
        fleet._sockets.append(s)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            return port  # the queue is full: from now on SYNs are dropped
    raise RuntimeError("could not fill the blackhole's backlog")


def start_fleet(
    healthy: int,
    unhealthy: int = 0,
    slow: dict[int, float] | None = None,
    dead: tuple[str, ...] = (),
    group: str = "gpu",
) -> Fleet:
    """`healthy + unhealthy` real sshd hosts (node-01, ...), `slow` = {index: nvidia-smi delay},
    plus one non-answering host per entry of `dead` (refused | silent | blackhole)."""
    root = Path(tempfile.mkdtemp(prefix="pivot-fleet-"))
    root.chmod(0o755)
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    fleet = Fleet(
        root=root,
        ssh_config=home / ".ssh" / "config",
        fleet_file=root / "pivot-home" / "fleet.yaml",
        home=home,
    )
    n = healthy + unhealthy
    names = [f"node-{i + 1:02d}" for i in range(n)]
    try:
        # the first alone: it may create the SSH test user, which must not race with itself
        if n:
            fleet.servers[names[0]] = start_sshd()
        with ThreadPoolExecutor(min(8, max(1, n))) as pool:
            futures = [pool.submit(start_sshd) for _ in names[1:]]
        failed: BaseException | None = None
        for name, fut in zip(names[1:], futures, strict=True):
            try:
                fleet.servers[name] = fut.result()  # kept even if another failed: stop() ends it
            except BaseException as exc:
                failed = exc
        if failed is not None:
            raise failed
        labels = list(FAILURES)
        for i, (alias, server) in enumerate(fleet.servers.items()):
            log = root / "logs" / alias / "server.log"
            log.parent.mkdir(parents=True)
            text = ""
            if i >= healthy:
                label = labels[(i - healthy) % len(labels)]
                fleet.unhealthy[alias] = label
                text = FAILURES[label]
            log.write_text(text)
            delay = (slow or {}).get(i)
            if delay:
                fleet.slow[alias] = delay
                smi = server.fake_bin / "nvidia-smi"
                smi.unlink()
                smi.write_text(SLOW_NVIDIA_SMI.format(delay=delay))
                smi.chmod(0o755)
        for i, kind in enumerate(dead):
            alias = f"down-{i + 1:02d}-{kind}"
            fleet.dead[alias] = kind
        _write_config(fleet)
        _chown_logs(fleet)
    except BaseException:
        fleet.stop()
        raise
    fleet.fleet_file.parent.mkdir(parents=True, exist_ok=True)
    fleet.fleet_file.write_text(
        f"groups:\n  {group}: [{', '.join(fleet.aliases)}]\n"
        f"  answering: [{', '.join(fleet.servers)}]\n"
    )
    return fleet


def _write_config(fleet: Fleet) -> None:
    known = fleet.home / ".ssh" / "known_hosts"
    blocks, kh = [], []
    for alias, s in fleet.servers.items():
        kh.append(s.known_hosts.read_text())
        blocks.append(
            f"Host {alias}\n  HostName {s.host}\n  Port {s.port}\n  User {s.user}\n"
            f"  IdentityFile {s.client_key}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {known}\n"
        )
    for alias, kind in fleet.dead.items():
        port = {"refused": free_port, "silent": lambda: _silent_listener(fleet)}.get(
            kind, lambda: _blackhole(fleet)
        )()
        user = pwd.getpwuid(os.geteuid()).pw_name
        blocks.append(f"Host {alias}\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n")
    fleet.ssh_config.write_text("".join(blocks))
    known.write_text("".join(kh))


def _chown_logs(fleet: Fleet) -> None:
    """The SSH user must read the logs: make the tree world-readable."""
    for path in [fleet.root / "logs", *(fleet.root / "logs").rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


@contextlib.contextmanager
def running_fleet(*args: object, **kwargs: object) -> Iterator[Fleet]:
    fleet = start_fleet(*args, **kwargs)  # type: ignore[arg-type]
    try:
        yield fleet
    finally:
        fleet.stop()
