"""What every tool is: typed args, typed result, a function over a `Host`.

A tool module defines `Args`, a `Result` subclass of `ToolResult`, a pure `parse_*` function
beside them, a `run(host, args) -> Result`, and `SPEC = ToolSpec(...)`. The registry lists the
specs; the agent, the CLI and the service all call tools through it and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from tools.host import CommandResult, Host

#: A tool never hands the agent more than this many lines, or lines longer than this.
MAX_LINES = 200
MAX_LINE_CHARS = 2000


class ToolResult(BaseModel):
    """Base of every tool result: which host, whether it worked, and what to do if not."""

    model_config = ConfigDict(extra="forbid")

    host: str
    ok: bool = True
    error: str | None = None
    fix: str | None = None

    def lines(self) -> list[str]:
        """The observation text the agent sees and may cite: verbatim host lines, bounded.

        Subclasses return raw lines from the host output (so evidence can be quoted byte for
        byte) plus short summary lines starting with '# '.
        """
        if self.error:
            return [f"# error: {self.error}", f"# fix: {self.fix or '-'}"]
        return []


A = TypeVar("A", bound=BaseModel)
R = TypeVar("R", bound=ToolResult)


@dataclass(frozen=True)
class ToolSpec(Generic[A, R]):
    name: str
    description: str
    args: type[A]
    result: type[R]
    fn: Callable[[Host, A], R]
    #: Changing tools (config apply/revert, launch, kill, benchmark) need approval.
    changing: bool = False
    # -- its role in an investigation: the agent asks the registry, never keeps its own tuple --
    #: its place in round 0's first wave (every cheap read at once); None: not in it
    first_sweep: int | None = None
    #: the arguments of that first-wave call (find_logs walks more roots than its default)
    first_sweep_args: dict[str, Any] = field(default_factory=dict)
    #: the wave's long pole (it walks directory trees): started before the cheap reads, which
    #: then finish in its shadow; the observations keep the sweep's order
    long_pole: bool = False
    #: it reads a container's record (inspect, logs): in the first sweep only with --container
    container_only: bool = False
    #: it reads the host's view of the processes (which container holds them): never inside one
    host_only: bool = False
    #: it reads the machine (GPUs, kernel log), the same view inside a container or out: a
    #: container found by the sweep does not read it again
    reads_machine: bool = False
    #: its lines are scanned for failure signatures (agent/knowledge/signatures/)
    scanned: bool = False
    #: its lines are a launch's own log: read from the last launch on, the launch's verdict
    launch_log: bool = False
    #: a failed read leaves a hypothesis unknown (not refuted): the report says how to read it
    verdict_needs: bool = False
    #: the facts (agent/facts.Facts fields) its result yields, for the reader and the docs
    facts: tuple[str, ...] = ()

    def call(self, host: Host, args: A | dict[str, Any] | None = None) -> R:
        parsed = args if isinstance(args, self.args) else self.args.model_validate(args or {})
        from tools.container_host import answered_outside

        with answered_outside() as seen:
            before = len(seen)
            result = self.fn(host, parsed)
            machine = len(seen) > before
        if result.ok and machine:
            # a stopped container's ports/disk/memory were read on its machine: the result is
            # the machine's, and says so by its host
            result = result.model_copy(update={"host": host.outer.name})  # type: ignore[attr-defined]
        return result

    def json_schema(self) -> dict[str, Any]:
        return self.args.model_json_schema()


def failed(result_cls: type[R], res: CommandResult, **fields: Any) -> R:
    """Turn an expected command failure into a typed result naming host, command and fix."""
    error = res.error or (
        f"{res.command!r} is not installed on {res.host}"
        if res.missing_command
        else f"{res.command!r} on {res.host} exited {res.rc}: {(res.stderr or res.stdout).strip()[:300]}"
    )
    fix = res.fix or ("install it or use another tool" if res.missing_command else "see the error")
    return result_cls(host=res.host, ok=False, error=error, fix=fix, **fields)


def bound_lines(lines: list[str], max_lines: int = MAX_LINES) -> list[str]:
    out = [ln if len(ln) <= MAX_LINE_CHARS else ln[:MAX_LINE_CHARS] + " …[cut]" for ln in lines]
    if len(out) > max_lines:
        out = [
            *out[: max_lines // 4],
            f"# … {len(out) - max_lines} lines cut …",
            *out[-(max_lines - max_lines // 4 - 1) :],
        ]
    return out
