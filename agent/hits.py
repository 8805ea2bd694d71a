"""Which signature lines are this launch's evidence: the last launch's lines of each latest log,
less what only an earlier run printed and kills of other jobs (agent/kills.py).

Its own module because it reads both agent/evidence.py and agent/kills.py, and kills.py reads
evidence.py: kept in evidence.py it made the two import each other.
"""

from __future__ import annotations

from agent.evidence import (
    LOG_TOOLS,
    earlier_run_logs,
    last_launch,
    latest_text_observations,
    text_lines,
)
from agent.kills import bystander_kills
from agent.signatures import Match, scan
from agent.state import Observation

#: what an earlier run's log cannot say about this one: that it is ready, or still going
_NOW_STRENGTHS = ("ready", "progress")


def signature_hits(observations: list[Observation]) -> list[tuple[Observation, Match]]:
    out: list[tuple[Observation, Match]] = []
    latest = latest_text_observations(observations)
    earlier_runs: set[str] = set()  # lines only an earlier launch printed
    for o in latest:
        if o["tool"] in LOG_TOOLS:
            lines = text_lines(o)
            cut = last_launch(lines)
            earlier_runs |= set(lines[:cut]) - set(lines[cut:])
    old_logs = earlier_run_logs(latest)
    foreign = bystander_kills(latest)  # a kill of another job is never this launch's evidence
    for o in latest:
        lines = text_lines(o)
        start = last_launch(lines) if o["tool"] in LOG_TOOLS else 0
        old = str(o["args"].get("path", "")) in old_logs
        for m in scan(lines):
            if m.line_no >= start and m.line not in earlier_runs and m.line not in foreign:
                if old and m.strength in _NOW_STRENGTHS:
                    continue
                out.append((o, m))
    return out
