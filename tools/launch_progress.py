"""`launch_progress`: the patient watch of one launch, before saying "not sure".

A load off a slow disk, a cold kernel cache or a big download can print nothing for minutes
while the process reads gigabytes, the GPUs fill, or the log moves on after a long phase; a hang
looks the same for the first minute. The short liveness reads (a log watched 6-30 s, the stacks,
one storage read, one GPU-memory watch) cannot tell them apart in that time, and an answer then is
a guess. This read watches the launch's three signs of work at once, for up to PIVOT_PATIENCE_S
(300 s unless set), and stops at the first that moves: the log grows, the process reads from
storage (/proc/PID/io read_bytes), a GPU's memory moves; or at the process's death. On a live
host a slow start is given the time it needs and a death is seen within a second or two; on a
replayed card the clock is virtual. Read-only: `stat`, `cat /proc/PID/io`, `ps`, nvidia-smi.

It says what moved, not what the log now says: after a log that grew or a death the agent reads
the log again with `log_tail` (and the process table, the kernel log), so the new lines are read,
scanned and weighed like any tail of it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from tools import gpu_status, log_tail, process_io
from tools.base import ToolResult, ToolSpec, bound_lines
from tools.batch import run_batch
from tools.container_host import machine_of
from tools.host import CommandResult, Host
from tools.log_window import env_seconds
from tools.processes import PS_COMMAND, parse_ps

ENV_PATIENCE = "PIVOT_PATIENCE_S"
DEFAULT_PATIENCE_S = 300.0
#: the log's size and the process's presence each second (a stat, a ps); its storage counters and
#: nvidia-smi every few seconds
LOG_POLL_S = 1.0
HEAVY_POLL_S = 5.0
#: storage reads of a loader at work are megabytes a second; a stuck process may still page in a
#: few kilobytes (a module, a config), which is not a load
MIN_READ = 8 * 2**20


def patience_s() -> float:
    """PIVOT_PATIENCE_S, or 300 s."""
    return env_seconds(ENV_PATIENCE, DEFAULT_PATIENCE_S)


class Args(BaseModel):
    path: str | None = Field(None, description="the launch's log file (its size is polled)")
    pid: int | None = Field(
        None, ge=1, description="the launch's main process: its death, its storage reads"
    )
    gpus: bool = Field(True, description="watch the GPUs' used memory too")
    watch_s: float | None = Field(
        None,
        ge=0,
        le=3600,
        description="the longest wait; stops at the first sign. Default and cap: "
        "PIVOT_PATIENCE_S (300 s)",
    )
    machine_pid: bool = Field(False, description="a pid of the machine's ps, not the container's")


class Result(ToolResult):
    path: str | None = None
    pid: int | None = None
    moved: Literal["log", "io", "gpu"] | None = Field(
        None, description="the first sign of work seen; None: nothing moved (or it died)"
    )
    died: bool = Field(False, description="the process was gone at a later read")
    waited_s: float = 0.0
    window_s: float = Field(0.0, description="how long it was willing to wait")
    watched: list[str] = Field(default_factory=list, description="the signs it could read")
    grew_bytes: int = Field(0, description="how much the log grew (read it again to see)")
    line: str = Field("", description="the line that shows the move (read_bytes, a GPU row)")
    reading: bool | None = Field(None, description="it read from storage during the watch")
    read_mib: float | None = None
    memory_moved_mib: float = 0.0
    moved_line: str = Field("", description="the GPU row whose memory moved")

    def lines(self) -> list[str]:
        if self.error:
            return super().lines()
        signs = ", ".join(self.watched) or "nothing readable"
        head = f"# watched {signs} for {self.waited_s:.0f} s (up to {self.window_s:.0f} s)"
        if self.died:
            out = [f"{head}: pid {self.pid} is GONE (it died during the watch)"]
        elif self.moved == "log":
            out = [
                f"{head}: the log grew by {self.grew_bytes} bytes: the launch is at work (read "
                "the log again for its new lines)"
            ]
        elif self.moved == "io":
            out = [
                f"{head}: pid {self.pid} read {self.read_mib or 0:.0f} MiB from storage: it is "
                "loading, not idle",
                self.line,
            ]
        elif self.moved == "gpu":
            out = [
                f"{head}: GPU memory moved by {self.memory_moved_mib:.0f} MiB: the launch is "
                "allocating, not idle",
                self.moved_line,
            ]
        else:
            out = [
                f"{head}: NOTHING moved (no log growth, no storage read, no GPU memory change); "
                f"PIVOT_PATIENCE_S={int(self.window_s)} sets the wait"
            ]
        return bound_lines(out)


def _gpu_used(host: Host) -> dict[int, tuple[int, str]] | None:
    res = gpu_status.read_once(host)
    if not res.ok or not res.gpus:
        return None
    return {g.index: (g.memory_used_mib or 0, g.line) for g in res.gpus}


def _ps_pid(pid: int) -> str:
    """One process's row (a busy box's whole table is not read each second)."""
    return f"ps -ww -o pid,stat,args -p {pid}"


def _alive_in(res: CommandResult, pid: int) -> tuple[bool | None, bool]:
    """(whether the row's pid runs, whether the answer was a process table at all). `ps -p` of a
    gone pid prints its header alone and exits 1: that is an answer, not a failure."""
    table = parse_ps(res.stdout) if not res.missing_command else None
    if table is None or not table.header:
        return None, False
    # a zombie (Z, <defunct>) has exited: only its parent has not reaped it yet
    return any(p.pid == pid and not p.stat.startswith("Z") for p in table.procs), True


def _alive(host: Host, pid: int) -> bool | None:
    """Whether `pid` is in the process table; None when it cannot be read."""
    alive, answered = _alive_in(host.run(_ps_pid(pid), timeout=10, max_bytes=20_000), pid)
    if answered:
        return alive
    res = host.run(PS_COMMAND, timeout=10, max_bytes=2_000_000)  # a ps without -p (busybox)
    table = parse_ps(res.stdout) if res.ok else None
    if table is None or not table.header:
        return None
    return any(p.pid == pid and not p.stat.startswith("Z") for p in table.procs)


def _poll(
    host: Host, machine: Host, path: str | None, pid: int | None
) -> tuple[int | None, bool | None]:
    """The log's size and whether the process runs, each second: over one channel where the
    host batches and both are read on it (a launch outside a container)."""
    if path and pid and machine is host:
        size_res, ps_res = run_batch(host, [log_tail.size_command(path), _ps_pid(pid)], timeout=10)
        alive, answered = _alive_in(ps_res, pid)
        return log_tail.parse_size(size_res), alive if answered else _alive(host, pid)
    size = log_tail.size_now(host, path) if path else None
    return size, (_alive(machine, pid) if pid else None)


def run(host: Host, args: Args) -> Result:
    window = min(args.watch_s if args.watch_s is not None else patience_s(), patience_s())
    machine = machine_of(host) if args.machine_pid else host
    res = Result(host=host.name, path=args.path, pid=args.pid, window_s=round(window, 3))
    size0 = log_tail.size_now(host, args.path) if args.path else None
    io0 = process_io.read_counters(machine, args.pid)[0] if args.pid else None
    gpu0 = _gpu_used(machine) if args.gpus else None
    alive0 = _alive(machine, args.pid) if args.pid else None
    res.watched = [
        name
        for name, known in (
            ("the log", size0 is not None),
            ("storage reads", io0 is not None),
            ("GPU memory", gpu0 is not None),
            ("the process", alive0 is True),
        )
        if known
    ]
    if not res.watched:
        res.ok = False
        res.error = f"nothing of the launch could be read on {host.name} (log, pid, GPUs)"
        res.fix = "name the launch's log (--log) or its pid; read it as its user or root"
        return res
    t0 = host.clock()
    next_heavy = HEAVY_POLL_S
    while host.clock() - t0 < window:
        elapsed = host.clock() - t0
        host.sleep(min(LOG_POLL_S, window - elapsed))
        elapsed = host.clock() - t0
        size, alive = _poll(
            host, machine, args.path if size0 is not None else None, args.pid if alive0 else None
        )
        if size is not None and size != size0:
            res.moved, res.grew_bytes = "log", size - (size0 or 0)
            break
        if alive is False:
            res.died = True  # every second: a death is seen at once, not after minutes
            break
        if elapsed < next_heavy and elapsed < window:
            continue
        next_heavy = elapsed + HEAVY_POLL_S
        if io0 is not None and args.pid:
            io = process_io.read_counters(machine, args.pid)[0]
            if io is not None and (io.read_bytes or 0) - (io0.read_bytes or 0) >= MIN_READ:
                res.moved, res.reading = "io", True
                res.read_mib = ((io.read_bytes or 0) - (io0.read_bytes or 0)) / 2**20
                res.line = io.lines.get("read_bytes", "")
                break
        if gpu0 is not None:
            now = _gpu_used(machine)
            if now:
                deltas = {i: abs(u - gpu0.get(i, (0, ""))[0]) for i, (u, _) in now.items()}
                idx = max(deltas, key=lambda i: deltas[i])
                if deltas[idx] >= gpu_status.MOVED_MIB:
                    res.moved, res.memory_moved_mib = "gpu", float(deltas[idx])
                    res.moved_line = now[idx][1]
                    break
    if not res.died and alive0 and args.pid and _alive(machine, args.pid) is False:
        res.died = True  # it moved, then died (a log that grew by its last words)
    res.waited_s = round(host.clock() - t0, 3)
    return res


SPEC = ToolSpec(
    name="launch_progress",
    description=(
        "The patient watch before saying 'not sure': polls a live launch's log size, its main "
        "process's storage reads (/proc/PID/io) and the GPUs' used memory together for up to "
        "PIVOT_PATIENCE_S (300 s), stopping at the first that moves or at the process's death. "
        "A sign of work after minutes of silence is a slow start (a cold disk, a long compile), "
        "not a hang; nothing in that time is a stall. Use it when the short liveness reads "
        "(log watch, stacks, process_io, GPU watch) saw nothing and no error explains it."
    ),
    args=Args,
    result=Result,
    fn=run,
    verdict_needs=True,
    # a death it saw puts the process table read before it out of date
    facts=("server_pids",),
)
