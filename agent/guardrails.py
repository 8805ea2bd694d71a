"""Rules that hold whatever the brain says. They are code, not prompt text.

- A cited line must occur verbatim in the observation it names.
- "Crashed" needs the server gone or a fatal signature in the evidence, never a bare grep hit.
- "Still starting" needs the server alive and its log advancing between two reads.
- An OOM is blamed on a stale process only if another pid holds GPU memory now.
"""

from __future__ import annotations

from agent.evidence import signature_hits
from agent.facts import Facts
from agent.rules import stale_gpu_possible
from agent.state import Action, Observation
from tools.taxonomy import LABELS


def check_conclusion(action: Action, observations: list[Observation], facts: Facts) -> list[str]:
    """Every problem with a proposed conclusion; empty means it may stand."""
    label = action.get("label") or ""
    problems: list[str] = []
    if label not in LABELS:
        return [f"[{label}] is not a taxonomy label"]
    by_id = {o["id"]: o for o in observations}
    evidence = action.get("evidence") or []
    if not evidence:
        problems.append(f"[{label}] cites no evidence line")
    for ev in evidence:
        obs = by_id.get(ev.get("observation", ""))
        line = ev.get("line", "")
        if not line.strip():
            problems.append(f"[{label}] cites an empty line")
        elif obs is None:
            if not any(
                line in o["lines"] or any(line in ln for ln in o["lines"]) for o in observations
            ):
                problems.append(
                    f"[{label}] cites a line that occurs in no observation: {line[:80]!r}"
                )
        elif not any(line in ln for ln in obs["lines"]):
            problems.append(f"[{label}] cites a line not in observation {obs['id']}: {line[:80]!r}")
    cited = {ev.get("line", "") for ev in evidence}
    strong_hits = {
        m.line for _, m in signature_hits(observations) if m.strength in ("fatal", "strong")
    }
    fact_backed = label in {
        "stale_gpu_process",
        "killed_externally",
        "still_starting",
        "disk_full",
        "shm_too_small",
        "host_oom_killed",
        "gpu_hardware_fault",
        "cuda_driver_mismatch",
    }
    if label == "still_starting":
        if facts.server_alive is not True:
            problems.append("[still_starting] needs the server process alive (ps shows none)")
        if not any(facts.log_growth.values()):
            problems.append("[still_starting] needs the log to advance between two reads")
    elif label == "stale_gpu_process":
        if not stale_gpu_possible(facts, signature_hits(observations)):
            problems.append("[stale_gpu_process] needs GPU memory held by another pid now")
    elif label == "killed_externally":
        signalled = any(
            m.label == "killed_externally" and m.strength in ("fatal", "strong")
            for _, m in signature_hits(observations)
        )
        if facts.server_alive is not False and not signalled:
            problems.append(
                "[killed_externally] needs the server process gone or a line showing the signal"
            )
    elif (
        not fact_backed
        and not (cited & strong_hits)
        and not any(any(c in h for h in strong_hits) for c in cited)
    ):
        problems.append(
            f"[{label}] cites no fatal or strong signature line: a grep hit is not a crash"
        )
    return problems
