"""What the benchmarks share: a real test sshd, a connected SSHHost, and the verdict line."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.sshd import Sshd, start_sshd  # noqa: E402
from tools.ssh_host import SSHHost  # noqa: E402


@contextmanager
def test_sshd() -> Iterator[tuple[Sshd, SSHHost]]:
    """The same real sshd the tests use, and one SSHHost connected to it."""
    server = start_sshd()
    host = SSHHost(
        "bench-sshd",
        hostname=server.host,
        port=server.port,
        user=server.user,
        key_filename=str(server.client_key),
        known_hosts=str(server.known_hosts),
        ssh_config_path="/dev/null",
        allow_agent=False,
    )
    try:
        yield server, host
    finally:
        host.close()
        server.stop()


def median_s(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def verdict(passed: bool, metric: str, value: str, target: str) -> None:
    """The one final line every benchmark prints; a FAIL exits non-zero."""
    print(f"{'PASS' if passed else 'FAIL'} {metric} {value} (target {target})")
    sys.exit(0 if passed else 1)
