"""A restart loop: the container's earlier instance died, the current one repeats the launch.

Every other rule reads a log from its last launch on, so a container that restarts itself
(`restart: always`) and is loading again shows nothing wrong: the error that ended the instance
before is above the last launch line. With the container's own restart count above zero and its
log holding that earlier launch's end (a traceback's last line, or a fatal line a signature
knows near the end, such as a failed bind followed by an orderly shutdown), that end is why the container keeps restarting: weighed
for its label (a signature's, or the words of the line), and the current try is no sign of a
launch that is merely starting. Not when the current instance has failed on its own (then its
own error speaks) or the log holds one launch only.
"""

from __future__ import annotations

from agent.evidence import launch_starts, text_lines
from agent.facts import Facts
from agent.rules import proof
from agent.rules.common import PHASE_PREFIX, F
from agent.rules.passed import END_WINDOW, own_end, stages
from agent.signatures import Match, scan
from agent.state import Observation


def restart_rules(facts: Facts, observations: list[Observation], add) -> None:  # type: ignore[no-untyped-def]
    c = facts.container
    if c is None or c.restart_count <= 0:
        return
    reads = [
        o
        for o in observations
        if o["tool"] == "container_logs"
        and o["ok"]
        and not o["args"].get("pattern")
        and not o["args"].get("previous")
    ]
    if not reads:
        return
    o = reads[-1]
    lines = text_lines(o)
    starts = launch_starts(lines)
    if len(starts) < 2:
        return
    earlier, current = lines[starts[-2] : starts[-1]], lines[starts[-1] :]
    if own_end(current) is not None:
        return  # the current instance failed on its own: its error is weighed by the others
    named = [
        m
        for m in scan(earlier)
        if m.label
        and m.strength in ("fatal", "strong")
        and not m.signature.startswith(PHASE_PREFIX)
    ]
    end = own_end(earlier) or _fatal_near_end(earlier, named)
    if end is None:
        return
    hit = next((m for m in named if m.line == end), named[-1] if named else None)
    label = hit.label if hit is not None else proof.label_hint(end)
    if label is None:
        return
    line = hit.line if hit is not None else end
    why = (
        f"the container restarted {c.restart_count} times; the instance before this one died "
        "of this, and the current one repeats the same launch"
    )
    # a signature's fatal line ended the instance before, and the restart policy runs the same
    # launch again: that names the loop's cause as surely as a fatal line of the current one;
    # the current instance's progress (memory moving, shards loading) is the next round of it
    known = hit is not None and hit.strength == "fatal"
    add(label, "fact", F.proves if known else F.supports_clearly, o["id"], line, why)
    add("still_starting", "fact", F.refutes_strongly if known else F.refutes, o["id"], line, why)
    # the instances run one launch: the stages the one before got through, this one gets through
    for stage, rx in stages():
        passed = next((ln for ln in earlier if rx.search(ln)), None)
        if passed is not None:
            for other in stage.refutes:
                if other != label:
                    add(
                        other,
                        "stage",
                        F.refutes,
                        o["id"],
                        passed,
                        f"the instance before got past {stage.name}",
                    )


def earlier_instance_ended(facts: Facts, observations: list[Observation]) -> bool:
    """The container restarted and its log holds an earlier instance before the current one:
    the live instance is not the one that ended, so its being alive refutes no death."""
    c = facts.container
    if c is None or c.restart_count <= 0:
        return False
    return any(
        len(launch_starts(text_lines(o))) >= 2
        for o in observations
        if o["tool"] == "container_logs" and o["ok"] and not o["args"].get("pattern")
    )


def _fatal_near_end(lines: list[str], named: list[Match]) -> str | None:
    """A fatal line a signature knows among the earlier instance's last lines that is its own
    (a server's error line is not always a traceback: uvicorn's failed bind is one line, then an
    orderly shutdown); a line saying a peer or a signal ended it is not."""
    tail = set(lines[-END_WINDOW:])
    for m in reversed(named):
        if m.strength != "fatal" or m.line not in tail:
            continue
        if proof.external_end(m.line) or proof.peer_lost(m.line) or proof.is_wrapper(m.line):
            continue
        return m.line
    return None
