"""What the agent can look at next, and how much each look would tell it.

The sweep decides what to read first (everything cheap, concurrently); after it, each candidate
check from knowledge/checks.yaml gets a value: the share of belief among live hypotheses that
its outcome would move. Brains choose among these; they never compose shell commands.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agent import script_cmd
from agent.evidence import LOG_READS, launch_line
from agent.facts import Facts, derive, launch_reads
from agent.rules.proof import crashed_pod
from agent.server_port import server_port
from agent.state import Hypothesis, Observation
from tools import yamlio
from tools.engines import server_name_pattern
from tools.log_window import max_window_s

LOG_NAME = re.compile(r"(?i)(\.log|\.out|\.err|nohup|/logs?/[^/]+$|\.txt$)")
CONFIG_NAME = re.compile(
    r"(?i)(sitecustomize\.py|\.env$|/\.env|\.sh$|\.ya?ml$|\.json$|\.toml$|\.pbtxt$|\.conf$|\.cfg$|\.ini$)"
)
KNOWN_GOOD_SUFFIXES = (".known-good", ".known_good", ".good", ".orig", ".bak")
#: an absolute path in prose or a listing; a sentence's closing period is not part of it
#: (never the tail of a home-relative `~/x/y` or of a relative `logs/x`)
ABS_PATH = re.compile(r"(?<![\w.~/-])(/[\w.@+-]+(?:/[\w.@+-]+)+)(?<!\.)")


class CheckOption(BaseModel):
    id: str
    tool: str
    args: dict[str, Any]
    separates: list[str]
    says: str
    value: float = 0.0
    #: run only when nothing else is worth running and nothing is proven (a long wait)
    last: bool = False

    @property
    def key(self) -> str:
        return f"{self.id}:{sorted(self.args.items())}"


@lru_cache(maxsize=1)
def _data() -> list[Any]:
    return yamlio.safe_load((Path(__file__).parent / "knowledge" / "checks.yaml").read_text())


def catalogue() -> list[dict[str, Any]]:
    return [c for c in _data() if isinstance(c, dict) and "id" in c]


@lru_cache(maxsize=1)
def deciding_checks() -> dict[str, str]:
    """label -> the check that separates it from its rivals (for the board)."""
    out: dict[str, str] = {}
    for c in catalogue():
        for label in c["separates"]:
            out.setdefault(label, f"{c['tool']}: {c['says']}")
    for item in _data():
        if isinstance(item, dict) and "settled_by" in item:
            out.update(item["settled_by"])
    return out


def listed_paths(observations: list[Observation]) -> list[str]:
    """Paths that find_logs (or the operator) surfaced, newest first as the tool listed them."""
    out: list[str] = []
    for o in observations:
        if o["tool"] in ("config_read", "log_tail") and o["ok"] and o["args"].get("path"):
            out.append(str(o["args"]["path"]))
        if o["tool"] != "find_logs" or not o["ok"]:
            continue
        d = o["data"]
        for f in [*(d.get("logs") or []), *(d.get("configs") or []), *(d.get("files") or [])]:
            p = f.get("path") if isinstance(f, dict) else f
            if isinstance(p, str):
                out.append(p)
        for ln in o["lines"]:
            if ln.startswith("# "):
                continue
            m = ABS_PATH.search(ln)
            if m:
                out.append(m.group(1))
    return list(dict.fromkeys(out))


def split_paths(paths: list[str]) -> tuple[list[str], list[str]]:
    logs, configs = [], []
    for p in paths:
        if p.endswith(KNOWN_GOOD_SUFFIXES):
            continue
        if CONFIG_NAME.search(p) and not p.endswith(".log"):
            configs.append(p)
        elif LOG_NAME.search(p):
            logs.append(p)
    return logs, configs


#: a rotation of a log beside it: server.log.1, server.log.old, server.log-20261201, .gz excluded
_ROTATION = re.compile(r"^(?:\.\d{1,2}|\.old|\.bak|[-.]\d{8}(?:-\d+)?)$")


def rotation_of(path: str, other: str) -> bool:
    """`other` is a rotated copy of `path` (logrotate, RotatingFileHandler, a supervisor)."""
    return other.startswith(path) and bool(_ROTATION.match(other[len(path) :]))


#: a log this short made only of probe lines is the fresh file a rotation left behind
FRESH_LOG_LINES = 20


def rotated_log(observations: list[Observation], all_paths: list[str]) -> str | None:
    """An unread rotation of a log the investigation read: the file the server kept writing
    through its open descriptor after a rename, or the older half of the launch's output. A
    log read in part refutes nothing; its rotation is read before anything is concluded."""
    read = [str(o["args"].get("path")) for o in observations if o["tool"] == "log_tail" and o["ok"]]
    for o in observations:
        if o["tool"] == "processes" and o["ok"]:
            for actual in (o["data"].get("rotated") or {}).values():
                if actual not in read:
                    return str(actual)
    from agent.rules.proof import fatal_lines, frontend_access

    # a read that holds its launch's start (the banner) has the whole run: its rotation holds
    # earlier runs only (a writer still writing the renamed file is the processes read above)
    started = {
        str(o["args"].get("path"))
        for o in observations
        if o["tool"] == "log_tail" and o["ok"] and any(launch_line(ln) for ln in o["lines"])
    }
    for path in read:
        for other in all_paths:
            if other not in read and path not in started and rotation_of(path, other):
                return other
    # nothing listed beside it: a log that holds no launch at all (only probes, a wrapper's
    # line) is most often the fresh file after a rename; its first rotation is worth one read

    tried = {str(o["args"].get("path")) for o in observations if o["tool"] == "log_tail"}
    for o in observations:
        if o["tool"] == "log_tail" and o["ok"]:
            lines = [ln for ln in o["lines"] if not ln.startswith("# ")]
            path = str(o["args"].get("path"))
            # the shape of a fresh file after a rename: a few lines, every one a probe the
            # front end answered (a log that merely lacks a launch marker is not that)
            if (
                lines
                and len(lines) <= FRESH_LOG_LINES
                and all(frontend_access(ln) for ln in lines)
                and not any(launch_line(ln) for ln in lines)
                and not fatal_lines(lines)
                and f"{path}.1" not in tried
            ):
                return f"{path}.1"
    return None


def known_good_of(path: str, all_paths: list[str]) -> str | None:
    for suf in KNOWN_GOOD_SUFFIXES:
        if path + suf in all_paths:
            return path + suf
    return None


def primary_log(
    observations: list[Observation], facts: Facts | None = None
) -> tuple[str | None, Observation | None]:
    """The log the investigation is about: one the launch's own processes write (their open
    fds say so), else the fullest log read that no other launch writes (newest first on a tie).
    Never "the biggest file on the box": a test run's output or another user's log is not it."""
    facts = facts if facts is not None else derive(observations)
    ours = set(facts.server_pids)
    others = set(facts.other_launch_pids) | set(facts.co_tenant_pids)
    written = {p for p, pids in facts.log_writers.items() if set(pids) & ours}
    foreign = {
        p
        for p, pids in facts.log_writers.items()
        if pids and set(pids) <= others and p not in written
    }
    from agent.hits import set_aside_logs

    aside = set_aside_logs(observations)  # an earlier run's story (rotated, or before the pod's)
    best: tuple[str | None, Observation | None] = (None, None)
    rank: tuple[int, int] = (-1, 0)
    for o in observations:
        if o["tool"] == "log_tail" and o["ok"]:
            path = str(o["args"].get("path"))
            if path in foreign or path in aside:
                continue
            text = [ln for ln in o["lines"] if not ln.startswith("# ")]
            # the server's own log, not a wrapper's one-line "failed to become healthy"
            r = (1 if path in written else 0, len(text))
            if r >= rank:
                best, rank = (path, o), r
    return best


def _args_key(args: dict[str, Any]) -> str:
    return repr(sorted((k, repr(v)) for k, v in (args or {}).items()))


def _same_value(a: Any, b: Any) -> bool:
    """Equal as arguments: 60 and 60.0 are one watch."""
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return float(a) == float(b)
    return bool(a == b)


def covered(tool: str, args: dict[str, Any], reads: list[Observation]) -> Observation | None:
    """A read of `tool` already made with every one of `args` (and perhaps more: py_stacks of
    the pid with native frames covers py_stacks of the pid), or None."""
    for o in reads:
        if o["tool"] == tool and all(
            k in o["args"] and _same_value(v, o["args"][k]) for k, v in (args or {}).items()
        ):
            return o
    return None


def _crashed_pod(observations: list[Observation]) -> str | None:
    """A pod a log read names as crashed whose own log no read has fetched yet."""
    read = {
        str(o["args"].get("name") or "").rsplit("/", 1)[-1]
        for o in observations
        if o["tool"] == "service_logs"
    }
    for o in observations:
        if o["ok"] and o["tool"] in LOG_READS:
            for ln in o["lines"]:
                pod = crashed_pod(ln)
                if pod and pod not in read:
                    return pod
    return None


def _engine_lines(o: Observation | None) -> bool:
    """A log read that holds an engine's own start (its launch banner): the server's log."""
    return o is not None and any(launch_line(ln) for ln in o["lines"] if not ln.startswith("# "))


def _gpu_busy(observations: list[Observation]) -> bool:
    """The latest nvidia-smi read shows a GPU with real memory in use."""
    reads = [o for o in observations if o["tool"] == "gpu_status" and o["ok"]]
    if not reads:
        return False
    for g in reads[-1]["data"].get("gpus") or []:
        used, total = g.get("memory_used_mib"), g.get("memory_total_mib")
        numbers = isinstance(used, int | float) and isinstance(total, int | float)
        if numbers and total > 0 and used >= max(1024, 0.02 * total):
            return True
    return False


def _silent_server_pid(f: Facts) -> int | None:
    """The server's main pid when it runs but its log stopped (or a busy process that may be
    the workload): where its stacks wait tells a hang from slow work."""
    if f.server_alive and f.log_growth and not any(f.log_growth.values()):
        # a rank, not the launcher: the one on the busiest GPU, else any rank holding GPU memory
        on_gpu = [p for p in f.gpu_pids if p in f.server_pids]
        ranks = [p for p in f.server_worker_pids if p in on_gpu] or on_gpu
        if ranks:
            return max(ranks, key=lambda p: f.gpu_pids.get(p, 0.0))
        # no GPU process list: a worker whose title names its rank (VLLM::Worker_TP0) runs
        # the model; an engine core or a scheduler front waits on it
        titled = [p for p in f.server_worker_pids if f._ps_recs.get(p, {}).get("rank") is not None]
        group = titled or f.server_worker_pids or f.server_main_pids or f.server_pids
        if not group:
            return None
        # of those, the one running flat out: a rank spinning in a collective (NCCL busy-polls
        # its peer) or at work is where the launch is; a resource tracker idles beside it
        return max(group, key=lambda p: f._ps_recs.get(p, {}).get("cpu_pct") or 0.0)
    if f.server_alive is None and f.busy_unknown_pids:
        return next(iter(f.busy_unknown_pids))
    return None


def _engine_pid(f: Facts, observations: list[Observation]) -> int | None:
    """The engine of a worker read idle in its command loop, when the engine's own stacks are
    not read yet: a server process with no rank in its title (an engine core), else its main."""
    stacks = [o for o in observations if o["tool"] == "py_stacks" and o["ok"]]
    if not any(o["data"].get("awaits") == "work" for o in stacks) or any(
        o["data"].get("awaits") == "replies" for o in stacks
    ):
        return None
    read = {o["args"].get("pid") for o in stacks}
    untitled = [p for p in f.server_worker_pids if f._ps_recs.get(p, {}).get("rank") is None]
    return next((p for p in [*untitled, *f.server_main_pids] if p not in read), None)


#: a hub model id as launches name it: vllm serve ID, --model(-path) ID, model='ID' in a config dump
_HUB_MODEL = re.compile(
    r"(?:vllm serve|--model(?:-path|-id)?[ =]|\bmodel(?:_path|_tag)?['\"]?\s*[=:]\s*['\"])"
    r"\s*([A-Za-z0-9][\w.-]*/[\w.-]+)(?=['\"\s,)]|$)"
)


def hub_model(observations: list[Observation], facts: Facts | None = None) -> str | None:
    """The hub model id (org/name, not a local path) the server was launched with. Given the
    facts, another launch's process rows are not read: a neighbour's `vllm serve Qwen/...` on a
    busy box names its model, not this launch's."""
    if facts is not None:
        observations = launch_reads(observations, facts)
    for o in observations:
        if o["ok"] and o["tool"] in ("processes", *LOG_READS, "config_read"):
            for ln in o["lines"]:
                m = _HUB_MODEL.search(ln)
                if m and not m.group(1).startswith(("/", ".", "~")):
                    return m.group(1)
    return None


def hub_caches(observations: list[Observation]) -> list[str]:
    """The hub cache the launch environment names (HF_HUB_CACHE, $HF_HOME/hub), if any."""
    out: list[str] = []
    for o in observations:
        if not o["ok"]:
            continue
        for ln in o["lines"]:
            m = re.match(r"^\s*(?:export\s+)?(HF_HUB_CACHE|HF_HOME)=(/\S+)", ln)
            if m and o["tool"] in ("host_facts", "launch_env", "config_read"):
                out.append(m.group(2) if m.group(1) == "HF_HUB_CACHE" else m.group(2) + "/hub")
            d = _DOWNLOAD_DIR.search(ln)  # vLLM's --download-dir holds the hub layout itself
            if d and o["tool"] in ("processes", "log_tail", "log_search", "config_read"):
                out.append(d.group(1))
    return list(dict.fromkeys(out))


_DOWNLOAD_DIR = re.compile(r"(?:--download-dir[ =]|download_dir=')(/[^\s',)]+)")


#: a GPU at this utilisation or more is at work: the launch's storage reads are not what to ask
IDLE_GPU_PCT = 50


def _gpu_at_work(facts: Facts) -> bool:
    return any((g.util_pct or 0) >= IDLE_GPU_PCT for g in facts.gpus)


def _memory_would_tell(facts: Facts, observations: list[Observation]) -> bool:
    """A silent log over busy GPUs, where nothing better already tells working from stuck: not
    when a pinned GPU's peer sits idle (a collective waiting for it), nor when the stacks were
    read (they say where it waits). Watching memory costs up to a minute of a real hang."""
    from agent.rules.hang import pinned_gpus

    quiet = bool(facts.log_growth) and not any(facts.log_growth.values())
    if not quiet:
        return False
    if not any((g.util_pct or 0) >= 90 for g in facts.gpus):
        # idle GPUs: the stacks or the process's storage reads tell working from stuck; when the
        # stacks could not be read and the storage read could not be made or saw nothing read,
        # a watched memory read is the read left
        from agent.rules.hang import reading_storage

        # no Python stacks: the read failed, or only the kernel's view came back (no py-spy)
        stacks_failed = any(
            o["tool"] == "py_stacks" and (not o["ok"] or o["data"].get("method") != "py-spy")
            for o in observations
        )
        # (the storage read is not offered while a GPU of the box is at work: then it is no
        # read left to wait for, and the memory watch is the one that can still tell)
        io_tried = any(o["tool"] == "process_io" for o in observations) or _gpu_at_work(facts)
        return (
            bool(facts.server_alive)
            and stacks_failed
            and io_tried
            and reading_storage(observations) is None
        )
    pinned, idle = pinned_gpus(facts, observations)
    if pinned and idle:
        return False
    return not any(o["tool"] == "py_stacks" and o["ok"] for o in observations)


def _patience_args(
    facts: Facts, observations: list[Observation], log_path: str | None
) -> dict[str, Any] | None:
    """The patient watch's arguments when the short liveness reads are spent on a live launch
    that shows neither work nor an error: its log was watched and stayed quiet (or a watched
    GPU read saw no memory move), and no fatal line of it was found. None otherwise."""
    from agent.hits import signature_hits

    if facts.server_alive is not True:
        return None
    quiet_log = bool(facts.log_growth) and not any(facts.log_growth.values())
    quiet_gpu = any(
        o["tool"] == "gpu_status" and o["ok"] and o["data"].get("watched") for o in observations
    )
    if not (quiet_log or quiet_gpu):
        return None
    if any(m.strength == "fatal" and m.label for _o, m in signature_hits(observations)):
        return None
    pid = _silent_server_pid(facts) or next(iter(facts.server_main_pids or facts.server_pids), None)
    path = log_path if log_path and log_path.startswith("/") else None
    if path is None and pid is None:
        return None
    args: dict[str, Any] = {"gpus": bool(facts.gpu_available)}
    if path:
        args["path"] = path
    if pid:
        args["pid"] = pid
        if facts.ps_outside:
            args["machine_pid"] = True
    return args


#: the reads taken again after the patient watch saw the launch die, by their check's `needs`
_AFTER_DEATH = {"died_in_watch": "processes", "dmesg_after_death": "dmesg"}


def _died_in_watch(observations: list[Observation], then: str) -> str | None:
    """The log path ("" when none) of the newest patient watch that saw the launch die (or, for
    `then` "log", its log grow), when no read of `then` (a tool's name, or "log": a log_tail of
    that path) came after it; else None."""
    for i in range(len(observations) - 1, -1, -1):
        o = observations[i]
        if o["tool"] != "launch_progress":
            continue
        moved = o["data"].get("died") or (then == "log" and o["data"].get("moved") == "log")
        if not (o["ok"] and moved):
            return None
        path = str(o["data"].get("path") or "")
        later = observations[i + 1 :]
        if then != "log" and any(r["tool"] == then for r in later):
            return None
        if then == "log" and any(
            r["tool"] == "log_tail" and r["args"].get("path") == path for r in later
        ):
            return None
        return path
    return None


def options(
    observations: list[Observation], board: dict[str, Hypothesis], done: list[str]
) -> list[CheckOption]:
    live = {
        h["label"]: max(h["score"], 0.0) + 0.5 for h in board.values() if h["status"] != "refuted"
    }
    total = sum(live.values()) or 1.0
    facts = derive(observations)  # once per decision: the preconditions below read it
    log_path, log_obs = primary_log(observations, facts)
    all_paths = listed_paths(observations)
    out: list[CheckOption] = []
    failed = {(o["tool"], _args_key(o["args"])) for o in observations if not o["ok"]}
    for c in catalogue():
        args: dict[str, Any] | None = {}
        need = c["needs"]
        if need == "live_log" and log_path and facts.server_alive is False:
            args = None  # a server known to be gone: its log cannot grow, never wait on it
        elif need in ("primary_log", "live_log"):
            args = {"path": log_path} if log_path else None
            if args:
                args.update(c.get("args") or {})  # e.g. the liveness window of log_growth
            if args and c.get("pattern"):
                args["pattern"] = c["pattern"]
        elif need == "big_log":
            size = int((log_obs or {}).get("data", {}).get("size") or 0) if log_obs else 0
            text = sum(len(ln) + 1 for ln in (log_obs or {}).get("lines", [])) if log_obs else 0
            args = (
                {
                    "path": log_path,
                    "pattern": r"(?i)error|exception|traceback|killed|fatal|out of memory|terminated|failed|insufficient|cannot|unable|\[E\]",
                }
                if log_path and size > text * 1.5
                else None
            )
        elif need == "port":
            port = server_port(observations, facts)
            args = {"port": port} if port else None
        elif need == "systemd_unit":
            # a unit the server's by its name (an engine's, "llm", "serve"...): the box's other
            # units (podman.service, a database's) say nothing about this launch
            unit = next(
                (
                    name
                    for p in all_paths
                    if (name := p.rsplit("/", 1)[-1]).endswith(".service")
                    and server_name_pattern().search(name.removesuffix(".service"))
                ),
                None,
            )
            args = {"kind": "journalctl", "name": unit} if unit else None
        elif need in ("server_pid", "idle_server_pid"):
            pid = _silent_server_pid(facts)
            if need == "idle_server_pid" and _gpu_at_work(facts):
                pid = None  # GPUs at work: a spin or a compute, not a read from storage
            args = {"pid": pid, **(c.get("args") or {})} if pid else None
            if args and facts.ps_outside:
                args["machine_pid"] = True  # a pid of the machine's table, not the container's
        elif need == "engine_pid":
            pid = _engine_pid(facts, observations)
            args = {"pid": pid} if pid else None
            if args and facts.ps_outside:
                args["machine_pid"] = True
        elif need == "script_command":
            args = (
                {"pattern": script_cmd.pattern(facts.script_commands)}
                if facts.ps_available and not facts.server_pids and facts.script_commands
                else None
            )
        elif need == "hub_model":
            model = hub_model(observations, facts) if facts.server_alive else None
            args = {"model": model, "caches": hub_caches(observations)} if model else None
        elif need == "silent_gpus":
            args = (
                {"watch_s": 2 * max_window_s()} if _memory_would_tell(facts, observations) else None
            )
        elif need == "quiet_launch":
            args = _patience_args(facts, observations, log_path)
        elif need in _AFTER_DEATH:
            args = {} if _died_in_watch(observations, _AFTER_DEATH[need]) is not None else None
        elif need == "log_after_watch":
            died = _died_in_watch(observations, "log")
            args = {"path": died} if died else None
        elif need == "live_container":
            ctr = facts.container
            # its record unread (a pod's runtime, a trimmed paste): the server seen alive inside
            # it, beside a log read from it, says it runs
            # (a record that names no state, a CRI runtime's `inspect` of another shape, is as
            # good as unread: it says nothing of whether the container runs)
            running = (
                ctr.running
                if ctr is not None and (ctr.status or ctr.running)
                else bool(facts.server_alive)
                and any(o["tool"] == "container_logs" and o["ok"] for o in observations)
            )
            # the file named is the server's log, or a wrapper's (a restart script's "did not
            # become healthy"): only the engine's own lines make it the one to watch
            args = (
                dict(c.get("args") or {})
                if running and (not log_path or not _engine_lines(log_obs))
                else None
            )
        elif need == "live_pod":
            pod = next(
                (
                    o
                    for o in reversed(observations)
                    if o["tool"] == "service_logs" and o["ok"] and o["args"].get("name")
                ),
                None,
            )
            args = (
                {
                    "kind": str(pod["data"].get("kind") or "kubectl"),
                    "name": str(pod["data"].get("name") or pod["args"]["name"]),
                    **(c.get("args") or {}),
                }
                if pod is not None and facts.pod_running and not pod["data"].get("watched")
                else None
            )
        elif need == "crashed_pod":
            pod = _crashed_pod(observations)
            args = {**(c.get("args") or {}), "name": pod} if pod else None
        elif need == "gpu_busy":
            args = {} if _gpu_busy(observations) else None
        elif need == "rotated_log":
            rot = rotated_log(observations, all_paths)
            args = {"path": rot} if rot else None
        elif need == "known_good_config":
            # only the configs the sweep judged to be this launch's (the ones it read): a
            # known-good copy beside some other checkout's file under /tmp says nothing here
            configs = [
                str(o["args"].get("path"))
                for o in observations
                if o["tool"] == "config_read" and o["ok"] and o["args"].get("path")
            ]
            good = next(
                (known_good_of(p, all_paths) for p in configs if known_good_of(p, all_paths)), None
            )
            args = {"path": good} if good else None
        if args is None:
            continue
        opt = CheckOption(
            id=c["id"],
            tool=c["tool"],
            args=args,
            separates=c["separates"],
            says=c["says"],
            last=bool(c.get("last")),
        )
        same = (opt.tool, _args_key(opt.args))
        prior = covered(opt.tool, opt.args, observations)  # the same read, or one with more
        if (
            opt.key in done
            or same in failed
            or (prior is not None and (not prior["ok"] or not c.get("repeat")))
        ):
            # planned before, or the very read already taken (by either brain; a failed one
            # fails again); only a check that is a re-read on purpose repeats one that worked
            continue
        opt.value = sum(live.get(lbl, 0.0) for lbl in opt.separates) / total
        out.append(opt)
    return sorted(out, key=lambda o: -o.value)
