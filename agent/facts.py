"""Host facts derived from observations: is the server alive, who holds the GPUs, does the log grow.

These are the checks an engineer runs by eye (ps, nvidia-smi, a second tail). They are computed
from tool results only, never from the operator's words or from log text telling us what to do.
Each observation's data is read back as its tool's typed `Result` (agent/typed_results.py), so
a renamed field fails loudly (ResultShapeError) instead of yielding empty facts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr

from agent import script_cmd
from agent.rules import proof
from agent.rules.proof import frontend_only, log_pids, main_log_pids
from agent.state import Observation
from agent.typed_results import typed
from tools import (
    config_read,
    container_inspect,
    container_logs,
    disk,
    dmesg,
    engines,
    gpu_status,
    host_facts,
    launch_progress,
    log_tail,
    ports,
    processes,
    service_logs,
)
from tools.container_inspect import ContainerState

#: A process that is running now, not a leftover: R, or S/D using the CPU.
_RUNNING_CPU = 1.0


#: Display servers and desktop shells: type G in nvidia-smi, never a stale compute process.
GRAPHICS = re.compile(
    r"(?i)(?:^|/)(?:Xorg|Xwayland|gnome-shell|kwin\w*|plasmashell|compiz|xfwm4)\b"
)
GRAPHICS_ROW = re.compile(r"\|\s+\d+\s+\S+\s+\S+\s+\d+\s+G\s")


class GpuFact(BaseModel):
    index: int | None = None
    used_mib: float | None = None
    total_mib: float | None = None
    util_pct: float | None = None
    bus_id: str | None = (
        None  # as nvidia-smi prints it (00000000:18:00.0): ties a kernel line to it
    )
    line: str = ""


class RankFact(BaseModel):
    """One rank of the server: its worker process and whether it is alive."""

    rank: int
    pid: int | None = None
    state: Literal["alive", "defunct", "gone"] = "gone"
    line: str = Field("", description="the ps line of its worker, verbatim (empty when gone)")


class Facts(BaseModel):
    gpu_available: bool = False
    gpus: list[GpuFact] = Field(default_factory=list)
    gpu_obs: str | None = None
    gpu_error: str | None = None
    gpu_pids: dict[int, float] = Field(default_factory=dict)  # pid -> MiB
    gpu_pid_lines: dict[int, str] = Field(default_factory=dict)
    #: pid -> the GPU (nvidia-smi's index) its memory is on, where nvidia-smi said
    gpu_pid_index: dict[int, int] = Field(default_factory=dict)
    #: the process table is the machine's, read for a container without ps of its own: its
    #: pids are the machine's, and a pid is read on the machine (py_stacks, process_io)
    ps_outside: bool = False
    gpu_pid_obs: str | None = None
    graphics_mib: float = 0.0  # held by display servers / desktop apps (type G)
    ps_available: bool = False
    ps_obs: str | None = None
    ps_header: str = ""
    procs: dict[int, str] = Field(default_factory=dict)  # pid -> verbatim ps line
    #: live processes of the server under investigation: its main process, launchers, ranks
    #: and workers (never a zombie, never another launch the log/port/pid file told apart)
    server_pids: list[int] = Field(default_factory=list)
    server_engine: str | None = Field(None, description="the registry's engine of the server")
    server_main_pids: list[int] = Field(
        default_factory=list, description="live entry points / launchers of the server"
    )
    server_worker_pids: list[int] = Field(
        default_factory=list, description="live ranks, schedulers, engine cores, children"
    )
    server_defunct_pids: list[int] = Field(
        default_factory=list, description="server processes that are zombies (<defunct>)"
    )
    server_user: str | None = Field(None, description="the user the server runs as")
    ps_reader: str | None = Field(
        None, description="who reads the box: the user of the process list's own ps row"
    )
    launch_user: str | None = Field(
        None,
        description="the user the launch runs as: its own processes' or, none alive, that of "
        "the live instances of its engine's command on the box, when they agree",
    )
    host_mem_pct: float | None = Field(
        None, description="host RAM all processes hold (sum of ps %MEM), from the latest ps"
    )
    free_held_pct: float | None = Field(
        None, description="host RAM held (total minus available) by `free`, from host_facts"
    )
    free_obs: str | None = None
    free_line: str = Field("", description="free's Mem: row, to cite")
    mem_hogs: list[int] = Field(
        default_factory=list, description="pids holding the most host RAM, biggest first"
    )
    ranks: list[RankFact] = Field(
        default_factory=list,
        description="each rank the worker titles or the log name, with its liveness",
    )
    ranks_gone: list[int] = Field(
        default_factory=list,
        description="ranks the log names with no worker alive while the server still runs",
    )
    log_ranks: list[int] = Field(default_factory=list, description="ranks the log lines name")
    core_gone_line: str = Field(
        "",
        description="a log line of the engine's core (scheduler, engine core) while no core "
        "process is alive and the front end still runs: the core is gone",
    )
    log_writers: dict[str, list[int]] = Field(
        default_factory=dict, description="log path -> pids writing it (stdout/stderr)"
    )
    other_launch_pids: list[int] = Field(
        default_factory=list,
        description="live engine processes of another launch (told apart by log/port/pid file)",
    )
    co_tenant_pids: dict[int, str] = Field(
        default_factory=dict,
        description="pid -> why: another user's or another launch's live, running job holding "
        "the GPU or running an engine; never advise killing it",
    )
    busy_unknown_pids: dict[int, str] = Field(
        default_factory=dict,
        description="pid -> ps line: runs hard, matches no engine; may be the workload",
    )
    building_pids: dict[int, str] = Field(
        default_factory=dict, description="pid -> ps line of a compiler the server is running"
    )
    leftover_pids: dict[int, str] = Field(
        default_factory=dict,
        description="pid -> why: a defunct, orphaned or idle process of an earlier launch",
    )
    _ps_recs: dict[int, dict[str, Any]] = PrivateAttr(default_factory=dict)
    #: workers that started before the launch's entry point (an earlier launch's): pid -> why
    _older: dict[int, str] = PrivateAttr(default_factory=dict)
    dmesg_available: bool = False
    dmesg_obs: str | None = None
    dmesg_lines: list[str] = Field(default_factory=list)
    dmesg_summary: str = ""
    #: this machine's IPv4 addresses and container-bridge /24 prefixes (host_facts network)
    machine_addrs: list[str] = Field(default_factory=list)
    bridge_nets: list[str] = Field(default_factory=list)
    machine_addrs_obs: str | None = None
    #: compute processes whose GPU memory nvidia-smi cannot meter on this box ([N/A] for the
    #: GPU and the process alike: unified memory): holders of an unknown amount, not of none
    gpu_pids_unmetered: list[int] = Field(default_factory=list)
    #: the workload commands of the launch's shell script (agent/script_cmd.py)
    script_commands: list[list[str]] = Field(default_factory=list)
    #: a line of the launch's log binding an address of another machine, and that address
    log_elsewhere: str | None = None
    log_elsewhere_addr: str = ""
    #: kernel kill lines of other jobs (agent/kills.py) -> why they are not the launch's
    bystander_kills: dict[str, str] = Field(default_factory=dict)
    #: (observation id, kill line, process name) of a kill, while the live launch ran, of a
    #: process its command line names (agent/kills.py dependency_kill)
    dependency_kill: tuple[str, str, str] | None = None
    shm_mib: float | None = None
    #: the /dev/shm read was the machine's, answered for a container that could not run df
    shm_on_machine: bool = False
    shm_use_pct: float | None = None
    shm_line: str = ""
    #: the /dev/shm the launch's log says it maps (vLLM's message-queue ring), the line and
    #: its read: a need bigger than /dev/shm is the shortfall in numbers
    shm_need_mib: float | None = None
    shm_need_line: str = ""
    shm_need_obs: str = ""
    #: the row of the fullest filesystem df listed (mount, pct, line): the one that refutes a
    #: full disk when even it has room
    fullest_mount: tuple[str, float, str] | None = None
    #: the container's inspect line saying it shares the host's IPC namespace (its /dev/shm is
    #: the host's, not docker's 64 MiB default)
    ipc_host_line: str = ""
    #: mount, pct, line: full mounts the launch writes to (or all, when nothing of it is known)
    full_mounts: list[tuple[str, float, str]] = Field(default_factory=list)
    others_full_mounts: list[tuple[str, float, str]] = Field(
        default_factory=list,
        description="full mounts no path of the launch lies on (another team's volume): never "
        "its disk_full",
    )
    disk_obs: str | None = None
    mounts_seen: list[str] = Field(default_factory=list, description="every mount df listed")
    disk_available: bool = False
    listeners: dict[int, str] = Field(default_factory=dict)  # port -> verbatim line
    listener_pids: dict[int, int] = Field(default_factory=dict)  # port -> the pid holding it
    ports_obs: str | None = None
    log_growth: dict[str, bool] = Field(default_factory=dict)  # path -> grew between reads
    log_growth_obs: dict[str, str] = Field(default_factory=dict)
    log_watch: dict[str, bool] = Field(default_factory=dict)  # path -> grew within the window
    log_owners: dict[str, str] = Field(
        default_factory=dict, description="log path -> the user owning the file (stat)"
    )
    #: the server's container (--container): its record, the observation and lines it came from
    container: ContainerState | None = None
    container_cli: str = ""
    container_obs: str | None = None
    container_lines: list[str] = Field(default_factory=list)

    #: the named pod's container is Running (its record, `kubectl describe pod`): where no
    #: process table is readable (a cluster's bastion), that is the server alive
    pod_running: bool | None = None
    pod_obs: str | None = None
    pod_line: str = ""

    @property
    def server_alive(self) -> bool | None:
        if self.pod_running:
            # the named pod's container runs: the server is alive there, whatever this box's
            # own process table shows (a CI runner's or a bastion's, not the pod's node)
            return True
        if not self.ps_available:
            return None
        if self.server_pids:
            return True
        # a busy process no engine pattern knows may be the workload: gone is not proven
        return None if self.busy_unknown_pids else False

    @property
    def gpu_clean(self) -> bool | None:
        known = [g for g in self.gpus if g.used_mib is not None]
        if not self.gpu_available or not known:
            return None
        return all((g.used_mib or 0) < max(1024.0, 0.02 * (g.total_mib or 0)) for g in known)


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


#: the reads of one launch's log, by path: (observation id, file size, its lines)
LogReads = dict[str, list[tuple[str, int, list[str]]]]


#: the last few derivations, by the identity of the observations they read (see `derive`)
_DERIVED: list[tuple[tuple[Observation, ...], Facts]] = []
_DERIVED_KEEP = 4


def derive(observations: list[Observation]) -> Facts:
    """The facts of these observations, derived once per decision.

    One decision asks for them three times (findings, the offered checks, the rulebook's next
    step) over the same observation objects, and deriving them was a tenth of an eval's CPU.
    Observations never change once taken and nobody edits a Facts after it is made, so the
    result is reused while the list holds the very same objects (compared by identity, and the
    objects kept alive here, so an id is never another card's)."""
    key = tuple(observations)
    for seen, facts in reversed(list(_DERIVED)):  # another session may append meanwhile
        if len(seen) == len(key) and all(a is b for a, b in zip(seen, key, strict=True)):
            return facts
    facts = _derive(observations)
    _DERIVED.append((key, facts))
    del _DERIVED[:-_DERIVED_KEEP]
    return facts


def _derive(observations: list[Observation]) -> Facts:
    f = Facts()
    log_reads: LogReads = {}
    for o in observations:
        if not o["ok"]:
            if o["tool"] == "gpu_status":
                # a tool that raised or got bad arguments left no result: its lines say why
                f.gpu_error = typed(o, gpu_status.Result).error if o["data"] else None
                f.gpu_obs = o["id"]
            continue
        read = READERS.get(o["tool"])
        if read is not None:
            read(f, o, log_reads)
    if f.dmesg_available:
        from agent.kills import bystander_kills

        f.bystander_kills = bystander_kills(observations)
        f.dmesg_lines = [ln for ln in f.dmesg_lines if ln not in f.bystander_kills]
    _ranks(f, [ln for reads in log_reads.values() for ln in reads[-1][2]])
    _launch_user(f, log_reads)
    _tenancy(f)
    _keep_plausible_workloads(f, log_reads)
    _keep_plausible_builds(f, log_reads)
    _writers_named_by_log(f, log_reads)
    _runs_the_script(f)
    if (
        _other_ports(f, log_reads)
        | _other_models(f, log_reads)
        | _other_engines(f, log_reads)
        | _other_users(f, log_reads)
        | _other_writers(f, log_reads)
    ):
        # a process taken for the launch was another launch: who the launch is (its user, its
        # ranks) and who the other holders are follow from what remains
        _identity(f)
        _ranks(f, [ln for reads in log_reads.values() for ln in reads[-1][2]])
        _launch_user(f, log_reads)
        _tenancy(f)
    _launch_mounts(f, log_reads)
    _ran_elsewhere(f, log_reads)
    _shm_need(f, log_reads)
    if f.dmesg_available and f.server_alive:
        from agent.kills import dependency_kill

        launch_text = "\n".join([*(f.procs.get(p, "") for p in f.server_pids), *f.container_lines])
        f.dependency_kill = dependency_kill(observations, launch_text)
        if f.dependency_kill is not None and f.dependency_kill[1] in f.bystander_kills:
            # another cgroup's kill, but of what the launch uses: its line is the launch's
            del f.bystander_kills[f.dependency_kill[1]]
            f.dmesg_lines.append(f.dependency_kill[1])
    for path, reads in log_reads.items():
        if len(reads) >= 2:
            (_, s0, t0), (oid, s1, t1) = reads[-2], reads[-1]
            # grown since the earlier read, or within the watched window: either is progress
            changed = f.log_watch.get(path, False) or s1 > s0 or (t1[-1:] != t0[-1:])
            f.log_growth[path] = changed and advancing(t0, t1)
            f.log_growth_obs[path] = oid
    return f


def _shm_need(f: Facts, log_reads: LogReads) -> None:
    """The most /dev/shm a line of the launch's logs (their newest reads) says it maps."""
    for reads in log_reads.values():
        oid, _size, text = reads[-1]
        for line in text:
            need = proof.shm_need_bytes(line)
            if need is not None and need / (1 << 20) > (f.shm_need_mib or 0):
                f.shm_need_mib, f.shm_need_line, f.shm_need_obs = need / (1 << 20), line, oid


_LAUNCHER = engines.workload_pattern()  # tools/engines.yaml common.workload_programs
_HOME = re.compile(r"^/home/([^/]+)/")


def _keep_plausible_workloads(f: Facts, log_reads: LogReads) -> None:
    """A busy process no engine pattern knows counts as a possible workload only when it is a
    Python/MPI/launcher process tied to the log under investigation: its program or script is
    named in the log, or the log lives in its user's home. Unrelated jobs on a busy box never
    make a dead server look alive."""
    if not f.busy_unknown_pids:
        return
    text = "\n".join(ln for reads in log_reads.values() for _, _, t in reads for ln in t[:400])
    homes = {m.group(1) for p in log_reads if (m := _HOME.match(p))}
    keep: dict[int, str] = {}
    for pid, line in f.busy_unknown_pids.items():
        rec = f._ps_recs.get(pid, {})
        cmd = str(rec.get("command") or line)
        user = str(rec.get("user") or "")
        if not _LAUNCHER.search(cmd):
            continue
        words = {w.rsplit("/", 1)[-1] for w in cmd.split()[:3] if len(w.rsplit("/", 1)[-1]) >= 5}
        if user in homes or any(w in text for w in words if not w.startswith("python")):
            keep[pid] = line
    f.busy_unknown_pids = keep


#: where kernel JITs build: a cache of the user running the program (~/.cache/flashinfer,
#: ~/.cache/torch_extensions, torch's inductor dir), not a source tree
_JIT_CACHE = re.compile(r"/\.cache/|/torch_extensions/|/torchinductor_")


def _keep_plausible_builds(f: Facts, log_reads: LogReads) -> None:
    """A compiler working in another user's home (/home/U/src/...) while the log under
    investigation is not U's is U's own build on a shared box: it cannot be what keeps a dead
    launch "still building". So is one that no process tree ties to the launch and that runs
    as another user than the launch's."""
    if not f.building_pids or not log_reads:
        return
    homes = {m.group(1) for p in log_reads if (m := _HOME.match(p))}
    for pid in list(f.building_pids):
        rec = f._ps_recs.get(pid, {})
        if rec.get("ppid") not in (None, 1) and f.server_pids:
            continue  # a child of a server process: the tree says whose it is
        cmd = str(rec.get("command") or "")
        # a home anywhere in the command, an include path's too (`-I/home/kwang/llvm/include`)
        theirs = {m.group(1) for m in re.finditer(r"/home/([^/\s]+)/", cmd)}
        user = str(rec.get("user") or "")
        if _JIT_CACHE.search(cmd) and user and user in (f.launch_user, f.server_user):
            # a kernel JIT builds in its cache under the home of whoever runs the launch
            # (~/.cache/flashinfer, ~/.cache/torch_extensions): the launch's user's, not a
            # project of theirs elsewhere
            continue
        if theirs and user in theirs and not theirs & homes:
            del f.building_pids[pid]
        elif f.launch_user and user and user != f.launch_user:
            # no tree ties it to the launch, and it runs as another user: their build (a
            # colleague's `ninja -j8` in tmux), not one the launch started
            del f.building_pids[pid]


def _writers_named_by_log(f: Facts, log_reads: LogReads) -> None:
    """A live process the log names as its writer (NCCL's host:PID:TID prefix, vLLM's
    `(Worker pid=N)`) is that launch, whatever its command line: a benchmark binary or a training
    script is alive, not "gone". Only launcher-like commands count, so a recycled pid (a shell,
    sshd) never ties an old log to an unrelated process."""
    if not f.ps_available:
        return
    for path, reads in log_reads.items():
        named = log_pids(reads[-1][2])
        for pid in named:
            rec = f._ps_recs.get(pid)
            if rec is None or rec.get("zombie") or pid in f.server_pids:
                continue
            if pid in f.other_launch_pids or pid in f.co_tenant_pids:
                continue
            if not _LAUNCHER.search(str(rec.get("command") or "")):
                continue
            f.server_pids.append(pid)
            f.server_main_pids.append(pid)
            f.log_writers.setdefault(path, []).append(pid)
            f.busy_unknown_pids.pop(pid, None)


def _runs_the_script(f: Facts) -> None:
    """With no engine process known, a live process running the command of the launch's script
    (agent/script_cmd.py) is the launch: an engine no pattern knows is alive, not "gone". Never
    another launch's or another user's process, never a zombie."""
    if not f.ps_available or f.server_pids or not f.script_commands:
        return
    for pid, rec in f._ps_recs.items():
        if rec.get("zombie") or pid in f.other_launch_pids or pid in f.co_tenant_pids:
            continue
        user = str(rec.get("user") or "")
        if f.launch_user and user and user != f.launch_user:
            continue
        cmd = str(rec.get("command") or "")
        if any(script_cmd.runs(c, cmd) for c in f.script_commands):
            f.server_pids.append(pid)
            f.server_main_pids.append(pid)
            f.busy_unknown_pids.pop(pid, None)


def _config(f: Facts, o: Observation, _logs: LogReads) -> None:
    res = typed(o, config_read.Result)
    if res.format == "shell":
        f.script_commands += script_cmd.commands(res.text)


#: the port a launch serves on, as its log or its command line says it
LOG_PORT = re.compile(
    r"(?:--port[ =]|\bport=|'port': |Uvicorn running on https?://[^\s/]+:|"
    # TGI's launcher prints its arguments as a Rust struct: `Args { ..., port: 6006, ... }`
    r"\bArgs \{.*?(?<![\w.])port: )(\d{2,5})\b"
)
_CMD_PORT = re.compile(r"--port[ =](\d{2,5})\b")


def _other_ports(f: Facts, log_reads: LogReads) -> bool:
    """A server launch given another port than the one the log under investigation names is
    another launch: a second server (another team's, a test's) cannot keep this one "alive",
    even where its fds cannot be read (another user's process)."""
    if not f.server_main_pids or not log_reads:
        return False
    ports = {
        int(m.group(1))
        for reads in log_reads.values()
        for ln in reads[-1][2]
        for m in LOG_PORT.finditer(ln)
    }
    if len(ports) != 1:
        return False  # no port named, or several (a log of several launches): no verdict from ports
    (ours,) = ports
    theirs: set[int] = set()
    # mains, and any server process no parent ties to a main (`ps aux` has no ppid column: a
    # neighbour's router given --port 80 is its own launch as far as this list can tell)
    loose = [p for p in f.server_pids if int(f._ps_recs.get(p, {}).get("launch") or p) == p]
    for pid in dict.fromkeys([*f.server_main_pids, *loose]):
        rec = f._ps_recs.get(pid, {})
        m = _CMD_PORT.search(str(rec.get("command") or ""))
        if m and int(m.group(1)) != ours and rec.get("ours") is not True:
            theirs.add(int(rec.get("launch") or pid))
    if not theirs:
        return False
    _set_aside(f, theirs)
    return True


def _set_aside(f: Facts, theirs: set[int]) -> None:
    """Move the processes of the launches `theirs` (their top pids) out of the launch's own
    into other_launch_pids: told apart by port, engine or user, they are another launch."""
    for pid in list(f.server_pids):
        rec = f._ps_recs.get(pid, {})
        if int(rec.get("launch") or pid) in theirs or pid in theirs:
            f.server_pids.remove(pid)
            for group in (f.server_main_pids, f.server_worker_pids):
                if pid in group:
                    group.remove(pid)
            f.other_launch_pids.append(pid)
    # where ps gave no parents, a worker of the same engine and user as a main set aside, with
    # no main of its kind left in the launch, is that main's worker (a live launch's
    # EngineCore, not the dead launch's leftover)
    moved = [f._ps_recs.get(p, {}) for p in theirs]
    kinds = {
        (r.get("server"), r.get("user")) for r in moved if r.get("role") in ("main", "launcher")
    }
    left = {
        (r.get("server"), r.get("user"))
        for p in f.server_pids
        if (r := f._ps_recs.get(p, {})).get("role") in ("main", "launcher")
    }
    for pid in list(f.server_pids):
        rec = f._ps_recs.get(pid, {})
        kind = (rec.get("server"), rec.get("user"))
        if (
            rec.get("role") == "worker"
            and rec.get("ppid") is None
            and kind in kinds
            and kind not in left
        ):
            f.server_pids.remove(pid)
            if pid in f.server_worker_pids:
                f.server_worker_pids.remove(pid)
            f.other_launch_pids.append(pid)


def _log_engine(log_reads: LogReads) -> str | None:
    """The one engine whose launch banner the logs under investigation print, if exactly one."""
    found: set[str] = set()
    reg = engines.registry()
    texts = ["\n".join(reads[-1][2][:2000]) for reads in log_reads.values()]
    for text in texts:
        for name, e in reg.engines.items():
            if not e.generic and any(re.search(m, text) for m in e.launch_markers):
                found.add(name)
    if not found:
        # no banner (an engine that prints none, a log cut after it): the engine whose own
        # source the log's tracebacks run through (`site-packages/lmdeploy/...`)
        for text in texts:
            for name, e in reg.engines.items():
                if not e.generic and any(
                    re.search(rf'File "[^"]*/(?:site|dist)-packages/{d}/', text)
                    for d in e.source_dirs
                ):
                    found.add(name)
    return next(iter(found)) if len(found) == 1 else None


def _log_named_mains(log_reads: LogReads) -> set[int]:
    """The pids the logs under investigation name as their writer, in their own pid column."""
    return set().union(*(main_log_pids(reads[-1][2]) for reads in log_reads.values()))


def _other_engines(f: Facts, log_reads: LogReads) -> bool:
    """A live server process of another engine, whose command line never names the engine the
    log under investigation prints, and which does not write that log, is another launch (a
    neighbour's training job under torchrun is not the dead vLLM server's launch). Workers
    count too: a `ps aux` without parents cannot tie a neighbour's `sglang::scheduler_TP0` to
    its main process, and its engine alone says it is not this vLLM's."""
    mine = _log_engine(log_reads)
    if mine is None or not f.server_pids:
        return False
    names = engines.registry().engines[mine].names
    writers = {p for ps in f.log_writers.values() for p in ps}
    # the launch that wrote the log is the log's, whatever engines it runs: a serving stack
    # hosts another engine (Triton's server runs a vLLM backend in its Python stub; Ray Serve,
    # Dynamo and KServe run vLLM below them). Its writer is the process the log names in its
    # own pid column (glog's `I0321 09:58:02.330141 1 server.cc:...`), or the main process of
    # the container whose log it is
    own = writers | {p for p in _log_named_mains(log_reads) if p in f._ps_recs}
    if f.container is not None and f.container.running and f.container.pid in f._ps_recs:
        own.add(f.container.pid)
    own_launches = {int(f._ps_recs.get(p, {}).get("launch") or p) for p in own}
    theirs: set[int] = set()
    reg = engines.registry()
    for pid in f.server_pids:
        rec = f._ps_recs.get(pid, {})
        engine = rec.get("server")
        cmd = str(rec.get("command") or "")
        if (
            engine in (None, "unknown", mine)
            # a server of its own (serve_x.py) runs an engine as a library: it may be this one
            or (engine in reg.engines and reg.engines[engine].generic)
            or pid in own
            or int(rec.get("launch") or pid) in own_launches
            or rec.get("ours") is True
            or any(re.search(n, cmd, re.I) for n in names)
        ):
            continue
        theirs.add(int(rec.get("launch") or pid))
    if not theirs:
        return False
    _set_aside(f, theirs)
    return True


#: a model a command line serves: `--model X`, `--model-id X`, `--model-path X`, `serve X`
_CMD_MODEL = re.compile(r"(?:--model(?:[-_](?:id|path))?[ =]|\bserve )(?!-)(\S+)")
#: a model a launch's log names as the one it serves, in the engine's own dump of its arguments
#: (TGI's `model_id: "X"`, vLLM's `'model': 'X'` / `model='X'`, SGLang's `model_path='X'`); a
#: `--model X` in a log is often an example in a hint ("For example: ... --model DeepSeek-V3")
_LOG_MODEL = re.compile(r"""model_id: "([^"]+)"|'model': '([^']+)'|\bmodel(?:_path)?='([^']+)'""")


def _model_key(name: str) -> str:
    """A model named by a path, a hub id or a bare name, compared by its last part."""
    return name.rstrip("/").rsplit("/", 1)[-1].lower()


def _other_models(f: Facts, log_reads: LogReads) -> bool:
    """A server process whose command line serves a model other than the one the log under
    investigation says it serves is another launch: a neighbour's falcon-40b shards are not
    this LLaMA-13B launch, even where `ps aux` has no parent column to group them by. Only
    when every log names exactly one model, and the process names one that differs."""
    if not f.server_pids or not log_reads:
        return False
    named = {
        _model_key(next(g for g in m.groups() if g))
        for reads in log_reads.values()
        for ln in reads[-1][2]
        for m in _LOG_MODEL.finditer(ln)
    }
    if len(named) != 1:
        return False
    (ours,) = named
    # the log's whole text, for a model it names otherwise (a resolved snapshot path holds the
    # hub name: .../models--Qwen--Qwen2.5-7B/snapshots/<hash>)
    text = "\n".join(ln for reads in log_reads.values() for ln in reads[-1][2]).lower()
    writers = {p for ps in f.log_writers.values() for p in ps}
    theirs: set[int] = set()
    for pid in f.server_pids:
        rec = f._ps_recs.get(pid, {})
        m = _CMD_MODEL.search(str(rec.get("command") or ""))
        if m is None or pid in writers or rec.get("ours") is True:
            continue
        key = _model_key(m.group(1))
        if key != ours and key not in text:
            theirs.add(int(rec.get("launch") or pid))
    if not theirs:
        return False
    _set_aside(f, theirs)
    return True


def _home_owner(log_reads: LogReads) -> str | None:
    """The one user in whose home every log under investigation lives."""
    homes = {m.group(1) for p in log_reads if (m := _HOME.match(p))}
    if len(homes) != 1 or any(not _HOME.match(p) for p in log_reads):
        return None
    return next(iter(homes))


def _container_owner(f: Facts) -> str | None:
    """Who runs the server's container's main process, by the host's ps."""
    pid = f.container.pid if f.container is not None else None
    user = str(f._ps_recs.get(pid, {}).get("user") or "") if pid is not None else ""
    return user or None


def _other_users(f: Facts, log_reads: LogReads) -> bool:
    """A live server of another (non-root) user than the launch's is another user's launch, not
    this one (a neighbour's vLLM on a shared box). The launch's user: whose home the log under
    investigation lives in, or who runs the server's container's main process (State.Pid in
    the host's ps)."""
    owner = _home_owner(log_reads) or _container_owner(f)
    if owner is None:
        return False
    writers = {p for ps in f.log_writers.values() for p in ps}
    theirs: set[int] = set()
    for pid in f.server_pids:
        rec = f._ps_recs.get(pid, {})
        user = str(rec.get("user") or "")
        if (
            user
            and user not in (owner, "root")
            and pid not in writers
            and rec.get("ours") is not True
        ):
            theirs.add(int(rec.get("launch") or pid))
    if not theirs:
        return False
    _set_aside(f, theirs)
    return True


def _other_writers(f: Facts, log_reads: LogReads) -> bool:
    """Every log under investigation names the process that wrote it (glog's pid column,
    uvicorn's "Started server process [N]"), and each of those is gone: a live server with
    another pid did not write them, so it is another launch (a neighbour's Triton on the same
    GPU), never this one still running."""
    if not f.server_main_pids or not log_reads:
        return False
    if f.ps_outside and f.container is not None and f.container.running:
        # the process table is the machine's, the logs those of a container that runs: a pid a
        # log names is in the container's namespace (its 1 is the machine's 2201), never
        # comparable (a stopped one's launch is in no table: the servers there are others')
        return False
    named = [main_log_pids(reads[-1][2]) for reads in log_reads.values()]
    if not all(named):
        return False  # a log that names no writer: who wrote it is not known
    mains = set().union(*named)
    if any(p in f._ps_recs and not f._ps_recs[p].get("zombie") for p in mains):
        return False
    writers = {p for ps in f.log_writers.values() for p in ps}
    text = "\n".join(ln for reads in log_reads.values() for ln in reads[-1][2])
    theirs = {
        int(f._ps_recs.get(pid, {}).get("launch") or pid)
        for pid in f.server_main_pids
        if pid not in writers
        and f._ps_recs.get(pid, {}).get("ours") is not True
        # a pid in a container's namespace (its log says 1, the host's ps 2201) is no proof:
        # a server whose own arguments (its model repository, its model) the log names is it
        and not any(p in text for p in _arg_paths(f, pid))
    }
    if not theirs:
        return False
    _set_aside(f, theirs)
    return True


#: absolute paths on a command line
_ARG_PATH = re.compile(r"(?:^|[\s=])(/[\w.@%+-]+(?:/[\w.@%+-]+)*)")


def _arg_paths(f: Facts, pid: int) -> list[str]:
    """The absolute paths a process's arguments name (its program's own path left out)."""
    cmd = str(f._ps_recs.get(pid, {}).get("command") or "")
    paths = _ARG_PATH.findall(cmd)
    return paths[1:] if cmd.startswith("/") else paths


def _dmesg(f: Facts, o: Observation, _logs: LogReads) -> None:
    typed(o, dmesg.Result)  # its tally is in the lines; the shape is still checked
    f.dmesg_available = True
    f.dmesg_obs = o["id"]
    f.dmesg_lines = [ln for ln in o["lines"] if not ln.startswith("# ")]
    # the tool's tally ("0 OOM kills, 0 Xid, ...") is what a refutation should quote
    f.dmesg_summary = next((ln for ln in o["lines"] if "OOM kills" in ln), "")


def _host_facts(f: Facts, o: Observation, _logs: LogReads) -> None:
    res = typed(o, host_facts.Result)
    mem = res.memory
    if mem is not None and mem.line in o["lines"]:  # only a line the tool printed is cited
        f.free_held_pct, f.free_obs, f.free_line = mem.held_pct, o["id"], mem.line
    for sec in res.sections:
        if sec.name == "network" and sec.ok and sec.lines:
            f.machine_addrs, f.bridge_nets = machine_addresses(sec.lines)
            f.machine_addrs_obs = o["id"]


_IPV4 = re.compile(r"\b(\d{1,3}(?:\.\d{1,3}){3})(?:/\d+)?\b")
#: interfaces a container runtime or a VM bridge owns: containers on them have addresses of
#: their own, on this machine
_BRIDGE_IF = re.compile(r"^(?:docker|br-|cni|podman|virbr|flannel|cali|vxlan|weave|kube)")


def machine_addresses(lines: list[str]) -> tuple[list[str], list[str]]:
    """(this machine's IPv4 addresses, the /24 prefixes of its container bridges) from `ip
    -brief addr` rows ("eth0 UP 172.16.11.66/24 ...") or `hostname -I` ("172.16.11.66
    172.17.0.1"): a bridge is an interface a container runtime names, or, with no names, an
    address ending in .1 beside another (docker0's 172.17.0.1)."""
    addrs: list[str] = []
    bridges: list[str] = []
    named = any(len(ln.split()) >= 3 and not _IPV4.match(ln.split()[0]) for ln in lines)
    for ln in lines:
        parts = ln.split()
        ips = [m.group(1) for m in _IPV4.finditer(ln) if not m.group(1).startswith("127.")]
        if named and parts and _BRIDGE_IF.match(parts[0]):
            bridges += [ip.rsplit(".", 1)[0] for ip in ips]
        addrs += ips
    if not named and len(addrs) > 1:
        bridges += [ip.rsplit(".", 1)[0] for ip in addrs if ip.endswith(".1")]
    return list(dict.fromkeys(addrs)), list(dict.fromkeys(bridges))


#: the address a server's own log says it binds to (vLLM's non-default args, SGLang's
#: ServerArgs, a command line's --host, uvicorn's banner): a process binds only its machine's
_BIND = re.compile(
    r"""'host': '(\d[\d.]+)'|\bhost='(\d[\d.]+)'|--host[= ](\d[\d.]+)\b|"""
    r"""(?:Uvicorn running on|API server \d+ on) https?://(\d[\d.]+):"""
)


def _ran_elsewhere(f: Facts, log_reads: LogReads) -> None:
    """The launch's log binds an address this machine does not have (nor a container bridge of
    it has): the log was written on another machine (a head node's log copied here), so its
    processes' absence from this machine's table says nothing about them."""
    if not f.machine_addrs:
        return
    for reads in log_reads.values():
        _, _, text = reads[-1]
        for ln in text[:200]:
            m = _BIND.search(ln)
            ip = next((g for g in m.groups() if g), None) if m else None
            if ip is None or ip.startswith(("0.", "127.")) or ip in f.machine_addrs:
                continue
            if ip.rsplit(".", 1)[0] in f.bridge_nets:
                continue  # a container's own address on this machine's bridge
            f.log_elsewhere, f.log_elsewhere_addr = ln, ip
            return


def _ports(f: Facts, o: Observation, _logs: LogReads) -> None:
    f.ports_obs = o["id"]
    for lst in typed(o, ports.Result).listeners:
        line = _find_line(o["lines"], f":{lst.port}")
        if line:  # only a line the tool printed can be cited
            f.listeners[lst.port] = line
            if lst.pid is not None:
                f.listener_pids[lst.port] = lst.pid


def _log_tail(f: Facts, o: Observation, log_reads: LogReads) -> None:
    tail = typed(o, log_tail.Result)
    path = str(o["args"].get("path") or tail.path)
    text = [ln for ln in o["lines"] if ln and not ln.startswith("# ")]
    log_reads.setdefault(path, []).append((o["id"], tail.size, text))
    if tail.grew is not None:  # a watched read: the window itself says
        f.log_watch[path] = tail.grew
    if tail.owner:
        f.log_owners[path] = tail.owner


def _launch_progress(f: Facts, o: Observation, _logs: LogReads) -> None:
    """The patient watch saw the launch's process die: the process table read before it is out
    of date, and the launch is not known to be alive until a later read of it (ps_after_death)
    says which of it remains."""
    res = typed(o, launch_progress.Result)
    if res.died and res.pid in f.server_pids:
        f.server_pids, f.server_main_pids, f.server_worker_pids = [], [], []


def _container_logs(f: Facts, o: Observation, log_reads: LogReads) -> None:
    """A container's log read: like a file's, keyed by the container, its size the line count
    (a restart or a watched window that saw new lines is growth as for a file)."""
    res = typed(o, container_logs.Result)
    if o["args"].get("pattern") or o["args"].get("previous"):
        return  # a search or an earlier instance's lines: not the log's current end
    key = f"container:{res.container or o['args'].get('name') or ''}"
    text = [ln for ln in o["lines"] if ln and not ln.startswith("# ")]
    log_reads.setdefault(key, []).append((o["id"], len(res.entries), text))
    if res.grew is not None:
        f.log_watch[key] = res.grew


#: a container's state in `kubectl describe pod` ("    State:          Running")
_POD_STATE = re.compile(r"^\s+State:\s+(Running|Waiting|Terminated)\b")


def _service_logs(f: Facts, o: Observation, log_reads: LogReads) -> None:
    """A pod's log read (`kubectl logs` of the pod the operator named): like a file's, keyed by
    the pod, its size the line count; its record says whether its container runs. A pod found
    by a cluster-wide search is not known to be the launch: its state says nothing of it."""
    if not o["ok"] or o["args"].get("pattern") or o["args"].get("previous"):
        return
    if not o["args"].get("name"):
        return
    res = typed(o, service_logs.Result)
    key = f"pod:{res.name or o['args'].get('name')}"
    log_reads.setdefault(key, []).append((o["id"], len(res.tail), list(res.tail)))
    if res.grew is not None:
        f.log_watch[key] = res.grew
    states = [(m.group(1), ln) for ln in res.describe if (m := _POD_STATE.match(ln))]
    if states:
        f.pod_running = all(st == "Running" for st, _ in states)
        line = next(ln for ln in o["lines"] if ln == states[0][1])  # only printed lines are cited
        f.pod_obs, f.pod_line = o["id"], line


_DIGITS = re.compile(r"\d+")


def advancing(before: list[str], after: list[str]) -> bool:
    """Did the log move forward, or only repeat itself? A hung worker keeps printing the same
    "still waiting" warning with a new timestamp; a loader prints new shard counts. A line is
    new work if, digits aside, the first read never printed it, or it is a progress bar."""
    from agent.signatures import scan

    seen = {_DIGITS.sub("#", ln) for ln in before}
    # a probe the HTTP front-end answered is not the engine's work (it answers while the
    # scheduler behind it is dead)
    fresh = [ln for ln in after if ln not in set(before) and not frontend_only(ln)]
    if not fresh:
        return False
    # a launcher's "still waiting" heartbeat is no work of the ranks it waits for
    fresh = [ln for ln in fresh if not proof.wait_message(ln)]
    if not fresh:
        return False
    if any(m.strength == "progress" for m in scan(fresh[-50:])):
        return True
    return any(_DIGITS.sub("#", ln) not in seen for ln in fresh)


def _gpu(f: Facts, o: Observation, _logs: LogReads) -> None:
    res = typed(o, gpu_status.Result)
    if res.status != "ok":
        f.gpu_error = res.error or res.status
        f.gpu_obs = o["id"]
        return
    if not res.gpus:
        return
    f.gpu_available = True
    f.gpu_obs = o["id"]
    f.gpus = []
    f.gpu_pids, f.gpu_pid_lines, f.graphics_mib = {}, {}, 0.0  # the newest read decides
    f.gpu_pids_unmetered = []
    f.gpu_pid_index = {}
    for g in res.gpus:
        idx = g.index
        line = g.line  # the tool's own row for this GPU (memory, utilization)
        for ln in o["lines"] if not line else []:
            if ln.startswith("# "):
                continue
            # a table row carries "MiB"; a csv query row (nounits) is the index and commas
            if (
                idx is not None
                and re.match(rf"\s*\|?\s*{idx}\b", ln)
                and ("MiB" in ln or ln.count(",") >= 3)
            ):
                line = ln
                break
        f.gpus.append(
            GpuFact(
                index=idx,
                used_mib=_num(g.memory_used_mib),
                total_mib=_num(g.memory_total_mib),
                util_pct=_num(g.utilization_pct),
                bus_id=g.bus_id,
                line=line,
            )
        )
    for p in res.processes:
        line = _find_line(o["lines"], str(p.pid))
        if GRAPHICS.search(p.name) or GRAPHICS_ROW.search(line):
            # a desktop's display server holds a little memory; it is nobody's leftover
            f.graphics_mib += _num(p.used_mib) or 0.0
            continue
        f.gpu_pids[p.pid] = _num(p.used_mib) or 0.0
        if p.used_mib is None and all(g.memory_used_mib is None for g in res.gpus):
            # unified memory (GB10, Jetson): nvidia-smi meters neither the GPU nor the process
            f.gpu_pids_unmetered.append(p.pid)
        f.gpu_pid_lines[p.pid] = line
        if p.gpu_index is not None:
            f.gpu_pid_index[p.pid] = p.gpu_index
        f.gpu_pid_obs = o["id"]


def _num(value: int | None) -> float | None:
    return float(value) if value is not None else None


def _ps(f: Facts, o: Observation, _logs: LogReads) -> None:
    res = typed(o, processes.Result)
    f.ps_available = True
    f.ps_obs = o["id"]
    # the tool's own verdict line says it best ("# no inference-server process is running")
    f.ps_header = next(
        (ln for ln in o["lines"] if ln.startswith("# no inference-server")),
        next((ln for ln in o["lines"] if "PID" in ln), ""),
    )
    f.procs, f.server_pids, f.server_main_pids, f.server_worker_pids = {}, [], [], []
    f.host_mem_pct = res.mem_pct_total
    f.ps_outside = bool(res.read_outside)
    f.ps_reader = res.reader
    f.mem_hogs = [
        p.pid
        for p in sorted(res.processes, key=lambda p: -(p.mem_pct or 0))
        if (p.mem_pct or 0) >= processes.MEM_HOG_PCT
    ]
    f.server_defunct_pids, f.other_launch_pids = [], []
    f.building_pids, f.busy_unknown_pids = {}, {}
    f.log_writers = {k: list(v) for k, v in res.log_writers.items()}
    #: the records as dicts, for the rules that look a pid up (agent.rules.hang, next_steps)
    f._ps_recs = {}
    f._older = {}
    for r in res.processes:
        pid, cmd = r.pid, r.command
        line = _ps_line(o["lines"], pid, r.raw, cmd)
        f.procs[pid] = line or cmd
        if r.building:
            f.building_pids[pid] = f.procs[pid]
        if r.busy_unknown:
            f.busy_unknown_pids[pid] = f.procs[pid]
        zombie = r.stat.startswith("Z") or "<defunct>" in cmd
        # the processes tool classifies servers from the engine registry (tools/engines.yaml)
        engine, role = r.server, r.role
        f._ps_recs[pid] = {**r.model_dump(mode="json"), "zombie": zombie}
        if not engine:
            continue
        if r.ours is False:
            if not zombie:
                f.other_launch_pids.append(pid)
            continue
        if zombie:
            f.server_defunct_pids.append(pid)
            continue
        f.server_pids.append(pid)
        (f.server_main_pids if role in ("main", "launcher") else f.server_worker_pids).append(pid)
    _older_than_the_launch(f)
    _identity(f)


def _ps_line(lines: list[str], pid: int, raw: str, cmd: str) -> str:
    """The ps row of `pid` itself: the tool's own row for it, else a row naming that pid as a
    whole number beside its command. Never the first row with the same command: a second copy
    of the launch's command (a supervisor's restart) has the same argv, and a pid at the start
    of a row has no space before it."""
    if raw and raw in lines:
        return raw
    own = re.compile(rf"(?<!\d){pid}(?!\d)")
    return next((ln for ln in lines if cmd[:40] in ln and own.search(ln)), "")


def launch_reads(observations: list[Observation], f: Facts) -> list[Observation]:
    """The observations with each ps read cut to the rows that may speak for the launch: the
    row of an engine process outside the launch (a second copy of its command, a neighbour's
    server, another launch) is another process's setting, never this launch's, however alike
    their command lines are. Rows of processes no engine claims stay (a custom launcher)."""
    theirs = {
        f.procs[p]
        for p, rec in f._ps_recs.items()
        if p in f.procs
        and p not in f.server_pids
        and (rec.get("server") or p in f.other_launch_pids)
    }
    if not theirs:
        return observations
    return [
        {**o, "lines": [ln for ln in o["lines"] if ln not in theirs]}
        if o["tool"] == "processes" and o["ok"]
        else o
        for o in observations
    ]


def _identity(f: Facts) -> None:
    """The launch's engine and user, from its main processes (recomputed when another launch
    is told apart later: a neighbour's server must not lend the launch its user)."""
    mains = [f._ps_recs[p] for p in f.server_main_pids] or [f._ps_recs[p] for p in f.server_pids]
    known = [r["server"] for r in mains if r["server"] not in (None, "unknown")]
    f.server_engine = known[0] if known else (mains[0]["server"] if mains else None)
    users = [str(r.get("user") or "") for r in mains if r.get("user")]
    f.server_user = users[0] if users else None


_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _age_key(rec: dict[str, Any]) -> float | None:
    """How long ago a process started, comparably: `etimes` when ps gave it, else its START
    column (HH:MM today, MonDD an earlier day, a year long ago); None when unknown."""
    if isinstance(rec.get("elapsed_s"), int):
        return float(rec["elapsed_s"])
    st = str(rec.get("started") or "")
    if re.fullmatch(r"\d{1,2}:\d\d", st):
        h, m = map(int, st.split(":"))
        return 10**6 - (h * 60 + m) * 60.0  # later today = younger
    if re.fullmatch(r"[A-Z][a-z]{2}\d{1,2}", st) and st[:3] in _MONTHS:
        return 10**7 + (12 - _MONTHS.index(st[:3])) * 31 * 86400 + (31 - int(st[3:])) * 86400
    if re.fullmatch(r"\d{4}", st):
        return 10**9 + (9999 - int(st)) * 1.0
    return None


def _older_than_the_launch(f: Facts) -> None:
    """A worker that started before every live entry point of its engine cannot be their child:
    it outlived an earlier launch (an orphaned runner still holding its GPU memory after the
    server was restarted). It is a leftover, never the server's own worker."""
    mains = [p for p in f.server_main_pids if f._ps_recs.get(p, {}).get("role") == "main"]
    if not mains:
        return
    ages = [_age_key(f._ps_recs[p]) for p in mains]
    if any(a is None for a in ages):
        return
    engine = {f._ps_recs[p].get("server") for p in mains}
    oldest_main = max(a for a in ages if a is not None)
    for pid in list(f.server_worker_pids):
        rec = f._ps_recs.get(pid, {})
        age = _age_key(rec)
        if age is None or rec.get("server") not in engine or age <= oldest_main:
            continue
        f.server_worker_pids.remove(pid)
        f.server_pids.remove(pid)
        f._older[pid] = "a worker started before this launch's server (an earlier launch's orphan)"


def _ranks(f: Facts, log_lines: list[str]) -> None:
    """Per-rank liveness: ranks from worker titles (sglang::scheduler_TP1, VLLM::Worker_TP1) and
    from the log (`TP1`, `[rank1]`); a rank the log names whose worker is not alive, while the
    server still runs, is gone."""
    recs = f._ps_recs
    engine = f.server_engine if f.server_engine not in (None, "unknown") else None
    f.log_ranks = sorted(engines.log_ranks(log_lines, engine))
    alive: dict[int, int] = {}
    defunct: dict[int, int] = {}
    for pid in [*f.server_worker_pids, *f.server_defunct_pids]:
        rank = recs.get(pid, {}).get("rank")
        if isinstance(rank, int):
            (defunct if pid in f.server_defunct_pids else alive).setdefault(rank, pid)
    core_gone = _core_gone(f, engine, log_lines)  # sets f.core_gone_line
    if not alive and not defunct and core_gone:
        gone = f.log_ranks or [0]
        f.ranks = [RankFact(rank=r, state="gone") for r in gone]
        f.ranks_gone = list(gone)
        return
    if not alive and not defunct and _every_rank_gone(f, log_lines):
        f.ranks = [RankFact(rank=r, state="gone") for r in f.log_ranks]
        f.ranks_gone = list(f.log_ranks)
        return
    if not alive and not defunct:
        alive = _ranks_by_gpu(f)
    if not alive and not defunct:
        f.ranks = []
        f.ranks_gone = []
        return
    ranks = sorted(set(alive) | set(defunct) | set(f.log_ranks))
    f.ranks = []
    for r in ranks:
        pid = alive.get(r, defunct.get(r))
        state = "alive" if r in alive else "defunct" if r in defunct else "gone"
        f.ranks.append(
            RankFact(rank=r, pid=pid, state=state, line=f.procs.get(pid, "") if pid else "")
        )
    f.ranks_gone = [x.rank for x in f.ranks if x.state != "alive"] if f.server_pids else []


def _core_gone(f: Facts, engine: str | None, log_lines: list[str]) -> bool:
    """The engine's core workers (its schedulers, its engine core) are all gone while its front
    end lives: the log shows the core worked (a line only it writes) and the front end answering
    after the core's last line, the live ps shows the server's processes and none of them is a
    core worker (tools/engines.yaml `core_workers`).
    Such a server answers /health and accepts requests that nothing will ever serve."""
    if engine is None or not f.server_pids:
        return False
    recs = f._ps_recs
    # workers orphaned under init while the entry point lives: their parent, the engine core
    # between them and the front end, is gone (vLLM V1's workers are the EngineCore's children)
    orphans = [
        p
        for p in f.server_worker_pids
        if recs.get(p, {}).get("ppid") == 1 and f.server_main_pids and 1 not in f.server_main_pids
    ]
    line = engines.core_log_line(log_lines, engine)
    if line is None and not orphans:
        return False
    if line is not None:
        # ... and the front end demonstrably outlived it: it answered requests after the core's
        # last line (a ps that merely lacks the core, beside a silent log, proves nothing)
        last = max(i for i, ln in enumerate(log_lines) if engines.core_log_line([ln], engine))
        if not any(proof.frontend_access(ln) for ln in log_lines[last + 1 :]):
            return False
    elif not any(proof.frontend_access(ln) for ln in log_lines):
        return False
    # a core that died of an error of its own is explained by that error, not by its absence
    if any(
        kind != "exit_signal"
        and not proof.external_end(log_lines[i])
        and not proof.peer_lost(log_lines[i])
        for i, kind in proof.fatal_lines(log_lines)
    ):
        return False
    if any(
        engines.is_core_worker(str(recs.get(p, {}).get("command", "")), engine)
        for p in f.server_pids
    ):
        return False
    f.core_gone_line = line or f.procs.get(orphans[0], "")
    return True


#: a launch over several machines: its ranks may all run on the others
_MULTI_NODE = re.compile(r"--(?:nnodes|num[-_]nodes)[= ](?!1\b)\d+|\bip=\d+\.\d+\.\d+\.\d+")


def _every_rank_gone(f: Facts, log_lines: list[str]) -> bool:
    """The launch's entry point lives, its log names two or more ranks, no process of it is a
    rank, and no process holds memory on this machine's GPUs (nvidia-smi read, GPUs listed): the
    ranks it spawned (an MPI session's workers, a launcher's children) are all gone while it
    waits for them. Ranks in a container or on this host's GPUs would hold memory there; a
    launch over several machines (--nnodes, a rank's `ip=` on the log) may run them elsewhere."""
    if len(f.log_ranks) < 2 or not f.server_main_pids or f.server_worker_pids:
        return False
    mains = " ".join(f.procs.get(p, "") for p in f.server_main_pids)
    if _MULTI_NODE.search(mains) or any(_MULTI_NODE.search(ln) for ln in log_lines):
        return False
    if f.gpu_obs is None or not f.gpus or f.gpu_pids or f.gpu_pids_unmetered:
        return False
    # a CUDA context alone holds ~500 MiB: a live rank hung at its first collective shows one
    return all(g.used_mib is not None and g.used_mib < 100 for g in f.gpus)


def _ranks_by_gpu(f: Facts) -> dict[int, int]:
    """rank -> pid for launches whose workers carry no rank in their title (a custom launcher's
    `python -c from multiprocessing.spawn import spawn_main`): the server's processes that hold
    a GPU are its ranks, in pid order (rank 0 starts first). Fewer holders than the ranks the
    log names means a rank is gone; only live ps with parent pids can say which belong."""
    if len(f.log_ranks) < 2 or not f.server_pids or not f.gpu_pids:
        return {}
    recs = f._ps_recs
    if not any(r.get("ppid") is not None for r in recs.values()):
        return {}
    tree = set(f.server_pids)
    grew = True
    while grew:  # the server's descendants: spawned ranks are children of the launcher
        kids = {pid for pid, r in recs.items() if r.get("ppid") in tree and not r.get("zombie")}
        grew = not kids <= tree
        tree |= kids
    holders = sorted(pid for pid in f.gpu_pids if pid in tree)
    if not holders or len(holders) >= len(f.log_ranks):
        return {}
    return dict(zip(f.log_ranks, holders, strict=False))


def _launch_user(f: Facts, log_reads: LogReads) -> None:
    """Who the launch runs as. With none of its processes alive, the live main processes of the
    engine its log prints (another instance of the same command, a supervisor's restart) run as
    the same user, when they all agree: a GPU holder of another user is then that user's job,
    never a leftover of the launch (a neighbour's idle notebook is not the launch's to kill).
    With none of those either, the owner of the launch's log (stat), when its logs agree: the
    launch wrote it. (A root shell's redirect makes a log root's: another user's job is then
    told theirs, never called the launch's leftover, the safe side.)"""
    f.launch_user = f.server_user
    engine = _log_engine(log_reads) if f.launch_user is None else None
    if engine is not None:
        users = {
            str(r.get("user") or "")
            for r in f._ps_recs.values()
            if r.get("server") == engine
            and r.get("role") in ("main", "launcher")
            and not r.get("zombie")
        }
        if len(users) == 1 and "" not in users:
            f.launch_user = users.pop()
    if f.launch_user is None:
        # none alive: the launch's log was written by it, so its owner is who it ran as
        owners = {f.log_owners[p] for p in log_reads if p in f.log_owners}
        if len(owners) == 1:
            f.launch_user = owners.pop()


def _program(command: str) -> str:
    return command.split(None, 1)[0] if command.strip() else ""


def _spawned_by_live_main(recs: dict[int, dict[str, Any]], pid: int, ours: set[int]) -> int | None:
    """Where ps gave no parents: the live main process (not the launch's) whose child `pid`
    must be, being the same program (`/opt/envs/x/bin/python3`), of the same user and started
    at the same minute (ps's START): a `multiprocessing.spawn` worker of a running server holds
    that server's GPU memory, not a dead launch's."""
    r = recs.get(pid, {})
    if r.get("ppid") is not None or not r.get("started") or not r.get("user"):
        return None
    prog = _program(str(r.get("command") or ""))
    mains = [
        m
        for m, rm in recs.items()
        if m != pid
        and m not in ours
        and rm.get("role") in ("main", "launcher")
        and not rm.get("zombie")
        and rm.get("user") == r.get("user")
        and rm.get("started") == r.get("started")
        and prog
        and _program(str(rm.get("command") or "")) == prog
    ]
    # two such mains: whose child it is cannot be told, so it is no one's by this rule
    return mains[0] if len(mains) == 1 else None


def _tenancy(f: Facts) -> None:
    """Other holders of the GPU (and other launches' engine processes): a co-tenant is someone's
    live, running job (another user, or another launch whose main process runs); a leftover is a
    defunct, orphaned or idle process of an earlier launch."""
    recs = f._ps_recs
    ours = set(f.server_pids)
    f.co_tenant_pids, f.leftover_pids = {}, dict(f._older)
    utils = [g.util_pct for g in f.gpus if g.util_pct is not None]
    gpus_idle = bool(utils) and max(utils) < 5
    for pid in dict.fromkeys([*f.gpu_pids, *f.other_launch_pids, *f.server_defunct_pids]):
        if pid in ours:
            continue
        r = recs.get(pid)
        if r is None:
            continue  # not in this ps (another container): unknown
        stat = str(r.get("stat") or "")
        cpu = r.get("cpu_pct")
        running = stat[:1] == "R" or (isinstance(cpu, int | float) and cpu >= _RUNNING_CPU)
        user = str(r.get("user") or "")
        engine, role = r.get("server"), r.get("role")
        twin = _spawned_by_live_main(recs, pid, ours) if not r["zombie"] else None
        if r["zombie"]:
            f.leftover_pids[pid] = "defunct (a zombie of an earlier launch)"
        elif twin is not None:
            f.co_tenant_pids[pid] = f"a worker of another live launch (main pid {twin})"
        elif f.launch_user and user and user != f.launch_user and stat[:1] in ("R", "S", "D"):
            f.co_tenant_pids[pid] = f"another user's job ({user})"
        elif (
            f.launch_user is None
            and not engine
            and f.ps_reader
            and user
            and user != f.ps_reader
            and stat[:1] in ("R", "S", "D")
        ):
            # nothing of the launch says who ran it; the one reading the box (the process
            # list's own ps row) asks about their own launch, as people do, so another user's
            # live program that is no inference server (a notebook kernel) is that user's job.
            # An engine's process stays weighed as below: it may be the launch's own leftover
            # under the account a scheduler ran it as.
            f.co_tenant_pids[pid] = f"another user's job ({user})"
        elif engine and role == "worker":
            # a worker with no server process above it (its parent gone, or re-parented to
            # init) outlived its launch. Where ps gave no parents, a live main process of the
            # same engine and user may well be its parent: another launch's worker, not an orphan
            ppid = r.get("ppid")
            sibling_main = next(
                (
                    m
                    for m, rm in recs.items()
                    if m not in ours
                    and rm.get("server") == engine
                    and rm.get("role") in ("main", "launcher")
                    and not rm.get("zombie")
                    and str(rm.get("user") or "") == user
                ),
                None,
            )
            if ppid is None and sibling_main is not None:
                f.co_tenant_pids[pid] = f"a worker of another live launch (main pid {sibling_main})"
                continue
            orphan = ppid == 1 or r.get("launch") in (None, pid)
            if orphan:
                f.leftover_pids[pid] = "a worker whose launch is gone (orphan of an earlier launch)"
            elif running:
                f.co_tenant_pids[pid] = "a worker of another launch that is running"
        elif engine and role in ("main", "launcher"):
            if running or stat[:1] in ("S", "R"):
                f.co_tenant_pids[pid] = "another launch of an inference server, running"
        elif running and not (gpus_idle and stat[:1] != "R"):
            f.co_tenant_pids[pid] = "a running job (state R or busy CPU)"
        elif gpus_idle and stat[:1] in ("S", "T", "t"):
            # ps's %CPU is a lifetime average; a sleeping holder with every GPU at 0% runs nothing
            f.leftover_pids[pid] = "holding GPU memory while sleeping, with the GPUs idle (0% util)"
        elif stat[:1] in ("S", "T", "t") and isinstance(cpu, int | float) and cpu < _RUNNING_CPU:
            f.leftover_pids[pid] = "idle (sleeping, no CPU) while holding the GPU"


#: agent/observe.py's first line on a read the machine answered for a container that could not:
#: it names each command so answered (`df -hP` could not run inside: ...; `free -m` ...)
_MACHINE_NOTE = re.compile(r"^# read on \S+, the machine: ")
_DF_OUTSIDE = re.compile(r"`df\b[^`]*` could not run inside")


def _read_on_machine(o: Observation) -> bool:
    """The df rows of this disk read are the machine's (df could not run in the container)."""
    first = o["lines"][0] if o["lines"] else ""
    return bool(_MACHINE_NOTE.match(first)) and bool(_DF_OUTSIDE.search(first))


def _disk(f: Facts, o: Observation, _logs: LogReads) -> None:
    res = typed(o, disk.Result)
    f.disk_available = True
    f.disk_obs = o["id"]
    shm = next((m for m in res.mounts if m.mount == "/dev/shm"), None)
    f.mounts_seen = [m.mount for m in res.mounts if m.mount]
    for m in [*res.mounts, *([res.shm] if res.shm and shm is None else [])]:
        # df's own row for the mount (a search for "/" finds any row with a slash in it)
        raw = getattr(m, "raw", "") or ""
        line = (
            raw
            if raw and raw in o["lines"]
            else (_find_line(o["lines"], m.mount) if m.mount else "")
        )
        if m.mount == "/dev/shm":
            # the container could not answer: the machine's /dev/shm, the container's only
            # under --ipc=host (its record's ShmSize says which, see _container)
            machine = _read_on_machine(o)
            if machine and f.shm_mib is not None and not f.shm_on_machine:
                continue  # the container's own df row, read earlier, stands
            f.shm_on_machine = machine
            f.shm_mib = _mib(m.size)
            f.shm_use_pct = float(m.use_pct) if m.use_pct is not None else None
            f.shm_line = line
        elif m.use_pct is not None and m.use_pct >= disk.FULL_PCT:  # the disk tool's one number
            f.full_mounts.append((m.mount, float(m.use_pct), line))
        if (
            m.mount != "/dev/shm"
            and m.use_pct is not None
            and line
            and (f.fullest_mount is None or m.use_pct > f.fullest_mount[1])
        ):
            f.fullest_mount = (m.mount, float(m.use_pct), line)


#: an absolute path in a log line or a command line (quoted or bare, up to a separator)
_ABS_PATH = re.compile(r"(?<![\w.~/-])(/[\w.@%+-]+(?:/[\w.@%+=-]+)*)")
#: where any launch writes besides its own paths: temp files, IPC, the build and model caches
_ALWAYS_WRITTEN = ("/tmp", "/var/tmp", "/dev/shm")


def _mount_of(path: str, mounts: list[str]) -> str | None:
    """The mount a path lies on: the longest mount point that is a prefix of it."""
    best = None
    for m in mounts:
        root = m.rstrip("/") or "/"
        if (path == root or path.startswith(root + "/") or root == "/") and (
            best is None or len(root) > len(best.rstrip("/") or "/")
        ):
            best = m
    return best


def _launch_mounts(f: Facts, log_reads: LogReads) -> None:
    """A full mount is the launch's disk_full only when the launch writes there: the mount of
    its log, of a path its own lines or command line name (model, cache, output), of its
    user's home (caches), or of /tmp and /dev/shm. Another team's full volume
    (/var/lib/containers) is theirs. With nothing of the launch known, every full mount stays."""
    if not f.full_mounts or not log_reads:
        return
    paths = set(log_reads) | set(_ALWAYS_WRITTEN)
    for reads in log_reads.values():
        for ln in reads[-1][2]:
            paths.update(_ABS_PATH.findall(ln))
    for pid in f.server_pids:
        paths.update(_ABS_PATH.findall(str(f._ps_recs.get(pid, {}).get("command") or "")))
    user = f.launch_user or f.server_user
    if user:
        paths.add("/root" if user == "root" else f"/home/{user}")
    mounts = [m for m, _, _ in f.full_mounts]
    # every mount df listed is a candidate for "the mount a path lies on", not only full ones:
    # a path on a roomy /data must not count as lying on a full /
    every = mounts + [m for m in f.mounts_seen if m not in mounts]
    written = {_mount_of(p, every) for p in paths}
    keep = [fm for fm in f.full_mounts if fm[0] in written]
    f.others_full_mounts = [fm for fm in f.full_mounts if fm[0] not in written]
    f.full_mounts = keep


def _container(f: Facts, o: Observation, _logs: LogReads) -> None:
    res = typed(o, container_inspect.Result)
    c = res.container
    if c is None:
        return
    named = o["args"].get("name")
    if named and f.container is not None and f.container.name != c.name:
        # another container read for comparison (the old image's run, a sibling): its state
        # is not the investigated launch's (the first one read, or the one read without a name)
        return
    f.container, f.container_cli, f.container_obs = c, res.cli, o["id"]
    f.container_lines = list(
        o["lines"]
    )  # the tool's own summary lines ("# GPUs: NONE ...") are quotable
    if c.ipc_host:
        f.ipc_host_line = _find_line(o["lines"], '"IpcMode"')
    if (f.shm_mib is None or f.shm_on_machine) and c.shm_size is not None and not c.ipc_host:
        # a stopped container cannot be read inside: its /dev/shm is what the run gave it
        f.shm_mib = c.shm_size / (1 << 20)
        f.shm_line = _find_line(o["lines"], '"ShmSize"')
        f.disk_obs = f.disk_obs or o["id"]


#: Which tools' results facts are built from, and the reader of each: the tools whose spec
#: declares `facts=(...)` (tests/agent/test_facts_typed.py holds the two together).
READERS: dict[str, Callable[[Facts, Observation, LogReads], None]] = {
    "gpu_status": _gpu,
    "processes": _ps,
    "dmesg": _dmesg,
    "disk": _disk,
    "ports": _ports,
    "log_tail": _log_tail,
    "launch_progress": _launch_progress,
    "container_logs": _container_logs,
    "service_logs": _service_logs,
    "host_facts": _host_facts,
    "container_inspect": _container,
    "config_read": _config,
}
