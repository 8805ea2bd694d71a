"""Log tools over a REAL sshd as an unprivileged user, on real files and real writer processes.

What replay cannot show: a loader printing one shard every 4 s is seen growing only if the
read waits; a 2 GB log is searched from its launch in seconds over SSH; the kernel log and
other users' sockets are unreadable for a non-root user and must say so. These tests need the
real sshd and FAIL (not skip) when it cannot start.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sshd import Sshd, start_sshd
from tools.dmesg import SPEC as DMESG
from tools.log_search import SPEC as SEARCH
from tools.log_tail import SPEC as TAIL
from tools.ports import SPEC as PORTS
from tools.process_io import SPEC as PROCESS_IO
from tools.ssh_host import SSHHost

WRITER = r"""
import sys, time
path, n, dt = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with open(path, "a") as f:
    f.write("[2025-06-01 10:00:00] server_args=ServerArgs(model_path='/models/x', tp_size=2)\n")
    f.flush()
    for i in range(1, n + 1):
        f.write(f"\rLoading safetensors checkpoint shards:   {i * 100 // 200}% Completed | "
                f"{i}/200 [00:{i * 4:02d}<13:00,  4.00s/it]")
        f.flush()
        time.sleep(dt)
"""


@pytest.fixture(scope="module")
def live_sshd() -> Iterator[Sshd]:
    server = start_sshd()  # no skip: these tests are about the live path
    yield server
    server.stop()


@pytest.fixture
def host(live_sshd: Sshd) -> Iterator[SSHHost]:
    h = SSHHost(
        "live-sshd",
        hostname=live_sshd.host,
        port=live_sshd.port,
        user=live_sshd.user,
        key_filename=str(live_sshd.client_key),
        known_hosts=str(live_sshd.known_hosts),
        ssh_config_path="/dev/null",
        allow_agent=False,
        connect_timeout=5.0,
    )
    yield h
    h.close()


@pytest.fixture
def scratch(live_sshd: Sshd, request: pytest.FixtureRequest) -> Path:
    d = live_sshd.scratch / request.node.name[:40]
    d.mkdir(mode=0o755, exist_ok=True)
    d.chmod(0o755)
    return d


def test_slow_loader_grows_within_the_window_with_an_eta(host: SSHHost, scratch: Path) -> None:
    log = scratch / "loader.log"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(log), "6", "4"])
    try:
        time.sleep(0.5)  # the launch line and shard 1 are out; shard 2 comes ~3.5 s later
        t = time.monotonic()
        res = TAIL.call(host, {"path": str(log), "watch_s": 6})
        took = time.monotonic() - t
    finally:
        proc.kill()
        proc.wait()
    assert res.ok and res.watched and res.grew is True, res.lines()
    assert 2.5 < res.waited_s < 6.0 and took < 7.0  # stopped at the growth, not at 6 s
    p = res.last_progress
    assert p is not None and (p.done, p.total, p.s_per_item) == (2, 200, 4.0)
    assert p.eta_s == pytest.approx(198 * 4.0)
    assert any("shard 2/200 at 4.0 s each: about 13 minutes left" in ln for ln in res.lines())


BURSTS = r"""
import sys, time
path, gap = sys.argv[1], float(sys.argv[2])
def line(msg):
    with open(path, "a") as f:
        f.write(time.strftime("[%Y-%m-%d %H:%M:%S TP0] ") + msg + "\n")
line("Prefill batch, #new-seq: 1, #new-token: 8192, #queue-req: 27")
time.sleep(gap)  # a long prefill: the log has gone quiet before and went on
line("Prefill batch, #new-seq: 0, #new-token: 8192, #queue-req: 27")
time.sleep(gap)
line("Decode batch, #running-req: 4, #token: 201345, gen throughput (token/s): 88.12")
"""


def test_a_log_that_went_quiet_before_is_watched_past_that_silence(
    host: SSHHost, scratch: Path
) -> None:
    """Its own lines say the log goes quiet for about 4 s at a time and then goes on: a 2 s
    window would call it stalled; the watch waits for its pace and sees it go on."""
    log = scratch / "bursts.log"
    proc = subprocess.Popen([sys.executable, "-c", BURSTS, str(log), "4"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (not log.exists() or log.read_text().count("\n") < 2):
            time.sleep(0.1)  # the second line is out: the 4 s silence is in the log itself
        res = TAIL.call(host, {"path": str(log), "watch_s": 2})
    finally:
        proc.kill()
        proc.wait()
    assert res.ok and res.grew is True, res.lines()
    assert res.silence_s is not None and res.silence_s >= 3
    assert 2.0 < res.waited_s < 6.0, res.waited_s


READER = r"""
import os, sys, time
fd = int(sys.argv[1])  # opened by the test and passed down: no path permissions involved
print("reading", flush=True)
while True:  # a loader on a slow disk: drop the file from the page cache, read it again slowly
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.lseek(fd, 0, 0)
    while os.read(fd, 1 << 20):
        time.sleep(0.05)
"""


def _repo_scratch(name: str) -> Path:
    """A directory on the checkout's own disk (storage reads are counted there; a tmpfs /tmp
    would serve the file from memory and count nothing)."""
    d = Path(__file__).resolve().parents[2] / ".live-scratch" / name
    d.mkdir(parents=True, exist_ok=True)
    for p in (d, d.parent):
        p.chmod(0o755)
    return d


def test_a_silent_process_reading_from_disk_is_seen_reading(host: SSHHost, live_sshd: Sshd) -> None:
    """/proc/PID/io of a real process (run as the SSH user) re-reading a file off the disk."""
    data = _repo_scratch("io") / "weights.bin"
    data.write_bytes(os.urandom(32 << 20))
    data.chmod(0o644)
    import pwd

    pw = pwd.getpwnam(live_sshd.user)
    fd = os.open(data, os.O_RDONLY)
    py = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    proc = subprocess.Popen(
        [py, "-c", READER, str(fd)], pass_fds=(fd,),
        stdout=subprocess.PIPE, user=pw.pw_uid, group=pw.pw_gid, cwd="/tmp",
    )  # fmt: skip
    os.close(fd)
    try:
        assert proc.stdout is not None and b"reading" in proc.stdout.readline()
        res = PROCESS_IO.call(host, {"pid": proc.pid, "watch_s": 10})
    finally:
        proc.kill()
        proc.wait()
    assert res.ok and res.reading is True, res.lines()
    assert res.line.startswith("read_bytes:") and res.line in res.lines()
    assert res.waited_s < 10  # stopped at the growth


def test_another_users_process_io_is_unknown_with_the_fix(host: SSHHost, live_sshd: Sshd) -> None:
    """As an unprivileged SSH user, a root process's /proc/PID/io is not readable: said so."""
    if live_sshd.user == "root":
        pytest.fail("this module's sshd must log in as an unprivileged user")
    proc = subprocess.Popen(["sleep", "30"])
    try:
        res = PROCESS_IO.call(host, {"pid": proc.pid, "watch_s": 1})
    finally:
        proc.kill()
        proc.wait()
    assert not res.ok and res.reading is None
    assert "root" in (res.fix or ""), res.fix


def test_silent_log_did_not_grow_after_the_window(host: SSHHost, scratch: Path) -> None:
    log = scratch / "silent.log"
    log.write_text("INFO server started\nINFO waiting for requests\n")
    log.chmod(0o644)
    t = time.monotonic()
    res = TAIL.call(host, {"path": str(log), "watch_s": 1.5})
    assert res.ok and res.grew is False and res.grew_bytes == 0
    assert 1.5 <= res.waited_s < 2.5 and time.monotonic() - t < 3.5
    assert any("did NOT grow" in ln for ln in res.lines())


def test_progress_bar_waits_longer_up_to_the_user_limit(
    host: SSHHost, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = scratch / "graphs.log"
    log.write_text("INFO Capture cuda graph begin. This can take up to several minutes.\n")
    log.chmod(0o644)
    monkeypatch.setenv("PIVOT_LIVENESS_MAX_S", "2.5")
    res = TAIL.call(host, {"path": str(log), "watch_s": 1})
    assert res.grew is False and res.window_s == 2.5 and res.waited_s >= 2.5
    assert res.last_progress is not None and res.last_progress.slow_phase


@pytest.fixture(scope="module")
def big_log(live_sshd: Sshd) -> Iterator[Path]:
    """2 GB: one launch, decode noise, the OOM 12 MB before the end, then engine-dead noise."""
    path = live_sshd.scratch / "big2g.log"
    noise = b"".join(
        b"[2025-06-01 10:00:%02d TP0] Decode batch. #running-req: 1, #token: %d, "
        b"gen throughput (token/s): 41.2\n" % (i % 60, i)
        for i in range(9000)
    )
    total = 2_000_000_000
    with open(path, "wb") as fh:
        fh.write(b"[2025-06-01 09:59:00] server_args=ServerArgs(model_path='/m', tp_size=2)\n")
        while fh.tell() < total - 12_000_000:
            fh.write(noise)
        fh.write(
            b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
            b"GPU 0 has a total capacity of 139.81 GiB\n"
        )
        dead = b"[2025-06-01 11:00:00] Scheduler hit an exception; engine dead\n" * 1000
        while fh.tell() < total:
            fh.write(dead)
    path.chmod(0o644)
    yield path
    path.unlink()


def test_2gb_log_oom_12mb_before_the_end_is_found_over_ssh(host: SSHHost, big_log: Path) -> None:
    t = time.monotonic()
    res = SEARCH.call(host, {"path": str(big_log), "pattern": "(?i)out of memory|OutOfMemoryError"})
    took = time.monotonic() - t
    assert res.ok and res.whole_since_launch and res.launch_found, res.lines()[:3]
    assert res.searched_from == 0 and res.bytes_searched == big_log.stat().st_size
    assert [m.line for m in res.matches] == [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 0 has a total capacity of 139.81 GiB"
    ]
    assert res.matches[0].line in res.lines()
    assert took < 15, took  # seconds, not minutes: grep runs on the host, offsets come back


def test_2gb_log_one_launch_is_the_whole_file(host: SSHHost, big_log: Path) -> None:
    """The only marker is the first line: the launch line and the OOM both count."""
    res = SEARCH.call(host, {"path": str(big_log), "pattern": "server_args|OutOfMemoryError"})
    # one launch only: the marker is the first line, so the whole file is this run
    assert res.launch_offset == 0 and res.total_matches == 2


def test_dmesg_as_unprivileged_user_is_unknown_not_empty(host: SSHHost, live_sshd: Sshd) -> None:
    if live_sshd.user == "root":
        pytest.fail("the test sshd logs in as root here; an unprivileged user is needed")
    restrict = Path("/proc/sys/kernel/dmesg_restrict").read_text().strip()
    res = DMESG.call(host)
    if restrict == "1":
        assert not res.ok and not res.readable and res.denied, res.lines()
        text = "\n".join(res.lines())
        assert "UNKNOWN" in text and "unknown because" in text
        assert "sudo dmesg" in text and "adm" in text and "journalctl -k" in text
        assert "read kernel buffer failed: Operation not permitted" in text
        assert res.oom_kills == [] and not any(
            not ln.startswith("# ") for ln in res.lines()
        )  # nothing that reads like a clean, empty kernel log
    else:
        assert res.ok or not res.readable


def test_ss_cannot_name_another_users_listener(host: SSHHost, live_sshd: Sshd) -> None:
    """root's sshd port: as the test user `ss -p` shows the socket but not its process."""
    res = PORTS.call(host, {"port": live_sshd.port})
    assert res.ok and res.port_free is False
    mine = [ln for ln in res.listeners if ln.port == live_sshd.port]
    assert mine and mine[0].pid is None and res.partial and res.owners_unknown >= 1
    text = "\n".join(res.lines())
    assert "unknown because" in text and f"sudo ss -ltnp 'sport = :{live_sshd.port}'" in text


def test_missing_directory_unreadable_and_binary_logs(host: SSHHost, scratch: Path) -> None:
    missing = TAIL.call(host, {"path": str(scratch / "nope.log")})
    assert not missing.ok and missing.problem == "missing"
    assert str(scratch / "nope.log") in (missing.error or "") and missing.fix

    (scratch / "server.log").write_text("INFO hi\n")
    (scratch / "server.log").chmod(0o644)
    d = TAIL.call(host, {"path": str(scratch)})
    assert not d.ok and d.problem == "directory" and "server.log" in (d.error or "")

    secret = scratch / "root-only.log"
    secret.write_text("RuntimeError: secret\n")
    secret.chmod(0o600)
    denied = SEARCH.call(host, {"path": str(secret), "pattern": "Error"})
    assert not denied.ok and denied.problem == "permission_denied", denied.lines()
    assert "owner root" in (denied.error or "") and "mode 600" in (denied.error or "")
    assert "sudo" in (denied.fix or "")

    blob = scratch / "core.bin"
    blob.write_bytes(b"\x7fELF\x02\x01\x01\x00" + os.urandom(200_000))
    blob.chmod(0o644)
    b = TAIL.call(host, {"path": str(blob)})
    assert not b.ok and b.binary and b.tail == []
    assert all(ln.startswith("# ") for ln in b.lines()) and "binary" in b.lines()[0]
