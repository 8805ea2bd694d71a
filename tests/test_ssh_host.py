"""SSHHost against a REAL OpenSSH sshd: behaviour, failure modes and their words."""

from __future__ import annotations

import logging
import socket
import subprocess
import threading
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import paramiko
import pytest

from cards.replay import ReplayHost
from tests.sshd import Sshd, free_port, start_sshd
from tools import hosts
from tools.local_host import LocalHost
from tools.ssh_host import SSHHost


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty HOME, so the real ~/.ssh never decides a test."""
    h = tmp_path / "home"
    (h / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return h


@pytest.fixture
def own_sshd() -> Sshd:
    """A private sshd for tests that kill it."""
    server = start_sshd()
    yield server
    server.stop()


def _keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def _remote_alive(host: SSHHost, pattern: str) -> bool:
    r = host.run(f"pgrep -f '{pattern}'")
    return r.rc == 0


# -- basics ------------------------------------------------------------------------------------
def test_run_returns_rc_stdout_stderr(ssh_host: SSHHost) -> None:
    r = ssh_host.run("echo out; echo err >&2; exit 3")
    assert (r.rc, r.stdout, r.stderr, r.error) == (3, "out\n", "err\n", None)
    assert r.host == "test-sshd" and not r.ok
    missing = ssh_host.run("no-such-program-xyz --version")
    assert missing.missing_command and "not found" in missing.stderr


def test_commands_run_in_a_non_login_posix_shell(ssh_host: SSHHost, sshd: Sshd) -> None:
    r = ssh_host.run("echo $0; echo $PATH")
    assert r.ok, r
    first, path = r.stdout.splitlines()[:2]
    assert first == "sh"  # a login shell would be "-sh" and read ~/.profile
    assert path.startswith(str(sshd.fake_bin))


def test_fake_nvidia_smi_replays_real_captures(ssh_host: SSHHost, sshd: Sshd) -> None:
    q = "nvidia-smi --query-gpu=index,name,memory.used,memory.free,memory.total,utilization.gpu --format=csv,noheader"
    fixtures = Path(__file__).parent / "fixtures" / "h200"
    assert ssh_host.run(q).stdout == (fixtures / "query-gpu.idle.csv").read_text()
    sshd.set_gpu_state("busy")
    try:
        assert ssh_host.run(q).stdout == (fixtures / "query-gpu.busy.csv").read_text()
        assert ssh_host.run("nvidia-smi").stdout == (fixtures / "nvidia-smi.busy.txt").read_text()
        apps = ssh_host.run(
            "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv"
        )
        assert apps.stdout == (fixtures / "query-compute-apps.busy.csv").read_text()
    finally:
        sshd.set_gpu_state("idle")


def test_read_tail_of_a_huge_file_reads_only_the_tail(ssh_host: SSHHost, sshd: Sshd) -> None:
    big = sshd.scratch / "huge.log"
    with big.open("wb") as fh:  # sparse: 4 GiB of holes, then the line we want
        fh.truncate(4 << 30)
        fh.seek(0, 2)
        fh.write(b"\nRuntimeError: the last line\n")
    t0 = time.monotonic()
    tail = ssh_host.read_tail(str(big), max_bytes=1000)
    assert time.monotonic() - t0 < 1.0
    assert tail.error is None and tail.exists
    assert tail.size == (4 << 30) + 29 and tail.bytes_read == 1000 == len(tail.data)
    assert tail.data.endswith(b"RuntimeError: the last line\n")
    big.unlink()
    gone = ssh_host.read_tail(str(big))
    assert not gone.exists and "does not exist on test-sshd" in (gone.error or "") and gone.fix


def test_write_file_is_atomic_and_keeps_mode(ssh_host: SSHHost, sshd: Sshd) -> None:
    target = sshd.scratch / "launch.env"
    assert ssh_host.write_file(str(target), b"NCCL_DEBUG=INFO\n", mode=0o640).ok
    assert target.read_bytes() == b"NCCL_DEBUG=INFO\n" and target.stat().st_mode & 0o777 == 0o640
    # A reader polling the file must only ever see one whole version, never a mix or a prefix.
    versions = {b"A" * 300_000, b"B" * 300_000}
    seen: set[bytes] = set()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.add(target.read_bytes())

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(10):
            assert ssh_host.write_file(str(target), sorted(versions)[i % 2]).ok
    finally:
        stop.set()
        t.join()
    assert seen <= versions | {b"NCCL_DEBUG=INFO\n"}
    assert target.stat().st_mode & 0o777 == 0o640  # mode of the replaced file kept
    assert not [p for p in sshd.scratch.iterdir() if p.name.startswith(".pivot-")]
    bad = ssh_host.write_file("/no/such/dir/x.env", b"x")
    assert not bad.ok and "test-sshd" in (bad.error or "") and bad.fix


# -- one connection, many channels -------------------------------------------------------------
def test_one_transport_serves_twenty_calls(ssh_host: SSHHost) -> None:
    first = ssh_host.transport()
    for i in range(20):
        assert ssh_host.run(f"echo {i}").stdout == f"{i}\n"
    assert ssh_host.transport() is first and ssh_host.connects == 1


def test_eight_concurrent_reads_share_one_connection(ssh_host: SSHHost) -> None:
    ssh_host.run("true")
    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: ssh_host.run(f"sleep 0.3; echo {i}"), range(8)))
    elapsed = time.monotonic() - t0
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(8)]
    assert all(r.ok for r in results) and ssh_host.connects == 1
    assert elapsed < 8 * 0.3 / 2, f"reads did not overlap: {elapsed:.2f}s"


def test_more_threads_than_sessions_are_queued_not_refused(ssh_host: SSHHost) -> None:
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda i: ssh_host.run("sleep 0.1; echo x"), range(16)))
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]


# -- host keys -----------------------------------------------------------------------------------
def test_unknown_host_key_is_refused_with_the_fix(
    ssh_host_factory, sshd: Sshd, home: Path, tmp_path: Path
) -> None:
    kh = tmp_path / "empty_known_hosts"
    kh.write_text("")
    h = ssh_host_factory(known_hosts=str(kh))
    r = h.run("true")
    assert not r.ok and h.connects == 0
    assert "test-sshd" in r.error and "'true'" in r.error and "not in" in r.error
    assert f"ssh-keyscan -p {sshd.port} 127.0.0.1 >> {kh}" in r.fix
    assert "trust_on_first_use" in r.fix
    # The fix, as written, works.
    subprocess.run(["sh", "-c", r.fix.split("`")[1]], check=True, capture_output=True)
    assert ssh_host_factory(known_hosts=str(kh)).run("true").ok


def test_changed_host_key_is_refused(
    ssh_host_factory, sshd: Sshd, home: Path, tmp_path: Path
) -> None:
    other = _keygen(tmp_path / "other_host_key")
    kind, b64 = Path(f"{other}.pub").read_text().split()[:2]
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{sshd.port} {kind} {b64}\n")
    r = ssh_host_factory(known_hosts=str(kh)).run("true")
    assert not r.ok and "CHANGED" in r.error and "test-sshd" in r.error
    assert "ssh-keygen -R" in r.fix
    # Even trust-on-first-use never overrides a changed key.
    r2 = ssh_host_factory(known_hosts=str(kh), trust_on_first_use=True).run("true")
    assert not r2.ok and "CHANGED" in r2.error


def test_trust_on_first_use_is_explicit_logged_and_recorded(
    ssh_host_factory, sshd: Sshd, home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kh = tmp_path / "tofu_known_hosts"
    with caplog.at_level(logging.WARNING, logger="pivot.ssh"):
        assert ssh_host_factory(known_hosts=str(kh), trust_on_first_use=True).run("true").ok
    assert any("trusting" in m and "SHA256:" in m for m in caplog.messages)
    recorded = kh.read_text()
    assert recorded.startswith(f"[127.0.0.1]:{sshd.port} ssh-ed25519 ")
    # Now known: a strict host accepts it.
    assert ssh_host_factory(known_hosts=str(kh)).run("true").ok


# -- reaching and logging in -------------------------------------------------------------------
def test_wrong_key_gives_a_clear_auth_error(ssh_host_factory, tmp_path: Path) -> None:
    wrong = _keygen(tmp_path / "wrong_key")
    r = ssh_host_factory(key_filename=str(wrong)).run("true")
    assert not r.ok and "refused our authentication" in r.error and "test-sshd" in r.error
    assert "authorized_keys" in r.fix and "IdentityFile" in r.fix


def test_closed_port_fails_fast_and_clearly(ssh_host_factory) -> None:
    port = free_port()
    t0 = time.monotonic()
    r = ssh_host_factory(alias="gpu-down", port=port).run("nvidia-smi", timeout=5)
    assert time.monotonic() - t0 < 2
    assert not r.ok and "gpu-down" in r.error and "'nvidia-smi'" in r.error
    assert "refused" in r.error.lower() and f"port {port}" in r.fix


def test_silent_server_times_out_within_the_connect_timeout(ssh_host_factory) -> None:
    """A port that accepts but never speaks SSH (a hung sshd, a wrong service)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    try:
        t0 = time.monotonic()
        r = ssh_host_factory(alias="hung", port=srv.getsockname()[1], connect_timeout=1.0).run(
            "true"
        )
        assert time.monotonic() - t0 < 2.5
        assert not r.ok and "hung" in r.error and r.fix
    finally:
        srv.close()


# -- commands that misbehave -------------------------------------------------------------------
def test_hanging_command_times_out_and_dies_on_the_host(ssh_host: SSHHost) -> None:
    t0 = time.monotonic()
    r = ssh_host.run("sleep 100.37", timeout=1)
    assert time.monotonic() - t0 < 1.6
    assert r.timed_out and not r.ok and "timeout" in r.error and "test-sshd" in r.error and r.fix
    deadline = time.monotonic() + 3
    while _remote_alive(ssh_host, "sleep 100[.]37") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _remote_alive(ssh_host, "sleep 100[.]37"), "the remote sleep outlived its timeout"


def test_gigabyte_flood_is_cut_fast_with_bounded_memory(ssh_host: SSHHost) -> None:
    tracemalloc.start()
    t0 = time.monotonic()
    r = ssh_host.run("yes pivot | head -c 3G", max_bytes=200_000)
    elapsed = time.monotonic() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert r.truncated and len(r.stdout) == 200_000 and r.stdout.startswith("pivot\n")
    assert elapsed < 2 and peak < 20e6, (elapsed, peak)
    assert "200000 bytes" in r.error and r.fix
    err = ssh_host.run("cat /dev/zero >&2", max_bytes=100_000)
    assert err.truncated and len(err.stderr) == 100_000
    time.sleep(0.3)
    assert not _remote_alive(ssh_host, "cat /dev/zer[o]")


# -- dropped connections -----------------------------------------------------------------------
def test_read_only_command_reconnects_once_after_a_drop(ssh_host_factory, own_sshd: Sshd) -> None:
    h = ssh_host_factory(server=own_sshd)
    assert h.run("true").ok and h.connects == 1
    results = []
    t = threading.Thread(target=lambda: results.append(h.run("sleep 1; echo done")))
    t.start()
    time.sleep(0.4)
    own_sshd.kill_connections()  # the listener lives on, the connection dies mid-command
    t.join()
    assert results[0].ok and results[0].stdout == "done\n" and h.connects == 2


def test_changing_command_is_not_rerun_after_a_drop(ssh_host_factory, own_sshd: Sshd) -> None:
    h = ssh_host_factory(server=own_sshd)
    assert h.run("true").ok
    results = []
    t = threading.Thread(target=lambda: results.append(h.run("sleep 1", readonly=False)))
    t.start()
    time.sleep(0.4)
    own_sshd.kill_connections()
    t.join()
    r = results[0]
    assert not r.ok and "dropped" in r.error
    assert "'sleep 1'" in r.error and "not re-run" in r.fix and h.connects == 1
    assert h.run("echo back").stdout == "back\n"  # the next call reconnects


def test_sshd_killed_mid_command_gives_a_clear_error(ssh_host_factory, own_sshd: Sshd) -> None:
    h = ssh_host_factory(alias="gpu-7", server=own_sshd)
    assert h.run("true").ok
    results = []
    t = threading.Thread(target=lambda: results.append(h.run("sleep 30", timeout=20)))
    t.start()
    time.sleep(0.4)
    t0 = time.monotonic()
    own_sshd.stop()  # listener and connections gone: the host is down
    t.join()
    assert time.monotonic() - t0 < 5
    r = results[0]
    assert not r.ok and "gpu-7" in r.error and "'sleep 30'" in r.error
    assert "dropped" in r.error and r.fix


# -- ~/.ssh/config and ProxyJump ---------------------------------------------------------------
def test_ssh_config_alias_and_proxy_jump(sshd: Sshd, home: Path) -> None:
    cfg = home / ".ssh" / "config"
    common = f"  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n  IdentityFile {sshd.client_key}\n"
    cfg.write_text(
        f"Host jump-box\n{common}\nHost gpu-node\n{common}  ProxyJump jump-box\n\nHost *\n  ServerAliveInterval 30\n"
    )
    h = SSHHost("gpu-node", known_hosts=str(sshd.known_hosts), allow_agent=False)
    try:
        assert h.target.proxy_jump == "jump-box" and h.target.user == sshd.user
        r = h.run("echo via-jump")
        assert r.ok and r.stdout == "via-jump\n"
        assert isinstance(h.transport().sock, paramiko.Channel)  # tunnelled, not a TCP socket
        assert h._jump is not None and h._jump.connects == 1
    finally:
        h.close()
    assert hosts.configured_hosts() == ["gpu-node", "jump-box"]


# -- tools.hosts -------------------------------------------------------------------------------
def test_resolve_host_kinds_and_cache(sshd: Sshd, tmp_path: Path) -> None:
    assert isinstance(hosts.resolve_host(local=True), LocalHost)
    card = tmp_path / "tiny-card.yaml"
    card.write_text("id: tiny-card\ntitle: t\nsource: test\nengine: other\nsymptom: s\n")
    assert isinstance(hosts.resolve_host(replay=str(card)), ReplayHost)
    with pytest.raises(ValueError, match="exactly one"):
        hosts.resolve_host()
    with pytest.raises(ValueError, match="--host and --local"):
        hosts.resolve_host("a", local=True)
    kw = {
        "hostname": sshd.host,
        "port": sshd.port,
        "user": sshd.user,
        "key_filename": str(sshd.client_key),
        "known_hosts": str(sshd.known_hosts),
        "allow_agent": False,
    }
    try:
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda _: hosts.resolve_host("cached-box", **kw), range(8)))
        assert all(g is got[0] for g in got)
        assert got[0].run("true").ok and hosts.resolve_host("cached-box", **kw).connects == 1
    finally:
        hosts.close_all()


# -- tools.sweep -------------------------------------------------------------------------------
def test_sweep_runs_tools_at_once_in_order_and_survives_a_crashing_tool(
    ssh_host: SSHHost, sshd: Sshd
) -> None:
    from pydantic import BaseModel

    from tools.base import ToolResult, ToolSpec
    from tools.sweep import run_commands_concurrently, run_concurrently

    class NoArgs(BaseModel):
        pass

    def slow_echo(word: str) -> ToolSpec:
        def fn(host, args: NoArgs) -> ToolResult:
            r = host.run(f"sleep 0.3; echo {word}")
            return ToolResult(host=host.name, ok=r.ok, error=None if r.ok else r.error)

        return ToolSpec(word, "echo after a pause", NoArgs, ToolResult, fn)

    def crash(host, args: NoArgs) -> ToolResult:
        raise RuntimeError("parser bug")

    calls = [(slow_echo(w), None) for w in ("gpu", "ps", "log")]
    calls.insert(1, (ToolSpec("broken", "crashes", NoArgs, ToolResult, crash), {}))
    t0 = time.monotonic()
    results = run_concurrently(ssh_host, calls)
    assert time.monotonic() - t0 < 0.3 * 3 * 0.8
    assert [r.ok for r in results] == [True, False, True, True]
    assert "broken" in results[1].error and "parser bug" in results[1].error and results[1].fix
    outs = run_commands_concurrently(ssh_host, ["echo a", "echo b", "echo c"])
    assert [o.stdout for o in outs] == ["a\n", "b\n", "c\n"] and ssh_host.connects == 1


def test_key_from_a_real_ssh_agent(
    ssh_host_factory, sshd: Sshd, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 5
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        subprocess.run(["ssh-add", "-q", str(sshd.client_key)], check=True)
        h = ssh_host_factory(key_filename=None, allow_agent=True)
        assert h.target.identity_files == []  # no key file: only the agent can log in
        assert h.run("echo agent").stdout == "agent\n"
    finally:
        agent.terminate()
        agent.wait()
