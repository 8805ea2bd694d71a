"""Independent reads at once: the agent's sweep round (gpu + ps + log + config, ...).

On an `SSHHost` each call gets its own channel on the one connection, so N reads of ~100 ms
take ~100 ms instead of N x 100 ms. Results come back in the order of the calls. A tool that
raises is a bug, but one bug must not cost the whole sweep: it is logged with its traceback
and returned as a failed `ToolResult` naming the tool.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel

from tools.base import ToolResult, ToolSpec
from tools.host import DEFAULT_TIMEOUT_S, CommandResult, Host

log = logging.getLogger("pivot.sweep")

#: Below sshd's MaxSessions (10) and SSHHost's own channel cap.
MAX_PARALLEL = 8


def run_concurrently(
    host: Host, calls: Sequence[tuple[ToolSpec, BaseModel | dict[str, Any] | None]]
) -> list[ToolResult]:
    """Call every (spec, args) on `host` at once; one result per call, in order."""
    if not calls:
        return []

    def one(call: tuple[ToolSpec, BaseModel | dict[str, Any] | None]) -> ToolResult:
        spec, args = call
        try:
            return spec.call(host, args)
        except Exception as exc:  # a bug in one tool; keep the others' results
            log.exception("tool %s crashed on %s", spec.name, host.name)
            return ToolResult(
                host=host.name,
                ok=False,
                error=f"tool {spec.name} crashed on {host.name}: {type(exc).__name__}: {exc}",
                fix="this is a bug in Pivot's tool; use another tool meanwhile and report it",
            )

    with ThreadPoolExecutor(min(len(calls), MAX_PARALLEL), thread_name_prefix="sweep") as pool:
        return list(pool.map(one, calls))


def run_commands_concurrently(
    host: Host, commands: Sequence[str], timeout: float = DEFAULT_TIMEOUT_S
) -> list[CommandResult]:
    """The same for raw commands (benchmarks, probes); results in the order of `commands`."""
    if not commands:
        return []
    with ThreadPoolExecutor(min(len(commands), MAX_PARALLEL), thread_name_prefix="sweep") as pool:
        return list(pool.map(lambda c: host.run(c, timeout=timeout), commands))
