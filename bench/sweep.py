"""A sweep round: gpu + ps + log + config read at once vs one after another, over one connection.

Each read takes ~100 ms on the host (`sleep 0.1; <read>`), as a slow nvidia-smi or a log on
NFS would. Concurrent reads run on separate channels of the one SSH connection
(tools.sweep). Target: the concurrent sweep <= 1.3x the slowest single read.
"""

from __future__ import annotations

import statistics
import time

from _common import test_sshd, verdict

from tools.sweep import run_commands_concurrently

ROUNDS = 7


def main() -> None:
    with test_sshd() as (server, host):
        log = server.scratch / "server.log"
        log.write_text("loading shard 1/4\n" * 20_000 + "RuntimeError: CUDA out of memory\n")
        cfg = server.scratch / "launch.env"
        cfg.write_text("NCCL_ALGO=Ring\nNCCL_MIN_NCHANNELS=2\n")
        reads = [
            "sleep 0.1; nvidia-smi --query-gpu=index,name,memory.used,memory.free,memory.total,"
            "utilization.gpu --format=csv,noheader",
            "sleep 0.1; ps aux",
            f"sleep 0.1; tail -c 65536 {log}",
            f"sleep 0.1; cat {cfg}",
        ]
        assert host.run("true").ok
        slowest, sequential, concurrent = [], [], []
        for _ in range(ROUNDS):
            singles = []
            for cmd in reads:
                t0 = time.perf_counter()
                assert host.run(cmd).ok
                singles.append(time.perf_counter() - t0)
            slowest.append(max(singles))
            sequential.append(sum(singles))
            t0 = time.perf_counter()
            results = run_commands_concurrently(host, reads)
            concurrent.append(time.perf_counter() - t0)
            assert all(r.ok for r in results), [r.error for r in results]
        assert host.connects == 1
    s, q, c = (statistics.median(x) for x in (slowest, sequential, concurrent))
    print(f"slowest single read: {s * 1000:.0f} ms, one after another: {q * 1000:.0f} ms")
    print(f"concurrent sweep:    {c * 1000:.0f} ms (medians of {ROUNDS} rounds)")
    ratio = c / s
    verdict(ratio <= 1.3, "sweep_vs_slowest_read", f"{ratio:.2f}x", "<= 1.3x")


if __name__ == "__main__":
    main()
