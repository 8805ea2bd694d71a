"""`processes`: which processes run, which of them are the inference server, zombies or stuck.

"Is the server still alive?", "is an old one still holding the GPU or the port?" and "is it
stuck in D state on NFS?" are answered from `ps`. The parser reads columns by the header line
it actually gets, so it takes `ps -eo pid,ppid,user,stat,etimes,pcpu,rss,args` from a live host
and the raw `ps aux` an incident card holds (no ppid there, so no process tree).

A process is the server only when the engine registry (`tools/engines.yaml`) knows its command
as an entry point, launcher or worker title, when it writes the log under investigation
(`/proc/PID/fd/1` or `/2`), when a pid file names it or it listens on the server's port, or when
it descends from one of those. A command line that merely mentions an engine, any `python -m`,
a compiler, an editor, a shell and pivot itself never are. GPU pids (from `gpu_status`) are
linked to their command lines, which is how a stale process holding memory is named."""

from __future__ import annotations

import posixpath
import re
import shlex
from typing import Literal

from pydantic import BaseModel, Field

from tools import engines, gpu_status
from tools.base import ToolResult, ToolSpec, bound_lines
from tools.container_host import container_of
from tools.host import CommandResult, Host
from tools.logfile import rotation_of

PS_COMMAND = "ps -ww -eo pid,ppid,user,stat,etimes,pcpu,pmem,rss,args"  # -ww: never cut at $COLUMNS
PS_FALLBACK = "ps auxww"
#: Which process writes which file on its stdout/stderr (the log under investigation).
#: stdin/stdout/stderr of every process (a `| tee LOG` pipeline is tied through its pipe) and its
#: pid namespace (a container's processes see other paths, so they are never judged by them)
FD_COMMAND = "ls -l /proc/[0-9]*/fd/0 /proc/[0-9]*/fd/1 /proc/[0-9]*/fd/2 /proc/[0-9]*/ns/pid"
LISTEN_COMMAND = "ss -ltnpH"

_COLUMN = {
    "PID": "pid",
    "PPID": "ppid",
    "USER": "user",
    "UID": "user",
    "STAT": "stat",
    "S": "stat",
    "ELAPSED": "etimes",
    "RSS": "rss",
    "RSZ": "rss",
    "%CPU": "cpu",
    "%MEM": "mem",
    "COMMAND": "command",
    "CMD": "command",
    "ARGS": "command",
}


class Args(BaseModel):
    pattern: str | None = Field(
        None, description="also list processes whose command matches (regex/text), or a pid"
    )
    link_gpu: bool = Field(True, description="ask gpu_status which pids hold GPU memory")
    gpu_pids: list[int] = Field(
        default_factory=list, description="pids known to hold GPU memory (skips gpu_status)"
    )
    logs: list[str] = Field(
        default_factory=list,
        description="log files under investigation: the pid whose stdout/stderr is one of them "
        "is the server (read from /proc/PID/fd/1 and /2)",
        max_length=16,
    )
    pid_files: list[str] = Field(
        default_factory=list, description="pid files of the server", max_length=8
    )
    ports: list[int] = Field(
        default_factory=list,
        description="the server's ports: the process listening on one is the server",
        max_length=8,
    )


class Proc(BaseModel):
    pid: int
    ppid: int | None = None
    user: str = ""
    stat: str = ""
    elapsed_s: int | None = None
    started: str = Field("", description="ps's START column as printed (09:51, Jul11, 2024)")
    cpu_pct: float | None = None
    mem_pct: float | None = Field(None, description="share of host RAM it holds (ps %MEM)")
    rss_kb: int | None = None
    command: str = ""
    server: str | None = Field(
        None,
        description="the engine (sglang | vllm | trtllm | ...) when part of an inference server; "
        "'unknown' for a server known only by its log, pid file or port",
    )
    role: Literal["main", "launcher", "worker"] | None = Field(
        None, description="main: the entry point; launcher: starts ranks; worker: rank/scheduler"
    )
    rank: int | None = Field(None, description="the rank its title names (TP1, ...)")
    busy_unknown: bool = Field(
        False,
        description="no engine matches it, yet it runs hard (state R or >= 50% CPU) and is not a "
        "shell, compiler, editor or pivot: it may be the workload (a user's script, a test "
        "binary), so the server cannot be called gone while it runs",
    )
    runtime: bool = Field(
        False,
        description="a daemon of a runtime the launch may run on (Ray's raylet): not the server",
    )
    building: bool = Field(
        False,
        description="a compiler/JIT builder (nvcc, ptxas, ninja, cc1plus) the server runs: "
        "work in progress, not a hang (any running compiler when ps shows no tree)",
    )
    why: str = Field("", description="how it was identified as the server")
    launch: int | None = Field(
        None, description="the top server process of its process tree (its launch)"
    )
    ours: bool | None = Field(
        None,
        description="True: in the tree of the process writing the given log (or pid file, "
        "port); False: that was found and this is another launch; None: not known",
    )
    zombie: bool = False
    d_state: bool = False
    on_gpu: bool = Field(False, description="nvidia-smi lists this pid as a compute process")
    gpu_mib: int | None = Field(None, description="GPU memory this pid holds, when known")
    raw: str = Field("", description="the ps line, verbatim")


class PsParse(BaseModel):
    header: str = ""
    procs: list[Proc] = Field(default_factory=list)


class Result(ToolResult):
    header: str = ""
    processes: list[Proc] = Field(
        default_factory=list,
        description="servers, zombies, D-state, GPU holders and pattern matches",
    )
    total: int = 0
    mem_pct_total: float | None = Field(
        None, description="host RAM all processes hold together (sum of ps %MEM), when shown"
    )
    servers: list[int] = Field(default_factory=list)
    mains: list[int] = Field(
        default_factory=list, description="servers' main processes (entry points, launchers)"
    )
    zombies: list[int] = Field(default_factory=list)
    d_state: list[int] = Field(default_factory=list)
    gpu_pids_missing: list[int] = Field(
        default_factory=list, description="GPU pids with no process here (other namespace)"
    )
    log_writers: dict[str, list[int]] = Field(
        default_factory=dict, description="log path -> pids whose stdout/stderr is that file"
    )
    rotated: dict[str, str] = Field(
        default_factory=dict,
        description="log asked about -> the file its writer really writes: renamed under it "
        "(server.log -> server.log.1) or deleted, the process still writing through its fd",
    )
    fd_unreadable: int = Field(
        0, description="processes whose stdout/stderr could not be read (another user's)"
    )
    read_outside: str | None = Field(
        None, description="why the table is the machine's, not the container's (no ps inside)"
    )
    whole: bool = Field(False, description="every row shown (a container's own table)")
    reader: str | None = Field(
        None,
        description="the user of the process list's own `ps` row: who reads the box (the one "
        "asking, most often about their own launch)",
    )

    def lines(self) -> list[str]:
        out = [self.header] if self.header and self.processes else []
        if self.read_outside:
            out.append(f"# {self.read_outside}")
        out += [p.raw for p in self.processes]
        out.append(f"# {self.total} processes; {len(self.processes)} shown")
        for p in self.processes:
            tags = [
                (
                    f"server={p.server}"
                    + (f" {p.role}" if p.role else "")
                    + (f" rank {p.rank}" if p.rank is not None else "")
                    + (f" ({p.why})" if p.why else "")
                )
                if p.server
                else "",
                "another launch" if p.server and p.ours is False else "",
                "a runtime's daemon (the launch may run on it), not the server"
                if p.runtime
                else "",
                "ZOMBIE" if p.zombie else "",
                "D-state (uninterruptible, often I/O or driver)" if p.d_state else "",
                ("holds GPU memory" + (f" ({p.gpu_mib} MiB)" if p.gpu_mib is not None else ""))
                if p.on_gpu
                else "",
            ]
            if any(tags):
                out.append(f"# pid {p.pid}: " + ", ".join(t for t in tags if t))
        for path, pids in self.log_writers.items():
            who = ", ".join(map(str, pids)) if pids else "no running process"
            out.append(f"# {path} is written by: {who}")
        for asked, actual in self.rotated.items():
            out.append(
                f"# {asked} was rotated: its writer writes {actual} (renamed under it); read that"
            )
        if self.fd_unreadable and any(not v for v in self.log_writers.values()):
            out.append(
                f"# could not read stdout/stderr of {self.fd_unreadable} processes of other "
                "users (run as root or as the server's user to tie the log to its process)"
            )
        live = [p for p in self.processes if p.server and not p.zombie]
        if not live and self.ok and self.whole and self.processes:
            out.append(
                "# no inference-server process is running that the engine registry knows (the "
                "container's whole table is shown: a process its log names by pid may be the "
                "server under another name)"
            )
        elif not live and self.ok:
            out.append("# no inference-server process is running")
        elif live and self.ok and all(p.ours is False for p in live):
            others = ", ".join(str(p.pid) for p in live[:6])
            out.append(
                "# no inference-server process of this launch is running "
                f"(other launches: {others})"
            )
        if self.mem_pct_total is not None and self.mem_pct_total >= MEM_PRESSURE_PCT:
            big = sorted(
                (p for p in self.processes if (p.mem_pct or 0) >= MEM_HOG_PCT),
                key=lambda p: -(p.mem_pct or 0),
            )
            hogs = ", ".join(f"pid {p.pid} {p.mem_pct:.0f}%" for p in big[:6])
            out.append(
                f"# host RAM nearly exhausted: processes hold {self.mem_pct_total:.0f}% of it "
                f"(ps %MEM); the biggest: {hogs}"
            )
        if self.gpu_pids_missing:
            out.append(f"# GPU pids not in this ps (container/namespace?): {self.gpu_pids_missing}")
        return bound_lines(out + super().lines())


def _int(v: str | None) -> int | None:
    return int(v) if v is not None and re.fullmatch(r"\d+", v) else None


def _float(v: str | None) -> float | None:
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


def server_kind(command: str) -> str | None:
    """The engine a command line is part of, from the registry (tools/engines.yaml): its entry
    point, launcher or worker title, never a mere mention (`grep vllm`, a compile, pivot)."""
    return engines.classify(command).engine


def parse_ps(text: str) -> PsParse:
    """Rows of any `ps` output whose header names PID and a command column."""
    out = PsParse()
    names: list[str] | None = None
    for line in text.splitlines():
        if names is None:
            toks = line.split()
            if "PID" in toks and any(_COLUMN.get(t) == "command" for t in toks):
                names = [_COLUMN.get(t, t.lower()) for t in toks]
                out.header = line
            continue
        parts = line.split(None, len(names) - 1)
        if len(parts) < len(names):
            continue
        row = dict(zip(names, parts, strict=False))
        pid = _int(row.get("pid"))
        if pid is None:
            continue
        cmd = row.get("command", "").rstrip()
        stat = row.get("stat", "")
        zombie = stat.startswith("Z") or cmd.endswith("<defunct>")
        m = engines.classify(cmd)
        out.procs.append(
            Proc(
                pid=pid,
                ppid=_int(row.get("ppid")),
                user=row.get("user", ""),
                stat=stat,
                elapsed_s=_int(row.get("etimes")),
                started=row.get("start", "") or "",
                cpu_pct=_float(row.get("cpu")),
                mem_pct=_float(row.get("mem")),
                rss_kb=_int(row.get("rss")),
                command=cmd,
                server=m.engine,
                role=m.role,
                rank=m.rank,
                why=("worker title" if m.role == "worker" else "entry point") if m.engine else "",
                zombie=zombie,
                d_state=stat.startswith("D"),
                raw=line,
            )
        )
    return out


_FD_LINE = re.compile(r"/proc/(\d+)/fd/([12]) -> (.+?)(?: \(deleted\))?$")
_DENIED = re.compile(r"/proc/(\d+)/(?:fd|ns)[^:]*: Permission denied")
_ANY_FD = re.compile(r"/proc/(\d+)/(fd/\d+|ns/pid) -> (.+?)(?: \(deleted\))?$")
_LISTEN = re.compile(r":(\d+)\s+\S+\s+users:\(\((.*)\)\)")
_LISTEN_PID = re.compile(r"pid=(\d+)")


def parse_fd_table(text: str) -> dict[int, dict[str, str]]:
    """pid -> {"fd/0": target, "fd/1": ..., "ns/pid": "pid:[N]"} from FD_COMMAND's output."""
    out: dict[int, dict[str, str]] = {}
    for line in text.splitlines():
        m = _ANY_FD.search(line)
        if m:
            out.setdefault(int(m.group(1)), {})[m.group(2)] = m.group(3)
    return out


def _glob_escape(path: str) -> str:
    return re.sub(r"([\[\]*?])", r"[\1]", path)


#: Splits the one command's output into the fd table and the find's hits.
_FIND_MARK = "@@pivot-fd-find@@"


def any_fd_command(logs: list[str]) -> str:
    """Every fd of every process that points at one of `logs` (a FileHandler writes on fd 3+,
    not stdout); find's own errors name the processes whose fds we may not read."""
    names = " -o ".join(f"-lname {shlex.quote(_glob_escape(posixpath.normpath(p)))}" for p in logs)
    return f"find /proc/[0-9]*/fd -maxdepth 1 \\( {names} \\) -exec ls -l {{}} + 2>&1"


def parse_fd_links(text: str) -> dict[int, set[str]]:
    """pid -> files its stdout/stderr point at, from `ls -l /proc/*/fd/1 /proc/*/fd/2`."""
    out: dict[int, set[str]] = {}
    for line in text.splitlines():
        m = _FD_LINE.search(line)
        if m and m.group(3).startswith("/"):
            out.setdefault(int(m.group(1)), set()).add(m.group(3))
    return out


def parse_listeners(text: str) -> dict[int, set[int]]:
    """port -> pids listening on it, from `ss -ltnp` (pids only for processes we may see)."""
    out: dict[int, set[int]] = {}
    for line in text.splitlines():
        m = _LISTEN.search(line)
        if m:
            out.setdefault(int(m.group(1)), set()).update(
                int(p) for p in _LISTEN_PID.findall(m.group(2))
            )
    return out


def _builds(p: Proc) -> bool:
    return bool(engines.builder_pattern().search(p.command))


def _mark_builders(procs: list[Proc]) -> None:
    """Compilers under a server process (or anywhere, beside a server, when ps has no tree)."""
    by_pid = {p.pid: p for p in procs}
    servers = {p.pid for p in procs if p.server}
    if not servers:
        # no server known: compilers hard at work are shown (a build, a JIT, a pip wheel may be
        # what writes the log; dead it is not)
        for p in procs:
            busy = p.stat.startswith("R") or (p.cpu_pct or 0.0) >= 50.0
            if busy and _builds(p):
                p.building = True
        return
    for p in procs:
        if not _builds(p):
            continue
        if p.ppid is None:
            p.building = True
            continue
        seen, up = set(), p.ppid
        while up is not None and up not in seen and up in by_pid:
            if up in servers:
                p.building = True
                break
            seen.add(up)
            up = by_pid[up].ppid


def _mark_busy_unknown(procs: list[Proc]) -> None:
    if any(p.server for p in procs):
        return  # the server is known; other busy jobs are co-tenants, not candidates
    for p in procs:
        busy = p.stat.startswith("R") or (p.cpu_pct or 0.0) >= 50.0
        if busy and not p.zombie and not p.building and not _never(p) and p.command[:1] != "[":
            p.busy_unknown = True


#: the process list's own row: `ps aux`, `ps -ef`, `ps -ww -eo pid,...` as the reader ran it
_READER_PS = re.compile(r"^(?:\S*/)?ps(?:\s|$)")


def _reader(procs: list[Proc]) -> str | None:
    users = {p.user for p in procs if p.user and _READER_PS.match(p.command)}
    return users.pop() if len(users) == 1 else None


def _possible_mains(procs: list[Proc]) -> set[int]:
    """Where an engine's workers live and no main process of theirs is known: the processes of
    the same user started when they did. One may be their main under a name the registry does
    not know (`mineru-vllm-server`); shown, so that "the front end is gone" is not said of a
    server that runs."""
    ruled = {p.user for p in procs if p.server and p.role in ("main", "launcher")}
    starts = {
        (p.user, p.started)
        for p in procs
        if p.server and p.role == "worker" and p.started and p.user not in ruled
    }
    return {p.pid for p in procs if not p.server and p.started and (p.user, p.started) in starts}


def _busy(p: Proc) -> bool:
    """Running hard now (state R or half a core), not a kernel thread, not ps itself."""
    running = p.stat.startswith("R") or (p.cpu_pct or 0.0) >= 50.0
    return running and not p.zombie and p.command[:1] != "[" and not _never(p)


def _never(p: Proc) -> bool:
    return engines.classify(p.command).never


def identify(
    procs: list[Proc],
    writers: dict[int, str] | None = None,
    pid_file_pids: set[int] | None = None,
    port_pids: dict[int, int] | None = None,
) -> None:
    """Mark the server's processes in place: the registry's entry points and worker titles
    (already on each Proc), the writers of the log under investigation, the pid-file pid, the
    listener on the server's port, and every descendant of those (ranks, workers) that is not a
    compiler, an editor, a shell, pivot itself. Each server process gets its launch (top server
    ancestor) and, when the log/pid file/port named one launch, whether it is that one."""
    by_pid = {p.pid: p for p in procs}
    anchors: set[int] = set()
    other_writers = {
        p: f[len(OTHER_LOG_PREFIX) :]
        for p, f in (writers or {}).items()
        if f.startswith(OTHER_LOG_PREFIX)
    }
    writers = {p: f for p, f in (writers or {}).items() if p not in other_writers}
    for pid, why in [
        *((p, f"writes {f}") for p, f in writers.items()),
        *((p, "pid file") for p in pid_file_pids or set()),
        *((p, f"listens on :{port}") for p, port in (port_pids or {}).items()),
    ]:
        p = by_pid.get(pid)
        if p is None or _never(p):
            continue
        anchors.add(pid)
        if not p.server:
            p.server, p.role = "unknown", "main"
        p.why = why if not p.why else f"{p.why}; {why}"
    kids: dict[int, list[Proc]] = {}
    for p in procs:
        if p.ppid is not None:
            kids.setdefault(p.ppid, []).append(p)
    # descendants of a server process belong to it (a g++ its JIT runs does not)
    frontier = [p for p in procs if p.server]
    while frontier:
        parent = frontier.pop()
        for c in kids.get(parent.pid, []):
            if c.server or _never(c):
                continue
            c.server, c.role, c.why = parent.server, "worker", f"child of {parent.pid}"
            frontier.append(c)

    def top(p: Proc) -> int:
        seen = {p.pid}
        while p.ppid in by_pid and by_pid[p.ppid].server and p.ppid not in seen:
            p = by_pid[p.ppid]
            seen.add(p.pid)
        return p.pid

    for p in procs:
        if p.server:
            p.launch = top(p)
    # a worker re-parented to init, with no server process above it and no main process of its
    # engine alive anywhere, outlived a launch that is gone: a leftover, never "the server"
    # (its GPU memory and ports are what the next launch trips on). Only where ps gave the
    # parent: a card's `ps aux` without PPID says nothing of it.
    mains = {p.server for p in procs if p.server and p.role in ("main", "launcher")}
    for p in procs:
        if (
            p.server
            and p.role == "worker"
            and p.ppid == 1
            and p.launch == p.pid
            and p.server not in mains
            and p.pid not in anchors
        ):
            p.ours = False
            p.why = "orphan: re-parented to init, no launch of its engine alive"
    if anchors:
        ours = {by_pid[a].launch for a in anchors}
        for p in procs:
            if p.server and p.ours is not False:
                p.ours = p.launch in ours if p.ppid is not None else p.pid in anchors
    elif other_writers:
        # nobody writes our log any more (its server is gone); a launch whose output goes to
        # another file is someone else's, so it cannot make a dead server look alive
        theirs = {by_pid[p].launch for p in other_writers if p in by_pid and by_pid[p].server}
        for p in procs:
            if p.server and p.launch in theirs:
                p.ours = False


def _matcher(pattern: str | None) -> re.Pattern[str] | None:
    if not pattern:
        return None
    try:
        return re.compile(pattern, re.I)
    except re.error:
        return re.compile(re.escape(pattern), re.I)


#: Host RAM held by all processes together (sum of ps %MEM) at which the kernel's OOM killer is
#: A container's process table up to this many rows is shown whole (its processes are the
#: workload's; a bigger one is a whole machine's init tree, filtered like a host's).
CONTAINER_ALL_ROWS = 40

#: near: the processes holding at least MEM_HOG_PCT each are shown and named.
MEM_PRESSURE_PCT = 85.0
MEM_HOG_PCT = 5.0

#: In `identify`'s writers map, a pid whose stdout goes to another file than the logs asked about.
OTHER_LOG_PREFIX = "other:"


def _writers(
    host: Host,
    logs: list[str],
    listed: set[int] | None = None,
    rotated: dict[str, str] | None = None,
) -> tuple[dict[str, list[int]], dict[int, str], int]:
    """Who writes the logs under investigation, on any fd, and through a pipe into `tee LOG`;
    and, for every other process whose fds we could read in our own pid namespace, where its
    output goes: a launch that provably does not write our log is another launch, so it can
    neither make a dead server look alive nor be taken for it."""
    if not logs:
        return {}, {}, 0
    # one round trip: the stdio/namespace table, then every fd that points at a log
    res = host.run(f"{FD_COMMAND}; echo {_FIND_MARK}; {any_fd_command(logs)}", timeout=20)
    listing, mark, found_out = (res.stdout or "").partition(_FIND_MARK + "\n")
    table = parse_fd_table(listing)  # ls exits 2 when some links could not be read: keep the rest
    if not table and (res.rc is None or res.error):
        # the listing itself was not made (not recorded, no /proc): who writes the log is
        # unknown, never "no running process"
        return {}, {}, 0
    denied_pids = set(_DENIED.findall(res.stderr or "")) | set(_DENIED.findall(found_out))
    wanted = {posixpath.normpath(p): p for p in logs}
    by_log: dict[str, list[int]] = {p: [] for p in logs}
    pid_log: dict[int, str] = {}
    for pid, fds in sorted(table.items()):
        for fd in ("fd/1", "fd/2"):
            target = posixpath.normpath(fds.get(fd, ""))
            name = wanted.get(target)
            if name is None:
                # the log was rotated under a running writer: it writes the renamed file still
                name = next((w for n, w in wanted.items() if rotation_of(n, target)), None)
                if name is not None and rotated is not None:
                    rotated[name] = target
            if name is not None and pid not in by_log[name]:
                by_log[name].append(pid)
                pid_log[pid] = name
    for line in found_out.splitlines():
        m = _ANY_FD.search(line)
        name = wanted.get(posixpath.normpath(m.group(3))) if m else None
        if m and name is not None and int(m.group(1)) not in by_log[name]:
            by_log[name].append(int(m.group(1)))
            pid_log[int(m.group(1))] = name
    # `server 2>&1 | tee LOG`: the writer reads a pipe; whoever writes into that pipe writes LOG
    for name, pids in by_log.items():
        pipes = {table.get(w, {}).get("fd/0") for w in pids} - {None}
        pipes = {x for x in pipes if x and x.startswith("pipe:")}
        for pid, fds in sorted(table.items()):
            if pid not in pid_log and pipes & {fds.get("fd/1"), fds.get("fd/2")}:
                by_log[name].append(pid)
                pid_log[pid] = name
    ns = [fds.get("ns/pid") for fds in table.values() if fds.get("ns/pid")]
    home_ns = table.get(1, {}).get("ns/pid") or (max(set(ns), key=ns.count) if ns else None)
    # the find ran to its end (its rc is the command's) and was not cut by a timeout
    complete = bool(mark) and res.rc is not None and not res.error
    for pid, fds in sorted(table.items()):
        if pid in pid_log or str(pid) in denied_pids:
            continue
        out = fds.get("fd/1") or fds.get("fd/2")
        if out is None:
            continue
        if out.startswith("/") and not out.startswith(("/dev/", "/proc/")):
            pid_log[pid] = OTHER_LOG_PREFIX + out  # writes another log file: another launch
        elif complete and home_ns is not None and fds.get("ns/pid") == home_ns:
            # its fds were read, none points at our log, and it sees the paths we see
            pid_log[pid] = OTHER_LOG_PREFIX + out
    if complete:
        # in ps a moment ago, gone from /proc now (and not for want of permission): it exited
        # between the two reads, so it writes nothing (a busy box starts and ends jobs all the time)
        for pid in (listed or set()) - set(table) - {int(d) for d in denied_pids}:
            pid_log.setdefault(pid, OTHER_LOG_PREFIX + "(exited during the read)")
    return by_log, pid_log, len(denied_pids)


def _pid_files(host: Host, paths: list[str]) -> set[int]:
    out: set[int] = set()
    for path in paths:
        res = host.run(f"cat {shlex.quote(path)}", timeout=5)
        m = re.match(r"\s*(\d+)\s*$", res.stdout or "") if res.ok else None
        if m:
            out.add(int(m.group(1)))
    return out


def _port_pids(host: Host, ports: list[int]) -> dict[int, int]:
    if not ports:
        return {}
    res = host.run(LISTEN_COMMAND, timeout=10)
    listeners = parse_listeners(res.stdout or "")
    return {pid: port for port in ports for pid in sorted(listeners.get(port, ()))}


def _stopped_container(res: CommandResult) -> bool:
    """The container is not running: its processes are gone, so no table of the machine's
    would show them (and it would read as "the server is gone" from the machine's view)."""
    return "is not running" in (res.error or "")


def run(host: Host, args: Args) -> Result:
    res = host.run(PS_COMMAND, timeout=15)
    parsed = parse_ps(res.stdout) if res.ok else PsParse()
    if not parsed.header:
        res = host.run(PS_FALLBACK, timeout=15)
        parsed = parse_ps(res.stdout) if res.ok else PsParse()
    outside = None
    box = container_of(host)
    if not parsed.header and box is not None and not _stopped_container(res):
        # a slim image without ps: the machine's table shows the container's processes too,
        # under the pids nvidia-smi (run outside) names, so GPU memory links to its holders
        inner = res.error or (res.stderr or res.stdout).strip()[:120] or f"rc {res.rc}"
        res = box.outer.run(PS_COMMAND, timeout=15)
        parsed = parse_ps(res.stdout) if res.ok else PsParse()
        if parsed.header:
            outside = (
                f"no process table inside container {box.container} ({inner}); this is the "
                f"machine's ({box.outer.name}), whose pids nvidia-smi names"
            )
    if not parsed.header:
        detail = res.error or (res.stderr or res.stdout).strip()[:200] or f"rc {res.rc}"
        return Result(
            host=host.name,
            ok=False,
            error=f"{res.command!r} on {host.name} gave no process table: {detail}",
            fix="install procps (ps), or read /proc/<pid>/cmdline for the pids you care about",
        )
    gpu_mib: dict[int, int | None] = {p: None for p in args.gpu_pids}
    if args.link_gpu and not args.gpu_pids:
        gs = gpu_status.snapshot(host)
        gpu_mib = {p.pid: p.used_mib for p in gs.processes}
    match = _matcher(args.pattern)
    own = {p.pid for p in parsed.procs if re.match(r"^(?:ps|ls|ss)\s", p.command)}
    procs = [p for p in parsed.procs if p.pid not in own]
    rotated: dict[str, str] = {}
    by_log, pid_log, denied = _writers(host, args.logs, {p.pid for p in procs}, rotated)
    identify(procs, pid_log, _pid_files(host, args.pid_files), _port_pids(host, args.ports))
    _mark_builders(procs)
    _mark_busy_unknown(procs)
    mems = [p.mem_pct for p in procs if p.mem_pct is not None]
    mem_total = round(sum(mems), 1) if mems else None
    pressure = mem_total is not None and mem_total >= MEM_PRESSURE_PCT
    shown: list[Proc] = []
    # inside a container every process is the workload's and the table is short: each row is
    # shown, so a server under a name no registry knows (LocalAI's backend.py, a multiprocessing
    # spawn child the log names as `(EngineCore pid=N)`) is seen alive, never "gone"
    whole = outside is None and box is not None and len(procs) <= CONTAINER_ALL_ROWS
    kin = _possible_mains(procs)
    for p in procs:
        if p.pid in gpu_mib:
            p.on_gpu, p.gpu_mib = True, gpu_mib[p.pid]
        hit = match is not None and (match.search(p.command) or args.pattern == str(p.pid))
        p.runtime = not p.server and bool(engines.runtime_daemon_pattern().search(p.command))
        if (
            whole
            or hit
            or p.server
            or p.building
            or p.runtime
            or p.busy_unknown
            or _busy(p)  # at work beside the server: unpacking, converting what it waits for
            or p.zombie
            or p.d_state
            or p.pid in gpu_mib
            or (pressure and (p.mem_pct or 0) >= MEM_HOG_PCT)
            or p.pid in kin
        ):
            shown.append(p)
    present = {p.pid for p in parsed.procs}
    return Result(
        host=host.name,
        header=parsed.header,
        processes=shown,
        total=len(procs),
        mem_pct_total=mem_total,
        servers=[p.pid for p in shown if p.server],
        mains=[p.pid for p in shown if p.server and p.role in ("main", "launcher")],
        zombies=[p.pid for p in shown if p.zombie],
        d_state=[p.pid for p in shown if p.d_state],
        gpu_pids_missing=sorted(p for p in gpu_mib if p not in present),
        log_writers=by_log,
        reader=_reader([p for p in parsed.procs if p.pid in own]),
        rotated=rotated,
        fd_unreadable=denied,
        read_outside=outside,
        whole=whole,
    )


SPEC = ToolSpec(
    name="processes",
    description=(
        "The host's processes (ps) with inference servers marked by the engine registry (entry "
        "points, worker titles such as VLLM::EngineCore) and their children; logs= ties the log "
        "under investigation to the process writing it. Zombies and D-state processes are "
        "marked; each pid holding GPU memory is linked to its command. pattern= narrows to "
        "matching commands or one pid. Use it to see whether a server or its ranks are alive, "
        "or whether a stale process holds the GPU."
    ),
    args=Args,
    result=Result,
    fn=run,
    first_sweep=2,
    verdict_needs=True,
    facts=(
        "procs",
        "server_pids",
        "server_engine",
        "ranks",
        "log_writers",
        "building_pids",
        "busy_unknown_pids",
    ),
)
