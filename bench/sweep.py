"""The agent's first sweep (round 0's first wave), timed on the path an investigation runs.

`agent/nodes.sweep` sends the tools whose specs say `first_sweep` to `agent.observe.run_many`,
which runs them at once over the one SSH connection (a channel each). This benchmark times that
exact call on the test sshd against the slowest of the same tools called alone through the same
function. Target: the whole wave <= 1.3x its slowest single tool (concurrent, not sequential).

`find_logs` walks this machine's own trees: a /tmp full of clones and worktrees makes it the long
pole and the ratio falls (1.22x with 600 MB of worktrees, 1.71x with /tmp clean, the same
commit): measure on a clean /tmp, as a fresh server would be.
"""

from __future__ import annotations

import os
import statistics
import time

from _common import test_sshd, verdict

from agent.observe import run_many
from tools import registry

ROUNDS = 5


def main() -> None:
    wave = [(s.name, dict(s.first_sweep_args)) for s in registry.first_sweep()]
    with test_sshd() as (_server, host):
        assert host.run("true").ok
        slowest, sequential, concurrent = [], [], []
        for _ in range(ROUNDS):
            singles = []
            for call in wave:
                t0 = time.perf_counter()
                run_many(host, [call], 1, 0)
                singles.append(time.perf_counter() - t0)
            slowest.append(max(singles))
            sequential.append(sum(singles))
            t0 = time.perf_counter()
            obs = run_many(host, wave, 1, 0)
            concurrent.append(time.perf_counter() - t0)
            assert [o["tool"] for o in obs] == [t for t, _ in wave]
        assert host.connects == 1
    s, q, c = (statistics.median(x) for x in (slowest, sequential, concurrent))
    print(f"first sweep: {', '.join(t for t, _ in wave)}")
    print(f"slowest single tool: {s * 1000:.0f} ms, one after another: {q * 1000:.0f} ms")
    print(f"run_many (the agent's wave): {c * 1000:.0f} ms (medians of {ROUNDS} rounds)")
    # On a loopback sshd the "remote" commands run on this machine's cores too: the wave cannot
    # finish before the singles' total work spread over the cores, whatever the concurrency. The
    # verdict stays on the slowest tool; this line says how much of the gap is that floor.
    cores = os.cpu_count() or 1
    floor = max(s, q / cores)
    print(
        f"loopback floor (max of slowest, total / {cores} cores): {floor * 1000:.0f} ms; wave {c / floor:.2f}x it"
    )
    ratio = c / s
    verdict(ratio <= 1.3, "first_sweep_vs_slowest_tool", f"{ratio:.2f}x", "<= 1.3x")


if __name__ == "__main__":
    main()
