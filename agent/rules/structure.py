"""Fatal lines no signature knows: the process still died of an error of its own.

A line fatal by structure (agent/rules/proof.py) that no signature labels is weighed by its words
(`label_hints` in knowledge/structure.yaml), less than a signature would be, and it always speaks
against "killed from outside": a process that printed its own fatal error was not silently
stopped. An error line followed by more progress from a live server is noise and is skipped.
"""

from __future__ import annotations

import re

from agent.evidence import LOG_TOOLS, last_launch, latest_text_observations, text_lines
from agent.facts import Facts
from agent.hits import set_aside_logs
from agent.rules import proof
from agent.rules.common import F
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
    if final and not any(facts.log_growth.values()):
        fo, fidx, fline, _ = final[-1]
        if not _progress_after(fo, fidx, hits):
            # a traceback ended a component of the launch and nothing moved on after it (only
            # waits, or nothing): its start-up ended there, whatever the process table says
            add(
                "still_starting",
                "fact",
                F.refutes,
                fo["id"],
                fline,
                "an exception of the launch's own ended its start-up; no progress after it",
            )
    logs = {ob["id"] for ob, _, _, _ in own}
    if any(
        m.label
        and m.strength in ("fatal", "strong")
        and not m.signature.startswith("phase-")
        and not proof.is_wrapper(m.line)  # "a worker failed, see above": the cause is the above
        and ho["id"] in logs  # a pod's "Last State: Terminated" elsewhere names no log's error
        for ho, m in hits
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
            stmt = raising_statement(text_lines(o), idx)
            if stmt is not None:
                add(
                    label,
                    "structure",
                    THRESHOLDS.fact.hints,
                    o["id"],
                    stmt,
                    "the statement that raised it: a bare exception says no more than this",
                )
            break


_BARE = re.compile(r"(?:^|\s|\])\s*(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\s*$")
#: a caret line under a frame's code, bare or under a logger's prefix ("ERROR ... core.py:208]")
_CARETS = re.compile(r"(?:^|\]|\|)\s*[\^~]+\s*$")


def raising_statement(lines: list[str], index: int) -> str | None:
    """The source line a bare exception (`AssertionError` with no message) was raised by: the
    traceback's last code line above it (an `assert`'s condition is the message it lacks)."""
    if not _BARE.search(lines[index]):
        return None
    for ln in reversed(lines[max(0, index - 4) : index]):
        body = ln.strip()
        if not body or _CARETS.search(ln) or body.endswith("]"):
            continue  # a caret line, or a logger's prefix with nothing after it
        return None if re.search(r'(?:^|\]\s)\s*File "', ln) else ln
    return None
