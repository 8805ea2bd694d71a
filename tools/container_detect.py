"""`container_detect`: whether the inference server's processes live in a container, and which.

From the host, a container's processes show in `ps` like any other, so an investigation without
`--container` would read the host's /dev/shm, files and ports for a server that sees others. This
read tells them apart in one round trip, in the first sweep: the engine processes (the engine
registry, tools/engines.yaml) and, for each, its `/proc/PID/cgroup` line (the runtime's
patterns, tools/container_runtimes.yaml) and its pid namespace against the reading shell's own;
then `docker ps` / `podman ps` map the container id to its name, only when a cgroup line named
one. The reading shell's own cgroup is the baseline: when Pivot itself runs in a container,
processes of that same container are the host, not "in a container".

The server is said to run in a container only when every engine process lives in that one
container; engines on the host and in a container, or in several, are listed and left to
`--container`, never guessed.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from tools import engines, yamlio
from tools.base import ToolResult, ToolSpec
from tools.host import Host

PATTERNS = Path(__file__).with_name("container_runtimes.yaml")
MARK = "@@pivot-container-detect"


class Runtime(BaseModel):
    model_config = ConfigDict(extra="forbid")

    runtime: str
    cli: str | None = None
    pattern: str
    not_: str | None = Field(None, alias="not")


class RuntimeFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prefilter: str
    runtimes: list[Runtime]


@lru_cache(maxsize=1)
def runtimes() -> RuntimeFile:
    raw = yamlio.safe_load(PATTERNS.read_text(encoding="utf-8"))
    out = RuntimeFile.model_validate(raw)
    for r in out.runtimes:
        re.compile(r.pattern)  # a broken pattern is a bug found at load, not a silent miss
    return out


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InContainer(BaseModel):
    """One engine process and where it lives, as the host sees it."""

    pid: int
    command: str
    runtime: str | None = Field(None, description="docker, podman, containerd, ...; None: host")
    container_id: str | None = None
    cgroup_line: str = Field("", description="the /proc/PID/cgroup line that names it, verbatim")
    other_pid_ns: bool = Field(False, description="its pid namespace is not the reading shell's")


class Detected(BaseModel):
    """The one container every engine process lives in."""

    runtime: str
    cli: str | None = Field(None, description="docker or podman: the CLI that can read inside")
    container_id: str
    name: str | None = Field(None, description="from `CLI ps`; None when no CLI listed the id")
    pid: int = Field(description="the engine process whose cgroup line names it")
    source: str = Field(description="what showed it: /proc/PID/cgroup or /proc/PID/ns/pid")
    cgroup_line: str = ""

    @property
    def readable(self) -> bool:
        """Whether the run can read inside it (a name and a CLI that knows it)."""
        return bool(self.name and self.cli)


class Result(ToolResult):
    engine_pids: list[int] = Field(default_factory=list)
    processes: list[InContainer] = Field(default_factory=list)
    container: Detected | None = None
    undecided: str | None = Field(
        None, description="engine processes in several places: which, and what to pass instead"
    )

    def lines(self) -> list[str]:
        if self.error:
            return super().lines()
        out: list[str] = []
        for p in self.processes:
            if p.runtime:
                out.append(f"{p.pid} {p.cgroup_line}")
        c = self.container
        if c is not None:
            who = c.name or f"id {c.container_id[:12]} (no docker/podman lists it)"
            out.append(
                f"# the server runs in {c.runtime} container {who}, "
                f"detected from {c.source.replace('PID', str(c.pid))}"
            )
        elif self.undecided:
            out.append(f"# {self.undecided}")
        elif self.engine_pids:
            out.append(f"# engine processes {self.engine_pids} run on the host, in no container")
        else:
            out.append("# no engine process is running: nothing to place in a container")
        return out


def command(prefilter: str) -> str:
    """One shell read: our pid namespace, ps, every pid namespace, the cgroup lines that may name
    a container (ours first), and the names the CLIs give them (only when a line matched)."""
    return (
        f"echo {MARK} self; readlink /proc/self/ns/pid; "
        f"echo {MARK} ps; ps -ww -eo pid=,args=; "
        f"echo {MARK} ns; ls -l /proc/[0-9]*/ns/pid 2>/dev/null; "
        f"echo {MARK} cgroup; cg=$(grep -H -m1 -E '{prefilter}' /proc/self/cgroup "
        f"/proc/[0-9]*/cgroup 2>/dev/null); printf '%s\\n' \"$cg\"; "
        f"echo {MARK} names; "
        'if [ -n "$cg" ]; then for c in docker podman; do command -v $c >/dev/null 2>&1 && '
        "$c ps --no-trunc --format '{{.ID}} {{.Names}}' 2>/dev/null | sed \"s/^/$c /\"; done; fi; "
        "true"
    )


_NS = re.compile(r"/proc/(\d+)/ns/pid -> (\S+)")
_CG = re.compile(r"^/proc/(\w+)/cgroup:(.*)$")


def _sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    cur: list[str] | None = None
    for ln in text.splitlines():
        if ln.startswith(MARK + " "):
            cur = out.setdefault(ln[len(MARK) + 1 :].strip(), [])
        elif cur is not None and ln.strip():
            cur.append(ln)
    return out


def container_of(line: str) -> tuple[str, str | None, str] | None:
    """(runtime, cli, id) of a cgroup line, by the first runtime pattern that names one."""
    for r in runtimes().runtimes:
        if r.not_ and r.not_ in line:
            continue
        m = re.search(r.pattern, line)
        if m:
            return r.runtime, r.cli, m.group("id")
    return None


def parse(text: str, host: str) -> Result:
    """The read's output -> which engine processes live where, and the one container if any."""
    sec = _sections(text)
    self_ns = (sec.get("self") or [""])[0].strip()
    ns = {int(m.group(1)): m.group(2) for ln in sec.get("ns", []) if (m := _NS.search(ln))}
    cgroups: dict[str, str] = {}
    for ln in sec.get("cgroup", []):
        m = _CG.match(ln)
        if m:
            cgroups[m.group(1)] = m.group(2)
    own = container_of(cgroups.get("self", ""))
    names: dict[str, tuple[str, str]] = {}
    for ln in sec.get("names", []):
        parts = ln.split()
        if len(parts) >= 3:
            names[parts[1]] = (parts[0], parts[2])
    procs: list[InContainer] = []
    for ln in sec.get("ps", []):
        pid_s, _, cmd = ln.strip().partition(" ")
        if not pid_s.isdigit():
            continue
        match = engines.classify(cmd.strip())
        if match.engine is None or match.never:
            continue
        pid = int(pid_s)
        line = cgroups.get(pid_s, "")
        where = container_of(line) if line else None
        if where is not None and own is not None and where[2] == own[2]:
            where = None  # Pivot's own container: the host as far as this run is concerned
        procs.append(
            InContainer(
                pid=pid,
                command=cmd.strip(),
                runtime=where[0] if where else None,
                container_id=where[2] if where else None,
                cgroup_line=line if where else "",
                other_pid_ns=bool(self_ns and ns.get(pid) and ns[pid] != self_ns),
            )
        )
    res = Result(host=host, engine_pids=[p.pid for p in procs], processes=procs)
    decide(res, names)
    return res


def decide(res: Result, names: dict[str, tuple[str, str]]) -> None:
    """The one container all engine processes live in, or why there is none to name."""
    procs = res.processes
    if not procs:
        return
    ids = {p.container_id for p in procs}
    on_host = [p.pid for p in procs if p.container_id is None and not p.other_pid_ns]
    unknown_ns = [p.pid for p in procs if p.container_id is None and p.other_pid_ns]
    if ids == {None}:
        if unknown_ns and not on_host:
            res.undecided = (
                f"engine processes {unknown_ns} run in another pid namespace (a container no "
                "cgroup pattern names): pass --container NAME to read inside it"
            )
        return
    boxed = [p for p in procs if p.container_id is not None]
    if len(ids) > 1:
        where = sorted({_said(p, names) for p in boxed})
        host = f" and on the host ({on_host + unknown_ns})" if None in ids else ""
        res.undecided = (
            f"engine processes run in {', '.join(where)}{host}: pass --container NAME for "
            "the launch in question"
        )
        return
    first = boxed[0]
    assert first.container_id is not None and first.runtime is not None
    cli, name = next(
        ((c, n) for i, (c, n) in names.items() if i.startswith(first.container_id)), (None, None)
    )
    res.container = Detected(
        runtime=first.runtime,
        cli=cli or _cli_of(first.runtime),
        container_id=first.container_id,
        name=name,
        pid=first.pid,
        source="/proc/PID/cgroup",
        cgroup_line=first.cgroup_line,
    )


def _cli_of(runtime: str) -> str | None:
    return next((r.cli for r in runtimes().runtimes if r.runtime == runtime and r.cli), None)


def _said(p: InContainer, names: dict[str, tuple[str, str]]) -> str:
    cid = p.container_id or ""
    name = next((n for i, (_c, n) in names.items() if i.startswith(cid)), cid[:12])
    return f"{p.runtime} container {name}"


def run(host: Host, args: Args) -> Result:
    res = host.run(command(runtimes().prefilter), timeout=20, max_bytes=2_000_000)
    if res.error or (res.rc not in (0, None) and not res.stdout):
        return Result(
            host=res.host,
            ok=False,
            error=res.error or f"the container read failed: {res.stderr.strip()[:200]}",
            fix=res.fix or "pass --container NAME if the server runs in a container",
        )
    return parse(res.stdout, res.host)


SPEC = ToolSpec(
    name="container_detect",
    description=(
        "Whether the inference server's processes run in a Docker/Podman/containerd container, "
        "and which: each engine process's /proc/PID/cgroup line and pid namespace, the id "
        "mapped to a name with `docker ps` / `podman ps`. In the first sweep of a host "
        "investigated without --container; a detected container is then read inside."
    ),
    args=Args,
    result=Result,
    fn=run,
    first_sweep=10,
    host_only=True,
    facts=(),
)
