"""`launch`: start a server detached from us, in its own session, with a pid file and a log file.

Why detached: the seeds' night polled a server whose fate was tied to a shell that went away.
A launch here survives the caller, can be stopped as one process group, and is findable later
by its pid file and by a marker environment variable that every child inherits (orphans that
re-parent to init keep it too).
"""

from __future__ import annotations

import re
import shlex

from pydantic import BaseModel, Field

from tools.base import ToolResult, ToolSpec, failed
from tools.host import Host

#: Every process a launch starts carries this variable; cleanup finds orphans by it.
MARKER_VAR = "PIVOT_RUN_ID"


class Args(BaseModel):
    command: str = Field(description="the launch command line, run by /bin/sh")
    log_path: str = Field(description="stdout and stderr go here (truncated first)")
    workdir: str = Field(".", description="directory to start in")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables")
    pid_file: str | None = Field(None, description="where to write the pid; default LOG.pid")
    marker: str | None = Field(None, description=f"value of {MARKER_VAR} for this launch")
    inherit_env: list[str] | None = Field(
        None,
        description="start from an empty environment and pass on only these variables of the "
        "caller's (None: inherit everything, as a shell would)",
    )


class Result(ToolResult):
    pid: int | None = None
    log_path: str = ""
    pid_file: str = ""
    command: str = ""

    def lines(self) -> list[str]:
        if self.error:
            return super().lines()
        return [f"# launched pid {self.pid} (own process group), log {self.log_path}"]


def build_command(args: Args) -> tuple[str, str]:
    """The shell line that launches detached; returns (line, pid_file).

    `setsid` without -f execs in place when its caller is not a group leader (a background job
    of a non-interactive sh never is), so `$!` is the new session's leader and its pgid.
    """
    pid_file = args.pid_file or f"{args.log_path}.pid"
    env = dict(args.env)
    if args.marker:
        env[MARKER_VAR] = args.marker
    assigns = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
    q = shlex.quote
    clean = ""
    if args.inherit_env is not None:
        # `${V+"V=$V"}` is one word when V is set, nothing when it is not
        keep = " ".join(f'${{{v}+"{v}=${v}"}}' for v in args.inherit_env if _NAME.match(v))
        clean = f"-i {keep} " if keep else "-i "
    line = (
        f"mkdir -p {q(_dirname(args.log_path))} && cd {q(args.workdir)} && "
        f"{{ setsid env {clean}{assigns} /bin/sh -c {q('exec ' + args.command)} "
        f"> {q(args.log_path)} 2>&1 < /dev/null & }} ; "
        f"echo $! > {q(pid_file)} ; echo $!"
    )
    return line, pid_file


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _dirname(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path.strip("/") else "/"


def launch(host: Host, args: Args) -> Result:
    line, pid_file = build_command(args)
    res = host.run(line, timeout=15)
    if not res.ok:
        return failed(Result, res, log_path=args.log_path, pid_file=pid_file, command=args.command)
    try:
        pid = int(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Result(
            host=host.name,
            ok=False,
            error=f"launch on {host.name} printed no pid: {res.stdout[:200]!r}",
            fix="check that setsid and /bin/sh exist on the host",
            log_path=args.log_path,
            command=args.command,
        )
    return Result(
        host=host.name, pid=pid, log_path=args.log_path, pid_file=pid_file, command=args.command
    )


SPEC = ToolSpec(
    name="launch",
    description="Start a server detached (own process group, pid file, log file); returns its pid.",
    args=Args,
    result=Result,
    fn=launch,
    changing=True,
)
