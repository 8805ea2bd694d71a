"""Proof rules: what a conclusion must show before it may stand, whatever brain proposed it.

The gate checks proof, not membership in our signature list:
- every citation is verbatim: the named observation exists and the text is a whole line of it,
  or a substring of at least 16 characters of one line;
- a crash is proven by a line fatal *by structure* (agent/rules/proof.py) or a fatal/strong signature,
  and by the crash itself: the server gone, or no progress after that line. An error line from a
  process that keeps running and logging is noise;
- labels that rest on host facts are checked against those facts;
- "killed from outside" rests on absence, so it needs the process gone, no fatal line of its own
  since the launch, and no OOM kill in a readable kernel log; without a positive sign it stands
  only as inferred (see `qualify`).
Each rule is a small function returning problems; `check_conclusion` runs the ones for the label.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from agent import containers, kills
from agent import launch as launch_mod
from agent.at_work import working_on_logged_file
from agent.board import related
from agent.evidence import LOG_TOOLS, last_launch, launch_line, text_lines
from agent.facts import Facts, launch_reads
from agent.hits import set_aside_logs, signature_hits
from agent.rules import causes as rules_causes
from agent.rules import hang as rules_hang
from agent.rules import liveness as rules_liveness
from agent.rules import proof
from agent.rules.common import HW_ERROR
from agent.rules.host import shm_short
from agent.rules.memory import stale_gpu_possible
from agent.rules.own_fatal import OOM_KILL, own_fatal_since_launch
from agent.signatures import Match
from agent.state import Action, Observation
from cards.taxonomy import LABELS
from tools import service_logs

Hits = list[tuple[Observation, Match]]
#: Inferred-from-absence conclusions are capped here: the check that would confirm them is named.
INFERRED_CONFIDENCE = 0.6

ENOSPC = re.compile(
    r"(?i)No space left on device|ENOSPC|Errno 28|Disk quota exceeded|EDQUOT|not enough free (?:disk )?space"
)
SHM_LINE = re.compile(
    r"(?i)/dev/shm|\bshm\b|shared memory|posix_fallocate|Bus error|shm_open|--shm-size|--ipc"
)
XID = re.compile(r"(?i)\bXid\b|ECC error|fallen off the bus|GPU is lost|uncorrectable")
#: Labels a fact on the host proves (the rule checks the fact); the others need a crash line.
FACT_LABELS = {
    "still_starting",
    "stale_gpu_process",
    "killed_externally",
    "disk_full",
    "shm_too_small",
    "host_oom_killed",
    "gpu_hardware_fault",
    "cuda_driver_mismatch",
}


# -- citations ------------------------------------------------------------------------------------
def citation_problems(
    label: str, evidence: list[dict[str, str]], by_id: dict[str, Observation]
) -> list[str]:
    """Every citation names an observation that exists and quotes one of its lines verbatim."""
    if not evidence:
        return [f"[{label}] cites no evidence line"]
    out = []
    for ev in evidence:
        oid, line = str(ev.get("observation", "")), str(ev.get("line", ""))
        obs = by_id.get(oid)
        if obs is None:
            where = [o for o in by_id.values() if proof.quote_problem(line, o["lines"]) is None]
            hint = f" (it occurs in {where[0]['id']})" if where and line.strip() else ""
            out.append(f"[{label}] cites observation {oid!r}, which does not exist{hint}")
            continue
        why = proof.quote_problem(line, obs["lines"])
        if why is not None:
            out.append(f"[{label}] {why} in observation {oid}: {line[:80]!r}")
    return out


# -- what a cited line is -------------------------------------------------------------------------
def _sig_on(line: str, hits: Hits) -> list[Match]:
    t = line.strip()
    return [m for _, m in hits if t and (m.line.strip() == t or (len(t) >= 16 and t in m.line))]


def _is_phase(m: Match) -> bool:
    return m.signature.startswith("phase-") or m.strength in ("progress", "ready")


def crash_lines(
    evidence: list[dict[str, str]], by_id: dict[str, Observation], hits: Hits
) -> list[tuple[Observation, int, str]]:
    """Cited lines that may report a crash: fatal by structure, or a fatal/strong signature.
    Phase markers ("Load weight begin") never do: every healthy start prints them."""
    out = []
    # the kernel's line that the launch's own process died of a fault (a segfault, a divide
    # error) reports its crash as surely as a line the process printed
    crash = kills.own_crash(list(by_id.values())) if evidence else None
    # a log set aside as an earlier run's (a rotation, a copy of the pod before) holds none of
    # this launch's crashes, whatever it says
    aside = set_aside_logs(list(by_id.values())) if evidence else set()
    for ev in evidence:
        obs = by_id.get(str(ev.get("observation", "")))
        if obs is None or str(obs["args"].get("path") or "") in aside:
            continue
        lines = obs["lines"]
        i = proof.locate(str(ev.get("line", "")), lines)
        if i is None:
            continue
        sigs = [m for m in _sig_on(lines[i], hits) if not _is_phase(m)]
        kind = proof.kind_in_context(lines, i)
        if kind is None and any(m.strength in ("fatal", "strong") for m in sigs):
            kind = "signature"
        if kind is None and crash is not None and crash == (obs["id"], lines[i]):
            kind = "kernel_crash"
        if kind is not None:
            out.append((obs, i, kind))
    return out


def _progress_after(obs: Observation, index: int, hits: Hits) -> str | None:
    """A progress or ready line printed after lines[index] in the same read, if any."""
    later = [
        m
        for o, m in hits
        if o["id"] == obs["id"]
        and m.strength in ("progress", "ready")
        and m.line_no > index
        and not proof.frontend_only(m.line)
    ]
    return later[-1].line if later else None


def _restarted_after(obs: Observation, index: int, facts: Facts) -> bool:
    """The line ended an instance of a container that its restart policy launched again: the
    container restarted, and a launch line follows the cited one in the same read. What the
    live instance prints after that is the next round of the same launch, not this one going on
    (an appended log of runs an operator started by hand has no restart count: it stays noise)."""
    c = facts.container
    if c is None or c.restart_count <= 0:
        return False
    return any(launch_line(ln) for ln in obs["lines"][index + 1 :])


def crash_shown(obs: Observation, index: int, kind: str, facts: Facts, hits: Hits) -> str | None:
    """None when the crash is shown: the server gone (or not known to live), a traceback that
    ended a component (a scheduler may die while the HTTP front-end answers on), or nothing but
    more errors after the fatal line. Otherwise why the line is noise."""
    if facts.server_alive is not True or kind == "traceback":
        return None
    if _restarted_after(obs, index, facts):
        return None
    after = _progress_after(obs, index, hits)
    path = str(obs["args"].get("path", ""))
    if after:
        return f"the server is alive and kept working after that line: {after[:80]!r}"
    if facts.log_growth.get(path):
        return "the server is alive and its log still advances after that line"
    return None


# -- per-label proof rules ------------------------------------------------------------------------
Rule = Callable[[Action, dict[str, Observation], Facts, Hits], list[str]]


def _cited(action: Action) -> list[str]:
    return [str(e.get("line", "")) for e in action.get("evidence") or []]


def stall_proof(observations: list[Observation], facts: Facts) -> str | None:
    """Why a live, silent server is stuck rather than busy, or None: its stacks wait in a
    collective, or its GPUs spin while the log stays silent over the watched window."""
    if rules_hang.awaited_elsewhere(observations) is not None:
        return None  # the engine waits on a member that is not here: its state is not read
    stacks = [o for o in observations if o["tool"] == "py_stacks" and o["ok"]]
    if (
        stacks
        and stacks[-1]["data"].get("waiting_in") == "collective"
        and stacks[-1]["data"].get("awaits") != "work"  # a worker idle for its next command
    ):
        return "stacks"
    if rules_hang.quiet_phase_line(observations) is not None:
        return None  # the log's last phase (a compile, a graph capture) runs quietly for minutes
    if (
        rules_hang.silent(facts)
        and not facts.building_pids
        and rules_hang.pinned_gpus(facts, observations)[0]
        and rules_hang.multi_rank(facts, observations)
    ):
        return "pinned"
    if (
        rules_hang.silent(facts)
        and not facts.building_pids
        and rules_hang.multi_rank(facts, observations)
        and rules_hang.spinning_ranks(facts)
    ):
        return "pinned"  # ranks spinning on the CPU behind a silent log: the same inference
    if (
        rules_hang.silent(facts)
        and not facts.building_pids
        and rules_hang.multi_rank(facts, observations)
        and rules_hang.gpu_memory_static(observations) is not None
        and rules_hang.collective_phase_line(observations) is not None
        and rules_hang.reading_storage(observations) is None
    ):
        # alive, its log silent over the watched window, its GPU memory still over a watched
        # read, nothing read off storage: stuck, by inference (stacks would prove it)
        return "static"
    return None


def _nccl(action: Action, by_id: dict[str, Observation], facts: Facts, hits: Hits) -> list[str]:
    """A collective that failed prints it; a collective that hangs prints nothing, and a stall
    (alive, silent, GPUs spinning, or stacks in a collective) is its proof."""
    if stall_proof(list(by_id.values()), facts) is not None:
        return []
    out = _crash_rule(action, by_id, facts, hits)
    if out and out[0].startswith("[nccl_failure] cites no fatal line"):
        # a hang has its own form: say what proves it and what is not read yet
        elsewhere = rules_hang.awaited_elsewhere(list(by_id.values()))
        if elsewhere is not None:
            return [
                "[nccl_failure] is not shown: the engine waits for its workers' replies "
                f"({elsewhere[1].strip()}) while the workers read here idle, waiting for their "
                f"next command ({elsewhere[3].strip()}); the reply is owed by a member that is "
                "not on this host (another node's workers, or a rank that died). Read that "
                "member's state and log (its node, its container) before naming a cause"
            ]
        missing = _stall_reads_missing(list(by_id.values()), facts)
        out = [
            out[0] + "; or, for a hang, show the stall: the launch alive with its log silent over "
            "a watched read, and its stacks waiting in a collective, or its GPUs pinned, or their "
            "memory still over a watched read with nothing read off storage"
            + (f" (reads missing: {', '.join(missing)})" if missing else "")
        ]
    return out


def _stall_reads_missing(observations: list[Observation], facts: Facts) -> list[str]:
    """The reads a stall's proof needs that this investigation has not made. A read tried and
    failed (no counters, no py-spy on the host) is not asked for again: it is named as one the
    host cannot give, so the brain is not sent back for a read that cannot come."""
    tried = {(o["tool"], bool(o["args"].get("watch_s"))) for o in observations}
    got = {(o["tool"], bool(o["args"].get("watch_s"))) for o in observations if o["ok"]}
    out = []
    if not facts.log_growth:
        out.append("log_tail with watch_s (does the log advance?)")
    for key, what in (
        (("py_stacks", False), "py_stacks (where the ranks wait)"),
        (("gpu_status", True), "gpu_status with watch_s (does GPU memory move?)"),
        (("process_io", True), "process_io with watch_s (is it reading off storage?)"),
    ):
        if key in got:
            continue
        out.append(what if key not in tried else f"{key[0]} failed here: not readable on this host")
    return out


def _crash_rule(
    action: Action, by_id: dict[str, Observation], facts: Facts, hits: Hits
) -> list[str]:
    """A failure label needs a cited line that reports a crash, and the crash."""
    label = action.get("label") or ""
    lines = crash_lines(action.get("evidence") or [], by_id, hits)
    if not lines:
        return [
            f"[{label}] cites no fatal line: quote the error line that ended the process "
            "(a traceback's last line, an ERROR/FATAL line, an NCCL/CUDA error, a signal); "
            "a grep hit or a phase marker is not a crash"
        ]
    # the errors that say what happened (exceptions, NCCL/CUDA errors, signatures), not the
    # ERROR-prefixed frames and wrapper lines around them ("EngineCore failed to start.")
    survivors = [
        o["lines"][i]
        for o, i, k in lines
        if k not in ("error_level", "exit_signal") and not proof.is_wrapper(o["lines"][i])
    ]
    if label != "killed_externally" and survivors and all(proof.peer_lost(ln) for ln in survivors):
        # "Connection closed by peer" is what the survivor saw: the peer ended first, and what
        # ended it (its own error, a kill, its node's OOM killer) is the cause, not the link
        return [
            f"[{label}] cites only a survivor's error: its peer went away "
            f"({survivors[0].strip()[-120:]}); that is the consequence. What ended the peer is "
            "the cause: read the peer's own log, its container's state and its node's kernel log "
            "(another host: say so and conclude insufficient_evidence with this line as the clue)"
        ]
    reasons = [crash_shown(o, i, k, facts, hits) for o, i, k in lines]
    if all(r is not None for r in reasons):
        return [f"[{label}] is not a crash: {reasons[0]}"]
    contra = _contradiction(label, action, hits) or _contradiction(
        label, action, hits, [o["lines"][i] for o, i, _ in lines]
    )
    return [contra] if contra else []


def _contradiction(
    label: str, action: Action, hits: Hits, lines: list[str] | None = None
) -> str | None:
    """Every cited line (or every cited crash line: the lines that must prove the label) is a
    known sign of some other, unrelated label: the facts say otherwise. An MPI spawn failure
    that a signature knows as the image's MPI runtime proves no NCCL failure, whatever else is
    cited beside it (a phase line, a read's summary)."""
    named: set[str] = set()
    for line in _cited(action) if lines is None else lines:
        sigs = [m for m in _sig_on(line, hits) if not _is_phase(m) and m.label]
        if not sigs or any(related(label, m.label) for m in sigs if m.label):
            return None
        named |= {m.label for m in sigs if m.label}
    if not named:
        return None
    return f"[{label}] the cited lines are known signs of {', '.join(sorted(named))}, not {label}"


def _still_starting(action: Action, by_id, facts: Facts, hits: Hits) -> list[str]:  # type: ignore[no-untyped-def]
    out = []
    # GPU memory that moved over a watched window is a live process at work, even unseen by ps
    moving = rules_hang.gpu_memory_moved(list(by_id.values())) is not None
    at_work = rules_hang.quiet_phase_at_work(facts, list(by_id.values())) is not None
    building = rules_liveness.build_running(facts, list(by_id.values())) is not None
    if (
        facts.server_alive is not True
        and not ((moving or at_work) and facts.server_alive is None)
        and not building
    ):
        out.append(
            "[still_starting] needs the server process alive (ps shows none), or its build "
            "running (a compiler at work while the log stops on a build step)"
        )
    stacks = [o for o in by_id.values() if o["tool"] == "py_stacks" and o["ok"]]
    downloads = [o for o in by_id.values() if o["tool"] == "download_progress" and o["ok"]]
    working = (
        bool(facts.building_pids)
        or (bool(stacks) and stacks[-1]["data"].get("waiting_in") in ("compile", "load"))
        or (bool(downloads) and bool(downloads[-1]["data"].get("downloading")))
        or rules_hang.reading_storage(list(by_id.values())) is not None
        or working_on_logged_file(facts, list(by_id.values())) is not None
        or moving
        or at_work
        # a bar slower than the watched window: no growth in it is expected (qualify says so)
        or rules_hang.slow_bar(list(by_id.values()), facts) is not None
        # a setting the engine warned slows every step, a process busy on a CPU (inferred)
        or rules_hang.slowed_by_setting(facts, list(by_id.values())) is not None
    )
    if not any(facts.log_growth.values()) and not working:
        out.append(
            "[still_starting] needs the log to advance over the watched window, a compiler the "
            "server runs, stacks in loading/compiling, a model download that grows, the "
            "server reading from storage (process_io), or a process at work on the file the "
            "log's last step names"
        )
    return out


def _stale(action: Action, by_id, facts: Facts, hits: Hits) -> list[str]:  # type: ignore[no-untyped-def]
    if not stale_gpu_possible(facts, hits):
        return ["[stale_gpu_process] needs GPU memory held by another pid now"]
    return []


def _line_or_fact(label: str, rx: re.Pattern[str], fact: bool, what: str) -> Rule:
    def rule(action: Action, by_id, facts: Facts, hits: Hits) -> list[str]:  # type: ignore[no-untyped-def]
        if fact or any(rx.search(c) for c in _cited(action)):
            return []
        sig = any(
            m.label == label and m.strength in ("fatal", "strong")
            for c in _cited(action)
            for m in _sig_on(c, hits)
        )
        return [] if sig else [f"[{label}] needs {what}"]

    return rule


def _disk(action: Action, by_id, facts: Facts, hits: Hits) -> list[str]:  # type: ignore[no-untyped-def]
    return _line_or_fact(
        "disk_full", ENOSPC, bool(facts.full_mounts), "a full mount or a 'No space left' line"
    )(action, by_id, facts, hits)


def _shm(action: Action, by_id, facts: Facts, hits: Hits) -> list[str]:  # type: ignore[no-untyped-def]
    small = facts.shm_mib is not None and (facts.shm_mib < 1024 or (facts.shm_use_pct or 0) >= 95)
    if (
        facts.shm_mib is not None
        and facts.shm_mib >= 16384
        and not any(SHM_LINE.search(c) for c in _cited(action))
    ):
        return [
            f"[shm_too_small] /dev/shm has {facts.shm_mib / 1024:.0f} GiB and no shm error is cited"
        ]
    return _line_or_fact("shm_too_small", SHM_LINE, small, "a small /dev/shm or an shm error line")(
        action, by_id, facts, hits
    )


def _host_oom(action: Action, by_id, facts: Facts, hits: Hits) -> list[str]:  # type: ignore[no-untyped-def]
    return _line_or_fact(
        "host_oom_killed",
        OOM_KILL,
        False,
        "an OOM-kill line (kernel log, OOMKilled, low-memory kill)",
    )(action, by_id, facts, hits)


#: the GPU a kernel Xid line names: "NVRM: Xid (PCI:0000:18:00): 79, ..."
XID_PCI = re.compile(r"Xid \(PCI:([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})")
#: nvidia-smi's bus id: "00000000:18:00.0"
SMI_BUS = re.compile(r"^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})")


def _pci(m: re.Match[str] | None) -> str | None:
    return f"{int(m.group(1), 16):04x}:{m.group(2).lower()}:{m.group(3).lower()}" if m else None


def xid_of_other_gpus(action: Action, by_id: dict[str, Observation], facts: Facts) -> str | None:
    """Why the cited Xid lines are another GPU's, or None: the launch's own settings give it
    GPUs (CUDA_VISIBLE_DEVICES), nvidia-smi gives their bus ids, and every Xid cited names a bus
    none of them has. Anything unknown (no device list, a bus not read, an Xid without one)
    leaves it to the other checks: only a fault shown to be elsewhere is set aside."""
    xids = [c for c in _cited(action) if "Xid" in c]
    if not xids:
        return None
    mine = launch_mod.launch_gpus(list(by_id.values()))
    bus_of = {g.index: _pci(SMI_BUS.match(g.bus_id or "")) for g in facts.gpus}
    if not mine or any(not bus_of.get(i) for i in mine):
        return None
    theirs = [_pci(XID_PCI.search(c)) for c in xids]
    if any(b is None for b in theirs) or {bus_of[i] for i in mine} & set(theirs):
        return None
    gpus = ", ".join(str(i) for i in sorted(mine))
    return (
        f"[gpu_hardware_fault] the Xid cited is of PCI {theirs[0]}, not a GPU this launch was "
        f"given (CUDA_VISIBLE_DEVICES: {gpus}): another GPU's fault says nothing of this launch; "
        "cite a fault on its own GPUs"
    )


def _hardware_besides_xid(action: Action, hits: Hits) -> bool:
    """A cited line other than an Xid that shows a hardware fault (ECC, a reset required)."""
    rest = [c for c in _cited(action) if "Xid" not in c]
    return any(XID.search(c) for c in rest) or any(
        m.label == "gpu_hardware_fault" and m.strength in ("fatal", "strong")
        for c in rest
        for m in _sig_on(c, hits)
    )


def _hardware(action: Action, by_id, facts: Facts, hits: Hits) -> list[str]:  # type: ignore[no-untyped-def]
    hw = bool(facts.gpu_error and HW_ERROR.search(facts.gpu_error))
    other = None if hw else xid_of_other_gpus(action, by_id, facts)
    if other is not None and not _hardware_besides_xid(action, hits):
        return [other]
    return _line_or_fact(
        "gpu_hardware_fault", XID, hw, "an Xid/ECC/lost-GPU line or nvidia-smi failing"
    )(action, by_id, facts, hits)


def _driver(action: Action, by_id, facts: Facts, hits: Hits) -> list[str]:  # type: ignore[no-untyped-def]
    if facts.gpu_error and "driver" in facts.gpu_error.lower():
        return []
    # a crash line of the launch's own; the kernel's fault line only where it says what the
    # driver refused: a segfault that merely happened inside libcuda.so names no mismatch
    for o, i, kind in crash_lines(action.get("evidence") or [], by_id, hits):
        line = o["lines"][i]
        if kind != "kernel_crash" or proof.label_hint(line) == "cuda_driver_mismatch":
            return []
    return [
        "[cuda_driver_mismatch] needs a driver/CUDA error line that says what the driver refused "
        "(a version, an init failure) or nvidia-smi failing to reach the driver"
    ]


def positive_external_sign(
    observations: list[Observation], hits: Hits | None = None
) -> tuple[str, str] | None:
    """A line showing the process was ended from outside: a signal, a probe, a timeout kill
    (by structure, or a killed_externally signature)."""
    pod_named = _named_pod(observations)
    for o, m in hits if hits is not None else signature_hits(observations):
        if (
            m.label == "killed_externally"
            and m.strength in ("fatal", "strong")
            and not _other_pod(m.line, pod_named)
        ):
            return o["id"], m.line
    aside = set_aside_logs(observations)
    pod = pod_named
    for o in observations:
        if not o["ok"] or str(o["args"].get("path") or "") in aside:
            continue
        for ln in text_lines(o):
            if proof.external_end(ln) and not OOM_KILL.search(ln) and not _other_pod(ln, pod):
                return o["id"], ln
    return None


def _named_pod(observations: list[Observation]) -> str | None:
    """The pod the operator named, as its log was read (`kubectl logs NAME`)."""
    for o in observations:
        if o["tool"] == "service_logs" and o["ok"] and o["args"].get("name"):
            return str(o["args"]["name"]).rsplit("/", 1)[-1]
    return None


def _other_pod(line: str, pod: str | None) -> bool:
    """An event about another pod (the one a rollout replaced) is no sign about this one."""
    other = service_logs.pod_named_in(line)
    return bool(pod and other and other != pod)


def _cited_writer_gone(action: Action, by_id: dict[str, Observation], facts: Facts) -> bool:
    """A cited line names its writer's pid (vLLM's `(EngineCore pid=412)`) and the process table
    has no such process, while it has another pid the same log names (so both are numbered in
    one pid namespace, a retry's engine beside the first attempt's): that writer is gone."""
    if not facts.ps_available or facts.ps_outside:
        return False
    named = proof.log_pids(_cited(action))
    if not named or all(pid in facts._ps_recs for pid in named):
        return False
    logs = {str(e.get("observation", "")) for e in action.get("evidence") or []}
    everyone = {
        pid
        for oid in logs
        if (o := by_id.get(oid)) is not None
        for pid in proof.log_pids(text_lines(o))
    }
    return any(pid in facts._ps_recs for pid in everyone)


def _killed(action: Action, by_id: dict[str, Observation], facts: Facts, hits: Hits) -> list[str]:
    out = []
    # the server gone, one of its ranks gone, or its core (scheduler, engine core) gone, or the
    # process the cited lines name as their writer gone (an earlier attempt's engine core, while
    # a retry runs under another pid)
    gone = (
        facts.server_alive is not True
        or facts.ranks_gone
        or facts.core_gone_line
        or _cited_writer_gone(action, by_id, facts)
    )
    if not gone and positive_external_sign(list(by_id.values()), hits) is None:
        out.append(
            "[killed_externally] needs the server process (or one of its ranks, or its core) gone, "
            "or a line showing it was stopped from outside"
        )
    obs = list(by_id.values())
    if (
        not out
        and facts.server_alive is False
        and not facts.ranks_gone
        and positive_external_sign(obs, hits) is None
        and not _log_has_a_launch(obs)
    ):
        out.append(
            "[killed_externally] nothing ties a process to this log (no engine launch line in "
            "it, no writer pid): that no engine process runs does not show this launch is "
            "gone; find the process that writes it (a notebook kernel, a custom script)"
        )
    ready = next((m.line for _o, m in hits if m.strength == "ready"), None)
    if (
        not out
        and ready is not None
        and not facts.dmesg_available
        and facts.server_alive is False
        and not facts.ranks_gone
        and not facts.core_gone_line
        and positive_external_sign(obs, hits) is None
    ):
        out.append(
            f"[killed_externally] the server was up ({ready[:80]!r}) and no process here runs "
            "it now, with no line of an end and the kernel log unread: an OOM kill, a stop from "
            "outside and a server that runs on another machine (a cluster job on its node) "
            "cannot be told apart; read the kernel log (sudo dmesg -T) and where the launch runs"
        )
    stopped = frozenset(
        m.line
        for _, m in hits
        if m.label == "killed_externally" and m.strength in ("fatal", "strong")
    )
    own = own_fatal_since_launch(list(by_id.values()), stopped)
    if own is not None:
        out.append(
            f"[killed_externally] the log holds an error of the process's own ({own[0]}): "
            f"{own[1][:100]!r}; conclude what that error says"
        )
    if facts.dmesg_available and any(OOM_KILL.search(ln) for ln in facts.dmesg_lines):
        out.append("[killed_externally] the kernel log shows an OOM kill: that is host_oom_killed")
    crash = kills.own_crash(obs)
    if crash is not None:
        out.append(
            f"[killed_externally] the kernel log shows the launch's process died of a fault of "
            f"its own ({crash[0]}): {crash[1][:140]!r}; a crash, not a stop from outside: "
            "conclude what crashed it (the launch's arguments, the model, the build)"
        )
    # an outside end shown by a line of its own (a signal, a probe, a timeout kill) rests on
    # that line; only a conclusion from absence must not talk over an error-shaped line
    outside = positive_external_sign(list(by_id.values()), hits)
    clue = unexplained_log_error(list(by_id.values())) if outside is None else None
    if own is None and clue is not None:
        out.append(
            f"[killed_externally] the log ends on an error of its own that no rule explains "
            f"({clue[0]}): {clue[1][:120]!r}; not silence, so nothing is inferred from absence: "
            "read what that line names (the full log around it, the launch command)"
        )
    return out


def _log_has_a_launch(observations: list[Observation]) -> bool:
    """A log read names its launch: an engine's launch line or name, or a pid as its writer.
    Without one, "no engine process runs" says nothing about the process that wrote it."""
    from tools import engines

    names = engines.name_pattern()
    for o in observations:
        if o["ok"] and o["tool"] in LOG_TOOLS:
            lines = text_lines(o)
            if proof.log_pids(lines) or any(launch_line(ln) or names.search(ln) for ln in lines):
                return True
    # an inference launch's phase or progress line (weights loading, shards, graph capture)
    from agent.signatures import scan

    return any(
        m.strength in ("progress", "ready") or m.signature.startswith("phase-")
        for o in observations
        if o["ok"] and o["tool"] in LOG_TOOLS
        for m in scan(text_lines(o)[-200:])
    )


def unexplained_log_error(observations: list[Observation]) -> tuple[str, str] | None:
    """(observation id, line) of an error-shaped line among the last lines of the newest read
    of the launch's log since its last launch (agent/rules/proof.py `unexplained_error`)."""
    newest: dict[str, Observation] = {}
    for o in observations:
        if o["ok"] and o["tool"] in LOG_TOOLS:
            newest[str(o["args"].get("path"))] = o
    for o in newest.values():
        lines = text_lines(o)
        line = proof.unexplained_error(lines[last_launch(lines) :])
        if line is not None:
            return o["id"], line
    return None


def _bad_launch(
    action: Action, by_id: dict[str, Observation], facts: Facts, hits: Hits
) -> list[str]:
    """A setting proven wrong by host facts needs no crash line: a node of rank >= 1 told to meet
    rank 0 at its own address hangs without printing an error."""
    obs = launch_reads(list(by_id.values()), facts)
    if rules_causes.rendezvous_self(obs) is not None:
        return []
    if rules_causes.rendezvous_disagree(obs) is not None and (
        stall_proof(list(by_id.values()), facts) is not None
        or any(m.label == "nccl_failure" and m.strength == "fatal" for _, m in hits)
    ):
        return []  # the script's nodes meet at different addresses: init waits, or times out
    if rules_causes.loopback_across_nodes(obs) is not None:
        return []  # NCCL on lo across hosts: the ranks never meet, and nothing is printed
    if rules_causes.remote_rank_at_loopback(obs) is not None:
        return []  # a rank on another node sent to 127.0.0.1: it waits there forever
    if rules_causes.unresolvable_rendezvous(obs) is not None:
        return []  # the resolver's own error names the rendezvous host: the ranks retry forever
    if rules_causes.hidden_gpus(facts, obs) is not None:
        return []  # the engine's own count against nvidia-smi's: it runs, on too few GPUs
    if rules_hang.long_resource_wait(facts, obs) is not None:
        return []  # waiting for GPUs for longer than any node takes to join: they do not exist
    if containers.unpublished(facts.container, obs) is not None:
        return []  # ready inside a container whose run command publishes no port for it
    if containers.no_gpu_given(facts.container, obs) is not None and not (
        {m.label for _, m in hits if m.strength == "fatal"} & containers.NOT_FOR_WANT_OF_A_GPU
    ):
        return []  # given no GPU, and its engine says it sees none: the run command's fault
    return _crash_rule(action, by_id, facts, hits)


def _arch(action: Action, by_id: dict[str, Observation], facts: Facts, hits: Hits) -> list[str]:
    """A live, silent server on a GPU newer than its build's toolkit: the capability and the
    toolkit prove it without a crash line (the driver JIT-compiles, nothing is printed)."""
    if rules_causes.arch_beyond_build(facts, list(by_id.values())) is not None:
        return []
    return _crash_rule(action, by_id, facts, hits)


def _healthy(action: Action, by_id: dict[str, Observation], facts: Facts, hits: Hits) -> list[str]:
    """Up and fine is a finding like any other, and needs its proof: the launch alive, its own
    ready line cited (a /health probe the front end answered is not the engine), none of its
    ranks or its core gone, and no fatal line of its own after that ready line."""
    out = []
    if facts.server_alive is not True:
        out.append("[healthy] needs the server process alive now (ps)")
    if facts.ranks_gone or facts.core_gone_line:
        out.append("[healthy] a rank or the engine core of the launch is gone")
    if _front_end_gone(facts):
        # an engine core or rank outliving its main process answers no one: the front end
        # that serves requests (vLLM's API server, SGLang's launch_server) is that main process
        out.append(
            "[healthy] only workers of the launch are alive (pid "
            f"{', '.join(map(str, facts.server_worker_pids[:3]))}): its main process, the front "
            "end that answers requests, is gone"
        )
    ready = [
        (o, m)
        for o, m in hits
        if m.strength == "ready"
        and not proof.frontend_only(m.line)
        and not rules_liveness.launch_after(o, m.line_no)  # the front end's, before its engine
        and any(_sig_on(c, [(o, m)]) for c in _cited(action))
    ]
    if not ready:
        out.append("[healthy] cites no ready line of the launch's own (its 'ready'/'running on')")
        return out
    obs, m = ready[-1]
    lines = text_lines(obs)  # the lines the signature scan numbered
    later = [lines[i] for i, _ in proof.fatal_lines(lines) if i > m.line_no]
    if later:
        out.append(f"[healthy] the log has an error after its ready line: {later[-1][:100]!r}")
    refused = [ln for ln in lines[m.line_no + 1 :] if _SERVER_ERROR_REPLY.search(ln)]
    if refused:
        # up is not "answering": requests after the ready line got a server error (a proxy that
        # marked its child failed, an engine that refuses work)
        out.append(
            f"[healthy] requests after its ready line were answered with a server error: "
            f"{refused[-1][:100]!r}"
        )
    stalled = stall_proof(list(by_id.values()), facts)
    if stalled in ("stacks", "pinned") and rules_hang.silent(facts):
        # up once, stuck now: ready, then its log silent over a watched read while its ranks
        # spin (GPUs pinned) or wait in a collective
        out.append(
            "[healthy] it was ready, but its log is silent over a watched read while its ranks "
            + ("wait in a collective (stacks)" if stalled == "stacks" else "spin (GPUs pinned)")
            + ": a stall after start-up, not a healthy server"
        )
    return out


def _front_end_gone(facts: Facts) -> bool:
    """Only workers of the launch are alive and nothing could be their main process: no live
    process of theirs started when they did (a wrapper the registry does not know,
    `mineru-vllm-server`, would be one)."""
    workers = [facts._ps_recs.get(p, {}) for p in facts.server_worker_pids]
    if not workers or facts.server_main_pids:
        return False
    if any(
        r.get("role") in ("main", "launcher") and r.get("user") in {w.get("user") for w in workers}
        for r in facts._ps_recs.values()
        if r.get("server") and not r.get("zombie")
    ):
        return False  # a main of theirs runs, the launch's or not: not this rule's to say
    starts = {(r.get("user"), r.get("started")) for r in workers if r.get("started")}
    if not starts:
        return False  # no start times: whose child they are cannot be told
    return not any(
        (r.get("user"), r.get("started")) in starts and not r.get("zombie")
        for p, r in facts._ps_recs.items()
        if p not in facts.server_worker_pids
    )


#: an access-log line of a request answered 5xx: `"POST /v1/chat/completions HTTP/1.1" 503`
_SERVER_ERROR_REPLY = re.compile(r'"(?:GET|POST|PUT) /[^"]*" 5\d\d\b')


RULES: dict[str, Rule] = {
    "healthy": _healthy,
    "unsupported_gpu_arch": _arch,
    "bad_launch_argument": _bad_launch,
    "nccl_failure": _nccl,
    "still_starting": _still_starting,
    "stale_gpu_process": _stale,
    "killed_externally": _killed,
    "disk_full": _disk,
    "shm_too_small": _shm,
    "host_oom_killed": _host_oom,
    "gpu_hardware_fault": _hardware,
    "cuda_driver_mismatch": _driver,
}


def check_conclusion(action: Action, observations: list[Observation], facts: Facts) -> list[str]:
    """Every problem with a proposed conclusion; empty means it may stand."""
    label = action.get("label") or ""
    if label not in LABELS:
        return [f"[{label}] is not a taxonomy label"]
    by_id = {o["id"]: o for o in observations}
    evidence = action.get("evidence") or []
    problems = citation_problems(label, evidence, by_id)
    if problems:
        return problems
    theirs = launch_mod.build(observations, facts).bystander_lines()
    if evidence and all(str(e.get("line") or "") in theirs for e in evidence):
        return [
            f"[{label}] cites only bystanders' lines (other users' processes, other jobs' kernel "
            "kills, logins): they say nothing about this launch; cite the launch's own lines"
        ]
    hits = signature_hits(observations)
    rule = RULES.get(label, _crash_rule)
    return rule(action, by_id, facts, hits)


def qualify(action: Action, observations: list[Observation], facts: Facts) -> Action:
    """A conclusion that passed the gate but rests on absence says so: lower confidence, the
    reason in the summary, and the check that would confirm it in the next step."""
    if action.get("label") == "nccl_failure":
        return _qualify_hang(action, observations, facts)
    if action.get("label") == "still_starting":
        return _qualify_slow_bar(action, observations, facts)
    if action.get("label") == "shm_too_small":
        return _qualify_shm_ring(action, observations, facts)
    if action.get("label") != "killed_externally":
        return action
    if positive_external_sign(observations) is not None:
        return action
    unread = [] if facts.dmesg_available else ["the kernel log could not be read"]
    why = "inferred from absence: the process is gone and printed no error of its own"
    if unread:
        why += f"; {unread[0]}"
    confirm = (
        " To confirm: look for who stopped it (`journalctl -k` / `sudo dmesg -T` for kills, the "
        "supervisor's or Kubernetes events, a launcher timeout, shell history)."
    )
    return _inferred(
        action,
        "killed_externally",
        f"({why})",
        confirm,
    )


def _inferred(action: Action, label: str, why: str, confirm: str) -> Action:
    """A conclusion the proof allows only by inference: its confidence capped, the summary
    saying how it was inferred, the next step naming the read that would confirm it."""
    return Action(
        **{
            **action,
            "confidence": min(float(action.get("confidence") or 0.0), INFERRED_CONFIDENCE),
            "summary": f"{action.get('summary') or label} {why}",
            "next_step": (action.get("next_step") or "") + confirm,
        }
    )


def _qualify_shm_ring(action: Action, observations: list[Observation], facts: Facts) -> Action:
    """/dev/shm proven too small only by numbers (the ring the launch maps is bigger than it):
    the shortfall is shown, the death it causes (a bus error once traffic fills the ring) is
    not, so the conclusion is said to be inferred, with the read that would show the death."""
    if not shm_short(facts):
        return action
    if any(
        m.label == "shm_too_small" and m.strength in ("fatal", "strong")
        for _, m in signature_hits(observations)
    ):
        return action
    return _inferred(
        action,
        "shm_too_small",
        f"(inferred: {facts.shm_need_mib:.0f} MiB asked of a {facts.shm_mib:.0f} MiB /dev/shm "
        "shows the shortfall; the bus error it causes was not seen)",
        " To confirm: the worker's exit (SIGBUS, exit code 135 or -7) in the log or "
        "`dmesg -T`, or relaunch with a larger /dev/shm (`--shm-size`, `--ipc=host`) and "
        "see it pass.",
    )


def _qualify_slow_bar(action: Action, observations: list[Observation], facts: Facts) -> Action:
    """still_starting whose only sign of work is a bar slower than the watched window: said to
    be inferred, with the watch long enough to see one step."""
    if any(facts.log_growth.values()):
        return action
    slow = rules_hang.slow_bar(observations, facts)
    slowed = rules_hang.slowed_by_setting(facts, observations)
    if (
        slow is None
        and slowed is not None
        and not (
            rules_hang.gpu_memory_moved(observations)
            or rules_hang.quiet_phase_at_work(facts, observations)
        )
    ):
        _, line, pid = slowed
        return _inferred(
            action,
            "still_starting",
            f"(inferred: the log did not grow in the watch; the engine warned that a setting "
            f"slows every step ({line.strip()[:90]!r}) and pid {pid} is busy on a CPU)",
            f" To confirm: `py-spy dump --pid {pid}` shows it loading or compiling, or the log "
            "moves on given more time; remove the setting and relaunch to start at full speed.",
        )
    if slow is None:
        work = working_on_logged_file(facts, observations)
        if work is None:
            return action
        pid, _, path = work
        # no growth seen: that the helper's work is what the launch waits on is inferred
        return _inferred(
            action,
            "still_starting",
            f"(inferred: the log did not grow in the watch; pid {pid} is at work on {path})",
            f" To confirm: the log moves on once pid {pid} ends; if pid {pid} is gone and "
            "the log still says nothing, the launch is stuck.",
        )
    _, _, pace, window = slow
    need = int(1.5 * pace + 1)
    pid = (facts.server_main_pids or facts.server_pids or [None])[0]
    stack = f" or `py-spy dump --pid {pid}` shows it reading weights" if pid else ""
    return _inferred(
        action,
        "still_starting",
        f"(inferred: at {pace:.0f} s per step the {window:.0f} s watch was too short to see one)",
        f" To confirm: watch past one step (PIVOT_LIVENESS_MAX_S={need} pivot investigate "
        f"...){stack}; a step that never comes is a stalled load.",
    )


def _qualify_hang(action: Action, observations: list[Observation], facts: Facts) -> Action:
    """A hang inferred from spinning GPUs (no stacks read) is said to be inferred, with the
    reads that would prove it."""
    by_id = {o["id"]: o for o in observations}
    if stall_proof(observations, facts) not in ("pinned", "static") or crash_lines(
        action.get("evidence") or [], by_id, signature_hits(observations)
    ):
        return action
    pid = (facts.server_main_pids or facts.server_pids or [None])[0]
    dump = f"py-spy dump --pid {pid}" if pid else "py-spy dump --pid <server pid>"
    confirm = (
        f" To confirm the hang: `{dump}` (stacks in all_reduce/barrier/ncclCommInit prove a stuck "
        "collective); relaunch with NCCL_DEBUG=INFO to see which rank stops; try NCCL_P2P_DISABLE=1 "
        "once as a test (a broken P2P path: ACS/IOMMU); check `nvidia-smi topo -m`."
    )
    return _inferred(
        action,
        "nccl_failure",
        "(inferred from a stall: alive, "
        "silent over the watched window, GPUs "
        + ("spinning" if stall_proof(observations, facts) == "pinned" else "static")
        + "; stacks not read)",
        confirm,
    )
