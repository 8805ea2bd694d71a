"""The file API's reads of this machine cannot escape: each probe from issue 24, over real HTTP.

A symlink flipped while reading, a FIFO named `*.log`, a hard link to a protected file,
`--read-root /` asked for `/proc/self/environ`, and a binary file: the server is the real app
under uvicorn and every file is real.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from server.auth import ensure_token
from server.file_policy import shipped
from tests.server.conftest import Live, start_live
from tests.sshd import Sshd

SECRET = "TOP-SECRET-0xC0FFEE"


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    d.mkdir()
    (d / "engine.log").write_text("INFO ready\nCUDA out of memory\n")
    return d


def _serve(home: Path, *roots: str) -> Live:
    ensure_token(home)
    return start_live(home, database_url=None, read_roots={"*": [*shipped().read_roots, *roots]})


@pytest.fixture
def srv(tmp_path: Path, logs: Path) -> Iterator[Live]:
    live = _serve(tmp_path / "home", str(logs))
    yield live
    live.stop()


def _get(c: httpx.Client, path: str) -> httpx.Response:
    return c.get("/api/hosts/local/file", params={"path": path})


def test_symlink_flipped_while_reading_never_escapes(srv: Live, tmp_path: Path, logs: Path) -> None:
    """1000 reads of a link that a thread flips between a log, a secret outside the roots and
    the server's own token file: no read returns anything but the log."""
    secret = tmp_path / "shadow"
    secret.write_text(f"root:{SECRET}:19000:0:99999:7:::\n")
    targets = [logs / "engine.log", secret, srv.home / "server-token.json", logs / "engine.log"]
    link = logs / "current.log"
    os.symlink(targets[0], link)
    stop = threading.Event()

    def flip() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            tmp = logs / f".flip-{i}"
            os.symlink(targets[i % len(targets)], tmp)
            os.replace(tmp, link)

    flipper = threading.Thread(target=flip, daemon=True)
    flipper.start()
    statuses: Counter[int] = Counter()
    try:
        with srv.client() as c:
            for _ in range(1000):
                r = _get(c, str(link))
                statuses[r.status_code] += 1
                assert SECRET not in r.text and "digest" not in r.text, r.text
                assert r.status_code in (200, 403, 409), r.text
                if r.status_code == 200:
                    assert r.json()["text"] == "INFO ready\nCUDA out of memory\n"
    finally:
        stop.set()
        flipper.join(timeout=5)
    assert statuses[200] > 0 and statuses[403] + statuses[409] > 0, statuses


def test_fifo_named_log_never_blocks(srv: Live, logs: Path) -> None:
    """50 reads of a FIFO at once each answer at once (415), and /api/health answers throughout."""
    fifo = logs / "stuck.log"
    os.mkfifo(fifo)
    with srv.client() as c, ThreadPoolExecutor(max_workers=50) as pool:
        t0 = time.monotonic()
        futures = [pool.submit(_get, c, str(fifo)) for _ in range(50)]
        assert c.get("/api/health", timeout=5).status_code == 200
        answers = [f.result(timeout=10) for f in futures]
        assert time.monotonic() - t0 < 10
        assert {r.status_code for r in answers} == {415}, answers[0].text
        assert "not a regular file" in answers[0].json()["detail"]
        assert c.get("/api/health", timeout=5).status_code == 200
        assert _get(c, str(logs / "engine.log")).status_code == 200


def test_hard_links_to_protected_or_private_files_refused(srv: Live, logs: Path) -> None:
    private = srv.home.parent / "private-key-material"
    private.write_text(SECRET)
    private.chmod(0o600)
    os.link(srv.home / "memory.db", logs / "db.log")
    os.link(srv.home / "server-token.json", logs / "token-copy.log")
    os.link(private, logs / "innocent.log")
    shared = srv.home.parent / "shared.log"
    shared.write_text("world-readable and hard linked\n")
    shared.chmod(0o644)
    os.link(shared, logs / "shared.log")
    links = [logs / "db.log", logs / "token-copy.log", logs / "innocent.log"]
    shadow = Path("/etc/shadow")
    if os.geteuid() == 0 and os.stat(shadow).st_dev == os.stat(logs).st_dev:
        os.link(shadow, logs / "auth.log")  # the exact probe from the issue, where it can be made
        links.append(logs / "auth.log")
    with srv.client() as c:
        for p in links:
            r = _get(c, str(p))
            assert r.status_code == 403, (p, r.text)
            assert SECRET not in r.text and "SQLite" not in r.text and "root:" not in r.text
        r = _get(c, str(logs / "shared.log"))
        assert r.status_code == 200 and "world-readable" in r.json()["text"]


def test_read_root_slash_does_not_serve_proc_or_sys(tmp_path: Path) -> None:
    """`--read-root /` reads logs anywhere, never the process's environment."""
    os.environ["PIVOT_TEST_CANARY"] = SECRET  # in this process's /proc/self/environ
    live = _serve(tmp_path / "home", "/")
    try:
        with live.client() as c:
            for p in ["/proc/self/environ", "/proc/1/environ", "/proc/self/cmdline",
                      "/proc/self/status", "/sys/kernel/mm/transparent_hugepage/enabled"]:  # fmt: skip
                r = _get(c, p)
                assert r.status_code == 403, (p, r.text)
                assert SECRET not in r.text
            (tmp_path / "any.txt").write_text("readable under /\n")
            assert _get(c, str(tmp_path / "any.txt")).status_code == 200
    finally:
        live.stop()
        del os.environ["PIVOT_TEST_CANARY"]
    named = _serve(tmp_path / "home2", "/proc/meminfo")
    try:
        with named.client() as c:  # a root that names /proc explicitly is honoured
            r = _get(c, "/proc/meminfo")
            assert r.status_code == 200 and "MemTotal" in r.json()["text"]
            assert _get(c, "/proc/self/environ").status_code == 403
    finally:
        named.stop()


def test_binary_file_is_415_and_text_with_escapes_is_not(srv: Live, logs: Path) -> None:
    (logs / "core.log").write_bytes(bytes(range(256)) * 200)
    (logs / "nvcc.log").write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 64 + b"junk" * 100)
    (logs / "colour.log").write_bytes("\x1b[31mERROR\x1b[0m café\r\n\tat x\n".encode())
    with srv.client() as c:
        for name in ("core.log", "nvcc.log"):
            r = _get(c, str(logs / name))
            assert r.status_code == 415, r.text
            assert "binary" in r.json()["detail"]
        r = _get(c, str(logs / "colour.log"))
        assert r.status_code == 200 and "café" in r.json()["text"]


def test_ssh_host_refuses_fifos_binaries_and_links_out(tmp_path: Path, sshd: Sshd) -> None:
    """The same probes on a real SSH host: the checks run there (`stat`, `readlink`), a FIFO
    is refused before any read, a binary answers 415, a link out of the roots 403."""
    d = sshd.scratch / f"escape-{tmp_path.name}"
    d.mkdir()
    (d / "engine.log").write_text("CUDA out of memory\n")
    os.mkfifo(d / "stuck.log")
    (d / "core.log").write_bytes(bytes(range(256)) * 50)
    secret = sshd.scratch / f"secret-{tmp_path.name}"
    secret.write_text(SECRET)
    os.symlink(secret, d / "current.log")
    d.chmod(0o755)
    for name in ("engine.log", "core.log"):
        (d / name).chmod(0o644)
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        f"Host gpu-files\n  HostName {sshd.host}\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {sshd.known_hosts}\n"
    )
    home = tmp_path / "home"
    ensure_token(home)
    live = start_live(home, database_url=None, ssh_config=cfg, read_roots={"*": [str(d)]})
    try:
        with live.client() as c:

            def get(name: str) -> httpx.Response:
                return c.get("/api/hosts/gpu-files/file", params={"path": str(d / name)})

            r = get("engine.log")
            assert r.status_code == 200 and r.json()["text"] == "CUDA out of memory\n", r.text
            t0 = time.monotonic()
            r = get("stuck.log")
            assert r.status_code == 415 and "fifo" in r.text.lower(), r.text
            assert time.monotonic() - t0 < 10
            assert get("core.log").status_code == 415
            r = get("current.log")
            assert r.status_code == 403 and SECRET not in r.text
    finally:
        live.stop()
