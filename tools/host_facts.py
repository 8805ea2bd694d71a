"""`host_facts`: cheap read-only facts that fit no other tool, in one call.

Investigators (and the incident cards that record them) check the driver's kernel module
version, ECC error counters, host memory, resource limits and, where present, the container
or cluster view (`docker ps -a`, `kubectl get events`). Each comes back as its own section.
The commands are a fixed allowlist: this tool never runs free shell. A command that is not
installed (rc 127) is recorded as unavailable, which is a fact, not an error.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from tools.base import ToolResult, ToolSpec, bound_lines
from tools.batch import run_batch
from tools.host import CommandResult, Host
from tools.processes import MEM_PRESSURE_PCT
from tools.shared_reads import at_once, shared

SectionName = Literal[
    "driver", "ecc", "memory", "ulimit", "kernel", "network", "env", "docker", "kubectl", "pods"
]

#: The allowlist: section -> (command, max lines kept).
COMMANDS: dict[str, tuple[str, int]] = {
    "driver": ("cat /proc/driver/nvidia/version", 5),
    "ecc": ("nvidia-smi -q -d ECC", 60),
    "memory": ("free -m", 5),
    "ulimit": ("ulimit -a", 25),
    "kernel": ("uname -r", 2),
    # the interfaces NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME may name
    "network": ("ip -brief addr", 20),
    # the login environment's settings that steer a launch (GPUs, NCCL, proxies, caches);
    # secrets redacted (tools/launch_env.py reads a live server's own environment)
    "env": ("env", 40),
    "docker": ("docker ps -a", 30),
    "kubectl": ("kubectl get events", 40),
    # a crashed pod's last state says OOMKilled / Error / Completed and its exit code
    "pods": ("kubectl describe pods", 80),
}
#: the machine's addresses where `ip` is missing
NETWORK_FALLBACK = "hostname -I"
_POD_KEEP = re.compile(
    r"^\s*(Name|Status|Reason|Exit Code|Restart Count|Started|Finished|Last State|State|Message)\s*:"
    r"|OOMKilled|Killing|Unhealthy|BackOff|Evicted|probe"
)

#: concurrent commands; below sshd's default MaxSessions (10) with the sweep's other reads
_PARALLEL = 4

_ECC_KEEP = re.compile(
    r"^GPU [0-9A-Fa-f]|ECC|^Volatile$|^Aggregate$|Correctable|Uncorrectable|Parity|SEC-DED|"
    r"Remap|Retired|Single Bit|Double Bit|Unrepairable|Page Blacklist"
)
_ECC_COUNT = re.compile(r"^\s*((?:SRAM|DRAM)?\s*(?:Uncorrectable|Correctable)[^:]*?)\s*:\s*(\d+)")


class Args(BaseModel):
    sections: list[SectionName] = Field(
        default_factory=lambda: list(COMMANDS),  # type: ignore[arg-type]
        description="which facts to read; all by default",
    )


class Section(BaseModel):
    name: str
    command: str
    ok: bool
    available: bool = Field(True, description="False when the command is not installed")
    rc: int | None = None
    lines: list[str] = Field(default_factory=list)
    note: str | None = None


class EccCounts(BaseModel):
    volatile_uncorrectable: int = 0
    aggregate_uncorrectable: int = 0
    volatile_correctable: int = 0
    aggregate_correctable: int = 0
    found: bool = False


class HostMemory(BaseModel):
    """`free`'s Mem: row in MiB. Held is total minus available: page cache the kernel gives
    back on demand is not pressure, so `used` alone would overstate it."""

    total_mib: float
    available_mib: float
    line: str = Field(description="the Mem: row as printed, to cite")

    @property
    def held_pct(self) -> float:
        return 100.0 * (self.total_mib - self.available_mib) / self.total_mib


class Result(ToolResult):
    sections: list[Section] = Field(default_factory=list)
    driver_version: str | None = None
    ecc: EccCounts | None = None
    memory: HostMemory | None = None

    def lines(self) -> list[str]:
        out: list[str] = []
        for s in self.sections:
            state = (
                "ok"
                if s.ok
                else "unavailable: rc 127"
                if not s.available
                else f"rc {s.rc}"
                if s.rc is not None
                else "not read"
            )
            out.append(f"# $ {s.command}  ({state})" + (f" — {s.note}" if s.note else ""))
            out += s.lines
        if self.ecc and self.ecc.found:
            e = self.ecc
            out.append(
                f"# ECC uncorrectable: volatile {e.volatile_uncorrectable}, aggregate "
                f"{e.aggregate_uncorrectable}; correctable: volatile {e.volatile_correctable}"
                + (
                    " — uncorrectable ECC errors: a GPU memory fault"
                    if e.aggregate_uncorrectable or e.volatile_uncorrectable
                    else ""
                )
            )
        if self.memory is not None and self.memory.held_pct >= MEM_PRESSURE_PCT:
            out.append(
                f"# host RAM nearly exhausted: {self.memory.held_pct:.0f}% held (total minus "
                "available); the kernel's OOM killer acts next"
            )
        return bound_lines(out + super().lines())


_UNIT_MIB = {"": 1 / 1024, "b": 1 / 1048576, "k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1048576.0}


def _mib(value: str, default_unit: str) -> float | None:
    m = re.fullmatch(r"([\d.]+)([KMGTkmgt]i?)?[Bb]?", value)
    if not m:
        return None
    unit = (m.group(2) or default_unit)[:1].lower()
    return float(m.group(1)) * _UNIT_MIB.get(unit, 1.0)


def parse_free(text: str, default_unit: str = "m") -> HostMemory | None:
    """The Mem: row of `free` (-m by default; -g, -h and the old layout with a -/+ buffers row
    too). Without an available column (procps before 3.3.10) free + buff/cache stands in."""
    header: list[str] = []
    for line in text.splitlines():
        cols = line.split()
        if not cols:
            continue
        if cols[0] in ("total", "used") or "total" in cols[:2]:
            header = [c.lower() for c in cols]
            continue
        if cols[0] != "Mem:" or not header:
            continue
        values = dict(zip(header, cols[1:], strict=False))
        total = _mib(values.get("total", ""), default_unit)
        avail = _mib(values.get("available", ""), default_unit)
        if avail is None:
            parts = [
                _mib(values.get(k, ""), default_unit)
                for k in ("free", "buff/cache", "buffers", "cached")
            ]
            if parts[0] is None:
                return None
            avail = sum(p or 0.0 for p in parts)
        if not total:
            return None
        return HostMemory(total_mib=total, available_mib=avail, line=line)
    return None


def parse_ecc(text: str) -> EccCounts:
    """Sums `nvidia-smi -q -d ECC` counters over GPUs, split by Volatile / Aggregate block."""
    counts = EccCounts()
    block = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped in ("Volatile", "Aggregate"):
            block = stripped.lower()
            continue
        if stripped.startswith("Aggregate Uncorrectable SRAM Sources") or stripped.startswith(
            ("Retired", "Remapped", "Channel", "TPC", "Unrepairable")
        ):
            block = ""
            continue
        m = _ECC_COUNT.match(line)
        if not m or not block:
            continue
        counts.found = True
        kind = "uncorrectable" if "Uncorrectable" in m.group(1) else "correctable"
        field = f"{block}_{kind}"
        setattr(counts, field, getattr(counts, field) + int(m.group(2)))
    return counts


#: kubectl's words for "there is no cluster to ask" (no kubeconfig, nothing listening, no route)
_NO_CLUSTER = re.compile(
    r"connection to the server \S+ was refused|Unable to connect to the server|"
    r"no configuration has been provided|couldn't get current server API group list"
)


#: the one-liners asked in one batch (tools/batch.py): each is a fork and a few milliseconds,
#: where a channel of its own cost more than the command (the sweep is CPU-bound on small boxes);
#: `docker ps -a` answers from its daemon (or fails at once without one) in well under the
#: sweep's slowest read, so it rides along too, as does nvidia-smi's ECC query (one more start of
#: a binary the wave already starts for the GPU table)
_BATCHED = ("driver", "ulimit", "kernel", "network", "env", "docker", "ecc")


def _read(host: Host, name: str) -> CommandResult:
    if name == "memory":  # `disk` reads it in the same wave: one read for both
        return shared(host, "free -m", lambda: host.run("free -m", timeout=10))
    return host.run(COMMANDS[name][0], timeout=15, max_bytes=200_000)


def _one_liners(host: Host, names: list[str], kube: bool) -> dict[str, CommandResult]:
    """The batched sections, and (key "kube?") whether kubectl has a cluster to ask."""
    asked = [n for n in names if n in _BATCHED]
    commands = [COMMANDS[n][0] for n in asked] + ([_KUBE_CONFIGURED] if kube else [])
    answers = run_batch(host, commands, timeout=15, max_bytes=200_000)
    read = dict(zip(asked, answers, strict=False))
    if kube:
        read["kube?"] = answers[-1]
    return read


#: where kubectl finds a cluster: a kubeconfig, or a pod's service account (in-cluster)
_KUBE_CONFIGURED = (
    'test -n "${KUBECONFIG:-}" -o -f "$HOME/.kube/config" -o -n "${KUBERNETES_SERVICE_HOST:-}"'
)


def _events(host: Host, configured: CommandResult) -> CommandResult:
    """`kubectl get events`, unless the host says kubectl has no cluster to ask: no KUBECONFIG,
    no ~/.kube/config and not inside a pod. Starting kubectl there only to be refused cost
    ~50 ms of CPU (Go) in every first sweep on a box that has kubectl and no cluster. A host
    that cannot say (the test itself failed to run, a replayed card) is asked as before."""
    events = COMMANDS["kubectl"][0]
    if configured.rc == 1 and configured.error is None:
        why = (
            "not asked: no KUBECONFIG, no ~/.kube/config and not in a pod (kubectl has no cluster)"
        )
        return CommandResult(host=host.name, command=events, rc=None, error=why)
    return host.run(events, timeout=15, max_bytes=200_000)


def _pods_after(host: Host, events: CommandResult) -> CommandResult:
    """`kubectl describe pods`, unless `kubectl get events` just showed there is no cluster to
    ask (kubectl missing, or no kubeconfig / API server): then the pods' answer would be the
    same failure, so it is that one, under the pods' command. Asking anyway cost a second
    kubectl start (~50 ms of CPU, Go) inside the first sweep on every box with kubectl and no
    cluster. A cluster that answered, or refused only the events (RBAC), is asked; one that
    did not answer in time is not waited for twice."""
    pods = COMMANDS["pods"][0]
    if events.error and events.error.startswith("not asked"):
        return events.model_copy(update={"command": pods})
    if events.timed_out:
        why = f"not asked: {events.command!r} got no answer from the cluster in time"
        return events.model_copy(update={"command": pods, "error": why})
    if events.missing_command or (
        not events.ok and _NO_CLUSTER.search(events.stderr + "\n" + events.stdout)
    ):
        return events.model_copy(update={"command": pods})
    return _read(host, "pods")


def run(host: Host, args: Args) -> Result:
    from tools.launch_env import STEERING, parse_env
    from tools.packages import parse_driver_version

    sections: list[Section] = []
    driver = None
    ecc = None
    memory = None
    names = list(dict.fromkeys(args.sections))
    # the one-liners in one batch, `free` (shared with `disk`) on a channel of its own, at
    # once: the sweep waits for the slowest, not for the sum; kubectl's events wait for the batch's "is a cluster configured?", the pods
    # for the events, which say whether kubectl reaches a cluster at all
    kube = "kubectl" in names
    alone = [n for n in names if n not in _BATCHED and n not in ("kubectl", "pods")]
    jobs: list[str | None] = [None, *alone]
    answers = at_once(
        lambda n: _one_liners(host, names, kube) if n is None else {n: _read(host, n)},
        jobs,
        _PARALLEL,
        "pivot-host-facts",
    )
    read: dict[str, CommandResult] = {k: v for a in answers for k, v in a.items()}
    if kube:
        read["kubectl"] = _events(host, read.pop("kube?"))
    if "pods" in names:
        read["pods"] = _pods_after(host, read["kubectl"]) if kube else _read(host, "pods")
    used = {n: COMMANDS[n][0] for n in names}
    if "network" in read and not read["network"].ok:
        # a minimal image or an old host without iproute2: the addresses alone still say
        # which machine this is (a log that binds another machine's address ran there)
        alt = host.run(NETWORK_FALLBACK, timeout=10)
        if alt.ok and alt.stdout.strip():
            read["network"], used["network"] = alt, NETWORK_FALLBACK
    results = [read[n] for n in names]
    for name, res in zip(names, results, strict=True):
        command, keep = used[name], COMMANDS[name][1]
        text = res.stdout if res.stdout.strip() else res.stderr
        lines = [ln for ln in text.splitlines() if ln.strip()]
        note = None
        if name == "ecc":
            ecc = parse_ecc(res.stdout) if res.ok else None
            if ecc is not None and not ecc.found:
                note, ecc = "no ECC counters in the output (ECC off, or not this query)", None
            lines = [ln for ln in lines if _ECC_KEEP.search(ln.strip())]
        if name == "pods":
            lines = [ln for ln in lines if _POD_KEEP.search(ln)]
        if name == "env":
            variables, _ = parse_env(res.stdout if res.ok else "")
            lines = [f"{k}={v}" for k, v in variables.items() if STEERING.match(k)]
        if name == "driver" and res.ok:
            driver = parse_driver_version(res.stdout)
        if name == "memory" and res.ok:
            memory = parse_free(res.stdout)
        if len(lines) > keep:
            note = (note + "; " if note else "") + f"{len(lines) - keep} more lines cut"
            lines = lines[:keep]
        sections.append(
            Section(
                name=name,
                command=command,
                ok=res.ok and not (name == "ecc" and ecc is None),
                available=not res.missing_command,
                rc=res.rc,
                lines=lines if not res.missing_command else [],
                note=note or (res.error if res.timed_out or res.rc is None else None),
            )
        )
    return Result(host=host.name, sections=sections, driver_version=driver, ecc=ecc, memory=memory)


SPEC = ToolSpec(
    name="host_facts",
    description=(
        "Cheap read-only facts in one call, one section per command: NVIDIA kernel-module "
        "version (/proc/driver/nvidia/version), ECC error counters (nvidia-smi -q -d ECC), "
        "free -m, ulimit -a, uname -r, docker ps -a and kubectl get events where installed. "
        "Use it for driver-mismatch, ECC/hardware, container restarts and probe-kill questions."
    ),
    args=Args,
    result=Result,
    fn=run,
    first_sweep=6,
    scanned=True,
    facts=("free_held_pct", "free_line"),
)
