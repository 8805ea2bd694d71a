"""Liveness rules: is the server alive, does its log advance, did it say it was ready or die
with a fatal line of its own.
"""

from __future__ import annotations

from agent import kills
from agent.at_work import working_on_logged_file
from agent.evidence import (
    LOG_TOOLS,
    last_launch,
    latest_text_observations,
    launch_line,
    text_lines,
)
from agent.facts import Facts
from agent.rules import proof
from agent.rules.common import (
    PHASE_PREFIX,
    F,
)
from agent.rules.hang import slow_bar
from agent.rules.restarts import earlier_instance_ended
from agent.state import Observation
from agent.thresholds import THRESHOLDS


def liveness_rules(facts: Facts, observations: list[Observation], hits, add) -> None:  # type: ignore[no-untyped-def]
    fatal = [(o, m) for o, m in hits if m.strength == "fatal" and m.label]
    progress = [(o, m) for o, m in hits if m.strength == "progress"]
    ready = [(o, m) for o, m in hits if m.strength == "ready"]
    if ready and facts.server_alive and not _warming_after(ready, observations):
        o, m = ready[-1]
        add(
            "still_starting",
            "fact",
            F.refutes_outright,
            o["id"],
            m.line,
            "the server reported ready: it is not starting any more",
        )
    build = build_running(facts, observations) if facts.server_alive is False else None
    if build is not None and not fatal:
        from agent.rules.hang import COMPILING

        pid, line = build
        add(
            "still_starting",
            "fact",
            COMPILING,
            facts.ps_obs,
            line,
            f"no server process yet, and the log's last step is a build: pid {pid} is a compiler "
            "at work on it, so the launch is still being built, not dead",
        )
    elif facts.server_alive is False:
        add(
            "still_starting",
            "fact",
            F.refutes_strongly,
            facts.ps_obs,
            facts.ps_header or "PID",
            "no inference-server process is running: a dead process is not still loading",
        )
    elif facts.server_alive and not fatal:
        _downloading(observations, add)
        _reading_storage(facts, observations, add)
    if facts.server_alive:
        pid = facts.server_pids[0] if facts.server_pids else None
        # the witness of a live server: its ps line, or (no process table, a cluster's bastion)
        # the named pod's record saying its container runs
        alive_obs, alive_line, alive = (
            (facts.ps_obs, facts.procs.get(pid, ""), f"server pid {pid} is alive")
            if pid is not None
            else (facts.pod_obs, facts.pod_line, "the pod's container is running")
        )
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
                alive_obs,
                alive_line,
                alive,
            )
            # a hang is a stop: a log that moves forward now is no collective stuck now (the
            # stage rules keep it where an NCCL line of its own supports it)
            add(
                "nccl_failure",
                "stage",
                F.refutes,
                obs_id,
                line,
                "the log advanced between two reads: nothing is stuck in a collective",
            )
        killed_sig = any(m.label == "killed_externally" for _, m in hits)
        pressure = _memory_pressure(facts, add)
        # a restarted container's live instance is not the one that ended before it
        relaunched = earlier_instance_ended(facts, observations)
        if (
            not relaunched
            and not any(m.label == "host_oom_killed" for _, m in hits)
            and not facts.ranks_gone
            and not facts.core_gone_line
            and not pressure
            and facts.dependency_kill is None  # alive, but what it uses was killed
        ):
            add(
                "host_oom_killed",
                "fact",
                F.refutes_firmly,
                alive_obs,
                alive_line,
                f"{alive}: the OOM killer did not end it",
            )
        if (
            not fatal
            and not killed_sig
            and not relaunched
            and not facts.ranks_gone
            and not facts.core_gone_line
        ):
            add(
                "killed_externally",
                "fact",
                F.refutes_firmly,
                alive_obs,
                alive_line,
                f"{alive}: nothing killed it",
            )
        from agent.rules.hang import quiet_phase_line

        # a phase that runs quietly (compile, capture, warm-up) is silent by nature: not a stall
        quiet = quiet_phase_line(observations) is not None
        work = working_on_logged_file(facts, observations) if stalled and not growing else None
        if work is not None and not fatal:
            pid, ps_line, path = work
            add(
                "still_starting",
                "fact",
                THRESHOLDS.hang.compiling,
                facts.ps_obs,
                ps_line,
                f"the log is quiet, but pid {pid} is at work on {path}, the file its last step "
                "names (unpacking, converting, reading it): work in progress, not a stall",
            )
        # a quiet phase that prints a bar with its own pace (an autotuner at 43 s a profile) is
        # judged by that pace like any bar; without one its silence weighs nothing either way
        slow = slow_bar(observations, facts)
        quiet_unpaced = quiet and slow is None
        if (
            stalled
            and not growing
            # a compiler the launch runs is weighed by the build rules, unless the log's own bar
            # gives the pace to judge the silence by (Inductor's compile workers under a
            # CUDA-graph capture at 280 s a batch size)
            and (not facts.building_pids or slow is not None)
            and not quiet_unpaced
            and work is None
        ):
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
            from agent.rules.hang import gpu_memory_moved, slowed_by_setting

            if gpu_memory_moved(observations) is not None and not blocked:
                pass  # the GPUs' memory moved meanwhile: working, weighed by the hang rules
            elif slowed_by_setting(facts, observations) is not None and not blocked:
                pass  # slowed by a setting the engine warned of, busy: weighed by the hang rules
            elif slow is not None and not blocked:
                _, bar, pace, window = slow
                # weighed as the watch would have been had it lasted one step; qualify() says
                # the conclusion is inferred and how to confirm it
                add(
                    "still_starting",
                    "fact",
                    F.proves,
                    obs_id,
                    bar,
                    f"the bar moves its log once per {pace:.0f} s: the {window:.0f} s watched is "
                    "too short to see one, so no growth within it proves no stall",
                )
            else:
                add(
                    "still_starting",
                    "fact",
                    F.refutes if blocked else F.weakens,
                    obs_id,
                    line,
                    "the server is alive but its log did not advance between two reads (hung?)",
                )
    own = [(o, m) for o, m in fatal if not proof.peer_lost(m.line)]
    crash = kills.own_crash(observations)
    if crash is not None:
        # the kernel saw the launch's own process die of a fault: a crash, whatever the log
        # says (a process killed by its own signal prints nothing after it)
        add(
            "killed_externally",
            "fact",
            F.refutes_firmly,
            crash[0],
            crash[1],
            "the kernel log shows the launch's process died of a fault of its own (a crash "
            "by its own signal), not a stop from outside",
        )
        add("still_starting", "fact", F.refutes, crash[0], crash[1], "the launch's process crashed")
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
    elif facts.server_alive is False and not facts.building_pids and crash is None:
        # (compilers at work beside the log: a build still running may be what writes it)
        logs = [o for o in latest_text_observations(observations) if o["tool"] in LOG_TOOLS]
        if logs:
            o = logs[-1]
            text = text_lines(o)
            last = next((ln for ln in reversed(text) if ln.strip()), "")
            # an error of its own is a line fatal by its shape since the launch (a benign
            # "Ignore import error ..." warning is not one; a signal line from outside is not one)
            since = text[last_launch(text) :]
            # what is printed after a stop signal from outside (a harness reporting its own
            # timeout, a job failing because of it) is fallout, not an error of the server's
            stop = next((i for i, ln in enumerate(since) if proof.external_end(ln)), None)
            scope = since[: stop + 1] if stop is not None else since
            own_error = any(
                kind != "exit_signal"
                and not proof.external_end(scope[i])
                and not proof.peer_lost(scope[i])
                for i, kind in proof.fatal_lines(scope)
            )
            if not own_error and facts.log_elsewhere and facts.machine_addrs_obs:
                # absent here proves gone only for a launch that ran here
                add(
                    "killed_externally",
                    "fact",
                    F.refutes,
                    o["id"],
                    facts.log_elsewhere,
                    f"the log's server binds {facts.log_elsewhere_addr}, an address this machine "
                    f"({', '.join(facts.machine_addrs[:4])}) does not have: it ran on another "
                    "machine, so its processes' absence here says nothing about them",
                )
            elif not own_error:  # an error of its own is weighed by the structure rules
                add(
                    "killed_externally",
                    "fact",
                    F.supports_clearly,
                    o["id"],
                    since[stop] if stop is not None else last,
                    "the server was stopped from outside before any error of its own"
                    if stop is not None
                    else "the server is gone and its log ends without an error of its own",
                )


def _downloading(observations: list[Observation], add) -> None:  # type: ignore[no-untyped-def]
    """A live server whose hub-model download grows is starting, however quiet its log: the
    blob that grew between two reads is the proof; a peer is not what it waits for."""
    reads = [o for o in observations if o["tool"] == "download_progress" and o["ok"]]
    if not reads or not reads[-1]["data"].get("downloading"):
        return
    o = reads[-1]
    line = str(o["data"].get("growing_line") or "")
    if not line or line not in o["lines"]:
        return
    add(
        "still_starting",
        "fact",
        F.proves,
        o["id"],
        line,
        "the server is still downloading its model: "
        + (
            "its hub cache directory grew between two reads"
            if o["data"].get("cache_grew")
            else "an .incomplete blob in the hub cache grew between two reads"
        ),
    )
    add(
        "nccl_failure",
        "fact",
        F.refutes,
        o["id"],
        line,
        "the quiet log waits for the download (ranks that wait for it do so by design), not for "
        "a peer that failed in a collective",
    )


def _reading_storage(facts: Facts, observations: list[Observation], add) -> None:  # type: ignore[no-untyped-def]
    """A live server whose log stopped but which reads from storage is loading (a slow or
    failing disk, a network mount): the kernel's byte count that grew is the proof."""
    from agent.rules.hang import reading_storage

    found = reading_storage(observations)
    if found is None or found[2] not in facts.server_pids:
        return
    oid, line, pid = found
    add(
        "still_starting",
        "fact",
        F.proves,
        oid,
        line,
        f"server pid {pid} read from storage during the window (/proc/{pid}/io read_bytes "
        "grew): it is loading, however quiet its log",
    )
    add(
        "nccl_failure",
        "fact",
        F.refutes,
        oid,
        line,
        "the silent server is busy reading its files, not waiting for a peer",
    )


def _warming_after(ready, observations: list[Observation]) -> bool:  # type: ignore[no-untyped-def]
    """The front-end said "ready", then the engine started a phase that runs quietly (a warm-up
    request that requests wait behind, a compile): not ready yet, whatever /health answers.
    `ready` are the scan's own ready hits (the signatures are not scanned twice)."""
    from agent.rules.hang import quiet_phase_line

    o, m = ready[-1]
    # the engine's own "ready", not a probe the front-end answered after it
    own = [mm for oo, mm in ready if oo["id"] == o["id"] and not proof.frontend_only(mm.line)]
    if own:
        m = own[-1]
    lines = o["lines"]
    if launch_after(o, m.line_no):
        return True
    phase = quiet_phase_line(observations)
    if phase is None:
        return False
    return phase in lines and lines.index(phase) > m.line_no


def launch_after(o: Observation, line_no: int) -> bool:
    """An engine's launch begun after line `line_no` of a log read: a ready line before it is
    an earlier start's, or the front end's before its engine (Triton's endpoints up, then a
    model load starting the vLLM engine beneath them), so it says nothing of readiness now."""
    return any(launch_line(ln) for ln in text_lines(o)[line_no + 1 :])  # as the scan numbered


def build_running(facts: Facts, observations: list[Observation]) -> tuple[int, str] | None:
    """A compiler hard at work while the log under investigation stops on a build step: the
    launch is its build (an image, a wheel, an engine), not yet a server. Both are needed: a
    busy compiler alone may be anyone's job on a shared box."""
    from agent.rules.hang import quiet_phase_line

    if not facts.building_pids or not facts.ps_obs or quiet_phase_line(observations) is None:
        return None
    return next(iter(facts.building_pids.items()))


def _memory_pressure(facts: Facts, add) -> bool:  # type: ignore[no-untyped-def]
    """A live launch on a host whose RAM is nearly all held (ps %MEM, or free's total minus
    available): being alive now does not clear the OOM killer, it is about to act; the biggest
    holder is named where ps shows one."""
    from tools.processes import MEM_PRESSURE_PCT

    if (facts.host_mem_pct or 0) >= MEM_PRESSURE_PCT and facts.ps_obs:
        line = facts.procs.get(facts.mem_hogs[0], "") if facts.mem_hogs else ""
        if line:
            add(
                "host_oom_killed",
                "fact",
                F.supports_clearly,
                facts.ps_obs,
                line,
                f"host RAM nearly exhausted: processes hold {facts.host_mem_pct:.0f}% of it (ps "
                "%MEM); the kernel's OOM killer ends the biggest holder next",
            )
        return True
    if (facts.free_held_pct or 0) >= MEM_PRESSURE_PCT and facts.free_obs:
        add(
            "host_oom_killed",
            "fact",
            F.supports_clearly,
            facts.free_obs,
            facts.free_line,
            f"host RAM nearly exhausted: free shows {facts.free_held_pct:.0f}% held (total minus "
            "available); the kernel's OOM killer acts next",
        )
        return True
    return False
