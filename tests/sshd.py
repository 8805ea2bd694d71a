"""Start and stop a REAL OpenSSH sshd on 127.0.0.1 for tests and benchmarks.

Why a real one: paramiko's own server hides bugs a real sshd shows (stack notes #15, #19).
Each instance has its own config, host key, user key, authorized_keys, known_hosts and pid file
under one temporary directory, listens on a free port, and logs in a dedicated user whose shell
is /bin/sh (root's rc files cost ~80 ms a command: stack notes #17). That user's PATH starts
with a copy of tests/fake_bin, so `nvidia-smi` there replays real H200 captures.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
TEST_USER = "pivot-test"
HERE = Path(__file__).resolve().parent
FAKE_BIN = HERE / "fake_bin"
FIXTURES = HERE / "fixtures" / "h200"


class SshdUnavailable(RuntimeError):
    """sshd truly cannot start here (not installed, no permission); tests skip with this."""


@dataclass
class Sshd:
    """A running test sshd and everything a client needs to reach it."""

    port: int
    user: str
    root: Path
    host_key: Path
    client_key: Path
    known_hosts: Path
    fake_bin: Path
    scratch: Path
    config: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    host: str = "127.0.0.1"

    def set_gpu_state(self, state: str) -> None:
        """idle | busy | after: what the fake nvidia-smi on this host replays."""
        (self.fake_bin.parent / "gpu-state").write_text(state + "\n", encoding="ascii")

    @contextlib.contextmanager
    def nvidia_smi_fixture(self, script: str) -> Iterator[Path]:
        """Swap this host's fake `nvidia-smi` for another FIXTURE script (e.g. a two-GPU capture)
        for the duration of the block; the H200 replay link is put back after."""
        link = self.fake_bin / "nvidia-smi"
        target = os.readlink(link)
        variant = self.fake_bin / "nvidia-smi-variant-fixture"
        variant.write_text(script)
        variant.chmod(0o755)
        link.unlink()
        link.symlink_to(variant.name)
        try:
            yield variant
        finally:
            link.unlink()
            link.symlink_to(target)
            variant.unlink()

    def ssh_argv(self, *command: str) -> list[str]:
        """OpenSSH's own client with the same key and known_hosts (for benchmarks and checks)."""
        return [
            "ssh",
            "-F",
            "/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-i",
            str(self.client_key),
            "-p",
            str(self.port),
            f"{self.user}@{self.host}",
            *command,
        ]

    def connection_pids(self) -> list[int]:
        """The per-connection sshd processes (children of the listener), for drop tests."""
        return _descendants(self.proc.pid) if self.proc else []

    def kill_connections(self) -> None:
        """SIGKILL every per-connection sshd: clients see their connection drop."""
        for pid in self.connection_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        if self.proc is None:
            return
        kids = _descendants(self.proc.pid)
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for pid in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc = None
        shutil.rmtree(self.root, ignore_errors=True)


def _descendants(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    out: list[int] = []
    frontier = [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        out += kids
        frontier += kids
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ensure_user() -> str:
    """A dedicated user with /bin/sh; root (or whoever we are) when we cannot create one."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    try:
        pw = pwd.getpwnam(TEST_USER)
    except KeyError:
        r = subprocess.run(
            ["useradd", "--create-home", "--shell", "/bin/sh", "--password", "*", TEST_USER],
            capture_output=True,
        )
        if r.returncode != 0:
            return "root"
        pw = pwd.getpwnam(TEST_USER)
    if pw.pw_shell != "/bin/sh":
        subprocess.run(["usermod", "--shell", "/bin/sh", TEST_USER], check=False)
    # With UsePAM no a locked account ("!") is refused: stack notes #18.
    subprocess.run(["usermod", "--password", "*", TEST_USER], check=False, capture_output=True)
    return TEST_USER


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "pivot-test", "-f", str(path)],
        check=True,
        capture_output=True,
    )


def start_sshd(user: str | None = None, timeout: float = 10.0) -> Sshd:
    """Start a fresh sshd; raises SshdUnavailable only when it truly cannot run here."""
    if not Path(SSHD).exists() or not shutil.which("ssh-keygen"):
        raise SshdUnavailable("OpenSSH sshd/ssh-keygen not installed (run scripts/system-deps.sh)")
    user = user or _ensure_user()
    root = Path(tempfile.mkdtemp(prefix="pivot-sshd-"))
    root.chmod(0o755)
    host_key, client_key = root / "host_key", root / "client_key"
    _keygen(host_key)
    _keygen(client_key)
    fake_bin, fixtures = root / "fake_bin", root / "fixtures" / "h200"
    shutil.copytree(FAKE_BIN, fake_bin, symlinks=True)
    shutil.copytree(FIXTURES, fixtures)
    scratch = root / "scratch"
    scratch.mkdir()
    scratch.chmod(0o1777)
    path = f"{fake_bin}:/usr/local/bin:/usr/bin:/bin"
    auth = root / "authorized_keys"
    auth.write_text(f'environment="PATH={path}" ' + (root / "client_key.pub").read_text())
    auth.chmod(0o644)
    with contextlib.suppress(OSError):
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    log = root / "sshd.log"
    for _ in range(5):
        port = free_port()
        config = root / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"Port {port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {host_key}",
                    f"PidFile {root / 'sshd.pid'}",
                    f"AuthorizedKeysFile {auth}",
                    "StrictModes no",
                    "UsePAM no",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "PermitUserEnvironment yes",
                    f"AllowUsers {user}",
                    "AllowTcpForwarding yes",
                    "MaxSessions 10",
                    "MaxStartups 100",
                    "UseDNS no",
                    "PrintMotd no",
                    "LogLevel INFO",
                    "Subsystem sftp internal-sftp",
                    "",
                ]
            )
        )
        with log.open("ab") as fh:
            proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(config)],
                stdout=fh,
                stderr=fh,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        if _wait_banner(port, proc, timeout):
            break
        proc.kill()
        proc.wait()
    else:
        msg = log.read_text(errors="replace")[-2000:]
        shutil.rmtree(root, ignore_errors=True)
        raise SshdUnavailable(f"sshd did not start: {msg}")
    pub = host_key.with_suffix(".pub").read_text().split()
    known_hosts = root / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {pub[0]} {pub[1]}\n")
    return Sshd(
        port=port,
        user=user,
        root=root,
        host_key=host_key,
        client_key=client_key,
        known_hosts=known_hosts,
        fake_bin=fake_bin,
        scratch=scratch,
        config=config,
        log=log,
        proc=proc,
    )


def _wait_banner(port: int, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                if s.recv(64).startswith(b"SSH-"):
                    return True
        except OSError:
            time.sleep(0.02)
    return False
