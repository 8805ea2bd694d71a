"""Pre-flight: the host is clean before a launch, or we say exactly why it is not.

Checks, in order: leftover server processes (marker, the plan's cmdline patterns, GPU compute
apps), killed by pid only when the plan's policy allows; GPU memory back to the idle level;
the port free; /dev/shm and disk with room; a cheap memory estimate. A host that stays dirty
blocks the night: every later experiment would measure the leftovers, not the change.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from collections.abc import Callable

from pydantic import BaseModel, Field

from loop.launcher import marked_pids
from loop.plan import Plan
from tools.host import Host


class Leftover(BaseModel):
    pid: int
    why: str
    args: str = ""


class Preflight(BaseModel):
    ok: bool
    problems: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    leftovers: list[Leftover] = Field(default_factory=list)
    killed: list[int] = Field(default_factory=list)
    gpu_used_mib: list[int] = Field(default_factory=list)
    label: str | None = None


def gpu_memory(host: Host) -> list[tuple[int, int]] | None:
    """(used, total) MiB per GPU, or None when there is no nvidia-smi."""
    res = host.run(
        "nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits", timeout=20
    )
    if not res.ok:
        return None
    out = []
    for line in res.stdout.splitlines():
        nums = re.findall(r"\d+", line)
        if len(nums) >= 2:
            out.append((int(nums[0]), int(nums[1])))
    return out or None


def gpu_apps(host: Host) -> list[int]:
    res = host.run(
        "nvidia-smi --query-compute-apps=pid --format=csv,noheader,nounits 2>/dev/null", timeout=20
    )
    return [int(x) for x in re.findall(r"^\s*(\d+)\s*$", res.stdout, re.M)] if res.ok else []


def port_listeners(host: Host, port: int) -> bool:
    res = host.run("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null", timeout=10)
    for line in res.stdout.splitlines()[0:]:
        f = line.split()
        if len(f) > 3 and ":" in f[1] and f[3] == "0A":
            try:
                if int(f[1].rsplit(":", 1)[1], 16) == port:
                    return True
            except ValueError:
                continue
    return False


def free_mb(host: Host, path: str) -> int | None:
    res = host.run(f"df -Pk {shlex.quote(path)} 2>/dev/null | tail -1", timeout=10)
    f = res.stdout.split()
    return int(f[3]) // 1024 if res.ok and len(f) >= 4 and f[3].isdigit() else None


def find_leftovers(
    host: Host, plan: Plan, spare: Callable[[], set[int]] | None = None
) -> list[Leftover]:
    """Processes that must not be there; `spare` names pids that belong to runs still in
    flight on another host slot of the night (asked after the scan, so a run launched
    meanwhile is spared too)."""
    found: dict[int, Leftover] = {}
    me = {os.getpid(), os.getppid()}
    for pid in marked_pids(host, prefix=f"{plan.name}/"):
        found[pid] = Leftover(pid=pid, why=f"carries a run marker of plan {plan.name}")
    if plan.policy.server_match:
        res = host.run("ps -eo pid=,args=", timeout=10)
        pats = [re.compile(p) for p in plan.policy.server_match]
        for line in res.stdout.splitlines():
            m = re.match(r"\s*(\d+)\s+(.*)", line)
            if m and any(p.search(m.group(2)) for p in pats) and "ps -eo" not in m.group(2):
                pid = int(m.group(1))
                found.setdefault(
                    pid, Leftover(pid=pid, why="matches policy.server_match", args=m.group(2)[:200])
                )
    for pid in gpu_apps(host):
        found.setdefault(pid, Leftover(pid=pid, why="holds GPU memory (nvidia-smi compute app)"))
    if found and spare is not None:
        me |= spare()
    return [lo for pid, lo in sorted(found.items()) if pid not in me]


def run_preflight(
    host: Host,
    plan: Plan,
    state_dir: str,
    settle_s: float = 10.0,
    spare: Callable[[], set[int]] | None = None,
) -> Preflight:
    pf = Preflight(ok=True)
    leftovers = find_leftovers(host, plan, spare)
    pf.leftovers = leftovers
    if leftovers:
        listing = ", ".join(f"{lo.pid} ({lo.why})" for lo in leftovers)
        if not plan.policy.kill_leftovers:
            pf.ok = False
            pf.label = "stale_gpu_process"
            pf.problems.append(f"leftover processes: {listing}; policy.kill_leftovers is false")
        else:
            pids = " ".join(str(lo.pid) for lo in leftovers)
            host.run(f"kill -KILL {pids} 2>/dev/null; true", timeout=10)
            pf.killed = [lo.pid for lo in leftovers]
            time.sleep(0.2)
            still = find_leftovers(host, plan, spare)
            if still:
                pf.ok = False
                pf.label = "stale_gpu_process"
                pf.problems.append(f"still alive after kill -9: {[lo.pid for lo in still]}")
    gpus = gpu_memory(host)
    if gpus is not None:
        deadline = time.monotonic() + settle_s
        while (
            any(used > plan.policy.gpu_idle_mib for used, _ in gpus) and time.monotonic() < deadline
        ):
            time.sleep(0.5)
            gpus = gpu_memory(host) or gpus
        pf.gpu_used_mib = [u for u, _ in gpus]
        busy = [i for i, (u, _) in enumerate(gpus) if u > plan.policy.gpu_idle_mib]
        if busy:
            pf.ok = False
            pf.label = pf.label or "stale_gpu_process"
            pf.problems.append(
                f"GPU memory not back to idle on GPUs {busy}: {pf.gpu_used_mib} MiB used"
            )
        if plan.policy.weights_gb:
            mf = _mem_fraction(plan.baseline.launch)
            total_gb = min(t for _, t in gpus) / 1024
            if mf and plan.policy.weights_gb > mf * total_gb:
                pf.warnings.append(
                    f"weights {plan.policy.weights_gb} GB > mem-fraction {mf} x {total_gb:.0f} GB: "
                    "the KV cache will find no room"
                )
    if port_listeners(host, plan.baseline.port):
        pf.ok = False
        pf.label = pf.label or "port_in_use"
        pf.problems.append(f"port {plan.baseline.port} already has a listener")
    shm = free_mb(host, "/dev/shm")
    if shm is not None and shm < plan.policy.min_shm_mb:
        pf.ok = False
        pf.label = pf.label or "shm_too_small"
        pf.problems.append(f"/dev/shm has {shm} MB free < {plan.policy.min_shm_mb}")
    disk = free_mb(host, state_dir)
    if disk is not None and disk < plan.policy.min_disk_mb:
        pf.ok = False
        pf.label = pf.label or "disk_full"
        pf.problems.append(f"{state_dir} has {disk} MB free < {plan.policy.min_disk_mb}")
    return pf


def _mem_fraction(command: str) -> float | None:
    m = re.search(r"--mem-fraction-static[= ]([0-9.]+)", command)
    return float(m.group(1)) if m else None
