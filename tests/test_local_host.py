"""LocalHost with real processes and files: timeouts kill the group, floods stay bounded."""

from __future__ import annotations

import subprocess
import threading
import time
import tracemalloc
from pathlib import Path

from tools.local_host import LocalHost


def _alive(pattern: str) -> bool:
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode == 0


def test_run_rc_stdout_stderr(local_host: LocalHost) -> None:
    r = local_host.run("echo out; echo err >&2; exit 4")
    assert (r.rc, r.stdout, r.stderr, r.host) == (4, "out\n", "err\n", "localhost")
    assert local_host.run("no-such-program-xyz").missing_command


def test_timeout_kills_the_whole_process_group(local_host: LocalHost) -> None:
    t0 = time.monotonic()
    r = local_host.run("sleep 100.41 | cat; echo never", timeout=1)
    assert time.monotonic() - t0 < 2
    assert r.timed_out and not r.ok and "localhost" in r.error and r.fix
    time.sleep(0.2)
    assert not _alive("sleep 100[.]41"), "a child of the timed-out pipeline survived"


def test_flood_is_cut_with_bounded_memory(local_host: LocalHost) -> None:
    tracemalloc.start()
    t0 = time.monotonic()
    r = local_host.run("yes pivot | head -c 3G", max_bytes=100_000)
    elapsed = time.monotonic() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert r.truncated and len(r.stdout) == 100_000 and elapsed < 3 and peak < 20e6


def test_read_tail_reads_from_the_end(local_host: LocalHost, tmp_path: Path) -> None:
    big = tmp_path / "big.log"
    with big.open("wb") as fh:
        fh.truncate(2 << 30)
        fh.seek(0, 2)
        fh.write(b"last line\n")
    t0 = time.monotonic()
    tail = local_host.read_tail(str(big), max_bytes=64)
    assert time.monotonic() - t0 < 0.5
    assert (
        tail.size == (2 << 30) + 10 and tail.bytes_read == 64 and tail.data.endswith(b"last line\n")
    )
    missing = local_host.read_tail(str(tmp_path / "nope.log"))
    assert not missing.exists and "does not exist" in missing.error and missing.fix


def test_write_file_is_atomic(local_host: LocalHost, tmp_path: Path) -> None:
    target = tmp_path / "sitecustomize.py"
    target.write_bytes(b"original\n")
    target.chmod(0o640)
    versions = [b"A" * 500_000, b"B" * 500_000]
    seen: set[bytes] = set()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.add(target.read_bytes())

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(20):
            assert local_host.write_file(str(target), versions[i % 2]).ok
    finally:
        stop.set()
        t.join()
    assert seen <= {b"original\n", *versions}
    assert target.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["sitecustomize.py"]  # no temp files left
    bad = local_host.write_file(str(tmp_path / "no" / "dir" / "x"), b"x")
    assert not bad.ok and "localhost" in bad.error and bad.fix
