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
    before = _before_last_launch(list(newest.values()))
    for o in newest.values():
        lines = text_lines(o)
        start = last_launch(lines) if o["tool"] in LOG_TOOLS and not _searched(o) else 0
        older = before.get(_log_key(o), set()) if _searched(o) else set()
        for i, kind in proof.fatal_lines(lines[start:]):
            ln = lines[start + i]
            if kind == "exit_signal" or proof.external_end(ln) or OOM_KILL.search(ln):
                continue
            if proof.peer_lost(ln) or ln in skip or ln in older:
                continue
            return o["id"], ln
    return None


def _searched(o: Observation) -> bool:
    """A search of a log (log_search, a container's or pod's log read with a pattern): its lines
    are hits from anywhere in the file, with no launch boundary of their own."""
    return o["tool"] == "log_search" or bool(o["args"].get("pattern"))


def _log_key(o: Observation) -> str:
    """Which log a read is of: a file's path, or the container/pod named."""
    a = o["args"]
    return str(a.get("path") or f"{o['tool'].split('_')[0]}:{a.get('name') or ''}")


def _before_last_launch(reads: list[Observation]) -> dict[str, set[str]]:
    """Per log, the lines a search may not count as the launch's own: where the newest whole read
    of that log (no pattern) shows a later launch, every line of it before that launch, and any
    line it does not show at all (older than its window, which begins before that launch)."""
    out: dict[str, set[str]] = {}
    for o in reads:
        if _searched(o) or o["tool"] not in LOG_TOOLS:
            continue
        lines = text_lines(o)
        start = last_launch(lines)
        if start > 0:
            out[_log_key(o)] = set(lines[:start])
            out[_log_key(o) + "#after"] = set(lines[start:])
    for o in reads:
        key = _log_key(o)
        if _searched(o) and key + "#after" in out:
            after = out[key + "#after"]
            out[key] = out[key] | {ln for ln in text_lines(o) if ln not in after}
    return out
