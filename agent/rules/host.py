"""Host rules: the port's owner, Kubernetes reasons, the kernel log, the driver, /dev/shm and
the disks.
"""

from __future__ import annotations

import re

from agent.containers import container_rules, no_gpu_given, unpublished_port
from agent.facts import Facts
from agent.rules.common import (
    HW_ERROR,
    F,
)
from agent.rules.hang import earlier_kill_open
from agent.server_port import server_port
from agent.state import Observation
from agent.thresholds import THRESHOLDS

PORT_IN_LINE = re.compile(r"(?<![\d.])(\d{2,5})(?!\d)")


def _port_owner_rule(facts: Facts, hits, add) -> None:  # type: ignore[no-untyped-def]
    """A bind error names a port; the ports tool shows who holds it now: that line proves it."""
    for _, m in hits:
        if m.label != "port_in_use":
            continue
        for port in {int(p) for p in PORT_IN_LINE.findall(m.line)}:
            if port in facts.listeners and facts.ports_obs:
                line = facts.listeners[port]
                holder = facts.listener_pids.get(port)
                why = facts.leftover_pids.get(holder) if holder is not None else None
                if why:
                    # the port is taken by what an earlier launch left behind: that leftover is
                    # the cause, the bind error its consequence (a live co-tenant stays port_in_use)
                    add(
                        "stale_gpu_process",
                        "fact",
                        F.supports_clearly,
                        facts.ports_obs,
                        line,
                        f"port {port} is held by pid {holder}, {why}",
                    )
                    add(
                        "port_in_use",
                        "fact",
                        F.weakens,
                        facts.ports_obs,
                        line,
                        f"the port is taken by a leftover (pid {holder}): the consequence, not the cause",
                    )
                    return
                add(
                    "port_in_use",
                    "fact",
                    F.supports,
                    facts.ports_obs,
                    line,
                    f"port {port} is held right now by this listener",
                )
                return


_LISTENER_COUNT = re.compile(r"^# \d+ TCP listeners \(")


def _port_free_rule(facts: Facts, hits, add, observations: list[Observation]) -> None:  # type: ignore[no-untyped-def]
    """Nothing listens on the launch's own port and its log has no bind error: nobody took
    the port. Cited: the ports read's own line (the asked port "is free", or the count of the
    whole listener list it was not in). A list whose owners were partly unreadable still
    lists every port, so it refutes as well; a bind error in the log keeps the question open
    (its holder may have gone since)."""
    if any(m.label == "port_in_use" for _, m in hits):
        return
    port = server_port(observations, facts)
    if port is None:
        return
    for o in reversed(observations):
        if o["tool"] != "ports" or not o["ok"]:
            continue
        asked = o["args"].get("port")
        if asked == port:
            line = f"# port {port} is free"
        elif asked is None and port not in facts.listeners:
            line = next((ln for ln in o["lines"] if _LISTENER_COUNT.match(ln)), "")
        else:
            continue
        if line in o["lines"]:
            add(
                "port_in_use",
                "fact",
                F.refutes,
                o["id"],
                line,
                f"nothing listens on the launch's port {port} and its log has no bind error",
            )
        return


K8S_REASON = re.compile(r"^\s*Reason:\s+(\w+)")


def _k8s_rules(observations: list[Observation], add, earlier: bool = False) -> None:  # type: ignore[no-untyped-def]
    """A pod's last state names how its container ended: OOMKilled is the kernel, Error/137 is
    a signal from someone else (a probe, an eviction, a person). `earlier`: that was an earlier
    instance of a launch alive now, not yet seen at work (rules_hang.earlier_kill_open)."""
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
                    F.hints if earlier else F.supports_clearly,
                    o["id"],
                    reasons[0][0],
                    "exit 137 (SIGKILL) without OOMKilled: killed from outside (a probe, an eviction)"
                    + ("; that was an earlier instance, this one is alive" if earlier else ""),
                )


#: a file under /dev/shm named on a line (NCCL's "/dev/shm/nccl-Qm3ZtP", torch's "/dev/shm/torch_...")
_SHM_PATH = re.compile(r"/dev/shm/\S")


def _shm_has_room_while_alive(facts: Facts, labels_hit: set[str | None]) -> bool:
    """A small /dev/shm that the live launch uses little of, with no shared-memory error. Not
    when the launch maps more than it holds (tmpfs takes pages as they are written: the space
    runs out under traffic, not at start), nor when the container restarted (the instance
    using it now is not the one that died)."""
    return (
        facts.shm_mib is not None
        and facts.shm_mib < THRESHOLDS.shm.small_mib
        and facts.shm_use_pct is not None
        and facts.shm_use_pct < THRESHOLDS.shm.live_room_pct
        and facts.server_alive is True
        and "shm_too_small" not in labels_hit
        and not shm_short(facts)
        and not (facts.container is not None and facts.container.restart_count > 0)
    )


def shm_short(facts: Facts) -> bool:
    """The launch's log says it maps more /dev/shm than there is: the shortfall in numbers."""
    return (
        facts.shm_need_mib is not None
        and facts.shm_mib is not None
        and facts.shm_need_mib > facts.shm_mib
    )


def _dependency_killed(facts: Facts, add) -> None:  # type: ignore[no-untyped-def]
    """A live launch whose command line names a process the kernel killed while it ran: the
    server answers, but requests that need what it was started to use park or fail."""
    if facts.dependency_kill is None:
        return
    oid, line, comm = facts.dependency_kill
    add(
        "host_oom_killed",
        "fact",
        F.proves,
        oid,
        line,
        f"the kernel killed {comm} while the launch ran, a process that is not the server but "
        "that its command line names: the server is up, what it was started to use is gone",
    )


def host_rules(facts: Facts, hits, add, observations: list[Observation] | None = None) -> None:  # type: ignore[no-untyped-def]
    labels_hit = {m.label for _, m in hits if m.label and m.strength in ("fatal", "strong")}
    _dependency_killed(facts, add)
    _port_owner_rule(facts, hits, add)
    if observations:
        _port_free_rule(facts, hits, add, observations)
    container_rules(
        facts.container,
        facts.container_obs,
        facts.container_lines,
        add,
        [(o["id"], m.line) for o, m in hits if m.strength in ("fatal", "strong")]
        # the engine's own "no GPU here" words, at any level (vLLM says it at INFO)
        + [hit for hit in [no_gpu_given(facts.container, observations or [])] if hit],
        {m.label for _, m in hits if m.label and m.strength == "fatal"},
    )
    if observations:
        unpublished_port(facts.container, observations, add)
    oom_fatal = any(m.label == "host_oom_killed" and m.strength == "fatal" for _, m in hits)
    if observations and not oom_fatal:
        _k8s_rules(observations, add, earlier_kill_open(facts, observations))
    if facts.dmesg_available and facts.dmesg_obs:
        first = facts.dmesg_summary or (facts.dmesg_lines[-1] if facts.dmesg_lines else "")
        # "Killed" in a log is ambiguous; only the kernel's own line (or a fatal one) names the OOM killer
        oom_proven = any(
            m.label == "host_oom_killed" and (m.strength == "fatal" or o["tool"] == "dmesg")
            for o, m in hits
        ) or bool(facts.container and facts.container.killed_by_limit)
        from tools.processes import MEM_PRESSURE_PCT

        # a live launch on a host whose RAM is nearly all held: no kill *yet*
        held = max(facts.host_mem_pct or 0, facts.free_held_pct or 0)
        pressed = bool(facts.server_alive) and held >= MEM_PRESSURE_PCT
        if facts.dependency_kill is not None:
            pass  # a kill of what the launch uses: weighed by _dependency_killed, not set aside
        elif not oom_proven and facts.bystander_kills:
            line, why = next(iter(facts.bystander_kills.items()))
            add(
                "host_oom_killed",
                "fact",
                F.refutes,
                facts.dmesg_obs,
                line,
                f"the kernel's OOM kill here is a bystander's: {why}",
            )
        elif not oom_proven and first:
            add(
                "host_oom_killed",
                "fact",
                F.weakens if pressed else F.refutes_firmly,  # the kernel log is the authority
                facts.dmesg_obs,
                first,
                "no OOM-killer line yet, with host RAM nearly exhausted"
                if pressed
                else "the kernel log shows no OOM-killer line",
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
    if shm_short(facts) and facts.shm_need_obs:
        add(
            "shm_too_small",
            "fact",
            F.supports_clearly,
            facts.shm_need_obs,
            facts.shm_need_line,
            f"the launch maps {facts.shm_need_mib:.0f} MiB of shared memory and /dev/shm holds "
            f"{facts.shm_mib:.0f} MiB: it runs out once traffic fills the ring (SIGBUS)",
        )
    if facts.shm_mib is not None and facts.disk_obs:
        if _shm_has_room_while_alive(facts, labels_hit):
            # the launch's processes are alive and hold their segments, and half the space
            # is free: NCCL or the workers did not run out of it (running out is an error at
            # once, "No space left" or a bus error, not a hang), small as it is
            add(
                "shm_too_small",
                "fact",
                F.refutes,
                facts.disk_obs,
                facts.shm_line,
                f"/dev/shm is {facts.shm_mib:.0f} MiB but only {facts.shm_use_pct or 0:.0f}% used "
                "while the launch is alive: it did not run out",
            )
        elif (
            facts.shm_mib < THRESHOLDS.shm.small_mib
            or (facts.shm_use_pct or 0) >= THRESHOLDS.shm.full_pct
        ):
            full = (
                facts.shm_mib < THRESHOLDS.shm.small_mib
                and (facts.shm_use_pct or 0) >= THRESHOLDS.shm.full_pct
            )
            add(
                "shm_too_small",
                "fact",
                # small and used up: the segment is exhausted now, not only a risk
                F.supports_clearly if full else F.supports,
                facts.disk_obs,
                facts.shm_line,
                f"/dev/shm is {facts.shm_mib:.0f} MiB ({facts.shm_use_pct or 0:.0f}% used)"
                + (": small and used up" if full else ""),
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
    if (
        facts.shm_mib is None
        and facts.ipc_host_line
        and facts.container_obs
        and "shm_too_small" not in labels_hit
    ):
        # --ipc=host: the container's /dev/shm is the host's (half its RAM by default), never
        # the 64 MiB a container gets unless it asks; with no shared-memory error, not the cause
        add(
            "shm_too_small",
            "fact",
            F.refutes,
            facts.container_obs,
            facts.ipc_host_line,
            "the container shares the host's IPC namespace: its /dev/shm is the host's",
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
    fullest = facts.fullest_mount
    # /dev/shm is the filesystem that ran out: full, or small where a shared-memory failure
    # names it (a signature of shm_too_small in the launch's own lines)
    shm_full = bool(facts.shm_line) and (
        (facts.shm_use_pct or 0) >= THRESHOLDS.shm.full_pct
        or (
            facts.shm_mib is not None
            and facts.shm_mib < THRESHOLDS.shm.small_mib
            and "shm_too_small" in labels_hit
        )
    )
    # the row that shows it: the fullest filesystem df listed (a header proves nothing; /dev/shm
    # is IPC memory, not where a launch writes its files: alone it says nothing of the disks,
    # unless it is the one that is full: then "no space" is shm_too_small's, not a disk's)
    if (
        facts.disk_available
        and not facts.full_mounts
        and "disk_full" not in labels_hit
        and fullest is None
        and not facts.others_full_mounts
        and shm_full
    ):
        add(
            "disk_full",
            "fact",
            F.weakens_clearly,
            facts.disk_obs,
            facts.shm_line,
            "the filesystem that ran out is /dev/shm, IPC shared memory (shm_too_small), not a "
            "disk the launch writes to",
        )
    shm_enospc = next(
        (
            (o, m.line)
            for o, m in hits
            if "No space left on device" in m.line and _SHM_PATH.search(m.line)
        ),
        None,
    )
    if shm_enospc is not None and not facts.full_mounts:
        # the failing write names its own file: the space that ran out is /dev/shm's, whatever
        # df was or was not read
        add(
            "disk_full",
            "fact",
            F.weakens_clearly,
            shm_enospc[0]["id"],
            shm_enospc[1],
            "the write that found no space was to /dev/shm (IPC shared memory), not a disk",
        )
    if facts.full_mounts and not shm_full and "shm_too_small" not in labels_hit:
        # "No space left on device" is a full disk's or a full /dev/shm's: a disk the launch
        # writes to is full and /dev/shm is not, so the space that ran out is the disk's
        mount, pct, line = facts.full_mounts[0]
        add(
            "shm_too_small",
            "fact",
            F.refutes,
            facts.disk_obs,
            line,
            f"the filesystem that ran out is {mount} ({pct:.0f}% full), not /dev/shm",
        )
    if (
        facts.disk_available
        and not facts.full_mounts
        and "disk_full" not in labels_hit
        and (fullest is not None or facts.others_full_mounts)
    ):
        add(
            "disk_full",
            "fact",
            F.weakens_clearly,
            facts.disk_obs,
            fullest[2] if fullest else facts.others_full_mounts[0][2],
            "no filesystem the launch writes to is near full (full: "
            + ", ".join(m for m, _, _ in facts.others_full_mounts[:3])
            + ", where no path of the launch lies)"
            if facts.others_full_mounts
            else f"no filesystem is near full: the fullest, {fullest[0]}, is {fullest[1]:.0f}% used"
            if fullest
            else "no filesystem is near full",
        )
