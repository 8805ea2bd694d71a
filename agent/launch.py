"""The launch under investigation, named from evidence before any verdict: what the operator
pointed at, which processes, logs, port, GPU memory and settings are the launch's own, and
everything else on the box as a bystander with the reason why.

On a shared host the label was often right and the details around it wrong: another user's
server's port, a test run's log, another login's sshd line, a second instance of the same command
taken for the server itself. Facts (agent/facts.py) already tell the launch's processes from the
rest; this module gathers them into one view the report shows and the gate reads: no conclusion
may rest on a bystander's line alone, and a bystander's line is never shown as evidence.
"""

from __future__ import annotations

import posixpath
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from agent.at_work import working_on_logged_file
from agent.evidence import LOG_TOOLS, last_launch, latest_text_observations, text_lines
from agent.facts import LOG_PORT, Facts
from agent.rules.common import OTHER_PROC_MEM
from agent.rules.proof import log_pids
from agent.state import Observation
from agent.thresholds import THRESHOLDS
from tools import yamlio

KNOWLEDGE = Path(__file__).with_name("knowledge") / "launch.yaml"


class Companion(BaseModel):
    """A runtime's own log read beside the launch's (launch.yaml `companion_logs`)."""

    process: str
    launch: str
    path: str
    #: where the runtime keeps its current log by default, read when no found file matches
    #: (on a busy box the newest-first listing may not reach it)
    default: str | None = None


def shared_dirs() -> frozenset[str]:
    """Top-level directories many users share (/tmp/): never "beside" a log (launch.yaml)."""
    return frozenset(knowledge().shared_dirs)


def companion_logs(commands: list[str], found: list[str]) -> list[str]:
    """The logs that a runtime the box runs writes for the launch (Ray's raylet.out): the
    runtime's daemon runs, and a process says the launch runs on it. Found files matching the
    runtime's path, else its default place."""
    out: list[str] = []
    for c in knowledge().companion_logs:
        if any(re.search(c.process, cmd) for cmd in commands) and any(
            re.search(c.launch, cmd) for cmd in commands
        ):
            hits = [p for p in found if re.search(c.path, p)]
            out += hits or ([c.default] if c.default else [])
    return list(dict.fromkeys(out))


class Knowledge(BaseModel):
    model: list[str]
    tensor_parallel: list[str]
    sourced: list[str]
    bystander_lines: list[str]
    ended_words: list[str]
    companion_logs: list[Companion] = []
    launch_comms: list[str] = []
    shared_dirs: list[str] = []
    script_prefixes: list[str] = []
    script_setup: list[str] = []


@lru_cache(maxsize=1)
def knowledge() -> Knowledge:
    return Knowledge.model_validate(yamlio.safe_load(KNOWLEDGE.read_text(encoding="utf-8")))


@lru_cache(maxsize=8)
def _patterns(kind: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, re.M) for p in getattr(knowledge(), kind))


def first_value(kind: str, text: str) -> str | None:
    """The first value a `launch.yaml` pattern of `kind` finds in `text`."""
    for pat in _patterns(kind):
        m = pat.search(text)
        if m:
            return m.group(1)
    return None


#: the home directory a path lies in: /home/NAME or /root
_HOME_DIR = re.compile(r"^(/home/[^/]+|/root)(?:/|$)")


def _expand_home(path: str, base_dir: str) -> str | None:
    """`~/x` as the home of the script's owner, where the script lives under it; another
    user's `~name/x`, or a script outside any home, leaves the path unknown (None)."""
    home = _HOME_DIR.match(base_dir)
    if home is None or not path.startswith("~/"):
        return None
    return home.group(1) + path[1:]


def sourced_files(text: str, base_dir: str) -> list[str]:
    """Files a launch script or unit reads its settings from (`source`, `.`, `--env-file`,
    `EnvironmentFile=`, `env_file:`), as absolute paths: a setting there is the launch's own."""
    out: list[str] = []
    for pat in _patterns("sourced"):
        for m in pat.finditer(text):
            path = m.group(1)
            if "$" in path or path in ("/dev/null",):
                continue
            if path.startswith("~"):
                path = _expand_home(path, base_dir)
                if path is None:
                    continue
            if not path.startswith("/"):
                path = posixpath.normpath(posixpath.join(base_dir, path))
            out.append(path)
    return list(dict.fromkeys(out))


def bystander_line(line: str) -> bool:
    """A login, session or cron line: another person's or the system's, never the launch's."""
    return any(p.search(line) for p in _patterns("bystander_lines"))


class Member(BaseModel):
    pid: int
    role: str = Field(description="main | launcher | worker (rank, scheduler, engine core)")
    engine: str | None = None
    user: str = ""
    rank: int | None = None
    line: str = Field("", description="its ps line, verbatim")


class GpuHolder(BaseModel):
    pid: int
    mib: float
    owner: str = Field(
        description="this launch | another instance of the launch | another user's job | "
        "another launch | leftover | unknown"
    )
    why: str = ""


class LogFile(BaseModel):
    path: str
    given: bool = Field(False, description="the operator named it (--log)")
    writers: list[int] = Field(default_factory=list)
    note: str = ""


class Bystander(BaseModel):
    what: str = Field(description="'pid N (user)' or 'kernel line' or 'log line'")
    line: str = ""
    why: str


class Launch(BaseModel):
    """One launch, as the evidence names it; every field is from the launch's own reads."""

    anchor: str = Field(description="what the launch was found from, in words")
    engine: str | None = None
    model: str | None = None
    tensor_parallel: int | None = None
    members: list[Member] = Field(default_factory=list)
    duplicates: list[int] = Field(
        default_factory=list, description="live main processes of another instance of the launch"
    )
    logs: list[LogFile] = Field(default_factory=list)
    port: int | None = None
    port_holder: str = Field("", description="who listens on the launch's port, and whose it is")
    gpu: list[GpuHolder] = Field(default_factory=list)
    configs: list[str] = Field(default_factory=list)
    bystanders: list[Bystander] = Field(default_factory=list)
    others: int = Field(0, description="further processes on the box, none of them relevant")

    def bystander_lines(self) -> set[str]:
        return {b.line for b in self.bystanders if b.line}


def _cmd(facts: Facts, pid: int) -> str:
    return str(facts._ps_recs.get(pid, {}).get("command") or "")


def _launch_text(observations: list[Observation], facts: Facts) -> str:
    """The launch's own words about itself: its newest launch section in the logs read, then the
    command lines of its main processes."""
    parts: list[str] = []
    for o in observations:
        if o["tool"] in LOG_TOOLS and o["ok"] and o["tool"] == "log_tail":
            lines = text_lines(o)
            parts.append("\n".join(lines[last_launch(lines) :][:400]))
    parts += [_cmd(facts, p) for p in [*facts.server_main_pids, *facts.server_pids]]
    return "\n".join(parts)


def _same_model(a: str | None, b: str | None) -> bool:
    if not a or not b:
        return False
    return a.rstrip("/") == b.rstrip("/") or posixpath.basename(
        a.rstrip("/")
    ) == posixpath.basename(b.rstrip("/"))


def duplicate_mains(observations: list[Observation], facts: Facts) -> list[int]:
    """Live engine main processes outside the launch that run the launch's own model: a second
    instance of the same command (a supervisor's restart beside a still-loading first one, an
    orphan an orchestrator lost track of). Their GPU memory is what the launch ran short of.
    A command that names no model but the launch's own config file (`--config server.yaml`, as
    read for the launch) is the same command too."""
    model = first_value("model", _launch_text(observations, facts))
    configs = {
        posixpath.normpath(str(o["args"].get("path")))
        for o in observations
        if o["tool"] == "config_read" and o["ok"] and o["args"].get("path")
    }
    if not model and not configs:
        return []
    members = set(facts.server_pids)
    out = []
    for pid, rec in facts._ps_recs.items():
        if pid in members or rec.get("zombie") or rec.get("role") not in ("main", "launcher"):
            continue
        if not rec.get("server"):
            continue
        cmd = str(rec.get("command") or "")
        words = {posixpath.normpath(w) for w in re.split(r"[\s=]+", cmd) if w.startswith("/")}
        if _same_model(first_value("model", cmd), model) or configs & words:
            out.append(pid)
    return sorted(out)


def duplicate_instances(facts: Facts, observations: list[Observation]) -> dict[int, float]:
    """pid -> GiB of live server processes that torch's OOM line names as holding memory, when
    that OOM is a SECOND launch's: the log holds two launches (a supervisor's restart appended
    to it) and the named pid is not one the last launch's lines name as their own writer.
    Torch may list the dying process itself (a container's pid namespace), so one launch alone
    never makes its own pid a duplicate."""
    out: dict[int, float] = {}
    for o in latest_text_observations(observations):
        if o["tool"] != "log_tail":
            continue
        lines = text_lines(o)
        cut = last_launch(lines)
        for ln in lines[cut:]:
            # the line names the process that failed (pid=M) and another, N, holding memory: a
            # live server process N is then another instance, even in a one-launch log
            failed = {int(x) for x in FAILED_PID.findall(ln)}
            for m in OTHER_PROC_MEM.finditer(ln) if failed else ():
                pid = int(m.group(1))
                gib = float(m.group(2)) / (1024 if m.group(3) == "MiB" else 1)
                if (
                    pid not in failed
                    and pid in facts.server_pids
                    and gib >= THRESHOLDS.oom.duplicate_gib
                ):
                    out[pid] = gib
        if cut == 0:
            continue  # one launch in this log: the named pid may be itself
        own = set(log_pids(lines[cut:]))
        for ln in lines[cut:]:
            for m in OTHER_PROC_MEM.finditer(ln):
                pid = int(m.group(1))
                gib = float(m.group(2)) / (1024 if m.group(3) == "MiB" else 1)
                if (
                    pid in facts.server_pids
                    and pid not in own
                    and gib >= THRESHOLDS.oom.duplicate_gib
                ):
                    out[pid] = gib
    return out


#: the pid of the process an error line is about: "pid=1291230", "[pid 1291230]", "(pid 42)"
FAILED_PID = re.compile(r"\bpid[= ](\d+)\b")


def family(facts: Facts, roots: list[int]) -> set[int]:
    """The roots and their descendants in ps."""
    tree = set(roots)
    grew = True
    while grew:
        kids = {p for p, r in facts._ps_recs.items() if r.get("ppid") in tree}
        grew = not kids <= tree
        tree |= kids
    return tree


def build(
    observations: list[Observation],
    facts: Facts,
    logs_given: list[str] | None = None,
    configs_given: list[str] | None = None,
    container: str | None = None,
) -> Launch:
    from agent.server_port import server_port

    logs_given = list(logs_given or [])
    text = _launch_text(observations, facts)
    # a live instance that the failed start's own OOM names as holding the memory: the same
    # command started earlier (a supervisor's restart), never this launch
    twins = duplicate_instances(facts, observations)
    members = [
        Member(
            pid=p,
            role=str(facts._ps_recs.get(p, {}).get("role") or "worker"),
            engine=facts._ps_recs.get(p, {}).get("server"),
            user=str(facts._ps_recs.get(p, {}).get("user") or ""),
            rank=facts._ps_recs.get(p, {}).get("rank"),
            line=facts.procs.get(p, ""),
        )
        for p in facts.server_pids
        if p not in twins
    ]
    if container:
        anchor = f"--container {container}"
    elif logs_given:
        anchor = "--log " + ", ".join(logs_given)
    elif configs_given:
        anchor = "--config " + ", ".join(configs_given)
    elif facts.server_main_pids:
        p = facts.server_main_pids[0]
        anchor = f"the engine launch found running: pid {p} ({facts.server_engine or 'server'})"
    elif any(o["tool"] == "log_tail" and o["ok"] for o in observations):
        anchor = "the newest server log found (no launch process runs)"
    else:
        anchor = "none: no launch process or server log was found"
    dups = sorted(set(duplicate_mains(observations, facts)) | set(twins))
    dup_family = family(facts, dups)
    tp = first_value("tensor_parallel", text)
    launch = Launch(
        anchor=anchor,
        engine=facts.server_engine,
        model=first_value("model", text),
        tensor_parallel=int(tp) if tp else None,
        members=members,
        duplicates=dups,
    )
    rotated: dict[str, str] = {}
    for o in observations:
        if o["tool"] == "processes" and o["ok"]:
            rotated.update(o["data"].get("rotated") or {})
    seen_logs: set[str] = set()
    for o in observations:
        if o["tool"] != "log_tail" or not o["ok"]:
            continue
        path = str(o["args"].get("path") or "")
        if not path or path in seen_logs:
            continue
        seen_logs.add(path)
        note = f"rotated: the server writes {rotated[path]}" if path in rotated else ""
        launch.logs.append(
            LogFile(
                path=path,
                given=path in logs_given,
                writers=list(facts.log_writers.get(path, [])),
                note=note,
            )
        )
    launch.port = server_port(observations, facts)
    if launch.port is not None:
        holder = facts.listener_pids.get(launch.port)
        if holder is None:
            launch.port_holder = (
                "nobody listens on it"
                if facts.ports_obs
                else "unknown (the listeners were not read)"
            )
        else:
            user = str(facts._ps_recs.get(holder, {}).get("user") or "")
            whose = (
                "another instance of the launch"
                if holder in dup_family
                else "this launch"
                if holder in facts.server_pids
                else "not this launch"
            )
            launch.port_holder = f"pid {holder}" + (f" ({user})" if user else "") + f": {whose}"
    for pid, mib in sorted(facts.gpu_pids.items(), key=lambda kv: -kv[1]):
        if pid in dup_family:
            owner, why = "another instance of the launch", f"runs the launch's model {launch.model}"
        elif pid in facts.server_pids:
            owner, why = "this launch", ""
        elif pid in facts.leftover_pids:
            owner, why = "leftover", facts.leftover_pids[pid]
        elif pid in facts.co_tenant_pids:
            why = facts.co_tenant_pids[pid]
            owner = "another user's job" if why.startswith("another user") else "another launch"
        else:
            owner, why = (
                "unknown",
                "" if pid in facts.procs else "not in this ps (another namespace)",
            )
        launch.gpu.append(GpuHolder(pid=pid, mib=mib, owner=owner, why=why))
    for o in observations:
        if o["tool"] == "config_read" and o["ok"]:
            path = str(o["args"].get("path") or "")
            if path and path not in launch.configs:
                launch.configs.append(path)
    _bystanders(launch, observations, facts, dup_family)
    return launch


def _bystanders(
    launch: Launch, observations: list[Observation], facts: Facts, dup_family: set[int]
) -> None:
    """Processes the sweep looked at that are not the launch, each with why; the kernel's kill
    lines of other jobs; login and session lines. Listed once; never evidence."""
    members = set(facts.server_pids)
    relevant = members | dup_family | set(facts.leftover_pids) | set(facts.gpu_pids)
    relevant |= set(facts.building_pids)
    work = working_on_logged_file(facts, observations)
    if work is not None:
        relevant.add(work[0])  # at work on the file the launch's log waits on: the launch's work
    if launch.port is not None and launch.port in facts.listener_pids:
        relevant.add(facts.listener_pids[launch.port])
    listed = 0
    from tools import engines

    for pid, rec in facts._ps_recs.items():
        if pid in relevant or pid in facts.busy_unknown_pids:
            continue
        if (
            engines.classify(str(rec.get("command") or "")).never
            and pid not in facts.co_tenant_pids
        ):
            continue  # a shell, an editor, this investigation's own reads: counted, not listed
        user = str(rec.get("user") or "")
        if pid in facts.co_tenant_pids:
            why = facts.co_tenant_pids[pid]
        elif pid in facts.other_launch_pids:
            why = "another launch (its own log, port or process tree)"
        elif rec.get("server"):
            why = "an engine process outside the launch's process tree"
        elif facts.server_user and user and user != facts.server_user:
            why = f"another user's process ({user})"
        else:
            why = "not in the launch's process tree"
        launch.bystanders.append(
            Bystander(
                what=f"pid {pid}" + (f" ({user})" if user else ""),
                line=facts.procs.get(pid, ""),
                why=why,
            )
        )
        listed += 1
    for line, why in facts.bystander_kills.items():
        launch.bystanders.append(Bystander(what="kernel line", line=line, why=why))
    for o in observations:
        if not o["ok"] or o["tool"] not in ("dmesg", "service_logs", *LOG_TOOLS):
            continue
        for ln in o["lines"]:
            if bystander_line(ln) and ln not in launch.bystander_lines():
                launch.bystanders.append(
                    Bystander(what="log line", line=ln, why="a login or session of the system")
                )
    total = max(
        (
            int(o["data"].get("total") or 0)
            for o in observations
            if o["tool"] == "processes" and o["ok"]
        ),
        default=0,
    )
    launch.others = max(0, total - len(relevant & set(facts.procs)) - listed)


def summary_lines(launch: Launch, limit: int = 6) -> list[str]:
    """The launch in a few lines, for the report: anchor, members, log, port, GPU, bystanders."""
    out = [f"found from {launch.anchor}"]
    if launch.members:
        mains = [m for m in launch.members if m.role in ("main", "launcher")] or launch.members
        out.append(
            f"{len(launch.members)} process(es): "
            + ", ".join(f"{m.pid} {m.role}" for m in mains[:3])
            + (f" + {len(launch.members) - len(mains[:3])} more" if len(launch.members) > 3 else "")
        )
    else:
        out.append("no process of the launch is alive")
    if launch.model:
        out.append(
            f"model {launch.model}"
            + (f", tp {launch.tensor_parallel}" if launch.tensor_parallel else "")
        )
    for lf in launch.logs[:2]:
        out.append(f"log {lf.path}" + (f" ({lf.note})" if lf.note else ""))
    if launch.port is not None:
        out.append(f"port {launch.port}: {launch.port_holder}")
    others = [g for g in launch.gpu if g.owner != "this launch"]
    if others:
        out.append(
            "GPU memory of others: "
            + ", ".join(f"pid {g.pid} {g.mib / 1024:.1f} GiB ({g.owner})" for g in others[:4])
        )
    if launch.duplicates:
        out.append(
            "another instance of the same launch: pid " + ", ".join(map(str, launch.duplicates))
        )
    if launch.bystanders:
        out.append(
            f"{len(launch.bystanders)} bystander(s) set aside"
            + (f" (and {launch.others} other processes)" if launch.others else "")
        )
    return out[: limit + 3]


def without_bystanders(evidence: list[dict[str, Any]], launch: Launch) -> list[dict[str, Any]]:
    """The evidence minus lines of bystanders (kept whole if that would leave nothing: the gate
    refuses such a conclusion on its own)."""
    theirs = launch.bystander_lines()
    kept = [e for e in evidence if str(e.get("line") or "") not in theirs]
    return kept or evidence


_DEVICE_LIST = re.compile(r"^\s*\d+(?:\s*,\s*\d+)*\s*$")


def launch_gpus(observations: list[Observation]) -> set[int] | None:
    """The GPU indices the launch's own settings give it (CUDA_VISIBLE_DEVICES in its config,
    env file or environment), when they all agree; None when unknown. Memory on other GPUs is a
    neighbour's, whatever it is."""
    seen: set[str] = set()
    for o in observations:
        if not o["ok"]:
            continue
        if o["tool"] == "config_read":
            for st in o["data"].get("sources") or []:
                if st.get("key") == "CUDA_VISIBLE_DEVICES":
                    seen.add(str(st.get("value") or "").strip("\"' "))
        elif o["tool"] in ("launch_env", "host_facts"):
            for ln in o["lines"]:
                if ln.startswith("CUDA_VISIBLE_DEVICES="):
                    seen.add(ln.split("=", 1)[1].strip("\"' "))
        elif o["tool"] == "container_inspect":
            # the container the launch runs in was given these GPUs of the machine (whose
            # indices nvidia-smi, read on the machine, prints)
            ids = ((o["data"] or {}).get("container") or {}).get("gpu_ids")
            if ids:
                seen.add(",".join(str(i) for i in ids))
    if len(seen) != 1:
        return None
    value = next(iter(seen))
    if not _DEVICE_LIST.match(value):
        return None
    return {int(x) for x in value.split(",")}


#: a port the operator names for the launch: "on port 8005", "port 8005", ":8005"
_SAID_PORT = re.compile(r"(?i)\bport\s*(?:is\s*|=\s*|:\s*)?(\d{4,5})\b|(?<![\d.]):(\d{4,5})\b")
#: what a superseded log read says in the run's state (its text stays in the session's events)
NOT_THIS_LOG = (
    "# not this launch's log: {path} serves port {theirs}; the launch in question (port {port}) "
    "writes {actual}"
)


def said_port(symptom: str) -> int | None:
    """The one port the operator's words name, if exactly one."""
    ports = {int(a or b) for a, b in _SAID_PORT.findall(symptom)}
    return next(iter(ports)) if len(ports) == 1 else None


def said_engine(symptom: str) -> str | None:
    """The one engine the operator's words name ("sglang died", "my vLLM hangs"), by the engine
    registry's names as whole words; None when none or several."""
    from tools import engines

    found = {
        name
        for name, e in engines.registry().engines.items()
        if not e.generic
        and any(re.search(rf"(?i)(?<![\w-]){n}(?![\w-])", symptom) for n in e.names)
    }
    return next(iter(found)) if len(found) == 1 else None


def said_ended(symptom: str) -> bool:
    """The operator's words say the launch ended (died, crashed, exited, was killed)."""
    return any(p.search(symptom) for p in _patterns("ended_words"))


def log_engines(lines: list[str]) -> set[str]:
    """The engines whose launch banner a log's lines print."""
    from tools import engines

    text = "\n".join(lines[:2000])
    return {
        name
        for name, e in engines.registry().engines.items()
        if not e.generic and any(re.search(m, text) for m in e.launch_markers)
    }


#: what a read of a log of another engine's launch (or of no launch) says, when no --log was given
NOT_THE_ENGINES_LOG = (
    "# not this launch's log: {path} prints {what}; the launch in question ({engine}) writes "
    "{actual}"
)


def log_port(lines: list[str]) -> int | None:
    """The port the newest launch in a log serves on, by its own lines; None when unsaid or
    when it names several."""
    tail = lines[last_launch(lines) :][:400]
    ports = {int(m.group(1)) for ln in tail for m in LOG_PORT.finditer(ln)}
    return next(iter(ports)) if len(ports) == 1 else None


def not_this_log(o: Observation, port: int, theirs: int, actual: str) -> Observation:
    """A read of a log another launch writes, kept in place with no result: no fact or line of
    that launch may speak for the launch in question."""
    line = NOT_THIS_LOG.format(path=o["args"].get("path"), theirs=theirs, port=port, actual=actual)
    return {**o, "ok": False, "lines": [line], "data": {}}


def wrong_log_said(observations: list[Observation]) -> str:
    """The report's note when the operator's --log was another launch's."""
    for o in observations:
        if not o["ok"] and o["lines"] and o["lines"][0].startswith("# not this launch's log:"):
            return "Note: " + o["lines"][0][2:].replace("not this launch's log: ", "", 1) + ". "
    return ""


#: where a launch script sends its output: `> F`, `>> F`, `| tee [-a] F`, `--log-file F`
_LOG_TARGET = re.compile(
    r"(?:(?<![0-9&])>>?|\btee(?:\s+-a)?)\s*['\"]?([^\s'\";|&<>]+\.(?:log|out|txt))\b"
    r"|--log[-_]?file[= ]['\"]?([^\s'\"]+)"
)


def script_log_targets(text: str, script: str) -> list[tuple[str, list[str]]]:
    """(file name, directories to look in) for each log a launch script writes: an absolute
    target's own directory; a relative one's, resolved against the script's directory and the
    three above it (scripts are often run from the repository root: `bash scripts/x/run.sh`)."""
    out: list[tuple[str, list[str]]] = []
    base = posixpath.dirname(script)
    for m in _LOG_TARGET.finditer(text):
        target = m.group(1) or m.group(2)
        if "$" in target or target.startswith("/dev/"):
            continue
        name = posixpath.basename(target)
        if target.startswith("~"):
            # `> ~/ft/logs/x.log` is under the script owner's home, never under the script's
            # own directory (`/home/u/ft/~/ft/logs`)
            expanded = _expand_home(target, base)
            if expanded is None:
                continue
            target = expanded
        if target.startswith("/"):
            dirs = [posixpath.dirname(target)]
        else:
            sub = posixpath.dirname(target)
            ups, d = [], base
            for _ in range(4):
                ups.append(posixpath.normpath(posixpath.join(d, sub)) if sub else d)
                d = posixpath.dirname(d)
            dirs = list(dict.fromkeys(ups))
        out.append((name, dirs))
    return out
