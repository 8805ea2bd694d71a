"""Memory rules: who holds the GPUs, whether the launch died for memory, and which phase an OOM
hit (weights, KV cache, runtime). Each adds signed findings tied to one verbatim line.
"""

from __future__ import annotations

import re

from agent.evidence import latest_text_observations, text_lines
from agent.facts import Facts
from agent.launch import (
    FAILED_PID,
    duplicate_instances,
    duplicate_mains,
    family,
    launch_gpus,
)
from agent.rules import proof
from agent.rules.common import (
    ALLOC,
    MEMORY_LABELS,
    MEMORY_PHASES,
    OOM_LABELS,
    OOM_NAMES_A_PID,
    OTHER_PROC_MEM,
    PHASE_PREFIX,
    TORCH_HELD,
    WORKER,
    F,
)
from agent.signatures import Match
from agent.state import Observation
from agent.thresholds import THRESHOLDS


def died_for_memory(hits: list[tuple[Observation, Match]]) -> bool:
    """The launch died of a GPU-memory failure (an OOM, no room for the KV cache, too little free
    memory at start): then other holders of GPU memory are suspects, even server-like ones."""
    return any(m.strength == "fatal" and m.label in MEMORY_LABELS for _, m in hits)


def taken_before_start(hits: list[tuple[Observation, Match]]) -> bool:
    """The engine saw GPU memory taken before it allocated anything ("less free memory than
    desired at startup", "memory unbalanced", "devices busy"): any holder is someone else."""
    return any(
        m.label == "stale_gpu_process"
        and m.strength in ("fatal", "strong")
        and m.signature not in OOM_NAMES_A_PID
        for _, m in hits
    )


def leftover_holders(facts: Facts, hits: list[tuple[Observation, Match]]) -> dict[int, float]:
    """GPU pids holding >= 1 GiB that are not the running server. After a memory failure, even
    server-like processes (orphaned workers of an earlier launch) count: the launch is dead."""
    busy = taken_before_start(hits)
    running = set(facts.server_pids)
    if busy:
        running = set()
    elif died_for_memory(hits):
        mains = {p for p in facts.server_pids if not WORKER.search(facts.procs.get(p, ""))}
        # a live main process owns its workers (it hit a runtime OOM and is still up); with no
        # main alive, worker-like survivors are an earlier launch's orphans
        running = set(facts.server_pids) if mains else set()
    # in exclusive mode any holder blocks, however small
    floor = 1.0 if busy else THRESHOLDS.oom.holder_floor_mib
    return {p: mib for p, mib in facts.gpu_pids.items() if mib >= floor and p not in running}


def unmetered_holders(facts: Facts, hits: list[tuple[Observation, Match]]) -> list[int]:
    """Compute processes other than the launch on a GPU nvidia-smi cannot meter (unified
    memory: [N/A] for the GPU and each process), when the engine itself says the memory was
    taken before it allocated anything: they hold it, by an amount only the engine's line says."""
    if not taken_before_start(hits):
        return []
    return [p for p in facts.gpu_pids_unmetered if p not in facts.server_pids]


#: vLLM's profiler's own numbers: free memory before and after its profiling run
_PROFILED = re.compile(
    r"Initial free memory ([\d.]+) ?(GiB|MiB|B)?, current free memory ([\d.]+) ?(GiB|MiB|B)?"
)
_TO_GIB = {"GiB": 1.0, "MiB": 1 / 1024, "B": 1 / 2**30, None: 1 / 2**30}


def freed_during_profiling(hits: list[tuple[Observation, Match]]) -> tuple[str, str, float] | None:
    """(observation id, line, GiB) when the engine's profiler saw more free memory after its
    own profiling run than before it: memory it never held was released meanwhile, so another
    process held it when the launch started (and may be gone by the time anyone looks)."""
    for o, m in hits:
        if m.signature != "vllm-memory-profiling-not-cleaned":
            continue
        p = _PROFILED.search(m.line)
        if p is None:
            continue
        before = float(p.group(1)) * _TO_GIB[p.group(2)]
        after = float(p.group(3)) * _TO_GIB[p.group(4)]
        if after > before:
            return o["id"], m.line, after - before
    return None


def stale_gpu_possible(facts: Facts, hits: list[tuple[Observation, Match]]) -> bool:
    """The guardrail's condition: another pid holds GPU memory now (or memory is held while no
    server runs, or after the launch died of a memory failure)."""
    if leftover_holders(facts, hits):
        return True
    if unmetered_holders(facts, hits):
        return True
    if freed_during_profiling(hits) is not None:
        return True
    # torch's OOM (of a relaunch) names a live earlier instance holding real memory
    if duplicate_instances(facts, list({o["id"]: o for o, _ in hits}.values())):
        return True
    return facts.gpu_clean is False and launch_gone(facts, hits)


def launch_gone(facts: Facts, hits: list[tuple[Observation, Match]]) -> bool:
    """No server of this launch is up to account for the GPU memory in use: none runs, or the
    launch died of a memory failure and only worker-like survivors remain."""
    if facts.server_alive is False:
        return True
    if not facts.ps_available:
        return False  # the processes were not read: gone is not known, and not proven
    if not died_for_memory(hits):
        return False
    return not any(not WORKER.search(facts.procs.get(p, "")) for p in facts.server_pids)


def _unexplained_mib(facts: Facts) -> float:
    """GPU memory in use that no listed process (desktop graphics included) accounts for."""
    used = max((g.used_mib or 0.0) for g in facts.gpus) if facts.gpus else 0.0
    return used - facts.graphics_mib


def search_rules(facts: Facts, observations: list[Observation], hits, add) -> None:  # type: ignore[no-untyped-def]
    """A whole-log search for CUDA OOM that finds nothing refutes a GPU OOM (absent a hit
    elsewhere), in a log the engine wrote. Where the engine's output was read from its container
    or pod, a file with no launch of its own that the launch's processes do not write is a
    wrapper's (a restart script's "did not become healthy", a deploy tool's steps): it never held
    the engine's output, so its silence says nothing."""
    oom_hit = any(m.label in OOM_LABELS and m.strength == "fatal" for _, m in hits)
    written = {p for p, pids in facts.log_writers.items() if set(pids) & set(facts.server_pids)}
    elsewhere = any(
        o["tool"] in ("container_logs", "service_logs") and o["ok"] and o["lines"]
        for o in observations
    )
    for o in observations:
        if o["tool"] != "log_search" or not o["ok"] or oom_hit:
            continue
        if "memory" not in str(o["args"].get("pattern", "")).lower():
            continue
        if o["data"].get("whole_since_launch") is False:
            continue  # part of the log since the launch was not read: absence refutes nothing
        if (
            elsewhere
            and not o["data"].get("launch_found")
            and str(o["args"].get("path")) not in written
        ):
            continue  # the engine's output is the container's: this file's silence is a wrapper's
        if int(o["data"].get("total_matches") or 0) == 0 and o["lines"]:
            for label in sorted(OOM_LABELS):
                add(
                    label,
                    "fact",
                    F.refutes,
                    o["id"],
                    o["lines"][0],
                    "no CUDA out-of-memory line in the whole log",
                )


def oom_phase(
    o: Observation, m: Match, hits: list[tuple[Observation, Match]]
) -> tuple[str, Match | None]:
    """Weights or runtime? The phase line nearest before the OOM decides (after it, for logs
    printed newest-first); without one, an allocation of a quarter of the GPU or more is weights."""
    phases = [
        mm
        for oo, mm in hits
        if oo["id"] == o["id"]
        and mm.signature.startswith(PHASE_PREFIX)
        and mm.label in MEMORY_PHASES  # an NCCL-init phase line says nothing about an OOM
    ]
    # a phase on the OOM's own line counts as before it (a progress bar the error was printed
    # onto, after a carriage return)
    before = [p for p in phases if p.line_no <= m.line_no]
    after = [p for p in phases if p.line_no > m.line_no]
    phase = before[-1] if before else (after[0] if after else None)
    if phase is not None and phase.label:
        return phase.label, phase
    held = TORCH_HELD.search(m.line)
    cap = ALLOC.search(m.line)
    if held and cap and float(cap.group(3)) > 0:
        # PyTorch itself holds (nearly) the whole GPU and no phase line says loading finished
        held_gib = float(held.group(1)) / (1024 if held.group(2) == "MiB" else 1)
        cap_gib = float(cap.group(3)) / (1024 if cap.group(4) == "MiB" else 1)
        if held_gib >= THRESHOLDS.oom.weights_hold_share * cap_gib:
            return "gpu_oom_weights", None
    a = cap
    if a:
        want = float(a.group(1)) * (1024 if a.group(2) == "GiB" else 1)
        total = float(a.group(3)) * (1024 if a.group(4) == "GiB" else 1)
        if total > 0 and want >= THRESHOLDS.oom.weights_ask_share * total:
            return "gpu_oom_weights", None
    return m.label or "cuda_oom_runtime", None


def oom_at_device_init(
    o: Observation, m: Match, hits: list[tuple[Observation, Match]]
) -> str | None:
    """The frame or line saying a CUDA OOM came while the device was being set up (vLLM's
    `init_device` / `MemorySnapshot()`, torch's `_lazy_init`), with no start-up phase line
    before it: the launch had loaded and run nothing of its own yet, so the OOM is neither its
    weights nor its runtime. None otherwise."""
    if any(
        oo["id"] == o["id"]
        and mm.signature.startswith(PHASE_PREFIX)
        and mm.label in MEMORY_PHASES
        and mm.line_no <= m.line_no
        for oo, mm in hits
    ):
        return None
    lines = text_lines(o)
    window = lines[max(0, m.line_no - THRESHOLDS.oom.init_frame_lines) : m.line_no + 1]
    return next((ln for ln in reversed(window) if proof.device_init(ln)), None)


#: torch's own accounting in an OOM line: the process itself held most of the GPU
_SELF_HELD = (
    re.compile(r"([\d.]+) ([GM]iB) is allocated by PyTorch"),
    re.compile(r"([\d.]+) ([GM]iB) already allocated"),
)
_CAPACITY = re.compile(r"([\d.]+) ([GM]iB) total capacity|total capacity of ([\d.]+) ([GM]iB)")


def self_filled(hits) -> tuple[Observation, str, float, float] | None:  # type: ignore[no-untyped-def]
    """(obs, line, held GiB, capacity GiB) when a CUDA OOM line says the process itself held
    nearly the whole GPU: it filled the GPU on its own, so no other holder is why it ran out."""
    for o, m in hits:
        if m.strength != "fatal" or m.label not in MEMORY_LABELS:
            continue
        cap = _CAPACITY.search(m.line)
        held = next((h for p in _SELF_HELD if (h := p.search(m.line))), None)
        if not cap or not held:
            continue
        total = float(cap.group(1) or cap.group(3))
        unit = cap.group(2) or cap.group(4)
        total_gib = total / (1024 if unit == "MiB" else 1)
        held_gib = float(held.group(1)) / (1024 if held.group(2) == "MiB" else 1)
        if total_gib > 0 and held_gib >= THRESHOLDS.oom.weights_hold_share * total_gib:
            return o, m.line, held_gib, total_gib
    return None


#: how much a failure line says the launch lacked: vLLM's "36.0 GiB KV cache is needed, which is
#: larger than the available KV cache memory (6.94 GiB)", torch's "Tried to allocate 448.00 MiB.
#: GPU 0 has a total capacity of 139.81 GiB of which 203.06 MiB is free"
_KV_NEED = re.compile(
    r"([\d.]+) ?([GM]iB) KV cache is needed, which is larger than the available KV cache "
    r"memory \(([\d.]+) ?([GM]iB)\)"
)
_TORCH_ASK = re.compile(
    r"Tried to allocate ([\d.]+) ([GM]iB)\b.*?of which ([\d.]+) ([GM]iB) (?:is )?free"
)


def _mib(value: str, unit: str) -> float:
    return float(value) * (1024 if unit == "GiB" else 1)


def shortfall_mib(hits) -> float | None:  # type: ignore[no-untyped-def]
    """The most memory a memory failure of the launch says it lacked (asked minus free), in
    MiB; None when no failure line states both. Memory another process holds explains the
    failure only if freeing it would have made the launch fit: at least this much."""
    out: float | None = None
    for _o, m in hits:
        if m.strength != "fatal" or m.label not in MEMORY_LABELS:
            continue
        for rx in (_KV_NEED, _TORCH_ASK):
            g = rx.search(m.line)
            if g:
                lack = _mib(g.group(1), g.group(2)) - _mib(g.group(3), g.group(4))
                out = max(out or 0.0, lack)
    return out


def _held_not_leftover(facts: Facts, add, why: str) -> None:  # type: ignore[no-untyped-def]
    """Refute a leftover holder on the busiest GPU's line: its memory has a live owner (`why`)."""
    busiest = max(facts.gpus, key=lambda g: g.used_mib or 0)
    add("stale_gpu_process", "fact", F.refutes, facts.gpu_obs, busiest.line, why)


def stale_rules(facts: Facts, observations: list[Observation], hits, add) -> None:  # type: ignore[no-untyped-def]
    own = self_filled(hits)
    if own is not None:
        o, line, held, total = own
        add(
            "stale_gpu_process",
            "fact",
            F.refutes,
            o["id"],
            line,
            f"the process itself held {held:.1f} of {total:.1f} GiB: it filled the GPU on its own",
        )
    launch_died = died_for_memory(hits)
    alive_servers = set() if launch_died else set(facts.server_pids)
    holders = leftover_holders(facts, hits)
    mine = launch_gpus(observations)
    if mine is not None:
        # memory on a GPU the launch was not given (CUDA_VISIBLE_DEVICES) cannot be what it ran
        # short of: a neighbour's, whatever it is
        holders = {
            p: mib
            for p, mib in holders.items()
            if facts.gpu_pid_index.get(p) is None or facts.gpu_pid_index[p] in mine
        }
    # memory held by someone else only matters if something ran short of it (or of the port)
    short = any(
        m.label in MEMORY_LABELS | {"port_in_use"}
        and m.strength in ("fatal", "strong")
        and not m.signature.startswith(PHASE_PREFIX)  # a phase says when, not that it ran short
        for _, m in hits
    )
    scale = 1.0 if short else THRESHOLDS.oom.unneeded_holder_scale
    if not short:
        # another user's or another launch's live job holding its own GPU memory is a co-tenant
        # on a shared box: with nothing short of memory or the port, it is nobody's root cause
        holders = {p: m for p, m in holders.items() if p not in facts.co_tenant_pids}
    # a second instance of the launch's own command, then an earlier launch's leftovers, hold
    # what the launch ran short of; with either present, other users' running jobs are
    # bystanders on a shared box, not the holders to name
    twins = family(facts, duplicate_mains(observations, facts))
    if any(p in twins or p in facts.leftover_pids for p in holders):
        holders = {
            p: m
            for p, m in holders.items()
            if not facts.co_tenant_pids.get(p, "").startswith("another user") or p in twins
        }
    holders = dict(sorted(holders.items(), key=lambda kv: (kv[0] not in twins, -kv[1])))
    lack = shortfall_mib(hits)
    too_small = {p: mib for p, mib in holders.items() if lack is not None and mib < lack}
    if too_small and len(too_small) == len(holders) and facts.gpu_pid_obs:
        # freeing what they hold would not have made the launch fit: not what it ran short of
        pid, mib = next(iter(too_small.items()))
        add(
            "stale_gpu_process",
            "fact",
            F.refutes,
            facts.gpu_pid_obs,
            facts.gpu_pid_lines.get(pid, ""),
            f"pid {pid} holds {mib:.0f} MiB, less than the {lack:.0f} MiB the launch lacked: "
            "freeing it would not have made it fit",
        )
        holders = {}
    if holders:
        soft = 0  # live co-tenants and unseen pids lean once between them, never add up to proof
        for pid, mib in holders.items():
            # a live co-tenant (another user's running job, another launch serving) holds its
            # memory by design: it is why this launch had less, not a stale process; the
            # memory failure stays the label and the next step sizes the launch beside it
            live = pid in facts.co_tenant_pids and pid not in twins
            # a pid no process list here shows (ps unread, another container or namespace) is
            # unknown: it may be a live neighbour; "not a running server" would be a guess
            unseen = pid not in facts._ps_recs
            if live or unseen:
                soft += 1
                if soft > 1:
                    continue
            add(
                "stale_gpu_process",
                "fact",
                (F.leans if live or unseen else F.proves) * scale,
                facts.gpu_pid_obs,
                facts.gpu_pid_lines.get(pid, ""),
                f"pid {pid} holds {mib:.0f} MiB of GPU memory: another instance of the launch's "
                "own command"
                if pid in twins
                else f"pid {pid} holds {mib:.0f} MiB of GPU memory; no process list here says "
                "what it is (another container or namespace)"
                if unseen
                else f"pid {pid} holds {mib:.0f} MiB of GPU memory and is not a running server",
            )
            if pid in facts.procs and not live:
                add(
                    "stale_gpu_process",
                    "fact",
                    F.leans,
                    facts.ps_obs,
                    facts.procs[pid],
                    f"pid {pid} is alive: {facts.procs[pid][:80]}",
                )
    elif (
        facts.gpu_clean is False
        and launch_gone(facts, hits)
        and not facts.gpu_pids
        and (others := [p for p in facts.other_launch_pids if p in facts.procs])
    ):
        # no pid named, and another launch runs on this box (another user's server, set aside
        # as not this one): the memory in use is that co-tenant's by design, not a leftover
        _held_not_leftover(
            facts,
            add,
            f"the GPU memory in use belongs to another live launch on this box (pid {others[0]}), "
            "not to a leftover of this one",
        )
    elif (
        facts.gpu_clean is False
        and launch_gone(facts, hits)
        and not facts.gpu_pids  # nvidia-smi named nobody: the holder is unseen (another container?)
        and _unexplained_mib(facts) >= 1024
        and _own_gpus_used(facts, observations)
        and own is None  # the launch filled its GPU itself: others' memory is beside the point
        and (lack is None or _unexplained_mib(facts) >= lack)
    ):
        busiest = max(facts.gpus, key=lambda g: g.used_mib or 0)
        add(
            "stale_gpu_process",
            "fact",
            # no pid to name: the holder may be outside this container, or still exiting;
            # a second nvidia-smi read (check gpu_recheck) decides
            F.supports * scale,
            facts.gpu_obs,
            busiest.line,
            "GPU memory is in use although no server process runs",
        )
    elif (
        lack is not None
        and facts.gpu_clean is False
        and not facts.gpu_pids
        and facts.gpus
        and _unexplained_mib(facts) < lack
    ):
        busiest = max(facts.gpus, key=lambda g: g.used_mib or 0)
        add(
            "stale_gpu_process",
            "fact",
            F.refutes,
            facts.gpu_obs,
            busiest.line,
            f"the GPU memory in use ({_unexplained_mib(facts):.0f} MiB) is less than the "
            f"{lack:.0f} MiB the launch lacked: freeing it would not have made it fit",
        )
    elif facts.gpu_clean:
        g = facts.gpus[0]
        add(
            "stale_gpu_process",
            "fact",
            F.refutes_strongly,
            facts.gpu_obs,
            g.line,
            "nvidia-smi shows the GPUs free: no process holds their memory",
        )
    elif (
        facts.gpu_clean is False
        and facts.server_alive
        and not launch_gone(facts, hits)
        and not duplicate_instances(facts, observations)
    ):
        pids = ", ".join(str(p) for p in facts.server_pids[:3])
        _held_not_leftover(
            facts,
            add,
            f"the GPU memory is held by the running server itself (pid {pids}), not a leftover",
        )
    # torch names other holders in its OOM message; believe it only if that pid still holds memory
    twins = duplicate_instances(facts, observations)
    for o in latest_text_observations(observations):
        for ln in text_lines(o):
            m = OTHER_PROC_MEM.search(ln)
            if not m:
                continue
            pid = int(m.group(1))
            gib = float(m.group(2)) / (1024 if m.group(3) == "MiB" else 1)
            duplicate = pid in twins
            # the OOM line names the process that failed (pid=M, "[pid M]") and another, N, that
            # holds memory: N is someone else, whatever ps calls it, unless another user's job
            failed = {int(x) for x in FAILED_PID.findall(ln)}
            other = (
                bool(failed)
                and pid not in failed
                and pid in facts.procs
                and not facts.co_tenant_pids.get(pid, "").startswith("another user")
                and gib >= THRESHOLDS.oom.duplicate_gib
            )
            if (
                pid in holders
                or other
                or (
                    pid in facts.procs
                    and (pid not in alive_servers or duplicate)
                    and not facts.gpu_clean
                )
            ):
                add(
                    "stale_gpu_process",
                    "fact",
                    F.supports_clearly,
                    o["id"],
                    ln,
                    f"the OOM names pid {pid}, another instance of this launch's command "
                    f"holding {gib:.1f} GiB"
                    if duplicate
                    else f"the OOM names pid {pid}, which still holds GPU memory",
                )
                if duplicate and facts.ps_obs and pid in facts.procs:
                    add(
                        "stale_gpu_process",
                        "fact",
                        F.supports_clearly,
                        facts.ps_obs,
                        facts.procs[pid],
                        f"pid {pid} is alive: a second instance of the launch, started earlier",
                    )


def _own_gpus_used(facts: Facts, observations: list[Observation]) -> bool:
    """Memory sits unused on a GPU the launch was given (all GPUs, when its settings do not say
    which): memory on a GPU it never used is a neighbour's, and memory on a GPU at work (its
    utilization up) is someone's live job, not what a dead launch left behind."""
    mine = launch_gpus(observations)
    idle = THRESHOLDS.hang.idle_pct
    return any(
        (g.used_mib or 0) >= max(1024.0, 0.02 * (g.total_mib or 0))
        and (g.util_pct is None or g.util_pct < idle)
        for g in facts.gpus
        if mine is None or g.index in mine
    )
