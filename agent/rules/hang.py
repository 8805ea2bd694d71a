"""Hangs: a live server whose log stopped is either busy (compiling, a slow phase) or stuck.

An engineer tells them apart with three reads: is anything still working (a compiler child, a
log that moves), are the GPUs pinned while nothing is printed (NCCL kernels spin at 100% while
they wait for a peer), and where the Python stacks sit (py-spy). A stall whose stacks wait in a
collective proves a stuck collective; pinned GPUs with a silent log only point at one.
"""

from __future__ import annotations

import re

from agent.evidence import LOG_READS, LOG_TOOLS, last_launch, latest_text_observations, text_lines
from agent.facts import Facts
from agent.rules import proof
from agent.rules.common import F
from agent.rules.own_fatal import own_fatal_since_launch
from agent.state import Observation
from agent.thresholds import THRESHOLDS
from tools.log_window import step_window_s

_H = THRESHOLDS.hang  # agent/knowledge/thresholds.yaml
_F = THRESHOLDS.fact
PINNED_PCT, IDLE_PCT = _H.pinned_pct, _H.idle_pct
BUSY_MIB = _H.busy_mib
#: Weights of the hang findings (see docs/signatures.md for how they meet the thresholds).
STACKS_IN_COLLECTIVE = _H.stacks_in_collective
PINNED_SILENT = _H.pinned_silent
COMPILING = _H.compiling


def silent(facts: Facts) -> bool:
    """The server (or a busy process tied to its log that may be the workload) runs, and its
    log did not advance over the read window."""
    alive = facts.server_alive or (facts.server_alive is None and bool(facts.busy_unknown_pids))
    return bool(alive) and bool(facts.log_growth) and not any(facts.log_growth.values())


def slow_bar(observations: list[Observation], facts: Facts) -> tuple[str, str, float, float] | None:
    """(obs id, bar line, seconds per step, seconds watched) when a live server's log ends on
    a progress bar whose own pace needs a longer window than it was watched for (one and a half
    steps, `step_window_s`): a silent window that short is what a working loader looks like, so
    it refutes nothing."""
    if not facts.server_alive:
        return None
    for o in reversed(observations):
        if o["tool"] not in ("log_tail", "container_logs", "service_logs") or not o["ok"]:
            continue
        if not o["data"].get("watched") or o["args"].get("previous"):
            continue
        if o["data"].get("grew"):
            return None
        bar = o["data"].get("last_progress") or {}
        if bar.get("total") is not None and (bar.get("done") or 0) >= bar["total"]:
            return None  # a finished bar has no next step to wait for
        paces = [float(v) for v in (bar.get("s_per_item"), bar.get("s_per_print")) if v]
        pace, window = max(paces, default=None), float(o["data"].get("window_s") or 0.0)
        if not pace or not window or step_window_s(float(pace)) <= window:
            return None  # watched long enough for the bar to move: its silence counts
        # the bar is the log's last step: its own line, or one of the last few with only the
        # next item's start after it ("Download file: part-4"), never an error
        # a pod's read carries its record after its log: the log's own last lines
        own = o["data"].get("tail") if o["tool"] == "service_logs" else text_lines(o)
        tail = [ln for ln in own or [] if ln.strip() and not ln.startswith("# ")][-3:]
        line = str(bar.get("line") or "")
        at = next((i for i, ln in enumerate(tail) if ln.strip() == line.strip()), None)
        if at is None or any(proof.error_shaped(ln) for ln in tail[at + 1 :]):
            return None
        return o["id"], tail[at], float(pace), window
    return None


def quiet_phase_line(observations: list[Observation]) -> str | None:
    """The log's last real line when it names a phase that may run for minutes without printing
    (torch.compile, graph capture, a JIT build), skipping the wait notices printed after it: the
    silence that follows is "compiling or stuck", not yet proof of a stall."""
    return _last_real_line(observations, proof.quiet_phase)


def collective_phase_line(observations: list[Observation]) -> str | None:
    """The log's last real line when it says the launch is in distributed set-up or a
    collective: a still, silent launch stopped there waits on its peers."""
    return _last_real_line(observations, proof.collective_phase)


def _last_real_line(observations: list[Observation], test) -> str | None:  # type: ignore[no-untyped-def]
    # the newest read of a file's tail, or of a container's or unit's own log (the log of a
    # launch in a pod), never a search of one nor an earlier instance's lines
    current = [o for o in observations if not o["args"].get("previous")]
    newest = [
        o
        for o in latest_text_observations(current)
        if o["tool"] in LOG_TOOLS and not o["args"].get("pattern")
    ]
    for o in newest:
        for ln in reversed(o["lines"]):
            if (
                not ln.strip()
                or ln.startswith("# ")
                or proof.wait_message(ln)
                or proof.frontend_only(ln)  # probes answered meanwhile say nothing of the phase
                or proof.phase_warning(ln)  # a warning inside the phase names no phase
            ):
                continue
            if test(ln):
                return ln
            break
    return None


def gpu_memory_moved(observations: list[Observation]) -> tuple[str, str, float, float] | None:
    """(observation, the GPU row that moved, MiB, seconds) when a watched nvidia-smi read saw
    a GPU's used memory change over its window."""
    from tools.gpu_status import MOVED_MIB

    for o in reversed(observations):
        if o["tool"] == "launch_progress" and o["ok"] and o["data"].get("moved") == "gpu":
            d = o["data"]
            line = str(d.get("moved_line") or "")
            if line in o["lines"]:
                return o["id"], line, float(d["memory_moved_mib"]), float(d.get("waited_s") or 0)
        if o["tool"] == "gpu_status" and o["ok"] and o["data"].get("watched"):
            d = o["data"]
            line = str(d.get("moved_line") or "")
            if (d.get("memory_moved_mib") or 0) >= MOVED_MIB and line in o["lines"]:
                return o["id"], line, float(d["memory_moved_mib"]), float(d.get("waited_s") or 0)
            return _moved_since_first_read(o, observations)
    return None


def _moved_since_first_read(
    watched: Observation, observations: list[Observation]
) -> tuple[str, str, float, float] | None:
    """A GPU whose used memory at the watched read differs from the first sweep's read of it:
    the memory moved between the two reads (a loader that allocated meanwhile), even if not
    within the watch's own window."""
    from tools.gpu_status import MOVED_MIB

    first = next(
        (o for o in observations if o["tool"] == "gpu_status" and o["ok"] and o is not watched),
        None,
    )
    if first is None or observations.index(first) > observations.index(watched):
        return None
    before = {g.get("index"): g for g in first["data"].get("gpus") or []}
    for g in watched["data"].get("gpus") or []:
        b = before.get(g.get("index"))
        if b is None or g.get("memory_used_mib") is None or b.get("memory_used_mib") is None:
            continue
        moved = abs(float(g["memory_used_mib"]) - float(b["memory_used_mib"]))
        line = str(g.get("line") or "")
        if moved >= MOVED_MIB and line in watched["lines"]:
            return watched["id"], line, moved, float(watched["data"].get("waited_s") or 0)
    return None


def own_gpus(facts: Facts, observations: list[Observation]) -> set[int] | None:
    """The GPUs that are the launch's: those its settings give it (CUDA_VISIBLE_DEVICES), else
    those its own processes hold memory on (not a co-tenant's); None when unknown. On a shared
    box another job's GPU at 98% says nothing about this launch's work."""
    from agent.launch import launch_gpus

    given = launch_gpus(observations)
    if given is not None:
        return given
    held = {
        facts.gpu_pid_index[p]
        for p in facts.server_pids
        if p not in facts.co_tenant_pids and facts.gpu_pid_index.get(p) is not None
    }
    return held or None


def quiet_phase_at_work(
    facts: Facts, observations: list[Observation]
) -> tuple[str, str, str] | None:
    """(observation, GPU row, why) when a single-rank launch sits in a phase that runs quietly
    (warm-up, compile, capture) with its GPU computing flat out: nothing to wait for in a
    collective, so the pinned GPU is the work itself."""
    phase = quiet_phase_line(observations)
    mine = own_gpus(facts, observations)
    working = [
        g
        for g in facts.gpus
        if (g.used_mib or 0) >= _H.context_mib
        and (g.util_pct or 0) >= _H.working_pct
        and (mine is None or g.index in mine)
    ]
    if phase is None or not working or not facts.gpu_obs or multi_rank(facts, observations):
        return None
    g = max(working, key=lambda x: x.util_pct or 0)
    return (
        facts.gpu_obs,
        g.line,
        f"the launch is in a phase that runs quietly ({phase.strip()[:80]!r}) and its only "
        f"GPU computes at {g.util_pct:.0f}%: working, not hung (one rank has no peer to wait for)",
    )


def busy_pid(facts: Facts) -> int | None:
    """A process of the launch busy on a CPU (ps's lifetime %CPU at working level), or None."""
    return next(
        (
            p
            for p in facts.server_pids
            if float(facts._ps_recs.get(p, {}).get("cpu_pct") or 0.0) >= _H.working_pct
        ),
        None,
    )


def slowed_by_setting(facts: Facts, observations: list[Observation]) -> tuple[str, str, int] | None:
    """(observation, warning line, busy pid) when the launch's log, from its last launch on,
    carries the engine's warning that a setting slows every step, and a process of the live
    launch is busy on a CPU (ps's lifetime %CPU): slow, at work. Not when the log stops in a
    collective or the launch's GPUs spin: a tracing switch is what one turns on to debug a hang,
    and a rank spinning in an all-reduce is busy on its CPU too."""
    if not facts.server_alive or collective_phase_line(observations) is not None:
        return None
    if pinned_gpus(facts, observations)[0]:
        return None
    busy = busy_pid(facts)
    if busy is None:
        return None
    for o in latest_text_observations(observations):
        if o["tool"] not in LOG_TOOLS or o["args"].get("pattern"):
            continue
        lines = text_lines(o)
        line = next((ln for ln in lines[last_launch(lines) :] if proof.slowdown(ln)), None)
        if line is not None:
            return o["id"], line, busy
    return None


def compiler_child(facts: Facts) -> tuple[int, str] | None:
    """A compiler the server runs (the processes tool marks it `building`)."""
    return next(iter(facts.building_pids.items()), None)


#: A launch spread over ranks, said by its log: only such a launch can wait in a collective.
MULTI_RANK = re.compile(
    r"(?i)\bNCCL\b|tp_size[=:' ]+[2-9]|tensor_parallel_size[=:' ]+[2-9]|world_size[=:' ]+[2-9]"
    r"|--tp(?:-size)?[ =][2-9]|\bTP[1-9]\b|\[rank[1-9]\]|nRanks [2-9]|pipeline_parallel_size[=:' ]+[2-9]"
)


def multi_rank(facts: Facts, observations: list[Observation]) -> bool:
    """Several ranks: two GPUs in use, two ranks named, or the log says so (NCCL, tp_size=2).
    A launch that states its own parallelism (tensor_parallel_size=1 in its args) is believed
    first: another user's busy GPU beside a one-GPU server is no peer of it."""
    size = launch_size(observations)
    if size is not None:
        return size > 1  # the launch says so itself
    if len([g for g in facts.gpus if (g.used_mib or 0) >= BUSY_MIB]) >= 2:
        return True
    if len(set(facts.log_ranks)) >= 2 or len(facts.server_worker_pids) >= 2:
        return True
    return any(
        MULTI_RANK.search(ln)
        for o in observations
        if (o["tool"] in LOG_READS or o["tool"] == "processes") and o["ok"]
        for ln in o["lines"]
    )


def spinning_ranks(facts: Facts) -> list[str]:
    """ps lines of the launch's processes running flat out (state R) while the log is silent:
    NCCL's proxy threads busy-poll a peer that never answers."""
    pids = [*facts.server_pids, *facts.busy_unknown_pids]
    out = []
    for pid in pids:
        rec = facts._ps_recs.get(pid, {})
        if str(rec.get("stat") or "").startswith("R") and pid not in facts.building_pids:
            out.append(facts.procs.get(pid, ""))
    return [ln for ln in out if ln]


def pinned_gpus(facts: Facts, observations: list[Observation] | None = None) -> tuple[list, list]:
    """(pinned, idle) GPUs among those holding a CUDA context: a collective waits with its GPU
    pinned while a peer that never arrived (or already died) sits idle. A context is a few
    hundred MiB: an NCCL test or a collective at init spins before any weights are loaded.
    Given the observations, only the launch's own GPUs count (own_gpus): a neighbour's
    training job pinned at 99% is no rank of this launch."""
    mine = own_gpus(facts, observations) if observations is not None else None
    if mine is None and observations is not None and busy_neighbour(facts) is not None:
        # whose GPU is pinned is unknown (nvidia-smi names no pids, the launch names no GPUs)
        # while another user's job runs flat out on this box: its spin is no proof of ours
        return [], []
    busy = [
        g
        for g in facts.gpus
        if (g.used_mib or 0) >= _H.context_mib
        and g.util_pct is not None
        and (mine is None or g.index in mine)
    ]
    pinned = [g for g in busy if (g.util_pct or 0) >= PINNED_PCT]
    idle = [g for g in busy if (g.util_pct or 0) <= IDLE_PCT]
    if mine is None and observations is not None and idle:
        size = launch_size(observations)
        if size is not None and len(pinned) >= size:
            # as many GPUs at work as the launch has ranks: every rank computes, and an idle
            # GPU beside them is another job's (a neighbour's server on the same box)
            idle = []
    return pinned, idle


def busy_neighbour(facts: Facts) -> int | None:
    """A pid of another user's job running flat out on this box (not the launch's, not a zombie):
    GPUs at work beside it may be its, not the launch's."""
    if not facts.launch_user:
        return None
    ours = set(facts.server_pids)
    for pid, r in facts._ps_recs.items():
        user = str(r.get("user") or "")
        cpu = r.get("cpu_pct")
        if (
            pid not in ours
            and user
            and user != facts.launch_user
            and not r.get("zombie")
            and isinstance(cpu, int | float)
            and cpu >= _H.neighbour_cpu_pct
        ):
            return pid
    return None


def launch_size(observations: list[Observation]) -> int | None:
    """How many ranks the launch runs (tensor x pipeline parallel, as its own log or command
    line states them), or None when it does not say."""
    from agent.launch import first_value

    text = "\n".join(
        ln
        for o in observations
        if (o["tool"] in LOG_READS or o["tool"] == "processes") and o["ok"]
        for ln in o["lines"][:400]
    )
    tp = first_value("tensor_parallel", text)
    if tp is None:
        return None
    pp = re.search(r"\bpipeline_parallel_size=(\d+)|--pipeline-parallel-size[= ](\d+)", text)
    return int(tp) * (int(pp.group(1) or pp.group(2)) if pp else 1)


def awaited_elsewhere(observations: list[Observation]) -> tuple[str, str, str, str] | None:
    """(engine obs id, its RPC frame, worker obs id, its idle frame) when the engine waits for
    its workers' replies while a worker of this host, read too, idles waiting for its next
    command: the workers here have answered, so the reply it waits for is owed by a member that
    is not here (another node's stage, or a rank that died). Its stacks then show where the
    launch waits, not that a collective hangs: that member's own state and log decide."""
    stacks = [o for o in observations if o["tool"] == "py_stacks" and o["ok"]]
    engine = next((o for o in stacks if o["data"].get("awaits") == "replies"), None)
    if engine is None:
        return None
    worker = next(
        (
            o
            for o in stacks
            if o["data"].get("awaits") == "work"
            and o["args"].get("pid") != engine["args"].get("pid")
        ),
        None,
    )
    if worker is None:
        return None
    return (
        engine["id"],
        str(engine["data"].get("awaits_frame") or ""),
        worker["id"],
        str(worker["data"].get("awaits_frame") or ""),
    )


def resource_wait(observations: list[Observation]) -> tuple[str, str, float] | None:
    """(obs id, line, seconds) when the launch's log ends on the engine's own notice that it
    is waiting for GPUs its cluster does not have (a pending Ray placement group), with how
    long it has waited; probes and comments after it say nothing of the phase."""
    newest: dict[str, Observation] = {}
    for o in observations:
        if o["tool"] in ("log_tail", "container_logs") and o["ok"] and not o["args"].get("pattern"):
            newest[str(o["args"].get("path") or o["tool"])] = o
    for o in newest.values():
        for ln in reversed(text_lines(o)):
            if not ln.strip() or ln.startswith("# ") or proof.frontend_only(ln):
                continue
            s = proof.resource_wait_s(ln)
            if s is not None:
                return o["id"], ln, s
            break
    return None


def long_resource_wait(
    facts: Facts, observations: list[Observation]
) -> tuple[str, str, float] | None:
    """The resource wait that proves the launch asks for GPUs that do not exist: the launch
    not seen dead, its log ending on the wait, waited past `hang.resource_wait_s`."""
    if facts.server_alive is False:
        return None
    found = resource_wait(observations)
    if found is None or found[2] < _H.resource_wait_s:
        return None
    if gpus_here_cover(facts, found[1]):
        return None  # the GPUs exist on this host: the cluster's view of them is what is wrong
    return found


#: one bundle's GPU count in a placement group's specs: `{'GPU': 1.0}`
_BUNDLE_GPU = re.compile(r"""['"]GPU['"]:\s*(\d+(?:\.\d+)?)""")


def gpus_here_cover(facts: Facts, wait_line: str) -> bool:
    """This host alone has as many GPUs as the pending placement group asks for: the GPUs are
    not missing, the cluster does not register them (a Ray node started without its GPUs, its
    accelerator detection wrong), so no launch argument asks for too many."""
    asked = sum(float(x) for x in _BUNDLE_GPU.findall(wait_line))
    return bool(asked) and len(facts.gpus) >= asked


def _resource_wait_rule(facts: Facts, observations: list[Observation], add) -> None:  # type: ignore[no-untyped-def]
    """A live launch whose log ends on a wait for GPUs, for longer than any node takes to join
    (`hang.resource_wait_s`): the layout asks for more GPUs than the cluster has, and nothing
    brings them (a worker pod never created, a node never started). A shorter wait is start-up
    (a rebooting node may still join) and proves nothing either way."""
    found = long_resource_wait(facts, observations)
    if found is None:
        return
    oid, line, waited = found
    why = (
        f"the engine has waited {waited:.0f} s for GPUs its cluster does not have (a pending "
        "placement group): more than a joining node takes, so they are not coming"
    )
    add("bad_launch_argument", "fact", _F.proves, oid, line, why)
    add("still_starting", "fact", _F.refutes, oid, line, why)


def _member_died(hits):  # type: ignore[no-untyped-def]
    """The first fatal line of the launch's own that is no NCCL error and no peer's departure
    (a rank's CUDA OOM, a worker's exception), with its observation, or None."""
    return next(
        (
            (o, m)
            for o, m in hits
            if m.strength == "fatal"
            and m.label
            and m.label != "nccl_failure"
            and not m.signature.startswith("phase-")
            and not proof.peer_lost(m.line)
        ),
        None,
    )


def hang_rules(facts: Facts, observations: list[Observation], hits, add) -> None:  # type: ignore[no-untyped-def]
    _resource_wait_rule(facts, observations, add)
    stacks = [o for o in observations if o["tool"] == "py_stacks" and o["ok"]]
    elsewhere = awaited_elsewhere(observations)
    for o in stacks[-1:]:
        d = o["data"]
        frame = d.get("collective_frame") or ""
        if (
            d.get("waiting_in") == "collective"
            and frame
            and facts.ranks_gone
            and facts.server_alive
        ):
            # the survivors wait for the rank that is gone: the wait is the consequence
            add(
                "killed_externally",
                "fact",
                _H.consequence_of_gone_rank,
                o["id"],
                frame,
                f"the live rank waits in a collective for rank {facts.ranks_gone[0]}, which is gone",
            )
        elif d.get("waiting_in") == "collective" and d.get("awaits") == "work":
            pass  # a worker idle in its command loop: nothing of a hang is shown by it
        elif d.get("waiting_in") == "collective" and frame and elsewhere is not None:
            # the engine's RPC waits on a member that is not here; its workers idle: no hang of
            # a collective is shown, only that nothing here is loading or compiling
            eid, eframe, _, wframe = elsewhere
            add(
                "still_starting",
                "fact",
                _H.stacks_not_starting,
                eid,
                eframe,
                f"the engine waits for its workers' replies while they idle ({wframe.strip()}): "
                "the reply is owed by a member that is not on this host",
            )
        elif d.get("waiting_in") == "collective" and frame:
            died = _member_died(hits)
            if died is not None:
                # a member died of its own error (not NCCL's): the others wait for it in the
                # collective, which is the consequence of that death, not a fault of the collective
                add(
                    "nccl_failure",
                    "fact",
                    _F.refutes,
                    died[0]["id"],
                    died[1].line,
                    "the ranks wait in a collective for a member that died of this error of its "
                    "own: the wait is the consequence, not a fault of the collective",
                )
            else:
                add(
                    "nccl_failure",
                    "fact",
                    STACKS_IN_COLLECTIVE,
                    o["id"],
                    frame,
                    "the server's Python stacks wait inside a collective: a stuck "
                    "all_reduce/barrier/init",
                )
            add(
                "still_starting",
                "fact",
                _H.stacks_not_starting,
                o["id"],
                frame,
                "the stacks wait for a peer, not on loading or compiling",
            )
        elif d.get("waiting_in") in ("compile", "load") and (frame := d.get("waiting_frame") or ""):
            add(
                "still_starting",
                "fact",
                _H.stacks_working,
                o["id"],
                frame,
                f"the stacks are {d['waiting_in']}ing: still working",
            )
    _rank_gone(facts, add)
    fatal_end = any(
        m.strength == "fatal" and m.label and not m.signature.startswith("phase-") for _, m in hits
    )
    moved = gpu_memory_moved(observations)
    quiet = bool(facts.log_growth) and not any(facts.log_growth.values())
    if moved is not None and quiet and facts.server_alive is not False and not fatal_end:
        oid, line, mib, secs = moved
        add(
            "still_starting",
            "fact",
            _H.memory_moving,
            oid,
            line,
            f"GPU memory moved by {mib:.0f} MiB in {secs:.0f} s while the log was silent: the "
            "workers are still allocating (loading, quantizing, compiling), not stuck",
        )
        add(
            "nccl_failure",
            "fact",
            -_H.memory_moving,
            oid,
            line,
            "a rank stuck in a collective allocates nothing; these GPUs' memory still moves",
        )
        _last_silent_line(facts, observations, add, "still_starting", "what the log says meanwhile")
        return
    busy = quiet_phase_at_work(facts, observations) if quiet and not fatal_end else None
    if busy is not None and facts.server_alive is not False:
        oid, line, note = busy
        add("still_starting", "fact", COMPILING, oid, line, note)
        phase = quiet_phase_line(observations) or ""
        log = next(
            (o for o in reversed(observations) if o["tool"] == "log_tail" and phase in o["lines"]),
            None,
        )
        if log is not None:
            add("still_starting", "fact", 0.25, log["id"], phase, "the phase it is in")
        return
    slowed = slowed_by_setting(facts, observations) if quiet and not fatal_end else None
    if slowed is not None:
        oid, line, pid = slowed
        add(
            "still_starting",
            "fact",
            COMPILING,
            oid,
            line,
            f"the engine warned that a setting in effect slows every step, and pid {pid} is busy "
            "on a CPU: the quiet log is the slowdown at work, not a hang (remove the setting)",
        )
        add(
            "nccl_failure", "fact", F.weakens, oid, line, "a slowed launch at work, not one waiting"
        )
        return
    if silent(facts) and slow_bar(observations, facts) is not None:
        return  # watched for less than one step of its own bar: no silence established
    if not silent(facts):
        pinned, _ = pinned_gpus(facts, observations)
        if (
            pinned
            and facts.gpu_obs
            and facts.server_alive
            and not facts.log_growth
            and multi_rank(facts, observations)
        ):
            # not yet a stall (the log's growth is unread): a question worth the watch check
            g = pinned[0]
            add(
                "nccl_failure",
                "fact",
                _H.pinned_alive,
                facts.gpu_obs,
                g.line,
                f"GPU {g.index} is pinned at {g.util_pct:.0f}% under a live multi-rank launch: "
                "working, or spinning in a collective; whether the log advances tells",
            )
        return
    if fatal_end:
        return  # the launch printed why it ended: a crash, not a hang

    comp = compiler_child(facts)
    if comp is not None and own_fatal_since_launch(observations) is None:
        # (a busy compiler says "building" only while the launch printed no error of its own:
        # one no signature knows still ends the start-up, whatever the pool is still doing)
        pid, line = comp
        add(
            "still_starting",
            "fact",
            COMPILING,
            facts.ps_obs or "",
            line,
            f"pid {pid} is a compiler the launch is running: it is building kernels, not hung",
        )
        return
    pinned, idle = pinned_gpus(facts, observations)
    if pinned and facts.gpu_obs and facts.ranks_gone and facts.server_alive:
        # a rank is gone: the pinned survivor spins waiting for it, which is the consequence
        g = pinned[0]
        add(
            "killed_externally",
            "fact",
            _H.consequence_of_gone_rank,
            facts.gpu_obs,
            g.line,
            f"GPU {g.index} spins at {g.util_pct:.0f}% with a silent log: the live rank waits in a "
            f"collective for rank {facts.ranks_gone[0]}, which is gone",
        )
        return
    static = gpu_memory_static(observations)
    if (
        not pinned
        and static is not None
        and multi_rank(facts, observations)
        and (
            quiet_phase_line(observations) is None
            and collective_phase_line(observations) is not None
            and not facts.building_pids
            and reading_storage(observations) is None
        )
    ):
        # alive, its log silent over the watched window, its GPU memory still over a watched
        # read, nothing read off storage: ranks waiting on each other (init or a collective),
        # by inference; stacks would prove it (guardrails caps it as inferred)
        oid, line = static
        add(
            "nccl_failure",
            "fact",
            _H.static_silent,
            oid,
            line,
            "the launch is alive, its log silent and its GPU memory still over a watched "
            "read, nothing read off storage: its ranks wait on each other (stacks unread)",
        )
        _last_silent_line(facts, observations, add)
        return
    if pinned and facts.gpu_obs and multi_rank(facts, observations):
        g = pinned[0]
        note = (
            f"GPU {g.index} is pinned at {g.util_pct:.0f}% while a peer sits idle and the log is "
            "silent: one rank waits in a collective for another"
            if idle
            else f"GPU {g.index} is pinned at {g.util_pct:.0f}% while the log is silent: a spin-wait "
            "(an NCCL collective waiting for a peer) rather than progress"
        )
        add(
            "nccl_failure",
            "fact",
            PINNED_SILENT + (0.5 if idle else 0.0),
            facts.gpu_obs,
            g.line,
            note,
        )
        if quiet_phase_line(observations) is None:
            add(
                "still_starting",
                "fact",
                -PINNED_SILENT,
                facts.gpu_obs,
                g.line,
                "a loading or compiling server prints or idles its GPUs; this one spins silently "
                "after a phase that does not run quietly",
            )
        _last_silent_line(facts, observations, add)


def _last_silent_line(  # type: ignore[no-untyped-def]
    facts: Facts,
    observations: list[Observation],
    add,
    label: str = "nccl_failure",
    note: str = "the silent log stops here",
) -> None:
    """Where it stopped: the last line the silent log printed (what an engineer quotes)."""
    for path, grew in facts.log_growth.items():
        o = next((x for x in observations if x["id"] == facts.log_growth_obs.get(path)), None)
        if o is None or grew:
            continue
        last = next(
            (
                ln
                for ln in reversed(o["lines"])
                if len(re.findall(r"[A-Za-z0-9]", ln)) >= 3 and not ln.startswith("# ")
            ),
            "",
        )
        if last:
            add(label, "fact", 0.25, o["id"], last, note)


#: a line about an earlier instance of a launch that restarts: the kubelet's restart of a
#: container, a pod's "Last State", a back-off between restarts
EARLIER_INSTANCE = re.compile(
    r"(?i)will be restarted|^\s*Last State:|restarting failed container|\bBack-off restarting"
)


def earlier_kill_open(facts: Facts, observations: list[Observation]) -> bool:
    """A kill line (a probe's restart, exit 137 in a pod's last state) ended an earlier
    instance of a launch that is alive now. Until this instance is seen at work (its log
    advancing, its GPU memory moving, its processes busy on a CPU: then the kill is what comes
    again, killed_externally) it may be stuck where that one was, and then the kill follows from
    the stall; it is no proof of its own until then."""
    at_work = (
        busy_pid(facts) is not None
        or any(facts.log_growth.values())
        or gpu_memory_moved(observations) is not None
        or killed_at_work(observations) is not None
    )
    return bool(facts.server_alive) and not at_work


def killed_at_work(observations: list[Observation]) -> tuple[str, str] | None:
    """(observation, its last progress line) when an earlier instance's own log (`--previous`)
    shows it at work (loading, compiling, a progress line among its last lines) until a stop
    from outside ended it, with no error of its own: it was not stuck, it was stopped."""
    from agent.rules.passed import END_WINDOW, own_end
    from agent.signatures import scan

    for o in reversed(observations):
        if not (o["ok"] and o["args"].get("previous")) or o["args"].get("pattern"):
            continue
        lines = [ln for ln in text_lines(o) if ln.strip()]
        ends = [i for i, ln in enumerate(lines[-END_WINDOW:]) if proof.external_end(ln)]
        if not ends:
            continue
        # what the instance printed before the stop (the stop's own traceback cut off)
        stop = len(lines) - min(END_WINDOW, len(lines)) + ends[-1]
        head = lines[:stop]
        tb = [i for i, ln in enumerate(head) if proof.traceback_start(ln)]
        if tb and stop - tb[-1] <= END_WINDOW:
            head = head[: tb[-1]]
        if not head or own_end(head) is not None:
            continue
        work = [
            ln
            for ln in head[-END_WINDOW:]
            if proof.quiet_phase(ln) or any(m.strength == "progress" for m in scan([ln]))
        ]
        if work:
            return o["id"], work[-1]
    return None


def earlier_instance_hits(facts: Facts, observations: list[Observation], hits):  # type: ignore[no-untyped-def]
    """The hits, with a restart's kill line (EARLIER_INSTANCE) of a launch alive now and not
    seen at work made weak: a clue, not the end of this launch (every rule reading the hits
    then weighs it so, the stall rules included)."""
    if not earlier_kill_open(facts, observations):
        return hits
    return [
        (o, m.model_copy(update={"strength": "weak"}))
        if m.label == "killed_externally"
        and m.strength in ("fatal", "strong")
        and EARLIER_INSTANCE.search(m.line)
        else (o, m)
        for o, m in hits
    ]


def gpu_memory_static(observations: list[Observation]) -> tuple[str, str] | None:
    """(obs id, a GPU line) when the latest watched nvidia-smi read saw no GPU's memory move."""
    for o in reversed(observations):
        if (
            o["tool"] == "launch_progress"
            and o["ok"]
            and "GPU memory" in o["data"].get("watched", [])
        ):
            if o["data"].get("moved") == "gpu":
                return None
            continue  # its GPU rows are not shown: the watched nvidia-smi read's line is cited
        if o["tool"] == "gpu_status" and o["ok"] and o["data"].get("watched"):
            if gpu_memory_moved([o]) is not None:
                return None
            line = next((ln for ln in o["lines"] if ln.strip() and not ln.startswith("#")), "")
            return o["id"], line
    return None


def reading_storage(observations: list[Observation]) -> tuple[str, str, int] | None:
    """(obs id, read_bytes line, pid) when the latest process_io read saw the process read
    from storage during its window."""
    # the patient watch (launch_progress) reads the same counters, over minutes
    reads = [
        o
        for o in observations
        if o["ok"]
        and (
            o["tool"] == "process_io"
            or (o["tool"] == "launch_progress" and o["data"].get("moved") == "io")
        )
    ]
    if not reads or not reads[-1]["data"].get("reading"):
        return None
    o = reads[-1]
    line = str(o["data"].get("line") or "")
    return (o["id"], line, int(o["data"].get("pid") or 0)) if line in o["lines"] else None


def _rank_gone(facts: Facts, add) -> None:  # type: ignore[no-untyped-def]
    """A TP/PP launch with one rank gone and the others alive: the survivors wait for it in a
    collective; the question is what ended that rank (its own error is weighed elsewhere). The
    engine's core gone under a live front end (facts.core_gone_line) is the same question."""
    if facts.core_gone_line and facts.server_alive and facts.ps_obs:
        # every core worker gone, the front end alive: it accepts requests nothing serves
        fronts = [*facts.server_main_pids, *facts.server_worker_pids]
        line = facts.procs.get(fronts[0], "") if fronts else ""
        if line:
            add(
                "killed_externally",
                "fact",
                _H.rank_gone,
                facts.ps_obs,
                line,
                "the engine's core (its scheduler / engine core) is gone while its front end "
                "still runs: requests are accepted and never served, and /health may still answer",
            )
        return
    if not facts.ranks_gone or not facts.server_alive:
        return
    alive = [r for r in facts.ranks if r.state == "alive"]
    gone = ", ".join(str(r) for r in facts.ranks_gone)
    line = alive[0].line if alive and alive[0].line else ""
    if line and facts.ps_obs:
        add(
            "killed_externally",
            "fact",
            _H.rank_gone,
            facts.ps_obs,
            line,
            f"rank {gone} is gone while rank {alive[0].rank} still runs: one rank was ended and "
            "the others wait for it in a collective",
        )
        return
    mains = [facts.procs.get(p, "") for p in facts.server_main_pids]
    if not alive and mains and mains[0] and facts.ps_obs:
        # every rank gone and no GPU memory held, the entry point still up: it waits for
        # workers that will never report (an MPI session's spawned ranks, a launcher's children)
        add(
            "killed_externally",
            "fact",
            _H.rank_gone,
            facts.ps_obs,
            mains[0],
            f"ranks {gone} are all gone and hold no GPU memory while the entry point still "
            "runs: it waits for workers that were ended and will never report ready",
        )
