"""Whose kill is a kernel kill line: this launch's, or a bystander's on a shared box.

One old OOM kill of an unrelated container poisoned every verdict on a busy host: a slow loader,
a port conflict and a healthy server were each "host_oom_killed", citing that line. A kill line
counts for the launch only when its victim is a member of the launch (a pid the launch's log or
processes name) or its time falls inside the launch's life (from the log's own first stamp to a
grace period after its last), and not before its log file was created (the file's birth, where
the filesystem keeps one: a log without stamps still has it). Otherwise it is a bystander's, and
no rule may cite it.

Unknown stays unknown: with no stamps on either side and a victim that could be the launch
(a Python or launcher process), the line still counts, as it did before.
"""

from __future__ import annotations

import re
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from agent.evidence import LOG_TOOLS, last_launch, text_lines
from agent.rules.proof import log_pids
from agent.state import Observation
from tools import engines, logtime, yamlio

#: How long after the log's last stamp a kill still belongs to the launch (the log stops when
#: the process stops printing; the kernel may kill it minutes into a quiet load).
GRACE_S = 1800
#: A kill this many minutes before the launch's log was last written did not end the launch
#: (a killed rank's consequences are logged within seconds, not for ten minutes after)
LATE_WRITE_MIN = 10
#: How long before the log's first stamp (clocks and buffered first lines differ a little).
LEAD_S = 120
#: A kill this close to the log's last line once shifted by whole hours (another time zone's
#: clock) is the launch's own end. Its risk: 28 shifted windows of 4 minutes could catch an
#: unrelated kill by chance (about 7% of a random hour after the log); the log's last line may
#: also be a restarted instance's, a minute after the kill (a pod's restart)
ZONE_MATCH_S = 120

_VICTIM = (
    re.compile(r"Killed process (\d+) \(([^)]+)\)"),
    re.compile(r"\btask=([^,\s]+),pid=(\d+)"),
)
_KERNEL_STAMP = re.compile(
    r"^\[\w{3} (?P<mon>\w{3}) +(?P<d>\d{1,2}) (?P<H>\d\d):(?P<M>\d\d):(?P<S>\d\d) (?P<Y>\d{4})\]"
)
_JOURNAL_STAMP = re.compile(
    r"^(?P<mon>\w{3}) +(?P<d>\d{1,2}) (?P<H>\d\d):(?P<M>\d\d):(?P<S>\d\d) \S+ kernel:"
)
_MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}
KILL_LINE = re.compile(
    r"Killed process \d+|\btask=[^,\s]+,pid=\d+|invoked oom-killer|Memory cgroup out of memory|"
    r"oom-kill:|oom_reaper: reaped process"
)


#: a kernel line saying a process died of a fault of its own: "python[123]: segfault at 0 ip ...",
#: "traps: lmdeploy[2771397] trap divide error ip:...", "traps: python[9] general protection ..."
CRASH_LINE = re.compile(
    r"\bsegfault at\b|\btrap (?:divide error|invalid opcode|stack segment|int3)\b|"
    r"\bgeneral protection(?: fault)?\b.*\bip[: ]"
)
_CRASHED = re.compile(r"(?:traps: |\] |^)([^\s\[\]]+)\[(\d+)\]")
#: how long after the launch's log last stamped a line its process may still crash (a crash
#: ends the log at once; a quiet load prints nothing for minutes before it)
CRASH_GRACE_S = 900


def crashed(line: str) -> tuple[int, str] | None:
    """(pid, process name) of a kernel crash line (CRASH_LINE), if it names one."""
    if not CRASH_LINE.search(line):
        return None
    m = _CRASHED.search(line)
    return (int(m.group(2)), m.group(1)) if m else None


def own_crash(observations: list[Observation]) -> tuple[str, str] | None:
    """(observation, line) of a kernel line saying the launch's own process died of a fault (a
    segfault, a divide error): a crash of its own, printed by the kernel, not by the process.
    Its victim is a member of the launch, or could be one and died within the launch's life by
    both clocks; a line that cannot be placed in time is no proof either way and is not taken."""
    lines = [
        (o["id"], ln)
        for o in observations
        if o["ok"] and o["tool"] == "dmesg"
        for ln in text_lines(o)
        if CRASH_LINE.search(ln)
    ]
    if not lines:
        return None
    span = _launch_span(observations)
    text = _log_text(observations)
    named = set(log_pids(text.splitlines()))
    born = _first_birth(observations)
    for oid, ln in reversed(lines):
        v = crashed(ln)
        st = kernel_stamp(ln)
        if v is None or st is None:
            continue
        if born is not None and _minutes_before(st, born) * 60 > LEAD_S:
            continue
        if span is not None:
            if not _during(st, span):
                continue
        elif v[0] not in named:
            continue
        # an engine's worker title ("sglang::schedul", "VLLM::EngineCor") is the launch's kind
        # of process by itself; a plain "python3" must also be named by the launch's log
        titled = "::" in v[1] or bool(engines.name_pattern().search(v[1]))
        if v[0] in named or (_could_be_launch(v[1]) and (titled or _member(v, text, named))):
            return oid, ln
    return None


def _during(st: logtime.Stamp, span: tuple[logtime.Stamp, logtime.Stamp]) -> bool:
    """A kernel stamp inside the launch's life by its log's clock: from LEAD_S before its first
    line to CRASH_GRACE_S after its last (a quiet phase prints nothing for minutes before it)."""
    year = st[0] or datetime.now().year
    t = _seconds(st, year)
    first = _seconds((span[0][0] or year, *span[0][1:]), year)
    last = _seconds((span[1][0] or year, *span[1][1:]), year)
    return first - LEAD_S <= t <= last + CRASH_GRACE_S


def victim(line: str) -> tuple[int, str] | None:
    """(pid, process name) a kill line names as its victim, if it names one."""
    m = _VICTIM[0].search(line)
    if m:
        return int(m.group(1)), m.group(2)
    m = _VICTIM[1].search(line)
    if m:
        return int(m.group(2)), m.group(1)
    return None


def kernel_stamp(line: str) -> logtime.Stamp | None:
    """When a kernel line was written: `dmesg -T`'s "[Thu Apr 23 23:58:12 2026]" or a journal's
    "Apr 23 23:58:12 host kernel:"; seconds-since-boot stamps say nothing about wall time."""
    m = _KERNEL_STAMP.match(line) or _JOURNAL_STAMP.match(line)
    if not m or m.group("mon") not in _MONTHS:
        return None
    g = m.groupdict()
    year = int(g["Y"]) if g.get("Y") else None
    return (year, _MONTHS[g["mon"]], int(g["d"]), int(g["H"]), int(g["M"]), int(g["S"]))


def _seconds(s: logtime.Stamp, year: int) -> float:
    return datetime(s[0] or year, s[1], s[2], s[3], s[4], s[5]).timestamp()


def _launch_span(observations: list[Observation]) -> tuple[logtime.Stamp, logtime.Stamp] | None:
    """The launch's life by its log's own clock: the newest read of each log, from its last
    launch on; the latest-ending log is the launch's (an earlier run's log ends before it)."""
    newest: dict[str, Observation] = {}
    for o in observations:
        if o["ok"] and o["tool"] in LOG_TOOLS and not o["args"].get("pattern"):
            # a search's few hits (or none) are not the log's span: keep the tail's read
            key = str(o["args"].get("path") or o["args"].get("name") or o["tool"])
            newest[key] = o
    spans = []
    for o in newest.values():
        lines = text_lines(o)
        sp = logtime.span(lines[last_launch(lines) :])
        if sp is not None:
            spans.append(sp)
    if not spans:
        return None
    return max(spans, key=lambda sp: (sp[1][0] or 0, sp[1][1:]))


def _log_text(observations: list[Observation]) -> str:
    return "\n".join(
        ln for o in observations if o["ok"] and o["tool"] in LOG_TOOLS for ln in text_lines(o)
    )


def _member(v: tuple[int, str], text: str, named: set[int]) -> bool:
    """The victim is the launch's: its own log names its pid (as a writer, or "Worker PID: N"),
    or names the program (a build's "'cicc' died due to signal 9"), or it is a builder the
    launch runs (the registry's compilers)."""
    pid, comm = v
    if pid in named or re.search(rf"(?i)\bpid\b\W{{0,3}}{pid}\b", text):
        return True
    if len(comm) >= 3 and re.search(rf"(?<![\w-]){re.escape(comm)}(?![\w-])", text):
        return True
    return bool(engines.builder_pattern().search(f" {comm} "))


def _last_write(observations: list[Observation]) -> logtime.Stamp | None:
    """The newest time a read log was last written (the host's wall clock), when known."""
    best: logtime.Stamp | None = None
    for o in observations:
        if o["ok"] and o["tool"] in LOG_TOOLS and o["data"].get("modified"):
            st = logtime.stamp(str(o["data"]["modified"]))
            if st is not None and (best is None or logtime.before(best, st)):
                best = st
    return best


def _first_birth(observations: list[Observation]) -> logtime.Stamp | None:
    """When the oldest log file read was created (the host's wall clock), only when every log
    file read says so: a file of unknown birth may be older than any kill."""
    births: list[logtime.Stamp] = []
    for o in observations:
        if o["ok"] and o["tool"] == "log_tail" and o["args"].get("path"):
            st = logtime.stamp(str(o["data"].get("born") or ""))
            if st is None:
                return None
            births.append(st)
    if not births:
        return None
    return min(births, key=lambda st: (st[0] or 0, st[1:]))


def _minutes_before(kill: logtime.Stamp, write: logtime.Stamp) -> float:
    """How many minutes the kill came before the write (negative: after it)."""
    year = write[0] or kill[0] or datetime.now().year
    return (_seconds(write, year) - _seconds(kill, year)) / 60.0


#: the kubelet's kill of one container of a pod: "Container aibrix-runtime failed liveness
#: probe, will be restarted" (a pod's events, `kubectl describe`, `kubectl get events`)
_KUBELET_KILL = re.compile(
    r"\bContainer ([a-z0-9][a-z0-9-]{0,62}) failed (?:startup|liveness) probe, will be restarted"
)


def _launch_containers(observations: list[Observation]) -> set[str]:
    """The containers whose own logs were read as the launch's (the investigation runs inside
    them): a pod's other containers (a sidecar, a metrics agent) are not the launch."""
    return {
        str(o["data"].get("container"))
        for o in observations
        if o["ok"] and o["tool"] == "container_logs" and o["data"].get("container")
    }


def sidecar_kills(observations: list[Observation]) -> dict[str, str]:
    """The kubelet's probe kills of a container of the pod that is not the launch's -> why: a
    sidecar restarting (its own probe failing while the engine loads) ends nothing of the
    launch, whose container keeps running."""
    own = _launch_containers(observations)
    if not own:
        return {}
    out: dict[str, str] = {}
    for o in observations:
        if not o["ok"]:
            continue
        for ln in text_lines(o):
            m = _KUBELET_KILL.search(ln)
            if m and m.group(1) not in own:
                out[ln] = (
                    f"the kubelet restarted container {m.group(1)}, not the launch's "
                    f"({', '.join(sorted(own))}): another container of the pod"
                )
    return out


def bystander_kills(observations: list[Observation]) -> dict[str, str]:
    """Kill lines that are not the launch's -> why: kernel kills of other jobs, and the
    kubelet's kills of another container of the pod. Lines of one kernel kill event share its
    stamp, so the event's other lines ("invoked oom-killer", the cgroup line) go with it."""
    return {**_kernel_bystanders(observations), **sidecar_kills(observations)}


def _kernel_bystanders(observations: list[Observation]) -> dict[str, str]:
    kernel = [
        (o, ln)
        for o in observations
        if o["ok"] and o["tool"] in ("dmesg", "service_logs")
        for ln in text_lines(o)
        if KILL_LINE.search(ln)
    ]
    if not kernel:
        return {}
    span = _launch_span(observations)
    own_end = _own_error_end(observations)
    text = _log_text(observations)
    named = set(log_pids(text.splitlines()))
    out: dict[str, str] = {}
    foreign_stamps: set[logtime.Stamp] = set()
    last_write = _last_write(observations)
    born = _first_birth(observations)
    mine = _own_container_id(observations)
    other_victims: set[tuple[int, str]] = set()
    for _, ln in kernel:
        st = kernel_stamp(ln)
        v = victim(ln)
        theirs = _kill_container_id(ln)
        if mine and theirs and not (mine.startswith(theirs) or theirs.startswith(mine)):
            out[ln] = (
                f"the kill was in another container's cgroup ({theirs[:12]}), not in the "
                f"investigated container ({mine[:12]})"
            )
            if st is not None:
                foreign_stamps.add(st)
            if v is not None:
                other_victims.add(v)
            continue
        if (
            st is not None
            and born is not None
            and _minutes_before(st, born) * 60 > LEAD_S
            and (v is None or not _member(v, text, named))
        ):
            out[ln] = (
                f"the kill came {_minutes_before(st, born):.0f} minutes before the launch's log "
                "was created: an earlier run's, or another job's"
            )
            foreign_stamps.add(st)
            continue
        if (
            st is not None
            and last_write is not None
            and _minutes_before(st, last_write) > LATE_WRITE_MIN
            and (v is None or not _member(v, text, named))
        ):
            out[ln] = (
                "the launch's log was still being written "
                f"{_minutes_before(st, last_write):.0f} minutes after this kill: not its end"
            )
            foreign_stamps.add(st)
            continue
        why = _foreign(ln, span, text, named, own_end)
        if why is not None:
            out[ln] = why
            st = kernel_stamp(ln)
            if st is not None:
                foreign_stamps.add(st)
    for _, ln in kernel:
        st = kernel_stamp(ln)
        if ln in out:
            continue
        if st is not None and st in foreign_stamps and victim(ln) is None:
            out[ln] = "part of the same kill event as a bystander's kill line"
        elif victim(ln) in other_victims:
            out[ln] = "the same victim as a kill in another container's cgroup"
    return out


#: a container's cgroup as the kernel names it in an OOM record: Podman's libpod-ID, Docker's
#: docker-ID, containerd's cri-containerd-ID, CRI-O's crio-ID (systemd or cgroupfs layouts)
_CGROUP_ID = re.compile(r"\b(?:libpod|docker|cri-containerd|crio)-([0-9a-f]{12,64})\b")


def _kill_container_id(line: str) -> str | None:
    """The container a kernel kill line's task cgroup names (task_memcg= first, then any)."""
    task = line.split("task_memcg=", 1)[1] if "task_memcg=" in line else line
    m = _CGROUP_ID.search(task)
    return m.group(1) if m else None


def _own_container_id(observations: list[Observation]) -> str | None:
    """The id of the container under investigation, as its inspect record gives it."""
    for o in observations:
        if o["tool"] == "container_inspect" and o["ok"]:
            c = (o["data"] or {}).get("container") or {}
            cid = str(c.get("id") or "").lower()
            if re.fullmatch(r"[0-9a-f]{12,64}", cid):
                return cid
    return None


def _own_error_end(observations: list[Observation]) -> str | None:
    """The error line the launch's log ends on, when it ended on one of its own (not a signal,
    not a kill): such a launch did not die of a kill nothing ties to it."""
    from agent.rules.proof import external_end, unexplained_error

    for o in observations:
        if o["ok"] and o["tool"] in LOG_TOOLS:
            lines = text_lines(o)
            tail = lines[last_launch(lines) :]
            if any(external_end(ln) or KILL_LINE.search(ln) for ln in tail[-5:]):
                return None
            line = unexplained_error(tail, last=5)
            if line is not None:
                return line
    return None


def _foreign(
    line: str,
    span: tuple[logtime.Stamp, logtime.Stamp] | None,
    text: str,
    named: set[int],
    own_end: str | None = None,
) -> str | None:
    v = victim(line)
    if v is not None and _member(v, text, named):
        return None
    if v is not None and not _could_be_launch(v[1]):
        # a neighbour's memhog killed while the launch ran is still the neighbour's
        return f"its victim ({v[1]}) is not a process an inference launch runs"
    st = kernel_stamp(line)
    if st is not None and span is not None:
        year = st[0] or datetime.now().year
        first = (span[0][0] or year, *span[0][1:])
        last = (span[1][0] or year, *span[1][1:])
        t = _seconds(st, year)
        end = _seconds(last, year)
        if any(abs(t + k * 3600 - end) <= ZONE_MATCH_S for k in range(-14, 15) if k):
            # dmesg -T prints the machine's local time, a container's log often UTC: a kill a
            # whole number of hours from the log's last line, to the minute, is its end
            return None
        if t < _seconds(first, year) - LEAD_S:
            return (
                "the kill came before this launch's log began (an earlier run's, or another job's)"
            )
        if t > _seconds(last, year) + GRACE_S:
            return "the kill came long after this launch's log ended"
        return None
    if own_end is not None:
        return (
            "nothing ties this kill to the launch (no pid of its, no time), and the launch's log "
            f"ends on an error of its own: {own_end[:80]!r}"
        )
    return None


@lru_cache(maxsize=1)
def _launch_comms() -> tuple[str, ...]:
    """knowledge/launch.yaml `launch_comms`, read here (agent.launch imports this module's
    users: importing it back would close a circle)."""
    raw = yamlio.safe_load((Path(__file__).parent / "knowledge" / "launch.yaml").read_text())
    return tuple(raw.get("launch_comms") or ())


def _could_be_launch(comm: str) -> bool:
    """A kernel comm name (15 characters at most: "VLLM::EngineCor", "sglang::schedul") that
    an inference launch may run under: Python, a launcher, an engine or a worker title, or a
    child the launch runs (a JIT build's compiler: knowledge/launch.yaml `launch_comms`)."""
    return bool(
        engines.workload_pattern().search(f" {comm} ")
        or engines.name_pattern().search(comm)
        or "::" in comm
        or comm.lower().startswith(("ray", "pt_", "torch"))
        or engines.builder_pattern().search(comm)
        or any(re.search(p, comm) for p in _launch_comms())
    )


#: process names too common to tie a victim to a launch by name (every launch names python)
_COMMON_COMMS = re.compile(
    r"(?i)^(?:python[\d.]*|bash|sh|zsh|node|java|ray|raylet|docker\S*|containerd\S*|systemd\S*|"
    r"sshd|sudo|conda|pip|uv|nvidia\S*|kworker\S*)$"
)


def dependency_kill(
    observations: list[Observation], launch_text: str
) -> tuple[str, str, str] | None:
    """(observation id, kill line, name) of a kernel kill, while the launch ran, of a process
    that is no member of the launch but that its command line names (a KV-cache server behind
    `--kv-transfer-config ...LMCacheConnector`, a tokenizer or router service): the server is up,
    and what it was started to use is gone. `launch_text` is the launch's own command line(s)."""
    if not launch_text:
        return None
    span = _launch_span(observations)
    if span is None:
        return None
    text = _log_text(observations)
    named = set(log_pids(text.splitlines()))
    found: list[tuple[str, str, str]] = []
    for o in observations:
        if not (o["ok"] and o["tool"] in ("dmesg", "service_logs")):
            continue
        for ln in text_lines(o):
            v = victim(ln)
            st = kernel_stamp(ln)
            if v is None or st is None or not KILL_LINE.search(ln):
                continue
            comm = v[1]
            if (
                len(comm) < 4
                or _COMMON_COMMS.match(comm)
                or engines.name_pattern().search(comm)  # an engine's own process: a launch's
                or _member(v, text, named)
            ):
                continue
            if not re.search(rf"(?i)(?<![a-z0-9]){re.escape(comm)}", launch_text):
                continue
            if _during(st, span):
                found.append((o["id"], ln, comm))
    # the event's "Killed process N (name)" line names the victim plainest
    return next((f for f in found if "Killed process" in f[1]), found[0] if found else None)
