"""`process_io`: is a silent server reading its weights from disk, or doing nothing?

A loader on a slow or failing disk (an NFS mount, a dying drive: 17 MB/s for a 15 GB checkpoint)
prints nothing for minutes, keeps the GPU at 0% and sits in D state: it looks hung. The kernel
counts every byte it reads: `/proc/PID/io`'s read_bytes (from storage) and rchar (any read) that
grow between two reads are work in progress, whatever the log says. Read-only: `cat` of one
procfs file, polled over a window on the host's clock (virtual on replay), stopping at growth.
Reading another user's process needs root or that user (ptrace rules); that is said, never taken
for "not reading".
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from tools.base import ToolResult, ToolSpec
from tools.container_host import machine_of
from tools.host import Host
from tools.log_window import max_window_s, poll_interval

_FIELD = re.compile(
    r"^(rchar|wchar|syscr|syscw|read_bytes|write_bytes|cancelled_write_bytes):\s*(\d+)\s*$"
)


class Args(BaseModel):
    pid: int = Field(ge=1, description="the server process (a rank, the engine core) to watch")
    watch_s: float | None = Field(
        None,
        ge=0,
        le=600,
        description="poll this long for growth (stops early when it reads); default the "
        "liveness window (PIVOT_LIVENESS_MAX_S, 30 s)",
    )
    machine_pid: bool = Field(False, description="a pid of the machine's ps, not the container's")


class IoCounters(BaseModel):
    read_bytes: int | None = None
    rchar: int | None = None
    lines: dict[str, str] = Field(default_factory=dict, description="field -> its line, to cite")


class Result(ToolResult):
    pid: int = 0
    first: IoCounters | None = None
    last: IoCounters | None = None
    waited_s: float = 0.0
    read_mib: float | None = Field(None, description="storage reads over the window, MiB")
    reading: bool | None = Field(
        None, description="True: it read from storage during the window; False: it did not"
    )
    line: str = Field("", description="the read_bytes line of the last read, to cite")

    def lines(self) -> list[str]:
        if self.error:
            return super().lines()
        out = list(self.last.lines.values()) if self.last else []
        if self.reading:
            rate = (self.read_mib or 0.0) / max(self.waited_s, 1e-3)
            out.append(
                f"# pid {self.pid} read {self.read_mib:.0f} MiB from storage in "
                f"{self.waited_s:.0f} s (~{rate:.1f} MiB/s): it is working (loading), not idle"
            )
        elif self.reading is False:
            out.append(
                f"# pid {self.pid} read nothing from storage in {self.waited_s:.0f} s (it may "
                "still compute or wait; this alone proves no hang)"
            )
        return out + super().lines()


def parse_io(text: str) -> IoCounters | None:
    """The counters of one `/proc/PID/io` read, or None when none is there."""
    c = IoCounters()
    for line in text.splitlines():
        m = _FIELD.match(line.strip())
        if not m:
            continue
        c.lines[m.group(1)] = line.rstrip()
        if m.group(1) == "read_bytes":
            c.read_bytes = int(m.group(2))
        elif m.group(1) == "rchar":
            c.rchar = int(m.group(2))
    return c if c.read_bytes is not None or c.rchar is not None else None


def read_counters(host: Host, pid: int) -> tuple[IoCounters | None, str]:
    res = host.run(f"cat /proc/{pid}/io", timeout=10, max_bytes=4000)
    counters = parse_io(res.stdout) if res.ok else None
    return counters, (res.stderr or res.stdout).strip()[:200] if counters is None else ""


def run(host: Host, args: Args) -> Result:
    host = machine_of(host) if args.machine_pid else host
    first, why = read_counters(host, args.pid)
    if first is None:
        denied = "denied" in why.lower()
        return Result(
            host=host.name,
            ok=False,
            pid=args.pid,
            error=f"/proc/{args.pid}/io on {host.name} could not be read: {why or 'no counters'}",
            fix=(
                "read it as root or as the server's own user (the kernel lets only them)"
                if denied
                else "check the pid is alive (processes)"
            ),
        )
    res = Result(host=host.name, pid=args.pid, first=first, last=first)
    window = args.watch_s if args.watch_s is not None else max_window_s()
    t0 = host.clock()
    while host.clock() - t0 < window:
        elapsed = host.clock() - t0
        host.sleep(min(poll_interval(elapsed, heavy=True), window - elapsed))
        nxt, _ = read_counters(host, args.pid)
        if nxt is None:
            break  # gone meanwhile: the processes read says so
        res.last = nxt
        grew = (nxt.read_bytes or 0) - (first.read_bytes or 0)
        if grew > 0:
            res.read_mib = grew / 2**20
            res.reading = True
            break
    else:
        res.reading = False
        res.read_mib = 0.0
    res.waited_s = round(host.clock() - t0, 3)
    res.line = (res.last.lines.get("read_bytes", "") if res.last else "") or ""
    return res


SPEC = ToolSpec(
    name="process_io",
    description=(
        "Whether a silent server process is reading from storage: /proc/PID/io's read_bytes "
        "read twice over a window (cat only). Bytes that grow are a load in progress (a slow "
        "or failing disk, a network mount): still starting, not hung. Needs root or the "
        "server's own user."
    ),
    args=Args,
    result=Result,
    fn=run,
)
