"""`pivot launch`: start a server so that its launch is watched from the first byte.

The server runs in its own session (its own process group, so Ctrl-C in the terminal reaches
pivot, not the server, and pivot stops the whole group on purpose) and writes straight to the
log file; pivot echoes the log as it grows. Writing to the file rather than through a pipe to
pivot means the server never dies of a broken pipe when pivot exits (`--until-ready` leaves it
running), and the log is complete whatever happens to pivot. Every process of the launch carries
the run marker (tools/launch.py), so children that leave the group are found and stopped too.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
import uuid
from pathlib import Path

from pydantic import BaseModel

from loop import launcher
from tools.host import Host
from tools.launch import MARKER_VAR
from tools.local_host import LocalHost


class Started(BaseModel):
    pid: int | None = None
    log: str
    marker: str
    command: str
    error: str | None = None


_PORT = re.compile(r"^--port(?:=(\d+))?$")


def port_of(argv: list[str]) -> int | None:
    """The `--port N` / `--port=N` a server command names (every engine spells it so)."""
    for i, a in enumerate(argv):
        m = _PORT.match(a)
        if m and m.group(1):
            return int(m.group(1))
        if m and i + 1 < len(argv) and argv[i + 1].isdigit():
            return int(argv[i + 1])
    return None


def default_log(home: Path, argv: list[str], local: bool) -> str:
    name = re.sub(r"[^\w.-]+", "_", Path(argv[0]).name)[:40] if argv else "server"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if local:
        return str(home / "launches" / f"{stamp}-{name}.log")
    return f"/tmp/pivot-launch-{stamp}-{name}.log"


def start(host: Host, argv: list[str], log: str) -> Started:
    """Start `argv` on `host` in its own session, stdout and stderr to `log`."""
    marker = f"pivot-launch-{uuid.uuid4().hex[:10]}"
    command = shlex.join(argv)
    if isinstance(host, LocalHost):
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(log, "ab") as fh:
                proc = subprocess.Popen(
                    argv,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    env={**os.environ, MARKER_VAR: marker},
                )
        except OSError as exc:
            return Started(log=log, marker=marker, command=command, error=f"{argv[0]}: {exc}")
        _children.append(proc)
        return Started(pid=proc.pid, log=log, marker=marker, command=command)
    res = launcher.start(host, command, ".", {}, log, marker)
    return Started(pid=res.pid, log=log, marker=marker, command=command, error=res.error)


#: local launches, reaped when they end (a dead child stays a zombie until its parent waits)
_children: list[subprocess.Popen[bytes]] = []


def stop(host: Host, started: Started, grace_s: float = 5.0) -> list[int]:
    """TERM the group, KILL it after `grace_s`, then the marker's orphans; the pids left."""
    left = launcher.stop(host, started.pid, started.marker, grace_s=grace_s)
    reap()
    return left


def reap() -> None:
    for p in list(_children):
        if p.poll() is not None:
            _children.remove(p)
