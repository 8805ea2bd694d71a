"""Fatal lines no signature knows: the process still died of an error of its own.

A line fatal by structure (agent/rules/proof.py) that no signature labels is weighed by its words
(`label_hints` in knowledge/structure.yaml), less than a signature would be, and it always speaks
against "killed from outside": a process that printed its own fatal error was not silently
stopped. An error line followed by more progress from a live server is noise and is skipped.
"""

from __future__ import annotations

from agent.evidence import LOG_TOOLS, last_launch, latest_text_observations, text_lines
from agent.facts import Facts
from agent.hits import set_aside_logs
from agent.rules import proof
from agent.signatures import Match
from agent.state import Observation
from agent.thresholds import THRESHOLDS

#: A hint from a line's words is weaker than a signature's fatal weight but can lead alone
#: (agent/knowledge/thresholds.yaml).
HINT_WEIGHT = THRESHOLDS.structure.hint_weight
AGAINST_KILLED = THRESHOLDS.structure.against_killed


def _progress_after(o: Observation, index: int, hits: list[tuple[Observation, Match]]) -> bool:
    return any(
        oo["id"] == o["id"] and m.strength in ("progress", "ready") and m.line_no > index
        for oo, m in hits
    )


def own_fatal_lines(
    facts: Facts, observations: list[Observation], hits: list[tuple[Observation, Match]]
) -> list[tuple[Observation, int, str, str]]:
    """(observation, index, line, kind) of fatal lines since the last launch that no labelled
    signature explains and that are not signals from outside or noise from a live server."""
    known = {(o["id"], m.line_no) for o, m in hits if m.label and m.strength in ("fatal", "strong")}
    aside = set_aside_logs(observations)
    out = []
    for o in latest_text_observations(observations):
        if o["tool"] not in LOG_TOOLS | {"log_search"} or str(o["args"].get("path")) in aside:
            continue
        lines = text_lines(o)
        start = last_launch(lines) if o["tool"] in LOG_TOOLS else 0
        for i, kind in proof.fatal_lines(lines[start:]):
            idx = start + i
            ln = lines[idx]
            if (o["id"], idx) in known or kind == "exit_signal" or proof.external_end(ln):
                continue
            if proof.peer_lost(ln):
                continue
            if facts.server_alive and kind != "exception" and _progress_after(o, idx, hits):
                continue
            out.append((o, idx, ln, kind))
    return out


def structure_rules(facts: Facts, observations: list[Observation], hits, add) -> None:  # type: ignore[no-untyped-def]
    own = own_fatal_lines(facts, observations, hits)
    if not own:
        return
    # the last exception line is the one that ended the process; otherwise the first error
    final = [x for x in own if x[3] == "exception"]
    o, _, line, _ = final[-1] if final else own[0]
    add(
        "killed_externally",
        "fact",
        AGAINST_KILLED,
        o["id"],
        line,
        "the process printed a fatal error of its own: it was not silently stopped",
    )
    if any(
        m.label and m.strength in ("fatal", "strong") and not m.signature.startswith("phase-")
        for _, m in hits
    ):
        return  # a signature names the failure more precisely than a line's words can
    for o, idx, ln, _ in ([final[-1]] if final else []) + own[:3]:
        label = proof.label_hint(ln)
        if label in (None, "bad_launch_argument"):
            # a generic exception type: where it was raised says more than its name
            label = proof.frame_hint(text_lines(o), idx) or label
        if label:
            add(
                label,
                "structure",
                HINT_WEIGHT,
                o["id"],
                ln,
                f"a fatal line no signature knows; its words point at {label}",
            )
            break
