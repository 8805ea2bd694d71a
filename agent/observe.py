"""Run typed tools and turn their results into observations; independent reads run concurrently."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import ValidationError

from agent.state import Observation
from tools.base import ToolResult, bound_lines
from tools.host import Host
from tools.registry import TOOLS

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
        result: ToolResult = spec.call(host, args)
        return result.ok, bound_lines(result.lines()), result.model_dump(mode="json")
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
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, max(1, len(calls)))) as pool:
        results = list(pool.map(lambda c: call(host, c[0], c[1]), calls))
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
