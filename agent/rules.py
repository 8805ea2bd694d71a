"""Host-fact rules: who holds the GPUs, is the server alive, does the log advance, what the
kernel and the disks say. Each rule adds signed findings tied to one verbatim line; none of them
knows any particular incident.
"""

from __future__ import annotations

import re

from agent import proof
from agent.evidence import LOG_TOOLS, last_launch, latest_text_observations, text_lines
from agent.facts import Facts
from agent.signatures import Match
from agent.state import Observation
from agent.thresholds import THRESHOLDS
from tools import engines

#: signature weights and the cap on repeated strong lines: agent/knowledge/thresholds.yaml
WEIGHT = THRESHOLDS.signature_weight.model_dump()
STRONG_CAP = THRESHOLDS.strong_cap  # repeated warnings must not outweigh one fatal line
F = THRESHOLDS.fact
PHASE_PREFIX = "phase-"  # knowledge/signatures: lines that tell which start-up phase ran
OOM_LABELS = {"gpu_oom_weights", "cuda_oom_runtime"}
TORCH_HELD = re.compile(r"([\d.]+) ([GM]iB) is allocated by PyTorch")
ALLOC = re.compile(r"Tried to allocate ([\d.]+) ([GM]iB).*?total capac\w* of ([\d.]+) ([GM]iB)")
#: Signatures that name "Process N" in an OOM: N is often the server itself, so they do not
#: by themselves make other holders suspects.
OOM_NAMES_A_PID = {"cuda-oom-other-process-holds-memory"}
#: Worker processes of a multi-process server (what outlives a crashed or removed launch).
WORKER = engines.worker_pattern()  # tools/engines.yaml common.worker_words
OTHER_PROC_MEM = re.compile(r"Process (\d+) has ([\d.]+) ([GM]iB) memory in use")
EXCEPTION_LINE = re.compile(r"\b[A-Z]\w*(?:Error|Exception): ")
#: nvidia-smi failures that look like the hardware itself (not a driver/library mismatch)
HW_ERROR = re.compile(
    r"(?i)unknown error|ERR!|fallen off|GPU is lost|not responding|Unable to determine the device handle"
)
MEMORY_LABELS = {"gpu_oom_weights", "cuda_oom_runtime", "kv_cache_no_room", "stale_gpu_process"}
#: Phase labels that place an OOM (weights loading, after weights, KV-cache sizing).
MEMORY_PHASES = {"gpu_oom_weights", "cuda_oom_runtime", "kv_cache_no_room"}


def died_for_memory(hits: list[tuple[Observation, Match]]) -> bool:
    """The launch died of a GPU-memory failure (an OOM, no room for the KV cache, too little free
    memory at start): then other holders of GPU memory are suspects, even server-like ones."""
    return any(m.strength == "fatal" and m.label in MEMORY_LABELS for _, m in hits)


def leftover_holders(facts: Facts, hits: list[tuple[Observation, Match]]) -> dict[int, float]:
    """GPU pids holding >= 1 GiB that are not the running server. After a memory failure, even
    server-like processes (orphaned workers of an earlier launch) count: the launch is dead."""
    # "less free memory than desired at startup", "memory unbalanced", "devices busy": the launch
    # saw the memory taken before it allocated anything, so any holder is someone else
    busy = any(
        m.label == "stale_gpu_process"
        and m.strength in ("fatal", "strong")
        and m.signature not in OOM_NAMES_A_PID
        for _, m in hits
    )
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


def stale_gpu_possible(facts: Facts, hits: list[tuple[Observation, Match]]) -> bool:
    """The guardrail's condition: another pid holds GPU memory now (or memory is held while no
    server runs, or after the launch died of a memory failure)."""
    if leftover_holders(facts, hits):
        return True
    return facts.gpu_clean is False and launch_gone(facts, hits)


def launch_gone(facts: Facts, hits: list[tuple[Observation, Match]]) -> bool:
    """No server of this launch is up to account for the GPU memory in use: none runs, or the
    launch died of a memory failure and only worker-like survivors remain."""
    if facts.server_alive is False:
        return True
    if not died_for_memory(hits):
        return False
    return not any(not WORKER.search(facts.procs.get(p, "")) for p in facts.server_pids)


def _unexplained_mib(facts: Facts) -> float:
    """GPU memory in use that no listed process (desktop graphics included) accounts for."""
    used = max((g.used_mib or 0.0) for g in facts.gpus) if facts.gpus else 0.0
    return used - facts.graphics_mib


def search_rules(observations: list[Observation], hits, add) -> None:  # type: ignore[no-untyped-def]
    """A whole-log search for CUDA OOM that finds nothing refutes a GPU OOM (absent a hit elsewhere)."""
    oom_hit = any(m.label in OOM_LABELS and m.strength == "fatal" for _, m in hits)
    for o in observations:
        if o["tool"] != "log_search" or not o["ok"] or oom_hit:
            continue
        if "memory" not in str(o["args"].get("pattern", "")).lower():
            continue
        if o["data"].get("whole_since_launch") is False:
            continue  # part of the log since the launch was not read: absence refutes nothing
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
    before = [p for p in phases if p.line_no < m.line_no]
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


def stale_rules(facts: Facts, observations: list[Observation], hits, add) -> None:  # type: ignore[no-untyped-def]
    launch_died = died_for_memory(hits)
    alive_servers = set() if launch_died else set(facts.server_pids)
    holders = leftover_holders(facts, hits)
    # memory held by someone else only matters if something ran short of it (or of the port)
    short = any(
        m.label in MEMORY_LABELS | {"port_in_use"} and m.strength in ("fatal", "strong")
        for _, m in hits
    )
    scale = 1.0 if short else THRESHOLDS.oom.unneeded_holder_scale
    if holders:
        for pid, mib in holders.items():
            add(
                "stale_gpu_process",
                "fact",
                F.proves * scale,
                facts.gpu_pid_obs,
                facts.gpu_pid_lines.get(pid, ""),
                f"pid {pid} holds {mib:.0f} MiB of GPU memory and is not a running server",
            )
            if pid in facts.procs:
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
        and not facts.gpu_pids  # nvidia-smi named nobody: the holder is unseen (another container?)
        and _unexplained_mib(facts) >= 1024
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
    elif facts.gpu_clean is False and facts.server_alive and not launch_gone(facts, hits):
        busiest = max(facts.gpus, key=lambda g: g.used_mib or 0)
        pids = ", ".join(str(p) for p in facts.server_pids[:3])
        add(
            "stale_gpu_process",
            "fact",
            F.refutes,
            facts.gpu_obs,
            busiest.line,
            f"the GPU memory is held by the running server itself (pid {pids}), not a leftover",
        )
    # torch names other holders in its OOM message; believe it only if that pid still holds memory
    for o in latest_text_observations(observations):
        for ln in text_lines(o):
            m = OTHER_PROC_MEM.search(ln)
            if not m:
                continue
            pid = int(m.group(1))
            if pid in holders or (
                pid in facts.procs and pid not in alive_servers and not facts.gpu_clean
            ):
                add(
                    "stale_gpu_process",
                    "fact",
                    F.supports_clearly,
                    o["id"],
                    ln,
                    f"the OOM names pid {pid}, which still holds GPU memory",
                )


def liveness_rules(facts: Facts, observations: list[Observation], hits, add) -> None:  # type: ignore[no-untyped-def]
    fatal = [(o, m) for o, m in hits if m.strength == "fatal" and m.label]
    progress = [(o, m) for o, m in hits if m.strength == "progress"]
    ready = [(o, m) for o, m in hits if m.strength == "ready"]
    if ready and facts.server_alive:
        o, m = ready[-1]
        add(
            "still_starting",
            "fact",
            F.refutes_outright,
            o["id"],
            m.line,
            "the server reported ready: it is not starting any more",
        )
    if facts.server_alive is False:
        add(
            "still_starting",
            "fact",
            F.refutes_strongly,
            facts.ps_obs,
            facts.ps_header or "PID",
            "no inference-server process is running: a dead process is not still loading",
        )
    elif facts.server_alive:
        pid = facts.server_pids[0]
        growing = [p for p, g in facts.log_growth.items() if g]
        stalled = [p for p, g in facts.log_growth.items() if not g]
        if growing and not fatal:
            obs_id = facts.log_growth_obs[growing[0]]
            line = next((m.line for o, m in reversed(progress) if o["id"] == obs_id), "")
            if not line:
                o = next(o for o in observations if o["id"] == obs_id)
                line = next((ln for ln in reversed(text_lines(o)) if ln.strip()), "")
            add(
                "still_starting",
                "fact",
                F.proves,
                obs_id,
                line,
                "the server process is alive and its log advanced between two reads",
            )
            shown = [m.line for o, m in progress if o["id"] == obs_id and m.line != line]
            for pline in list(dict.fromkeys(reversed(shown)))[:2]:
                add("still_starting", "progress", F.hints, obs_id, pline, "still loading/compiling")
            add(
                "still_starting",
                "fact",
                F.leans,
                facts.ps_obs,
                facts.procs.get(pid, ""),
                f"server pid {pid} is alive",
            )
        killed_sig = any(m.label == "killed_externally" for _, m in hits)
        if not any(m.label == "host_oom_killed" for _, m in hits) and not facts.ranks_gone:
            add(
                "host_oom_killed",
                "fact",
                F.refutes_firmly,
                facts.ps_obs,
                facts.procs.get(pid, ""),
                f"server pid {pid} is alive: the OOM killer did not end it",
            )
        if not fatal and not killed_sig and not facts.ranks_gone:
            add(
                "killed_externally",
                "fact",
                F.refutes_firmly,
                facts.ps_obs,
                facts.procs.get(pid, ""),
                f"server pid {pid} is alive: nothing killed it",
            )
        if stalled and not growing and not facts.building_pids:
            obs_id = facts.log_growth_obs[stalled[0]]
            o = next(o for o in observations if o["id"] == obs_id)
            line = next((ln for ln in reversed(text_lines(o)) if ln.strip()), "")
            # alive, silent, and an error on record: hung on that error, not loading
            blocked = any(
                m.strength in ("fatal", "strong")
                and m.label
                and not m.signature.startswith(PHASE_PREFIX)
                for _, m in hits
            )
            add(
                "still_starting",
                "fact",
                F.refutes if blocked else F.weakens,
                obs_id,
                line,
                "the server is alive but its log did not advance between two reads (hung?)",
            )
    own = [(o, m) for o, m in fatal if not proof.peer_lost(m.line)]
    if fatal:
        o, m = fatal[-1]
        add(
            "still_starting", "fact", F.refutes, o["id"], m.line, "a fatal error ended the start-up"
        )
    if own:
        o, m = own[-1]
        add(
            "killed_externally",
            "fact",
            F.refutes,
            o["id"],
            m.line,
            "the process printed its own fatal error",
        )
    elif fatal and facts.server_alive is False:
        # the only error says a peer went away: what ended the peer is the cause
        o, m = fatal[-1]
        add(
            "killed_externally",
            "fact",
            F.supports_clearly,
            o["id"],
            m.line,
            "the only error is a survivor's: its peer went away without an error of its own",
        )
        add(
            m.label,
            "fact",
            F.weakens,
            o["id"],
            m.line,
            "this error says a peer vanished: the consequence, not the cause",
        )
    elif facts.server_alive is False:
        logs = [o for o in latest_text_observations(observations) if o["tool"] in LOG_TOOLS]
        if logs:
            o = logs[-1]
            text = text_lines(o)
            last = next((ln for ln in reversed(text) if ln.strip()), "")
            # an error of its own is a line fatal by its shape since the launch (a benign
            # "Ignore import error ..." warning is not one; a signal line from outside is not one)
            since = text[last_launch(text) :]
            own_error = any(
                kind != "exit_signal"
                and not proof.external_end(since[i])
                and not proof.peer_lost(since[i])
                for i, kind in proof.fatal_lines(since)
            )
            if not own_error:  # an error of its own is weighed by the structure rules
                add(
                    "killed_externally",
                    "fact",
                    F.supports_clearly,
                    o["id"],
                    last,
                    "the server is gone and its log ends without an error of its own",
                )


PORT_IN_LINE = re.compile(r"(?<![\d.])(\d{2,5})(?!\d)")


def _port_owner_rule(facts: Facts, hits, add) -> None:  # type: ignore[no-untyped-def]
    """A bind error names a port; the ports tool shows who holds it now: that line proves it."""
    for _, m in hits:
        if m.label != "port_in_use":
            continue
        for port in {int(p) for p in PORT_IN_LINE.findall(m.line)}:
            if port in facts.listeners and facts.ports_obs:
                add(
                    "port_in_use",
                    "fact",
                    F.supports,
                    facts.ports_obs,
                    facts.listeners[port],
                    f"port {port} is held right now by this listener",
                )
                return


K8S_REASON = re.compile(r"^\s*Reason:\s+(\w+)")


def _k8s_rules(observations: list[Observation], add) -> None:  # type: ignore[no-untyped-def]
    """A pod's last state names how its container ended: OOMKilled is the kernel, Error/137 is
    a signal from someone else (a probe, an eviction, a person)."""
    for o in observations:
        if o["tool"] != "host_facts" or not o["ok"]:
            continue
        reasons = [(ln, m.group(1)) for ln in o["lines"] if (m := K8S_REASON.match(ln))]
        if reasons and not any(r == "OOMKilled" for _, r in reasons):
            add(
                "host_oom_killed",
                "fact",
                F.refutes_firmly,
                o["id"],
                reasons[0][0],
                "Kubernetes says the container ended with this reason, not OOMKilled",
            )
            if any("137" in ln for ln in o["lines"] if "Exit Code" in ln):
                add(
                    "killed_externally",
                    "fact",
                    F.supports_clearly,
                    o["id"],
                    reasons[0][0],
                    "exit 137 (SIGKILL) without OOMKilled: killed from outside (a probe, an eviction)",
                )


def host_rules(facts: Facts, hits, add, observations: list[Observation] | None = None) -> None:  # type: ignore[no-untyped-def]
    labels_hit = {m.label for _, m in hits if m.label and m.strength in ("fatal", "strong")}
    _port_owner_rule(facts, hits, add)
    oom_fatal = any(m.label == "host_oom_killed" and m.strength == "fatal" for _, m in hits)
    if observations and not oom_fatal:
        _k8s_rules(observations, add)
    if facts.dmesg_available and facts.dmesg_obs:
        first = facts.dmesg_summary or (facts.dmesg_lines[-1] if facts.dmesg_lines else "")
        # "Killed" in a log is ambiguous; only the kernel's own line (or a fatal one) names the OOM killer
        oom_proven = any(
            m.label == "host_oom_killed" and (m.strength == "fatal" or o["tool"] == "dmesg")
            for o, m in hits
        )
        if not oom_proven and first:
            add(
                "host_oom_killed",
                "fact",
                F.refutes_firmly,  # the kernel log is the authority on OOM kills
                facts.dmesg_obs,
                first,
                "the kernel log shows no OOM-killer line",
            )
        hw_like = facts.gpu_error is not None and HW_ERROR.search(facts.gpu_error)
        if "gpu_hardware_fault" not in labels_hit and first and not hw_like:
            add(
                "gpu_hardware_fault",
                "fact",
                F.refutes,
                facts.dmesg_obs,
                first,
                "no Xid or ECC line in the kernel log and nvidia-smi answers",
            )
    if "host_oom_killed" in labels_hit:
        for o, m in hits:
            if m.label == "host_oom_killed" and o["tool"] == "dmesg":
                add(
                    "killed_externally",
                    "fact",
                    F.weakens_clearly,
                    o["id"],
                    m.line,
                    "the kernel's OOM killer ended it: not an outside supervisor",
                )
                break
    if facts.gpu_error and facts.gpu_obs:
        err = facts.gpu_error
        if "communicate with the NVIDIA driver" in err or "driver" in err.lower():
            add(
                "cuda_driver_mismatch",
                "fact",
                F.supports,
                facts.gpu_obs,
                err,
                "nvidia-smi cannot reach the driver",
            )
    if facts.shm_mib is not None and facts.disk_obs:
        if (
            facts.shm_mib < THRESHOLDS.shm.small_mib
            or (facts.shm_use_pct or 0) >= THRESHOLDS.shm.full_pct
        ):
            add(
                "shm_too_small",
                "fact",
                F.supports,
                facts.disk_obs,
                facts.shm_line,
                f"/dev/shm is {facts.shm_mib:.0f} MiB ({facts.shm_use_pct or 0:.0f}% used)",
            )
        elif facts.shm_mib >= THRESHOLDS.shm.roomy_mib and "shm_too_small" not in labels_hit:
            add(
                "shm_too_small",
                "fact",
                F.refutes,
                facts.disk_obs,
                facts.shm_line,
                f"/dev/shm has {facts.shm_mib / 1024:.0f} GiB",
            )
    for mount, pct, line in facts.full_mounts[:2]:
        add(
            "disk_full",
            "fact",
            F.supports_clearly,
            facts.disk_obs,
            line,
            f"{mount} is {pct:.0f}% full",
        )
    if facts.disk_available and not facts.full_mounts and "disk_full" not in labels_hit:
        add(
            "disk_full",
            "fact",
            F.weakens_clearly,
            facts.disk_obs,
            facts.shm_line or "Filesystem",
            "no filesystem is near full",
        )
