"""Median time from a server's death to the loop's verdict, over 20 launches (target <= 1 s).

The emulator SIGKILLs itself at a random moment while still loading and writes the moment
(time.time()) to a file just before; the clock stops when `watch_until_ready` returns "died".

    .venv/bin/python bench/dead_launch.py [--launches 20]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loop import launcher  # noqa: E402
from tools.local_host import LocalHost  # noqa: E402

TARGET_S = 1.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=20)
    args = ap.parse_args()
    host = LocalHost()
    lags: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.launches):
            death = Path(tmp) / f"death-{i}"
            log = str(Path(tmp) / f"server-{i}.log")
            after = random.uniform(0.3, 2.0)
            cmd = f"{sys.executable} -m loop.emulator --port {40000 + i} --load-seconds 5"
            env = {"EMULATOR_DIE_AFTER": f"{after:.3f}", "EMULATOR_DEATH_FILE": str(death)}
            res = launcher.start(host, cmd, str(REPO), env, log, f"bench-dead-{i}")
            assert res.pid, res.error
            v = launcher.watch_until_ready(
                host, res.pid, log, f"http://127.0.0.1:{40000 + i}/health", ready_s=30, stall_s=30
            )
            verdict_at = time.time()
            died_at = float(death.read_text())
            lags.append(verdict_at - died_at)
            print(
                f"launch {i:2d}: died after {after:.2f}s -> verdict {v.state} {lags[-1] * 1000:.0f} ms later"
            )
            launcher.stop(host, res.pid, f"bench-dead-{i}", grace_s=0.5)
    med = statistics.median(lags)
    print(
        f"p90 {sorted(lags)[int(0.9 * len(lags)) - 1] * 1000:.0f} ms, max {max(lags) * 1000:.0f} ms"
    )
    ok = med <= TARGET_S
    print(f"{'PASS' if ok else 'FAIL'} dead_launch_median_s {med:.3f} (target <= {TARGET_S})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
