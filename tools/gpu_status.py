"""`gpu_status`: what each GPU holds and who holds it, from nvidia-smi.

The first question of most GPU-server investigations is "is the memory free, and if not, which
pid has it?". The tool asks nvidia-smi's CSV query (wide: driver and compute capability; if
that field list is refused, the narrow list incident cards record), then the compute-apps
query for per-process memory, and falls back to parsing the plain `nvidia-smi` table when the
query is missing or broken. Driver failures ("couldn't communicate with the NVIDIA driver"),
a missing nvidia-smi, MIG, `[N/A]` / `[Not Supported]` values and "Unknown Error"/"ERR!" GPUs
come back as data, never as exceptions.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from tools.base import ToolResult, ToolSpec, bound_lines
from tools.batch import can_batch, run_batch
from tools.host import CommandResult, Host
from tools.log_window import poll_interval
from tools.shared_reads import shared

#: The first six fields are exactly what incident cards record (`host.nvidia_smi`), so a row
#: with fewer columns is read by prefix and cards, old drivers and the wide query all parse.
WIDE_FIELDS = (
    "index",
    "name",
    "memory.used",
    "memory.free",
    "memory.total",
    "utilization.gpu",
    "driver_version",
    "compute_cap",
    "pci.bus_id",
)
CARD_FIELDS = WIDE_FIELDS[:6]
WIDE_QUERY = f"nvidia-smi --query-gpu={','.join(WIDE_FIELDS)} --format=csv,noheader,nounits"
CARD_QUERY = f"nvidia-smi --query-gpu={','.join(CARD_FIELDS)} --format=csv,noheader"
APPS_QUERY = "nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_bus_id --format=csv"
#: What incident cards record; older drivers may refuse gpu_bus_id.
APPS_QUERY_NARROW = "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv"
TABLE = "nvidia-smi"

Status = Literal["ok", "no_driver", "no_nvidia_smi", "unknown_error", "not_read"]

_NO_DRIVER = re.compile(
    r"couldn't communicate with the NVIDIA driver|NVIDIA driver is not loaded|"
    r"No devices were found|Failed to initialize NVML: (?:Driver/library version mismatch|"
    r"Unknown Error)|Driver Not Loaded",
    re.I,
)
_UNKNOWN = re.compile(r"Unknown Error|ERR!|GPU is lost|GPU requires reset|fallen off the bus", re.I)
_INVALID_FIELD = re.compile(r'Field ".*" is not a valid field to query', re.I)


class Args(BaseModel):
    """Every GPU and every compute process; with watch_s, read again over a window until a
    GPU's memory moves (a silent phase that allocates is working; a stuck collective is not)."""

    watch_s: float | None = Field(
        None,
        ge=0,
        le=600,
        description="poll until some GPU's used memory changes by 64 MiB or more, at most this long",
    )


class Gpu(BaseModel):
    index: int | None = None
    name: str = ""
    memory_used_mib: int | None = None
    memory_free_mib: int | None = None
    memory_total_mib: int | None = None
    utilization_pct: int | None = None
    driver: str | None = None
    compute_cap: str | None = None
    bus_id: str | None = None
    mig: bool = False
    error: str | None = Field(None, description="'Unknown Error', 'ERR!', ... as nvidia-smi said")
    line: str = Field(
        "", description="the raw line that shows this GPU's memory and utilization (to cite)"
    )


class GpuProcess(BaseModel):
    pid: int
    name: str = ""
    used_mib: int | None = None
    gpu_index: int | None = None


class GpuParse(BaseModel):
    """What one nvidia-smi output says; `raw_lines` are the verbatim lines it came from."""

    gpus: list[Gpu] = Field(default_factory=list)
    processes: list[GpuProcess] = Field(default_factory=list)
    driver_version: str | None = None
    cuda_version: str | None = None
    status: Status = "ok"
    message: str | None = None
    raw_lines: list[str] = Field(default_factory=list)


class Result(ToolResult):
    gpus: list[Gpu] = Field(default_factory=list)
    processes: list[GpuProcess] = Field(default_factory=list)
    driver_version: str | None = None
    cuda_version: str | None = None
    status: Status = "ok"
    source: str = Field("query", description="query | table | none")
    processes_known: bool = Field(
        True, description="False when neither compute-apps nor the table could be read"
    )
    raw_lines: list[str] = Field(default_factory=list)
    watched: bool = Field(False, description="read over a window (watch_s given)")
    waited_s: float = 0.0
    memory_moved_mib: float | None = Field(
        None, description="the largest change of one GPU's used memory over the window"
    )
    moved_line: str = Field("", description="the newest row of the GPU whose memory moved")

    def lines(self) -> list[str]:
        out = [*self.raw_lines]
        if self.watched and self.memory_moved_mib is not None:
            out.append(
                f"# over {self.waited_s:.0f} s: GPU memory moved by up to "
                f"{self.memory_moved_mib:.0f} MiB"
                + (" (still allocating: working)" if self.memory_moved_mib >= MOVED_MIB else "")
            )
        for g in self.gpus:
            used = "?" if g.memory_used_mib is None else g.memory_used_mib
            total = "?" if g.memory_total_mib is None else g.memory_total_mib
            extra = f" error={g.error}" if g.error else ""
            extra += " MIG" if g.mig else ""
            cap = f" cc {g.compute_cap}" if g.compute_cap else ""
            out.append(f"# GPU {g.index} {g.name}: {used}/{total} MiB used{cap}{extra}")
        if self.processes:
            out += [
                f"# pid {p.pid} ({p.name}) holds {p.used_mib if p.used_mib is not None else '?'} MiB"
                + (f" on GPU {p.gpu_index}" if p.gpu_index is not None else "")
                for p in self.processes
            ]
        elif self.ok and self.processes_known:
            out.append("# no compute processes hold GPU memory")
        elif self.ok:
            out.append("# per-process GPU memory unknown: compute-apps query and table both failed")
        if self.driver_version or self.cuda_version:
            out.append(f"# driver {self.driver_version or '?'}, CUDA {self.cuda_version or '?'}")
        out.append(f"# status: {self.status}")
        return bound_lines(out + super().lines())


# -- parsers ------------------------------------------------------------------------------------
def _num(value: str) -> int | None:
    """'102927 MiB', '102927', '0 %', '[N/A]', '[Not Supported]', 'ERR!' -> int or None."""
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*(?:MiB|%|W|MHz)?\s*$", value)
    return int(float(m.group(1))) if m else None


def _na(value: str) -> str | None:
    v = value.strip()
    if not v or v.startswith("[") or v in ("N/A", "ERR!"):
        return None
    return v


def _status_of(text: str) -> tuple[Status, str | None]:
    for line in text.splitlines():
        if _NO_DRIVER.search(line):
            return "no_driver", line.strip()
    for line in text.splitlines():
        if _UNKNOWN.search(line) and "|" not in line and "," not in line:
            return "unknown_error", line.strip()
    return "ok", None


def parse_query(text: str, fields: tuple[str, ...] = WIDE_FIELDS) -> GpuParse:
    """CSV rows of `--query-gpu`, with or without units and header; columns mapped by prefix."""
    status, message = _status_of(text)
    out = GpuParse(status=status, message=message)
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 2 or not re.fullmatch(r"\d+", cols[0]):
            continue  # a header, a warning, a message
        row = dict(zip(fields, cols, strict=False))
        bad = [v for v in cols if _UNKNOWN.search(v)]
        gpu = Gpu(
            index=int(cols[0]),
            name=row.get("name", ""),
            memory_used_mib=_num(row.get("memory.used", "")),
            memory_free_mib=_num(row.get("memory.free", "")),
            memory_total_mib=_num(row.get("memory.total", "")),
            utilization_pct=_num(row.get("utilization.gpu", "")),
            driver=_na(row.get("driver_version", "")),
            compute_cap=_na(row.get("compute_cap", "")),
            bus_id=_na(row.get("pci.bus_id", "")),
            error=bad[0].strip("[]") if bad else None,
            line=line,
        )
        out.gpus.append(gpu)
        out.raw_lines.append(line)
    drivers = {g.driver for g in out.gpus if g.driver}
    out.driver_version = drivers.pop() if len(drivers) == 1 else None
    if any(g.error for g in out.gpus) and out.status == "ok":
        out.status = "unknown_error"
    return out


def parse_compute_apps(text: str) -> list[GpuProcess]:
    """`--query-compute-apps` CSV; columns found by the header when present."""
    procs: list[GpuProcess] = []
    cols_of: dict[str, int] = {"pid": 0, "name": 1, "mem": 2}
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        low = [c.lower() for c in cols]
        if "pid" in low:
            for i, c in enumerate(low):
                if c == "pid":
                    cols_of["pid"] = i
                elif c.startswith("process_name") or c == "name":
                    cols_of["name"] = i
                elif "memory" in c:
                    cols_of["mem"] = i
                elif "bus_id" in c:
                    cols_of["bus"] = i
            continue
        try:
            pid = int(cols[cols_of["pid"]])
        except (ValueError, IndexError):
            # a headerless capture in another column order (a card's `gpu_bus_id,pid,...`):
            # each field says what it is (digits, "N MiB", a bus id)
            guess = _guess_columns(cols)
            if guess is None:
                continue
            pid, name, mem = guess
            procs.append(GpuProcess(pid=pid, name=name, used_mib=_num(mem)))
            continue
        name = _col(cols, cols_of.get("name"))
        procs.append(GpuProcess(pid=pid, name=name, used_mib=_num(_col(cols, cols_of.get("mem")))))
    return procs


_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_MIB_FIELD = re.compile(r"^\d+(?:\.\d+)?\s*MiB$")


def _guess_columns(cols: list[str]) -> tuple[int, str, str] | None:
    """(pid, name, memory) from a row whose columns are in an unknown order."""
    pid = next((c for c in cols if c.isascii() and c.isdigit()), None)
    mem = next((c for c in cols if _MIB_FIELD.match(c)), "")
    if pid is None:
        return None
    rest = [c for c in cols if c not in (pid, mem) and not _BUS_ID.match(c)]
    return int(pid), (rest[0] if rest else ""), mem


def _col(cols: list[str], i: int | None) -> str:
    return cols[i] if i is not None and i < len(cols) else ""


def _bus_ids_of_apps(text: str) -> dict[int, str]:
    """pid -> gpu bus id, when the compute-apps query carried a gpu_bus_id column."""
    out: dict[int, str] = {}
    bus_col = None
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        low = [c.lower() for c in cols]
        if "pid" in low:
            bus_col = next((i for i, c in enumerate(low) if "bus_id" in c), None)
            continue
        if bus_col is not None and bus_col < len(cols) and cols[0].isascii() and cols[0].isdigit():
            out[int(cols[0])] = cols[bus_col]
        elif bus_col is None:
            bus = next((c for c in cols if _BUS_ID.match(c)), None)
            pid = next((c for c in cols if c.isascii() and c.isdigit()), None)
            if bus and pid:
                out[int(pid)] = bus
    return out


_HEADER = re.compile(r"Driver Version:\s*(\S+)\s+CUDA Version:\s*(\S+)")
_GPU_ROW = re.compile(r"^\|\s*(\d+)\s+(.+?)\s+(On|Off|N/A)\s*\|\s*(\S+)\s+\S+\s*\|")
_MEM = re.compile(r"(\d+)MiB\s*/\s*(\d+)MiB")
_UTIL = re.compile(r"\|\s*(\d+)%\s+\S")
_PROC_ROW = re.compile(r"^\|\s+(\d+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(.+?)\s+(\d+MiB|\S+)\s*\|$")


def parse_table(text: str) -> GpuParse:
    """The plain `nvidia-smi` table: header versions, GPU rows (two lines each), processes."""
    status, message = _status_of(text)
    out = GpuParse(status=status, message=message)
    lines = text.splitlines()
    section = "gpus"
    pending: Gpu | None = None
    for raw in lines:
        line = raw.rstrip()
        m = _HEADER.search(line)
        if m:
            out.driver_version, out.cuda_version = m.group(1), m.group(2)
            out.raw_lines.append(raw)
            continue
        if "MIG devices" in line:
            section = "mig"
        elif "Processes:" in line:
            section = "procs"
        if section == "gpus":
            m = _GPU_ROW.match(line)
            if m:
                pending = Gpu(index=int(m.group(1)), name=m.group(2).strip(), bus_id=m.group(4))
                if _UNKNOWN.search(line):
                    pending.error = _UNKNOWN.search(line).group(0)  # type: ignore[union-attr]
                out.gpus.append(pending)
                out.raw_lines.append(raw)
                continue
            if pending is not None and line.startswith("|") and ("MiB" in line or "ERR!" in line):
                mem = _MEM.search(line)
                if mem:
                    pending.memory_used_mib = int(mem.group(1))
                    pending.memory_total_mib = int(mem.group(2))
                    pending.memory_free_mib = int(mem.group(2)) - int(mem.group(1))
                # GPU-Util is the cell after Memory-Usage; the row opens with Fan, also a "%"
                util = _UTIL.search(line, mem.end() if mem else 0)
                if util:
                    pending.utilization_pct = int(util.group(1))
                if "ERR!" in line and not pending.error:
                    pending.error = "ERR!"
                pending.line = raw
                out.raw_lines.append(raw)
                pending = None
                continue
            if line.startswith("|") and "Enabled" in line and out.gpus:
                out.gpus[-1].mig = True
        elif section == "mig":
            if "|" in line and _MEM.search(line):
                out.raw_lines.append(raw)
        elif section == "procs":
            m = _PROC_ROW.match(line)
            if m:
                out.processes.append(
                    GpuProcess(
                        pid=int(m.group(4)),
                        name=m.group(6).strip(),
                        used_mib=_num(m.group(7).replace("MiB", "")),
                        gpu_index=int(m.group(1)),
                    )
                )
                out.raw_lines.append(raw)
            elif "No running processes found" in line:
                out.raw_lines.append(raw)
    if any(g.error for g in out.gpus) and out.status == "ok":
        out.status = "unknown_error"
    return out


# -- the tool -----------------------------------------------------------------------------------
def _failure_status(res: CommandResult) -> tuple[Status, str]:
    if res.missing_command:
        return "no_nvidia_smi", f"nvidia-smi is not installed on {res.host} (rc 127)"
    if res.rc is None and res.error and not res.timed_out:
        # the read was never made (a card that did not record it, a lost connection): the
        # GPUs are unknown, not faulty; the message must not read as a driver or GPU fault
        return "not_read", f"nvidia-smi on {res.host} could not be read: {res.error}"
    status, message = _status_of(res.stdout + "\n" + res.stderr)
    detail = message or (res.error or (res.stderr or res.stdout).strip()[:300] or f"rc {res.rc}")
    return (
        status if status != "ok" else "unknown_error"
    ), f"{res.command!r} on {res.host}: {detail}"


_FIXES: dict[str, str] = {
    "no_nvidia_smi": "install the NVIDIA driver utilities, or check PATH (e.g. /usr/bin/nvidia-smi)"
    " and whether this container was started with --gpus / the NVIDIA runtime",
    "no_driver": "load the driver (nvidia-smi as root, modprobe nvidia, check dmesg for NVRM/Xid); "
    "a driver/library mismatch needs a reboot after a driver upgrade",
    "not_read": "read nvidia-smi on the host itself; until then the GPUs' state is unknown",
    "unknown_error": "check dmesg for Xid / 'fallen off the bus'; reset the GPU (nvidia-smi -r) or "
    "reboot the node; drain it if it recurs",
}


#: a GPU's used memory changing this much between two reads is allocation, not noise
MOVED_MIB = 64


def run(host: Host, args: Args) -> Result:
    first = snapshot(host)
    if args.watch_s is None or not first.ok or not first.gpus:
        return first
    t0 = host.clock()
    before = {g.index: g.memory_used_mib or 0 for g in first.gpus}
    res, moved = first, 0.0
    while host.clock() - t0 < args.watch_s:
        elapsed = host.clock() - t0
        host.sleep(min(poll_interval(elapsed, heavy=True), args.watch_s - elapsed))
        nxt = read_once(host)
        if not nxt.ok or not nxt.gpus:
            break
        res = nxt
        deltas = {g.index: abs((g.memory_used_mib or 0) - before.get(g.index, 0)) for g in nxt.gpus}
        moved = max(deltas.values(), default=0.0)
        if moved >= MOVED_MIB:
            idx = max(deltas, key=lambda i: deltas[i])
            res.moved_line = next((g.line for g in nxt.gpus if g.index == idx), "")
            break
    res.watched, res.memory_moved_mib = True, float(moved)
    res.waited_s = round(host.clock() - t0, 3)
    return res


def snapshot(host: Host) -> Result:
    """One read, shared with the other tools of the wave that ask for it (`processes` links
    pids to GPU memory through it): nvidia-smi's queries run once per sweep, not once per tool.
    Each caller gets its own copy (a watch updates its result in place)."""
    return shared(host, "gpu_status", lambda: read_once(host)).model_copy(deep=True)


def read_once(host: Host) -> Result:
    # the compute apps are asked with the GPUs over one channel where the host batches (one
    # channel less in a CPU-bound sweep); elsewhere only after the GPU query worked, as before
    ahead: CommandResult | None = None
    if can_batch(host):
        q, ahead = run_batch(host, [WIDE_QUERY, APPS_QUERY], timeout=20)
    else:
        q = host.run(WIDE_QUERY, timeout=20)
    if _INVALID_FIELD.search(q.stdout + q.stderr):  # an older driver without compute_cap
        q = host.run(CARD_QUERY, timeout=20)
    parsed = None if q.missing_command else parse_query(q.stdout + "\n" + q.stderr)
    source = "query"
    if parsed is None or not parsed.gpus or parsed.status != "ok":
        t = host.run(TABLE, timeout=20)
        table = None if t.missing_command else parse_table(t.stdout + "\n" + t.stderr)
        if table is not None and table.gpus:
            parsed, source = table, "table"
        elif parsed is None or not parsed.gpus:
            if q.missing_command and t.missing_command:
                status, error = _failure_status(q)
            else:
                status, error = _failure_status(t if not t.missing_command else q)
                if status in ("unknown_error", "not_read") and not q.missing_command:
                    # the query that ran and failed says why (NVML's driver/library mismatch);
                    # a table read that was never made says nothing about the GPUs
                    status_q, error_q = _failure_status(q)
                    if status_q not in ("unknown_error", "not_read") or status == "not_read":
                        status, error = status_q, error_q
            lines = [ln for ln in (q.stdout + "\n" + t.stdout).splitlines() if ln.strip()][:5]
            return Result(
                host=host.name,
                ok=False,
                status=status,
                error=error,
                fix=_FIXES[status],
                source="none",
                processes_known=False,
                raw_lines=lines,
            )
    assert parsed is not None
    processes = parsed.processes
    known = True
    if source == "query":
        apps = ahead if ahead is not None else host.run(APPS_QUERY, timeout=20)
        if not apps.ok and not apps.missing_command:
            apps = host.run(APPS_QUERY_NARROW, timeout=20)
        if apps.ok and not _INVALID_FIELD.search(apps.stdout):
            processes = parse_compute_apps(apps.stdout)
            by_bus = {g.bus_id: g.index for g in parsed.gpus if g.bus_id}
            for pid, bus in _bus_ids_of_apps(apps.stdout).items():
                for p in processes:
                    if p.pid == pid and bus in by_bus:
                        p.gpu_index = by_bus[bus]
            if len(parsed.gpus) == 1:
                for p in processes:
                    p.gpu_index = parsed.gpus[0].index
            parsed.raw_lines += [ln for ln in apps.stdout.splitlines() if ln.strip()]
        else:
            t = host.run(TABLE, timeout=20)
            if t.ok:
                table = parse_table(t.stdout)
                processes = table.processes
                parsed.cuda_version = table.cuda_version
                parsed.driver_version = parsed.driver_version or table.driver_version
                parsed.raw_lines += [
                    ln for ln in t.stdout.splitlines() if _PROC_ROW.match(ln) or _HEADER.search(ln)
                ]
            else:
                known = False
    ok = parsed.status == "ok"
    return Result(
        host=host.name,
        ok=ok,
        error=None
        if ok
        else f"nvidia-smi on {host.name} reports {parsed.message or parsed.status}",
        fix=None if ok else _FIXES[parsed.status],
        gpus=parsed.gpus,
        processes=processes,
        driver_version=parsed.driver_version,
        cuda_version=parsed.cuda_version,
        status=parsed.status,
        source=source,
        processes_known=known,
        raw_lines=parsed.raw_lines,
    )


SPEC = ToolSpec(
    name="gpu_status",
    description=(
        "Every GPU's memory used/free/total, utilization, driver and compute capability, and "
        "which pids hold GPU memory (nvidia-smi query, falling back to the plain table). Use "
        "it first on any OOM, 'not enough memory' or stale-process question; status tells "
        "no_driver / no_nvidia_smi / unknown_error (a GPU in 'Unknown Error' or 'ERR!')."
    ),
    args=Args,
    result=Result,
    fn=run,
    first_sweep=1,
    reads_machine=True,
    verdict_needs=True,
    facts=("gpus", "gpu_pids", "gpu_pid_lines", "gpu_pids_unmetered", "graphics_mib", "gpu_error"),
)
