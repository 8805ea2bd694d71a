"""`service_logs`: the launch's log when it is not a file: a container's, a pod's, a unit's.

Many servers log to stdout under docker, Kubernetes or systemd, so there is no file to tail. This
tool finds the inference-server container / pod / unit (or takes its name) and reads the last
lines with the platform's own reader. Commands are a fixed allowlist with quoted names: never a
free shell. A reader that is not installed is skipped; none at all is a clear error.
"""

from __future__ import annotations

import re
import shlex
from typing import Literal

from pydantic import BaseModel, Field

from tools import engines
from tools.base import ToolResult, ToolSpec, bound_lines
from tools.host import Host
from tools.textclean import clean_lines

Kind = Literal["docker", "kubectl", "journalctl"]
#: What an inference server's container, pod or unit tends to be called.
SERVER_NAME = engines.server_name_pattern()  # engine names + llm|serve|inference
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@/-]{0,200}$")


class Args(BaseModel):
    kind: Kind | Literal["auto"] = Field("auto", description="where the log lives; auto tries each")
    name: str | None = Field(None, description="container / pod / unit name; found when omitted")
    lines: int = Field(200, ge=1, le=2000)
    previous: bool = Field(False, description="kubectl: the previous (crashed) container's log")


class Result(ToolResult):
    kind: str = ""
    name: str = ""
    command: str = ""
    tail: list[str] = Field(default_factory=list)
    tried: list[str] = Field(default_factory=list)

    def lines(self) -> list[str]:
        if self.error:
            return super().lines()
        return [f"# {self.kind} log of {self.name} ($ {self.command})", *bound_lines(self.tail)]


def pick(listing: str, column: int = 0) -> str | None:
    """The first listed name that looks like an inference server, else the first name."""
    names: list[str] = []
    for ln in listing.splitlines():
        parts = ln.split()
        if len(parts) > column and not ln.startswith(("CONTAINER", "NAME", "UNIT", " ")):
            names.append(parts[column].lstrip("●"))
    for n in names:
        if SERVER_NAME.search(n) and SAFE_NAME.match(n):
            return n
    return next((n for n in names if SAFE_NAME.match(n)), None)


def _discover(host: Host, kind: Kind) -> str | None:
    cmd = {
        "docker": "docker ps -a --format '{{.Names}} {{.Image}} {{.Status}}'",
        "kubectl": "kubectl get pods --no-headers",
        "journalctl": "systemctl list-units --type=service --all --no-legend --no-pager",
    }[kind]
    res = host.run(cmd, timeout=15)
    if not res.ok or not res.stdout.strip():
        return None
    return pick(res.stdout)


def _read_cmd(kind: Kind, name: str, args: Args) -> str:
    q = shlex.quote(name)
    if kind == "docker":
        return f"docker logs --tail {args.lines} {q} 2>&1"
    if kind == "kubectl":
        prev = " --previous" if args.previous else ""
        return f"kubectl logs --tail={args.lines}{prev} {q}"
    return f"journalctl -u {q} -n {args.lines} --no-pager"


def run(host: Host, args: Args) -> Result:
    if args.name is not None and not SAFE_NAME.match(args.name):
        return Result(
            host=host.name,
            ok=False,
            error=f"{args.name!r} is not a container/pod/unit name",
            fix="pass the name as docker ps / kubectl get pods / systemctl show it",
        )
    kinds: list[Kind] = ["docker", "kubectl", "journalctl"] if args.kind == "auto" else [args.kind]
    tried: list[str] = []
    for kind in kinds:
        name = args.name or _discover(host, kind)
        if not name:
            tried.append(f"{kind}: nothing found")
            continue
        cmd = _read_cmd(kind, name, args)
        res = host.run(cmd, timeout=20)
        tried.append(f"{cmd}: rc {res.rc}")
        if res.ok and res.stdout.strip():
            return Result(
                host=host.name,
                kind=kind,
                name=name,
                command=cmd,
                tail=clean_lines(res.stdout).lines[-args.lines :],
                tried=tried,
            )
    return Result(
        host=host.name,
        ok=False,
        tried=tried,
        error=f"no container, pod or unit log found on {host.name} ({'; '.join(tried)})",
        fix="name the log file with --log, or the container/pod/unit with name=",
    )


SPEC = ToolSpec(
    name="service_logs",
    description=(
        "Read the inference server's log when it is not a file: `docker logs`, `kubectl logs` "
        "(optionally the previous, crashed container) or `journalctl -u`, finding the "
        "container/pod/unit by name when none is given."
    ),
    args=Args,
    result=Result,
    fn=run,
    scanned=True,
    launch_log=True,
)
