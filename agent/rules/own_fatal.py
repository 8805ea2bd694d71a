"""The launch's own fatal line: the one proof of a crash both the gate and the hang rules ask
for. It sits apart from the guardrails so the hang rules can ask it without an
import circle (guardrails reads them)."""

from __future__ import annotations

import re

from agent.evidence import LOG_TOOLS, last_launch, text_lines
from agent.hits import set_aside_logs
from agent.rules import proof
from agent.state import Observation

OOM_KILL = re.compile(
    r"(?i)Out of memory: Kill|oom-kill|invoked oom-killer|OOMKilled(?!\"?:?\s*\"?(?:false|0)\b)|"
    r"Memory cgroup out of memory|"
    r"running low on memory|oom_reaper"
)


def own_fatal_since_launch(
    observations: list[Observation], skip: frozenset[str] = frozenset()
) -> tuple[str, str] | None:
    """(observation id, line) of a fatal line by structure the server printed itself since its
    last launch, in any log read; signal and exit lines from outside do not count, nor the
    lines in `skip` (a supervisor's own report of its timeout kill, `level=ERROR ... timed out
    waiting for llama runner to start`, is the end from outside, not the process's error)."""
    newest: dict[str, Observation] = {}
    aside = set_aside_logs(observations)
    for o in observations:
        if str(o["args"].get("path")) in aside:
            continue
        if o["ok"] and o["tool"] in LOG_TOOLS | {"log_search"}:
            newest[f"{o['tool']}:{o['args'].get('path')}:{o['args'].get('pattern')}"] = o
    for o in newest.values():
        lines = text_lines(o)
        start = last_launch(lines) if o["tool"] in LOG_TOOLS else 0
        for i, kind in proof.fatal_lines(lines[start:]):
            ln = lines[start + i]
            if kind == "exit_signal" or proof.external_end(ln) or OOM_KILL.search(ln):
                continue
            if proof.peer_lost(ln) or ln in skip:
                continue
            return o["id"], ln
    return None
