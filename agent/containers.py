"""What a container's own record proves, and next steps in its run command's terms.

The facts come from `container_inspect` (tools/container_inspect.py); the wording from
agent/knowledge/containers.yaml. A container killed by its memory limit is `host_oom_killed`
even when the kernel log shows nothing (the runtime said exit 137 under a limit); its /dev/shm is
what the run gave it (`ShmSize`), read from the record when the container is not running and
nothing can be read inside it.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from agent.rules.common import F
from tools import yamlio
from tools.container_inspect import ContainerState

KNOWLEDGE = Path(__file__).parent / "knowledge" / "containers.yaml"
#: a container that restarted this often is in a restart loop
RESTART_LOOP = 2
MODEL_CACHE = ("/root/.cache/huggingface", "/models", "/data", "huggingface")


class ContainerKnowledge(BaseModel):
    model_config = ConfigDict(extra="forbid")
    next_steps: dict[str, str]
    notes: dict[str, str]
    no_gpu_lines: list[str] = []
    outside_signals: dict[int, str] = {}


@lru_cache(maxsize=1)
def knowledge() -> ContainerKnowledge:
    return ContainerKnowledge.model_validate(
        yamlio.safe_load(KNOWLEDGE.read_text(encoding="utf-8"))
    )


def _mib(n: int | None) -> str:
    if not n:
        return "no limit"
    return f"{n / (1 << 20):.0f} MiB" if n < 1 << 30 else f"{n / (1 << 30):.1f} GiB"


def _words(c: ContainerState, cli: str, port: int | None = None, path: str = "") -> dict[str, str]:
    return {
        "name": c.name,
        "cli": cli or "docker",
        "shm": "the host's /dev/shm" if c.ipc_host else _mib(c.shm_size),
        "memory": _mib(c.memory_limit),
        "restarts": str(c.restart_count),
        "policy": c.restart_policy or "-",
        "port": str(port or 8000),
        "path": path,
    }


def next_step(label: str, c: ContainerState, cli: str, port: int | None = None) -> str | None:
    text = knowledge().next_steps.get(label)
    return text.format(**_words(c, cli, port)) if text else None


def notes(c: ContainerState, cli: str, port: int | None = None) -> list[str]:
    """What the record shows is wrong with the run command, whatever the label."""
    k, out = knowledge().notes, []
    if c.restart_count >= RESTART_LOOP:
        out.append(k["restart_loop"].format(**_words(c, cli)))
    published = {p.container_port.split("/")[0] for p in c.ports if p.host_port}
    if port is not None and c.ports_shown and not c.network_host and str(port) not in published:
        # first: a known port means the engine got far enough to name it, so GPUs came later
        out.append(k["port_not_published"].format(**_words(c, cli, port)))
    if not c.gpus_requested and c.gpus_shown:
        out.append(k["no_gpu"].format(**_words(c, cli)))
    cache = [m for m in c.mounts if any(x in m.destination for x in MODEL_CACHE)]
    if not cache and c.mounts_shown:
        out.append(k["cache_not_mounted"].format(**_words(c, cli)))
    for m in cache:
        if m.read_only:
            out.append(k["cache_read_only"].format(**_words(c, cli, path=m.destination)))
    return out


def own_container_hits(facts, hits):  # type: ignore[no-untyped-def]
    """A container's investigation reads the host's kernel log, which also holds other
    containers' OOM kills: those are not this container's, when its record shows it exited on
    its own (an exit code of its own, not 137) or the kill names another container's id, on its
    own line or on the `oom-kill:` line the kernel prints just before it (task_memcg=...)."""
    c = facts.container
    if c is None:
        return hits
    own_exit = c.exit_code not in (None, 0, 137) and not c.running

    def foreign(o, m) -> bool:  # type: ignore[no-untyped-def]
        if o["tool"] != "dmesg" or m.label != "host_oom_killed":
            return False
        other = _killed_in(o["lines"], m.line)
        return own_exit or bool(other and c.id and not other.startswith(c.id))

    return [(o, m) for o, m in hits if not foreign(o, m)]


_CONTAINER_ID = re.compile(r"(?:libpod|docker)-([0-9a-f]{12,64})")
#: the kernel's report of one kill spans a few lines: the memcg line is at most this far above
KILL_REPORT_LINES = 3


def _killed_in(lines: list[str], line: str) -> str | None:
    """The container id a kernel OOM kill line belongs to: on the line itself, or on the
    `oom-kill:` line just above it that names the killed task's memory cgroup."""
    m = _CONTAINER_ID.search(line)
    if m:
        return m.group(1)
    try:
        at = lines.index(line)
    except ValueError:
        return None
    for above in reversed(lines[max(0, at - KILL_REPORT_LINES) : at]):
        if "oom-kill:" in above:
            m = _CONTAINER_ID.search(above.split("task_memcg=", 1)[-1])
            return m.group(1) if m else None
    return None


def _line(lines: list[str], key: str) -> str:
    return next((ln for ln in lines if ln.startswith(f'"{key}"')), "")


#: what a launch given no GPU does not fail of: its fatal line then has a reason of its own (a
#: CPU-only run whose model cannot load failed of the model, whatever the no-GPU warning says)
NOT_FOR_WANT_OF_A_GPU = frozenset(
    {"model_load_error", "port_in_use", "disk_full", "shm_too_small", "host_oom_killed"}
)


@lru_cache(maxsize=1)
def _no_gpu_rx() -> re.Pattern[str]:
    pats = knowledge().no_gpu_lines
    return re.compile(
        "|".join(f"(?i:{p[4:]})" if p.startswith("(?i)") else f"(?:{p})" for p in pats) or "(?!x)x"
    )


def no_gpu_line(line: str) -> bool:
    """An engine's or image's words for "no GPU is visible here" (knowledge: no_gpu_lines)."""
    return bool(_no_gpu_rx().search(line))


def no_gpu_given(c: ContainerState | None, observations) -> tuple[str, str] | None:  # type: ignore[no-untyped-def]
    """(observation, line) when the container's record requests no GPU and its engine says it
    sees none: the run command's missing --gpus, proven without a crash line of its own."""
    if c is None or c.gpus_requested or not c.gpus_shown:
        return None
    from agent.evidence import LOG_TOOLS, text_lines

    for o in observations:
        if o["ok"] and o["tool"] in LOG_TOOLS:
            for ln in text_lines(o):
                if no_gpu_line(ln):
                    return o["id"], ln
    return None


def container_rules(  # type: ignore[no-untyped-def]
    c: ContainerState | None,
    obs: str | None,
    lines: list[str],
    add,
    log_lines: list[tuple[str, str]] | None = None,
    fatal_labels: set[str] | None = None,
) -> None:
    """The record's own proof: killed by its limit (exit 137), or not killed at all.
    `fatal_labels`: the labels of the launch's fatal lines; one a missing GPU cannot cause (a
    model the server cannot load, a port taken) means a CPU-only run failed for its own reason."""
    if c is None or obs is None:
        return
    if c.killed_by_limit:
        line = _line(lines, "OOMKilled") if c.oom_killed else _line(lines, "ExitCode")
        add(
            "host_oom_killed",
            "fact",
            F.supports_clearly,
            obs,
            line,
            f"container {c.name} was killed by its memory limit ({_mib(c.memory_limit)}): "
            + ("OOMKilled true" if c.oom_killed else "exit 137 (SIGKILL) with a limit set"),
        )
        add(
            "killed_externally",
            "fact",
            F.weakens_clearly,
            obs,
            line,
            "the container's memory limit ended it, not a person or a supervisor",
        )
    own_reason = (fatal_labels or set()) & NOT_FOR_WANT_OF_A_GPU
    if not c.gpus_requested and c.gpus_shown and log_lines and not own_reason:
        hit = next(((o, ln) for o, ln in log_lines if no_gpu_line(ln)), None)
        if hit is not None:
            why = f"container {c.name} was given no GPU (no --gpus / device request) and its engine sees none"
            # the record and the engine's own words together name the cause: the run command
            add("bad_launch_argument", "fact", F.proves, hit[0], hit[1], why)
            for label in ("dependency_error", "cuda_driver_mismatch"):
                none = next((ln for ln in lines if "NONE passed" in ln), "")
                add(label, "fact", F.refutes, obs, none or hit[1], why)
    signal = knowledge().outside_signals.get(c.exit_code or 0)
    if c.killed_by_limit:
        pass
    elif signal and not c.running and c.finished_at and not c.oom_killed:
        why = f"container {c.name} exited {c.exit_code}: {signal}"
        add("killed_externally", "fact", F.supports_clearly, obs, _line(lines, "ExitCode"), why)
        add("host_oom_killed", "fact", F.refutes, obs, _line(lines, "ExitCode"), why)
    elif c.exit_code not in (None, 137) and not c.running and c.finished_at:
        add(
            "host_oom_killed",
            "fact",
            F.refutes,
            obs,
            _line(lines, "ExitCode"),
            f"container {c.name} exited {c.exit_code} on its own, OOMKilled false",
        )


#: a ready line that names where it listens: `Uvicorn running on http://0.0.0.0:8000`
_LISTEN_URL = re.compile(r"https?://[^\s/]+:(\d{1,5})")


def unpublished(c: ContainerState | None, observations) -> tuple[str, str, int] | None:  # type: ignore[no-untyped-def]
    """Ready inside, unreachable outside: (observation, ready line, port) when a running
    container's engine said it serves on a port that the run command publishes on no host port
    (no `-p`, no --network host). Requests from the host or the network get nothing."""
    if c is None or not c.running or c.network_host or not c.ports_shown:
        return None
    from tools import engines

    ready = [p for e in engines.registry().engines.values() for p in e.ready_markers]
    logs = [o for o in observations if o["tool"] == "container_logs" and o["ok"]]
    hit = next(
        (
            (o["id"], ln, int(m.group(1)))
            for o in reversed(logs)
            for ln in reversed(o["lines"])
            if any(p.search(ln) for p in ready) and (m := _LISTEN_URL.search(ln))
        ),
        None,
    )
    if hit is None:
        return None
    published = {p.container_port.split("/")[0] for p in c.ports if p.host_port}
    return None if str(hit[2]) in published else hit


def unpublished_port(c: ContainerState | None, observations, add) -> None:  # type: ignore[no-untyped-def]
    """The run command's missing `-p`, proven by the record and the engine's own ready line."""
    hit = unpublished(c, observations)
    if hit is None or c is None:
        return
    obs, line, port = hit
    why = (
        f"the server in container {c.name} is ready on port {port} inside, and the run command "
        "publishes no host port for it: nothing outside the container can reach it"
    )
    add("bad_launch_argument", "fact", F.proves, obs, line, why)
    add("healthy", "fact", F.refutes, obs, line, why)
