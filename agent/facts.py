"""Host facts derived from observations: is the server alive, who holds the GPUs, does the log grow.

These are the checks an engineer runs by eye (ps, nvidia-smi, a second tail). They are computed
from tool results only, never from the operator's words or from log text telling us what to do.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, Field

from agent.state import Observation

#: Command lines of inference servers and their launchers.
SERVER_CMD = re.compile(
    r"(?i)(sglang|vllm|tensorrt_llm|trtllm|tritonserver|text-generation-launcher|"
    r"text_generation_server|torchrun|lmdeploy|\bray\b.*(serve|worker)|"
    r"python[\d.]*\s+(-u\s+)?-m\s+\S+|launch_server|api_server|serve\b|handler\.py|server\.py)"
)
#: Things that are never the server even if they match above.
NOT_SERVER = re.compile(r"(?i)^\[|\bps\s+aux\b|\bgrep\b|sshd|-bash|/sbin/init|tail\s+-f")


#: Display servers and desktop shells: type G in nvidia-smi, never a stale compute process.
GRAPHICS = re.compile(
    r"(?i)(?:^|/)(?:Xorg|Xwayland|gnome-shell|kwin\w*|plasmashell|compiz|xfwm4)\b"
)
GRAPHICS_ROW = re.compile(r"\|\s+\d+\s+\S+\s+\S+\s+\d+\s+G\s")


class GpuFact(BaseModel):
    index: int | None = None
    used_mib: float | None = None
    total_mib: float | None = None
    line: str = ""


class Facts(BaseModel):
    gpu_available: bool = False
    gpus: list[GpuFact] = Field(default_factory=list)
    gpu_obs: str | None = None
    gpu_error: str | None = None
    gpu_pids: dict[int, float] = Field(default_factory=dict)  # pid -> MiB
    gpu_pid_lines: dict[int, str] = Field(default_factory=dict)
    gpu_pid_obs: str | None = None
    graphics_mib: float = 0.0  # held by display servers / desktop apps (type G)
    ps_available: bool = False
    ps_obs: str | None = None
    ps_header: str = ""
    procs: dict[int, str] = Field(default_factory=dict)  # pid -> verbatim ps line
    server_pids: list[int] = Field(default_factory=list)
    dmesg_available: bool = False
    dmesg_obs: str | None = None
    dmesg_lines: list[str] = Field(default_factory=list)
    dmesg_summary: str = ""
    shm_mib: float | None = None
    shm_use_pct: float | None = None
    shm_line: str = ""
    full_mounts: list[tuple[str, float, str]] = Field(default_factory=list)  # mount, pct, line
    disk_obs: str | None = None
    disk_available: bool = False
    listeners: dict[int, str] = Field(default_factory=dict)  # port -> verbatim line
    ports_obs: str | None = None
    log_growth: dict[str, bool] = Field(default_factory=dict)  # path -> grew between reads
    log_growth_obs: dict[str, str] = Field(default_factory=dict)

    @property
    def server_alive(self) -> bool | None:
        if not self.ps_available:
            return None
        return bool(self.server_pids)

    @property
    def gpu_clean(self) -> bool | None:
        known = [g for g in self.gpus if g.used_mib is not None]
        if not self.gpu_available or not known:
            return None
        return all((g.used_mib or 0) < max(1024.0, 0.02 * (g.total_mib or 0)) for g in known)


def _get(d: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    return default


_NUM = re.compile(r"([\d.]+)\s*([KMGT]i?B?)?", re.I)


def _mib(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    m = _NUM.search(str(value))
    if not m:
        return None
    n = float(m.group(1))
    unit = (m.group(2) or "M").upper()[0]
    return n * {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}.get(unit, 1)


def _find_line(lines: list[str], *needles: str) -> str:
    for ln in lines:
        if all(n in ln for n in needles):
            return ln
    return ""


def derive(observations: list[Observation]) -> Facts:
    f = Facts()
    log_reads: dict[str, list[tuple[str, int, str]]] = {}
    for o in observations:
        d = o["data"]
        if not o["ok"]:
            if o["tool"] == "gpu_status":
                f.gpu_error = d.get("error")
                f.gpu_obs = o["id"]
            continue
        if o["tool"] == "gpu_status":
            _gpu(f, o)
        elif o["tool"] == "processes":
            _ps(f, o)
        elif o["tool"] == "dmesg":
            f.dmesg_available = True
            f.dmesg_obs = o["id"]
            f.dmesg_lines = [ln for ln in o["lines"] if not ln.startswith("# ")]
            # the tool's tally ("0 OOM kills, 0 Xid, ...") is what a refutation should quote
            f.dmesg_summary = next((ln for ln in o["lines"] if "OOM kills" in ln), "")
        elif o["tool"] == "disk":
            _disk(f, o)
        elif o["tool"] == "ports":
            f.ports_obs = o["id"]
            for lst in _get(d, "listeners", default=[]) or []:
                port = lst.get("port")
                if isinstance(port, int):
                    f.listeners[port] = _find_line(o["lines"], f":{port}") or str(port)
        elif o["tool"] == "log_tail":
            path = str(o["args"].get("path") or d.get("path"))
            size = int(d.get("size") or 0)
            text = [ln for ln in o["lines"] if ln and not ln.startswith("# ")]
            log_reads.setdefault(path, []).append((o["id"], size, text))
    for path, reads in log_reads.items():
        if len(reads) >= 2:
            (_, s0, t0), (oid, s1, t1) = reads[-2], reads[-1]
            changed = s1 > s0 or (t1[-1:] != t0[-1:])
            f.log_growth[path] = changed and advancing(t0, t1)
            f.log_growth_obs[path] = oid
    return f


_DIGITS = re.compile(r"\d+")


def advancing(before: list[str], after: list[str]) -> bool:
    """Did the log move forward, or only repeat itself? A hung worker keeps printing the same
    "still waiting" warning with a new timestamp; a loader prints new shard counts. A line is
    new work if, digits aside, the first read never printed it, or it is a progress bar."""
    from agent.signatures import scan

    seen = {_DIGITS.sub("#", ln) for ln in before}
    fresh = [ln for ln in after if ln not in set(before)]
    if not fresh:
        return False
    if any(m.strength == "progress" for m in scan(fresh[-50:])):
        return True
    return any(_DIGITS.sub("#", ln) not in seen for ln in fresh)


def _gpu(f: Facts, o: Observation) -> None:
    d = o["data"]
    status = d.get("status", "ok")
    if status not in (None, "ok"):
        f.gpu_error = d.get("error") or status
        f.gpu_obs = o["id"]
        return
    gpus = _get(d, "gpus", default=[]) or []
    if not gpus:
        return
    f.gpu_available = True
    f.gpu_obs = o["id"]
    f.gpus = []
    f.gpu_pids, f.gpu_pid_lines, f.graphics_mib = {}, {}, 0.0  # the newest read decides
    for g in gpus:
        used = _mib(_get(g, "memory_used_mib", "memory_used", "used_mib"))
        total = _mib(_get(g, "memory_total_mib", "memory_total", "total_mib"))
        idx = g.get("index")
        line = ""
        for ln in o["lines"]:
            if ln.startswith("# "):
                continue
            if idx is not None and re.match(rf"\s*\|?\s*{idx}\b", ln) and "MiB" in ln:
                line = ln
                break
        f.gpus.append(GpuFact(index=idx, used_mib=used, total_mib=total, line=line))
    for p in _get(d, "processes", "apps", default=[]) or []:
        pid = p.get("pid")
        line = _find_line(o["lines"], str(pid)) if isinstance(pid, int) else ""
        if GRAPHICS.search(str(p.get("name", ""))) or GRAPHICS_ROW.search(line):
            # a desktop's display server holds a little memory; it is nobody's leftover
            f.graphics_mib += _mib(_get(p, "used_mib", "used_memory_mib", "used_memory")) or 0.0
            continue
        if isinstance(pid, int):
            f.gpu_pids[pid] = _mib(_get(p, "used_mib", "used_memory_mib", "used_memory")) or 0.0
            f.gpu_pid_lines[pid] = _find_line(o["lines"], str(pid))
            f.gpu_pid_obs = o["id"]


def _ps(f: Facts, o: Observation) -> None:
    d = o["data"]
    recs = _get(d, "processes", "records", default=[]) or []
    f.ps_available = True
    f.ps_obs = o["id"]
    # the tool's own verdict line says it best ("# no inference-server process is running")
    f.ps_header = next(
        (ln for ln in o["lines"] if ln.startswith("# no inference-server")),
        next((ln for ln in o["lines"] if "PID" in ln), ""),
    )
    for r in recs:
        pid = r.get("pid")
        if not isinstance(pid, int):
            continue
        cmd = str(_get(r, "command", "args", "cmd", default=""))
        line = _find_line(o["lines"], f" {pid} ", cmd[:40]) or _find_line(o["lines"], cmd[:60])
        f.procs[pid] = line or cmd
        stat = str(r.get("stat", ""))
        zombie = stat.startswith("Z") or "<defunct>" in cmd
        # the processes tool classifies servers (and says None for a Jupyter kernel); only a
        # result without that field falls back to our own pattern
        is_server = bool(r["server"]) if "server" in r else bool(SERVER_CMD.search(cmd))
        if is_server and not zombie and not NOT_SERVER.search(cmd):
            f.server_pids.append(pid)


def _disk(f: Facts, o: Observation) -> None:
    d = o["data"]
    f.disk_available = True
    f.disk_obs = o["id"]
    for m in _get(d, "mounts", "filesystems", default=[]) or []:
        mount = str(_get(m, "mount", "mounted_on", default=""))
        pct = _get(m, "use_pct", "use_percent")
        try:
            pct_f = float(str(pct).rstrip("%")) if pct is not None else None
        except ValueError:
            pct_f = None
        line = _find_line(o["lines"], mount) if mount else ""
        if mount == "/dev/shm":
            f.shm_mib = _mib(_get(m, "size_mib", "size"))
            f.shm_use_pct = pct_f
            f.shm_line = line
        elif pct_f is not None and pct_f >= 97:
            f.full_mounts.append((mount, pct_f, line))
