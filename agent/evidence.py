"""Which host lines count as evidence: the newest read of each log, from its last launch on.

Shared by the findings, the rules and the guardrails, so all three look at the same lines.
"""

from __future__ import annotations

import re
from functools import lru_cache

from agent.state import Observation
from tools import engines, logtime
from tools import registry as tool_registry

#: Tools whose lines are scanned for signatures, and those that are a launch's own log: each
#: tool says so on its spec (tools/registry.py).
TEXT_TOOLS = tool_registry.scanned()
LOG_TOOLS = tool_registry.launch_logs()
#: every read whose lines are a log's own text: the launch's logs (a file's tail, a container's
#: or a unit's log) and a search of them. A rule that reads "the log" reads all of these: a
#: container's log says what a file's would
LOG_READS = LOG_TOOLS | {"log_search"}


def text_lines(o: Observation) -> list[str]:
    return [ln for ln in o["lines"] if not ln.startswith("# ")]


def latest_text_observations(observations: list[Observation]) -> list[Observation]:
    """The newest read of each log (older reads of the same file only matter for growth). A
    container's or unit's log is its own log whatever the tool: reading a sidecar's log
    (`container_logs name=lmcache-server`) must not take the place of the launch's."""
    newest: dict[tuple[str, str, str, str, str], Observation] = {}
    for o in observations:
        if o["tool"] in TEXT_TOOLS and o["ok"]:
            args = o["args"]
            key = (
                o["tool"],
                str(args.get("path", "")),
                str(args.get("pattern", "")),
                # the instance before (`--previous`) is another log than the running one's
                str(bool(args.get("previous"))),
                # the container the read was of, as its result names it (an omitted name is
                # the investigated one; naming it outright is the same log)
                str(o["data"].get("container") or o["data"].get("name") or args.get("name") or ""),
            )
            newest[key] = o
    return list(newest.values())


@lru_cache(maxsize=1)
def _launch_markers() -> re.Pattern[str]:
    """Lines that start a launch, from the engine registry (the same ones log_search uses)."""
    return re.compile("|".join(f"(?:{p})" for p in engines.launch_patterns()))


@lru_cache(maxsize=1 << 16)
def launch_line(line: str) -> bool:
    """A line that starts a launch (the engine registry's launch markers); cached, as every
    rule that reads a log asks it of the same lines again."""
    return bool(_launch_markers().search(line))


@lru_cache(maxsize=1)
def _marker_kinds() -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in engines.launch_patterns())


def _marker_kind(line: str) -> int:
    return next(k for k, rx in enumerate(_marker_kinds()) if rx.search(line))


def launch_starts(lines: list[str]) -> list[int]:
    """Where each launch in an appended log starts. One launch prints several markers (vLLM's
    banner, its non-default args, its engine's init): a marker begins the next launch only when
    its kind was already printed by the launch it follows, so the header of one run is never
    read as two runs, and a restarted container's log splits where the relaunch begins."""
    starts: list[int] = []
    seen: set[int] = set()
    for i, ln in enumerate(lines):
        if not launch_line(ln):
            continue
        kind = _marker_kind(ln)
        if not starts or kind in seen:
            starts.append(i)
            seen = set()
        seen.add(kind)
    return starts


def last_launch(lines: list[str]) -> int:
    """Index where the last of several launches in an appended log starts (0 if one or none)."""
    starts = launch_starts(lines)
    return starts[-1] if len(starts) >= 2 else 0


def earlier_run_logs(latest: list[Observation]) -> set[str]:
    """Paths of logs read (the newest read of each) that ended before another log read began,
    by their own timestamps."""
    spans = {}
    for o in latest:
        if o["tool"] in LOG_TOOLS and o["args"].get("path"):
            lines = text_lines(o)
            sp = logtime.span(lines[last_launch(lines) :])
            if sp is not None:
                spans[str(o["args"]["path"])] = sp
    return logtime.earlier_logs(spans) if len(spans) > 1 else set()
