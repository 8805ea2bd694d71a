"""The container the first sweep found the server in, when no `--container` named one.

`container_detect` (tools/container_detect.py) runs in the first wave beside the other reads,
so finding out costs no round trip of its own. When it names one readable container, the rest of
the run reads inside it, exactly as `--container NAME` would: the sweep reads the server again
there (its processes, /dev/shm, ports, files, the container's record and log; the GPUs and the
kernel log were read already and look the same from inside), and every later round reads through
the same view. The view is derived from the observations each time (never held in the run's
context), so a resumed run reads inside the same container without being told again.
"""

from __future__ import annotations

from agent.state import Observation
from agent.typed_results import typed
from tools import container_detect
from tools.container_host import ContainerHost, container_of
from tools.host import Host

#: What a host-side read that the container view read again says in the run's state; the host's
#: own answer stays in the session's events.
SUPERSEDED = "# superseded: read on the host, outside container {name}; {again} reads it inside"


def detection(observations: list[Observation]) -> container_detect.Result | None:
    """The first sweep's container read, typed (the newest, if several)."""
    for o in reversed(observations):
        if o["tool"] == "container_detect" and o["ok"] and o["data"]:
            return typed(o, container_detect.Result)
    return None


def found(observations: list[Observation]) -> container_detect.Detected | None:
    """The one container every engine process lives in, when the run can read inside it."""
    res = detection(observations)
    c = res.container if res is not None else None
    return c if c is not None and c.readable else None


def run_host(host: Host, observations: list[Observation]) -> Host:
    """The host the run reads through: inside the detected container, else `host` itself."""
    c = found(observations)
    if c is None or container_of(host) is not None:
        return host
    assert c.name is not None and c.cli is not None  # readable
    return ContainerHost(host, c.name, cli=c.cli)


def supersede(o: Observation, name: str, again: str) -> Observation:
    """A host-side read the container view made again: kept in place (ids stay in order), with no
    result, so no fact or signature is drawn from the host's view of a container's server."""
    line = SUPERSEDED.format(name=name, again=again)
    return {**o, "ok": False, "lines": [line], "data": {}}


def where(host: Host, observations: list[Observation]) -> str:
    """One sentence for the report: which container was read, and how the run knew."""
    box = container_of(host)
    c = found(observations)
    if c is not None and (box is None or box.container == c.name):
        return (
            f"The server runs in {c.runtime} container {c.name} (detected from "
            f"/proc/{c.pid}/cgroup); investigated inside it."
        )
    if box is not None:
        return f"Investigated inside container {box.container} (--container)."
    res = detection(observations)
    if res is None:
        return ""
    if res.container is not None:  # named by its cgroup, but no docker/podman here knows it
        d = res.container
        return (
            f"The server runs in {d.runtime} container {d.name or d.container_id[:12]} (detected "
            f"from /proc/{d.pid}/cgroup), which no docker/podman on this host can read inside: "
            "this run read the host's view of it."
        )
    return f"Not read inside a container: {res.undecided}." if res.undecided else ""
