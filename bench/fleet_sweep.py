"""Fleet sweep: `pivot sweep --hosts GROUP` over 20 real sshd hosts vs the slowest host alone.

The fleet (tests/fleet/fleetkit.py): 20 real OpenSSH sshd on loopback ports, reached by alias
through ~/.ssh/config; 4 have a failing log (unhealthy), and the slowest has an `nvidia-smi`
that answers after SLOW_S (a slow driver). Both sides time the path users run: the `pivot`
CLI as a subprocess, start-up included, with the rulebook brain. The slowest single host's sweep
is `pivot sweep --hosts <that host>`; the fleet's is `pivot sweep --hosts gpu`. Runs alternate
(single, fleet) so both see the same machine load; medians are compared.
Target: the fleet sweep <= 1.5x the slowest single host's sweep.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import ROOT, verdict

from tests.fleet.fleetkit import Fleet, running_fleet

HOSTS = 20
UNHEALTHY = 4
SLOW_S = 2.0
RUNS = int(os.environ.get("PIVOT_BENCH_RUNS", "5"))


def sweep(fleet: Fleet, home: Path, hosts: str) -> tuple[float, dict]:
    env = {**fleet.env(home), "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "agent.cli", "sweep", "--hosts", hosts, "--json"]
        + ["--log", fleet.log_template(), "--brain", "rulebook"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    wall = time.perf_counter() - t0
    assert p.returncode in (0, 1), p.stderr[-2000:]
    return wall, json.loads(p.stdout)


def main() -> None:
    t0 = time.perf_counter()
    with running_fleet(HOSTS - UNHEALTHY, UNHEALTHY, slow={0: SLOW_S}) as fleet:
        print(f"{HOSTS} sshd hosts started in {time.perf_counter() - t0:.1f}s")
        home = fleet.fleet_file.parent
        slow = next(iter(fleet.slow))
        others = [a for a in fleet.servers if a != slow]
        # is the slow host really the slowest alone? one plain and one unhealthy host, once each
        plain = sweep(fleet, home, others[0])[0]
        sick = sweep(fleet, home, next(iter(fleet.unhealthy)))[0]
        single, fleet_wall, fleet_inner = [], [], []
        for _ in range(RUNS):
            single.append(sweep(fleet, home, slow)[0])
            wall, report = sweep(fleet, home, "gpu")
            fleet_wall.append(wall)
            fleet_inner.append(report["seconds"])
            rows = report["hosts"]
            assert len(rows) == HOSTS
            bad = {r["host"] for r in rows if r["health"] == "unhealthy"}
            assert bad == set(fleet.unhealthy), bad
            assert not [r for r in rows if r["health"] == "did not answer"], rows
    s = max(statistics.median(single), plain, sick)
    f = statistics.median(fleet_wall)
    print(f"one plain host alone: {plain:.2f}s, one unhealthy host alone: {sick:.2f}s")
    print(f"slowest host alone ({slow}, nvidia-smi +{SLOW_S:g}s): {statistics.median(single):.2f}s")
    print(
        f"fleet of {HOSTS}: {f:.2f}s ({statistics.median(fleet_inner):.2f}s inside the sweep, "
        f"the rest is start-up); medians of {RUNS} runs"
    )
    print(
        "load average (1, 5, 15 min) at the end: " + ", ".join(f"{x:.1f}" for x in os.getloadavg())
    )
    ratio = f / s
    verdict(ratio <= 1.5, "fleet_sweep_vs_slowest_host", f"{ratio:.2f}x", "<= 1.5x")


if __name__ == "__main__":
    main()
