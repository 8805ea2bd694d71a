"""The launch's own port, read from its evidence (log, config, its own processes).

Its own module because the checks (agent/checks.py) and the launch (agent/launch.py) both ask
for it, and the checks reach the launch through agent/rules/hang.py: kept in checks.py it closed
an import circle.
"""

from __future__ import annotations

import re

from agent.facts import Facts, derive
from agent.state import Observation

#: `--port N` (also `--http-port`, `--grpc-port`), `port=N`, or the address of a failed bind
#: (`0.0.0.0:8001`, `[::]:8000`, `localhost:8000`, uvicorn's `('0.0.0.0', 8000)`): the number after a host, never after a
#: source file (`chttp2_server.cc:1080]` on the same gRPC line names a line of C++, not a port)
PORT = re.compile(
    r"--(?:http-|grpc-)?port[ =](\d{2,5})\b|\bport=(\d{2,5})\b|"
    r"(?:(?<![\w.])(?:\d{1,3}(?:\.\d{1,3}){3}|localhost|\*)|\[[0-9a-fA-F:.]*\]):(\d{2,5})\b"
    r".*(?:in use|bind)|"
    # Python's socket address in uvicorn's "error while attempting to bind on address ('h', N)"
    r"bind on address \(['\"][^'\"]*['\"],\s*(\d{2,5})\)"
)


def server_port(observations: list[Observation], facts: Facts | None = None) -> int | None:
    """The launch's own port: what its log says (a bind error, `port=`, the address it serves
    on), else its config, else the command line of one of ITS processes. Never the first
    process on the box with a `--port`: on a shared host that is someone else's server."""
    for tools in (("log_tail", "log_window"), ("config_read",)):
        for o in observations:
            if o["tool"] not in tools or not o["ok"]:
                continue
            for ln in o["lines"]:
                m = PORT.search(ln)
                if m:
                    return int(next(g for g in m.groups() if g))
    if facts is None:
        facts = derive(observations)
    for pid in [*facts.server_main_pids, *facts.server_pids]:
        m = PORT.search(str(facts._ps_recs.get(pid, {}).get("command") or ""))
        if m:
            return int(next(g for g in m.groups() if g))
    return None
