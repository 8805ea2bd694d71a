"""Which signature lines are this launch's evidence: the last launch's lines of each latest log,
less what only an earlier run printed and kills of other jobs (agent/kills.py).

Its own module because it reads both agent/evidence.py and agent/kills.py, and kills.py reads
evidence.py: kept in evidence.py it made the two import each other.
"""

from __future__ import annotations

import re

from agent.evidence import (
    LOG_TOOLS,
    earlier_run_logs,
    last_launch,
    latest_text_observations,
    launch_line,
    text_lines,
)
from agent.kills import bystander_kills
from agent.signatures import Match, scan
from agent.state import Observation
from tools import logtime, service_logs
from tools.logfile import rotation_of

#: what an earlier run's log cannot say about this one: that it is ready, or still going
_NOW_STRENGTHS = ("ready", "progress")


def _superseded_rotations(
    observations: list[Observation], latest: list[Observation], old_logs: set[str]
) -> set[str]:
    """Rotated files (server.log.1) of a log whose newest read starts a launch of its own, and
    that ended before it began: an earlier run's whole story (yesterday's failure), none of it
    this launch's. A rotation whose log has no start of its own still holds the launch's
    start-up, and a log that is not a rotation (a test run's, another job's) is weighed as
    before: which of two unrelated logs is the launch's is not known from their names.
    Where the logs carry no timestamps, a rotation of the log the operator named is still the
    earlier file (a rotation renames the log it was; the named log starts anew after it)."""
    starts = {
        str(o["args"]["path"])
        for o in latest
        if o["tool"] in LOG_TOOLS
        and o["args"].get("path")
        and any(launch_line(ln) for ln in text_lines(o))
    }
    read = {
        str(o["args"]["path"]) for o in latest if o["tool"] in LOG_TOOLS and o["args"].get("path")
    }
    named = starts & _given_logs(observations)
    rotated = {r for r in read if any(rotation_of(base, r) for base in named)}
    return {old for old in old_logs | rotated if any(rotation_of(base, old) for base in starts)}


def _given_logs(observations: list[Observation]) -> set[str]:
    """The logs the investigation was given (the operator's, the launch's), as the process
    reads were told of them."""
    return {
        str(p)
        for o in observations
        if o["tool"] == "processes"
        for p in (o["args"].get("logs") or [])
    }


def _before_the_given_log(
    observations: list[Observation], latest: list[Observation], old_logs: set[str]
) -> set[str]:
    """Logs of earlier runs (ended before another log began), when the log the operator named
    starts a launch of its own and is not one of them: a smoke test's log of yesterday beside
    today's server.log is another run's story, none of it this launch's. Without a named log,
    or when the named log is the earlier one, they are weighed as before."""
    given = _given_logs(observations)
    own = {
        str(o["args"]["path"])
        for o in latest
        if o["tool"] in LOG_TOOLS
        and str(o["args"].get("path", "")) in given
        and any(launch_line(ln) for ln in text_lines(o))
    }
    if not own or own & old_logs:
        return set()
    return old_logs - given


def set_aside_logs(observations: list[Observation]) -> set[str]:
    """Paths of logs that hold none of this launch's story: rotations that ended before their
    log's own launch began, and earlier runs' logs beside the log the operator named. Every
    reader of fatal lines skips them, as the signature hits do: yesterday's traceback in
    server.log.1 is neither this launch's proof nor an error of its own."""
    latest = latest_text_observations(observations)
    return _set_aside(observations, latest, earlier_run_logs(latest))


def _set_aside(
    observations: list[Observation], latest: list[Observation], old_logs: set[str]
) -> set[str]:
    return (
        _superseded_rotations(observations, latest, old_logs)
        | _before_the_given_log(observations, latest, old_logs)
        | _before_the_runtime_log(latest)
    )


#: the pod's own start (`kubectl describe pod`'s "Start Time:"), before any of its instances
_POD_START = re.compile(r"^\s*Start Time:\s")


def _before_the_runtime_log(latest: list[Observation]) -> set[str]:
    """Log files that ended before the launch's own pod log began its launch: `kubectl logs`
    of the pod the operator named is this launch's, so a file on the box whose last line is
    older than that start (an operator's saved copy of the pod before, stopped by a rollout) is
    an earlier run's, none of it this launch's. A pod found by a cluster-wide search is not
    known to be the launch, and a pod whose container restarted is in a loop whose earlier
    instances' logs are its story: neither sets anything aside."""
    starts = []
    for o in latest:
        if o["tool"] != "service_logs" or not o["ok"] or not o["args"].get("name"):
            continue
        if o["args"].get("pattern") or o["args"].get("previous"):
            continue
        if service_logs.pod_restarted(o["lines"]):
            # a loop: its earlier instances are its story, but not what ended before the pod
            # itself began (yesterday's saved log of another pod)
            began = next((ln for ln in o["lines"] if _POD_START.match(ln)), None)
            sp = logtime.span([began]) if began else None
            if sp is not None:
                starts.append(sp[0])
            continue
        lines = text_lines(o)
        marks = [i for i, ln in enumerate(lines) if launch_line(ln)]
        sp = logtime.span(lines[marks[-1] :]) if marks else None
        if sp is not None:
            starts.append(sp[0])
    if not starts:
        return set()
    out = set()
    for o in latest:
        path = str(o["args"].get("path") or "")
        if o["tool"] not in LOG_TOOLS or not path:
            continue
        sp = logtime.span(text_lines(o))
        if sp is not None and all(logtime.before(sp[1], first) for first in starts):
            out.add(path)
    return out


def earlier_runs_set_aside(observations: list[Observation]) -> set[str]:
    """The logs of earlier runs that the log the operator named sets aside (the verdict says
    which file is which)."""
    latest = latest_text_observations(observations)
    return _before_the_given_log(observations, latest, earlier_run_logs(latest))


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
    superseded = _set_aside(observations, latest, old_logs)  # what set_aside_logs() says
    foreign = bystander_kills(latest)  # a kill of another job is never this launch's evidence
    for o in latest:
        lines = text_lines(o)
        start = last_launch(lines) if o["tool"] in LOG_TOOLS else 0
        path = str(o["args"].get("path", ""))
        if path in superseded:
            continue
        old = path in old_logs
        for m in scan(lines):
            if m.line_no >= start and m.line not in earlier_runs and m.line not in foreign:
                if old and m.strength in _NOW_STRENGTHS:
                    continue
                out.append((o, m))
    return out
