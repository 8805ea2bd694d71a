"""Run typed tools and turn their results into observations; independent reads run concurrently."""

from __future__ import annotations

import threading
from typing import Any

from pydantic import ValidationError

from agent.state import Observation
from tools import registry as tool_registry
from tools.base import ToolResult, bound_lines
from tools.container_host import answered_outside
from tools.host import Host
from tools.registry import TOOLS
from tools.shared_reads import at_once, one_wave

MAX_PARALLEL = 8


def call(host: Host, tool: str, args: dict[str, Any]) -> tuple[bool, list[str], dict[str, Any]]:
    spec = TOOLS.get(tool)
    if spec is None:
        return (
            False,
            [f"# error: no tool named {tool!r}", f"# fix: use one of {', '.join(TOOLS)}"],
            {},
        )
    try:
        with answered_outside() as seen:
            result: ToolResult = spec.call(host, args)
        lines = result.lines()
        if result.ok and seen:
            # the container could not answer (stopped, or its image lacks the program): the
            # machine's answer, said so (a tool that reads the machine anyway says nothing)
            lines = [
                f"# read on {result.host}, the machine: {'; '.join(dict.fromkeys(seen))}",
                *lines,
            ]
        return result.ok, bound_lines(lines), result.model_dump(mode="json")
    except ValidationError as exc:
        msg = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return False, [f"# error: bad arguments for {tool}: {msg}"], {}
    except Exception as exc:  # one tool's bug is a failed observation, never the end of the run
        return False, crash_lines(tool, exc), {}


def crash_lines(tool: str, exc: BaseException) -> list[str]:
    """What a tool that raised says in the observation: which tool, the exception type and
    message (one line, bounded), no traceback."""
    text = " ".join(str(exc).split())[:300] or "(no message)"
    return [
        f"# error: the {tool} tool failed: {type(exc).__name__}: {text}",
        "# fix: the check did not run, so this says nothing about the host; use another check",
    ]


def run_many(
    host: Host, calls: list[tuple[str, dict[str, Any]]], first_id: int, round_no: int
) -> list[Observation]:
    # one wave: a read two tools ask for at once is taken once (tools/shared_reads.py)
    with one_wave():
        results = at_once(
            lambda c: call(host, c[0], c[1]),
            calls,
            MAX_PARALLEL,
            "pivot-wave",
            first=lambda c: c[0] in TOOLS and TOOLS[c[0]].long_pole,
        )
    out: list[Observation] = []
    for i, ((tool, args), (ok, lines, data)) in enumerate(zip(calls, results, strict=True)):
        out.append(
            Observation(
                id=f"o{first_id + i}",
                tool=tool,
                args=args,
                ok=ok,
                lines=lines,
                data=data,
                round=round_no,
            )
        )
    return out


def first_wave(extra_logs: list[str], container: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """Round 0's first reads, as each tool's spec places itself in the sweep; the operator's
    logs go to `processes` so it can tie them to their writers; a container's record and log
    join them when the investigation is of a container."""
    return _calls(tool_registry.first_sweep(container), extra_logs)


def inside_wave(extra_logs: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """The first wave again inside a container the sweep found the server in (agent/detected):
    the reads of the server and of the container, not those of the machine."""
    return _calls(tool_registry.inside_sweep(), extra_logs)


def _calls(specs: list[Any], extra_logs: list[str]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (
            s.name,
            {"logs": list(extra_logs)}
            if s.name == "processes" and extra_logs
            else dict(s.first_sweep_args),
        )
        for s in specs
    ]


class Prefetch:
    """The first wave started early, in a thread, while the caller does something slow (the CLI
    imports the graph machinery, ~0.6 s): the same calls, the same tools, only sooner. The sweep
    node takes the result when its own calls are exactly these, and runs them itself otherwise."""

    def __init__(self, host: Host, calls: list[tuple[str, dict[str, Any]]]) -> None:
        self.host, self.calls = host, calls
        self._result: list[Observation] | None = None
        self._thread = threading.Thread(target=self._run, name="pivot-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self._result = run_many(self.host, self.calls, 1, 0)

    def take(self, host: Host, calls: list[tuple[str, dict[str, Any]]]) -> list[Observation] | None:
        if host is not self.host or calls != self.calls:
            return None
        self._thread.join()
        out, self._result = self._result, None
        return out


def since_earlier(new: list[Observation], earlier: list[Observation]) -> list[Observation]:
    """A log read again says how it changed since its previous read, not only within its own
    watch: a watch that saw nothing for 30 s after the file grew by a megabyte since the last
    read is a log at work between bursts, and a reader who sees only "did NOT grow" misses it."""
    out: list[Observation] = []
    for o in new:
        path = (o.get("data") or {}).get("path") if o["tool"] == "log_tail" and o["ok"] else None
        prev = next(
            (
                e
                for e in reversed(earlier)
                if e["tool"] == "log_tail" and e["ok"] and (e.get("data") or {}).get("path") == path
            ),
            None,
        )
        if path is None or prev is None:
            out.append(o)
            continue
        was, now = int(prev["data"].get("size") or 0), int(o["data"].get("size") or 0)
        said = (
            f"grew by {now - was} bytes"
            if now > was
            else "the same size"
            if now == was
            else f"shrank by {was - now} bytes (rotated or truncated)"
        )
        note = f"# since the read of it in {prev['id']}: {said} ({was} -> {now} bytes)"
        lines = list(o["lines"])
        lines.insert(1 if lines and lines[0].startswith("# ") else 0, note)
        out.append({**o, "lines": lines})
    return out
