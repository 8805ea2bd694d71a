"""`container_inspect`: what Docker or Podman knows about the server's container.

The container's own record answers what no read inside it can: whether it exited and with what
code, whether the kernel killed it for its memory limit (`OOMKilled`, exit 137), how often it
restarted, how big its /dev/shm is (64 MB unless `--shm-size` or `--ipc=host`), whether a GPU
was passed, which ports are published and which volumes are mounted read-only. The output of
`docker inspect NAME` / `podman inspect NAME` (the same JSON) is parsed; the lines shown are the
JSON's own lines (so they can be cited) plus a summary. Environment values that look like
secrets are redacted.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field

from tools.base import ToolResult, ToolSpec, bound_lines, failed
from tools.container_host import SAFE_NAME, container_of
from tools.host import Host
from tools.launch_env import STEERING, parse_env

#: Docker's and Podman's /dev/shm when the run gave no --shm-size (and no --ipc=host).
DEFAULT_SHM_BYTES = 64 * 1024 * 1024
#: The JSON keys whose lines are shown verbatim (citable): state, limits, devices, ports.
SHOWN_KEYS = re.compile(
    r'^\s*"(Status|Running|Restarting|OOMKilled|ExitCode|Error|StartedAt|FinishedAt|'
    r"RestartCount|ShmSize|Memory|MemorySwap|IpcMode|NetworkMode|Image|ImageName|PathOnHost|"
    r'Count|Destination|RW|HostPort)":'
)


#: one entry of Config.Env as the JSON prints it: `"KEY=value",`
_ENV_ENTRY = re.compile(r'^\s*"([A-Za-z_][A-Za-z0-9_]*)=[^"]*",?\s*$')
_REDACTED = re.compile(r'(":\s*)\*\*\*REDACTED\*\*\*')


class Args(BaseModel):
    name: str | None = Field(
        None, description="container name or id; the investigated container when omitted"
    )


class Mount(BaseModel):
    source: str = ""
    destination: str
    read_only: bool = False
    kind: str = ""


class PortBinding(BaseModel):
    container_port: str
    host_ip: str = ""
    host_port: str = ""


class ContainerState(BaseModel):
    name: str = ""
    id: str = ""
    image: str = ""
    status: str = ""
    running: bool = False
    restarting: bool = False
    pid: int | None = Field(
        None, description="the container's main process as the host numbers it (State.Pid)"
    )
    exit_code: int | None = None
    oom_killed: bool = False
    error: str = ""
    started_at: str = ""
    finished_at: str = ""
    restart_count: int = 0
    restart_policy: str = ""
    shm_size: int | None = Field(None, description="bytes; None when not shown")
    ipc_host: bool = False
    memory_limit: int = Field(0, description="bytes; 0 = no limit")
    network_host: bool = False
    gpus_requested: bool = False
    #: whether the record shows each part at all: a card or a trimmed paste may leave out
    #: HostConfig's devices, the port map or the mounts, and a part not shown proves nothing
    #: missing (a `docker inspect` always prints them, null when empty)
    gpus_shown: bool = True
    ports_shown: bool = True
    mounts_shown: bool = True
    devices: list[str] = Field(default_factory=list)
    gpu_ids: list[int] | None = Field(
        None,
        description="the machine's GPU indices passed to the container (--gpus '\"device=0,1\"', "
        "NVIDIA_VISIBLE_DEVICES=0,1); None when all, a count, UUIDs or not shown",
    )
    mounts: list[Mount] = Field(default_factory=list)
    ports: list[PortBinding] = Field(default_factory=list)
    exposed: list[str] = Field(default_factory=list, description="ports the image exposes")
    env: dict[str, str] = Field(default_factory=dict)
    redacted: list[str] = Field(default_factory=list)
    cmd: list[str] = Field(default_factory=list)
    shown: list[str] = Field(default_factory=list, description="the JSON's own lines, citable")

    @property
    def killed_by_limit(self) -> bool:
        """Exit 137 (SIGKILL) under a memory limit: the limit's OOM kill, even where the runtime
        does not set OOMKilled (Podman on cgroup v1 leaves it false)."""
        return self.oom_killed or (self.exit_code == 137 and self.memory_limit > 0)

    @property
    def shm_default(self) -> bool:
        return (
            not self.ipc_host and self.shm_size is not None and self.shm_size <= DEFAULT_SHM_BYTES
        )


class Result(ToolResult):
    cli: str = ""
    container: ContainerState | None = None

    def lines(self) -> list[str]:
        c = self.container
        if self.error or c is None:
            return super().lines()
        out = list(c.shown)
        if not c.status and not c.running:
            # a CRI runtime's record (crictl) or a pod's is not docker's shape: none of the
            # fields below could be read from it, and blanks must not read as a stopped container
            out.append(
                f"# this record is not in {self.cli or 'docker'}'s inspect shape (a CRI runtime's "
                "or a pod's?): the container's state, exit code and limits are unknown from it; "
                "read them with the runtime that runs it (kubectl get pod -o json, crictl inspect)"
            )
            return out
        out.append(
            f"# container {c.name} ({self.cli}): {c.status}, exit code {c.exit_code}, "
            f"OOMKilled {str(c.oom_killed).lower()}, restarted {c.restart_count} times"
            + (f" (policy {c.restart_policy})" if c.restart_policy else "")
            + f", started {c.started_at or '-'}, finished {c.finished_at or '-'}"
        )
        if c.killed_by_limit:
            out.append(
                f"# container {c.name} was killed by its memory limit "
                f"({_mib(c.memory_limit)}): exit 137"
                + ("" if c.oom_killed else " (SIGKILL) with a limit set")
            )
        shm = (
            "the host's (--ipc=host)"
            if c.ipc_host
            else (f"{_mib(c.shm_size)}" if c.shm_size is not None else "not shown")
        )
        out.append(
            f"# /dev/shm {shm}"
            + (" (the 64 MB default: no --shm-size)" if c.shm_default else "")
            + f"; memory limit {_mib(c.memory_limit) if c.memory_limit else 'none'}"
        )
        out.append(
            "# GPUs: "
            + (
                "requested (" + ", ".join(c.devices or ["--gpus"]) + ")"
                if c.gpus_requested
                else "NONE passed to the container (no --gpus / --device nvidia.com/gpu)"
                if c.gpus_shown
                else "not shown in this record (no HostConfig devices)"
            )
        )
        if c.network_host:
            out.append("# network: host (every port the server opens is on the host)")
        else:
            published = [
                f"{p.container_port} -> {p.host_ip or '0.0.0.0'}:{p.host_port}"
                for p in c.ports
                if p.host_port
            ]
            unpublished = sorted(
                {p.container_port for p in c.ports if not p.host_port}
                | set(c.exposed) - {p.container_port for p in c.ports if p.host_port}
            )
            out.append(
                "# published ports: "
                + (
                    ", ".join(published)
                    or ("NONE" if c.ports_shown else "not shown in this record")
                )
            )
            if unpublished:
                out.append("# exposed but not published: " + ", ".join(unpublished))
        for m in c.mounts:
            out.append(
                f"# mount {m.source or '(anonymous)'} -> {m.destination}"
                + (" READ-ONLY" if m.read_only else "")
            )
        if not c.mounts and c.mounts_shown:
            out.append("# mounts: none (a model cache inside the container is lost at each start)")
        out.append(f"# image {c.image}; cmd {' '.join(c.cmd)[:300]}")
        if c.redacted:
            out.append(f"# env values hidden (secrets): {', '.join(c.redacted)}")
        return bound_lines(out)


def _mib(n: int | None) -> str:
    if not n:
        return "0"
    return f"{n / 1024 / 1024:.0f} MiB" if n < 1 << 30 else f"{n / (1 << 30):.1f} GiB"


def _gpu_ids(hc: dict[str, Any], env: dict[str, str] | None) -> list[int] | None:
    """The machine's GPU indices the container was given, when the record names them by index:
    a device request's DeviceIDs, else NVIDIA_VISIBLE_DEVICES under the nvidia runtime."""
    named = [
        str(i) for r in hc.get("DeviceRequests") or [] for i in (r.get("DeviceIDs") or [])
    ] or (
        (env or {}).get("NVIDIA_VISIBLE_DEVICES", "").split(",")
        if hc.get("Runtime") == "nvidia"
        else []
    )
    named = [n.strip() for n in named if n.strip()]
    if not named or not all(n.isdigit() for n in named):
        return None
    return sorted({int(n) for n in named})


def _gpu_devices(hc: dict[str, Any], env: dict[str, str] | None) -> tuple[bool, list[str]]:
    devices: list[str] = []
    for d in hc.get("Devices") or []:
        path = d.get("PathOnHost") or d.get("PathInContainer") or "" if isinstance(d, dict) else d
        if path:
            devices.append(str(path))
    requested = any("nvidia" in d or "/dev/dri" in d for d in devices)
    for r in hc.get("DeviceRequests") or []:
        caps = [c for group in r.get("Capabilities") or [] for c in group]
        if r.get("Driver") == "nvidia" or "gpu" in caps:
            requested = True
            ids = r.get("DeviceIDs") or []
            devices.append(f"--gpus {','.join(ids) if ids else r.get('Count', 'all')}")
    visible = (env or {}).get("NVIDIA_VISIBLE_DEVICES", "")
    # CUDA images set NVIDIA_VISIBLE_DEVICES=all in their own Env; it passes GPUs only under
    # the nvidia runtime (with runc and no device request the container sees none)
    if visible and visible not in ("void", "none") and hc.get("Runtime") == "nvidia":
        requested = True
        devices.append(f"NVIDIA_VISIBLE_DEVICES={visible}")
    elif hc.get("Runtime") == "nvidia" and env is None:
        # the nvidia runtime with no Env shown: the image's NVIDIA_VISIBLE_DEVICES (all, in
        # CUDA images) decides; "no GPU passed" would be a guess
        requested = True
        devices.append("the nvidia runtime (NVIDIA_VISIBLE_DEVICES not shown)")
    return requested, devices


def parse_inspect(text: str) -> ContainerState:
    """`docker inspect NAME` / `podman inspect NAME` (a JSON array of one) -> the state."""
    # a captured card replaces secret-looking values (`"Passwd": true` too) with a bare marker
    data = json.loads(_REDACTED.sub(r'\1"<redacted>"', text))
    d: dict[str, Any] = data[0] if isinstance(data, list) else data
    st, hc, cfg = d.get("State") or {}, d.get("HostConfig") or {}, d.get("Config") or {}
    env, hidden = parse_env("\n".join(cfg.get("Env") or []))
    gpus, devices = _gpu_devices(hc, env if "Env" in cfg else None)
    mounts = [
        Mount(
            source=str(m.get("Source") or m.get("Name") or ""),
            destination=str(m.get("Destination") or ""),
            read_only=not m.get("RW", True),
            kind=str(m.get("Type") or ""),
        )
        for m in d.get("Mounts") or []
    ]
    ports: list[PortBinding] = []
    bindings = (d.get("NetworkSettings") or {}).get("Ports") or hc.get("PortBindings") or {}
    for cport, binds in bindings.items():
        if not binds:
            ports.append(PortBinding(container_port=cport))
        for b in binds or []:
            ports.append(
                PortBinding(
                    container_port=cport,
                    host_ip=str(b.get("HostIp") or ""),
                    host_port=str(b.get("HostPort") or ""),
                )
            )
    policy = hc.get("RestartPolicy") or {}
    shm = hc.get("ShmSize")
    shown = [
        ln.strip().rstrip(",")
        for ln in text.splitlines()
        if SHOWN_KEYS.match(ln)
        and not re.search(r'"(Memory|MemorySwap|Count)":\s*0\b|"Status": ""', ln)
    ]
    # the launch-steering entries of its Env, verbatim (citable: a setting that breaks the
    # engine is read here as from an env file); secrets never
    shown += [
        ln.strip().rstrip(",")
        for ln in text.splitlines()
        if (m := _ENV_ENTRY.match(ln))
        and m.group(1) in env
        and m.group(1) not in hidden
        and STEERING.match(m.group(1))
    ]
    exit_code = st.get("ExitCode")
    return ContainerState(
        name=str(d.get("Name") or "").lstrip("/"),
        id=str(d.get("Id") or "")[:12],
        image=str(d.get("ImageName") or cfg.get("Image") or d.get("Image") or ""),
        status=str(st.get("Status") or ""),
        running=bool(st.get("Running")),
        restarting=bool(st.get("Restarting")),
        pid=int(st["Pid"]) if isinstance(st.get("Pid"), int) and st["Pid"] > 0 else None,
        exit_code=int(exit_code) if isinstance(exit_code, int) else None,
        oom_killed=bool(st.get("OOMKilled")),
        error=str(st.get("Error") or ""),
        started_at=str(st.get("StartedAt") or ""),
        finished_at=""
        if str(st.get("FinishedAt") or "").startswith("0001")
        else str(st.get("FinishedAt") or ""),
        restart_count=int(d.get("RestartCount") or 0),
        restart_policy=str(policy.get("Name") or ""),
        shm_size=int(shm) if isinstance(shm, int) else None,
        ipc_host=str(hc.get("IpcMode") or "") == "host",
        memory_limit=int(hc.get("Memory") or 0),
        network_host=str(hc.get("NetworkMode") or "") == "host",
        gpus_requested=gpus,
        gpu_ids=_gpu_ids(hc, env if "Env" in cfg else None),
        gpus_shown=gpus or "DeviceRequests" in hc or "Devices" in hc,
        ports_shown=bool(ports)
        or "Ports" in (d.get("NetworkSettings") or {})
        or "PortBindings" in hc
        or "NetworkMode" in hc,
        mounts_shown="Mounts" in d,
        devices=devices,
        mounts=mounts,
        ports=ports,
        exposed=sorted((cfg.get("ExposedPorts") or {}).keys()),
        env=env,
        redacted=hidden,
        cmd=[str(x) for x in (cfg.get("Entrypoint") or []) + (cfg.get("Cmd") or [])]
        if isinstance(cfg.get("Cmd"), list)
        else [],
        shown=_dedupe(shown),
    )


def _dedupe(lines: list[str]) -> list[str]:
    seen: set[str] = set()
    return [ln for ln in lines if not (ln in seen or seen.add(ln))]  # type: ignore[func-returns-value]


def target(host: Host, name: str | None) -> tuple[Host, str, str] | ToolResult:
    """(the host the CLI runs on, the container's name, the CLI), or a failed result."""
    inside = container_of(host)
    if name is None and inside is None:
        return ToolResult(
            host=host.name,
            ok=False,
            error=f"no container given for {host.name}",
            fix="pass name=CONTAINER, or investigate with --container NAME",
        )
    name = name or (inside.container if inside else "")
    if not SAFE_NAME.match(name):
        return ToolResult(
            host=host.name, ok=False, error=f"{name!r} is not a container name", fix="-"
        )
    if inside is not None and name == inside.container:
        down = inside.unavailable()
        if down is not None:
            return ToolResult(host=host.name, ok=False, error=down.error, fix=down.fix)
        return inside.outer, name, inside.cli() or "docker"
    from tools.container_host import ContainerHost

    probe = ContainerHost(inside.outer if inside else host, name)
    down = probe.unavailable()
    if down is not None:
        return ToolResult(host=host.name, ok=False, error=down.error, fix=down.fix)
    return probe.outer, name, probe.cli() or "docker"


def run(host: Host, args: Args) -> Result:
    found = target(host, args.name)
    if isinstance(found, ToolResult):
        return Result(host=host.name, ok=False, error=found.error, fix=found.fix)
    outer, name, cli = found
    res = outer.run(f"{cli} inspect {name}", timeout=20)
    if not res.ok:
        return failed(Result, res, cli=cli)
    try:
        state = parse_inspect(res.stdout)
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        return Result(
            host=outer.name,
            ok=False,
            cli=cli,
            error=f"`{cli} inspect {name}` on {outer.name} printed no container record: {exc}",
            fix=f"run `{cli} inspect {name}` by hand",
        )
    return Result(host=outer.name, cli=cli, container=state)


SPEC = ToolSpec(
    name="container_inspect",
    description=(
        "The server container's record from `docker inspect` / `podman inspect`: state, exit "
        "code, OOMKilled (the container's memory limit), restart count, start/finish times, "
        "/dev/shm size (64 MB default without --shm-size), memory limit, GPUs passed or not, "
        "published ports, mounts (read-only or not), image, env (secrets redacted). Use it "
        "first when the server runs in a container."
    ),
    args=Args,
    result=Result,
    fn=run,
    first_sweep=8,
    container_only=True,
    scanned=True,
    verdict_needs=True,
    facts=("container",),
)
