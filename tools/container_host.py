"""`ContainerHost`: the Host protocol inside one Docker or Podman container.

It wraps the machine the container runs on (a `LocalHost`, an `SSHHost`, a `ReplayHost`), so a
container is investigated the same way locally and over SSH. What reads the server (its
processes, /dev/shm, environment, files, ports) runs inside, through `CLI exec NAME sh -c ...`;
what reads the machine (the GPUs through nvidia-smi, the kernel log) and the container CLI itself
(`inspect`, `logs`) run on the outer host, because inside a container they show nothing or
another view. The CLI (`docker` or `podman`) is the first one that knows the container, found
once. A Kubernetes pod would be one more class of this shape over `kubectl exec` (docs/containers.md).
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from tools.host import (
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT_S,
    CommandResult,
    FileTail,
    Host,
    failure,
    missing_file,
)

CLIS = ("docker", "podman")
#: Programs that read the machine, not the container: they run on the outer host.
OUTSIDE = frozenset({"nvidia-smi", "dmesg", "journalctl", "docker", "podman", "kubectl", "oc"})
#: Of those, the ones a GPU container carries itself (the NVIDIA runtime mounts nvidia-smi in):
#: where the machine has none (a cluster's bastion, a node whose tools are not on PATH), the
#: container's own shows its GPUs (their memory and load; its process list is its own).
INSIDE_TOO = frozenset({"nvidia-smi"})
#: Reads of what the container shares with the machine (its sockets under host networking or
#: the ports it published, the disks, the memory): where the container cannot answer them (it
#: has stopped, or its image lacks the program, as minimal images do), the machine's own answer
#: is the one there is (said so by the result's host). The machine's addresses (`ip`,
#: `hostname -I`) are its own under host networking; under a bridge the machine's include the
#: bridge that the container's address is on.
MACHINE_SHARED = frozenset({"ss", "netstat", "df", "free", "uname", "ip", "hostname"})
#: Files every container sees as the machine's own (the driver, the kernel's counters).
MACHINE_FILES = ("/proc/driver/", "/sys/", "/proc/meminfo", "/proc/loadavg", "/proc/cpuinfo")


def machine_shared(command: str) -> bool:
    """A read whose answer is the machine's inside a container or out (MACHINE_SHARED, or a
    file of MACHINE_FILES read with cat/head/tail)."""
    prog = first_program(command)
    if prog in MACHINE_SHARED:
        return True
    if prog not in ("cat", "head", "tail"):
        return False
    try:
        toks = shlex.split(command.split("|", 1)[0])
    except ValueError:
        return False
    return any(t.startswith(MACHINE_FILES) for t in toks[1:])


SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,200}$")
#: Above this a file is not written through the command line (ARG_MAX and the shell's limits).
MAX_WRITE_BYTES = 64_000


def first_program(command: str) -> str:
    """The program a shell command starts with (after sudo/env-less prefixes), by base name."""
    try:
        toks = shlex.split(command.split("|", 1)[0])
    except ValueError:
        toks = command.split()
    while toks and (toks[0] in ("sudo", "command", "exec", "timeout") or toks[0][:1].isdigit()):
        toks = toks[1:]
    return posixpath.basename(toks[0]) if toks else ""


class ContainerHost:
    """Reads inside container `container` on `outer`; the machine's own reads stay outside."""

    def __init__(
        self, outer: Host, container: str, cli: str | None = None, own_outer: bool = False
    ) -> None:
        if not SAFE_NAME.match(container):
            raise ValueError(f"{container!r} is not a container name or id")
        self.outer = outer
        #: close the outer host with this one (the service opens one host per session)
        self.own_outer = own_outer
        self.container = container
        self.name = f"{outer.name}/{container}"
        self._cli = cli
        self._lock = threading.Lock()
        self._why_not: CommandResult | None = None
        #: (inside, on the machine) of its bind mounts: fixed when it was created, so asked once
        self._mounts: list[tuple[str, str]] | None = None

    # -- which CLI --------------------------------------------------------------------------
    def cli(self) -> str | None:
        """`docker` or `podman`: the first that knows this container (asked once)."""
        with self._lock:
            if self._cli is None and self._why_not is None:
                tried: list[str] = []
                for cli in CLIS:
                    res = self.outer.run(
                        f"{cli} inspect --format '{{{{.Id}}}}' {self.container}", timeout=20
                    )
                    if res.ok and res.stdout.strip():
                        self._cli = cli
                        break
                    tried.append(
                        f"{cli}: "
                        + (
                            "not installed"
                            if res.missing_command
                            else (res.error or res.stderr.strip() or f"exit {res.rc}")[:200]
                        )
                    )
                if self._cli is None:
                    self._why_not = failure(
                        self.outer.name,
                        f"docker|podman inspect {self.container}",
                        f"no container {self.container!r} on {self.outer.name} ({'; '.join(tried)})",
                        f"list the containers with `docker ps -a` or `podman ps -a` on "
                        f"{self.outer.name} and pass --container with one of their names",
                    )
            return self._cli

    def unavailable(self) -> CommandResult | None:
        """Why this container cannot be read (no CLI knows it), or None."""
        return None if self.cli() else self._why_not

    def exec_command(self, command: str) -> str:
        return f"{self.cli()} exec {self.container} sh -c {shlex.quote(command)}"

    # -- Host protocol ----------------------------------------------------------------------
    def run(
        self, command: str, timeout: float = DEFAULT_TIMEOUT_S, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> CommandResult:
        prog = first_program(command)
        if prog in OUTSIDE:
            res = self.outer.run(command, timeout, max_bytes)
            if prog in INSIDE_TOO and not res.ok and (res.missing_command or res.rc is None):
                inside = self._inside(command, timeout, max_bytes)
                if inside.ok:
                    return inside
            return res
        return self._inside(command, timeout, max_bytes)

    def _inside(self, command: str, timeout: float, max_bytes: int) -> CommandResult:
        down = self.unavailable()
        if down is not None:
            return down.model_copy(update={"command": command})
        res = self.outer.run(self.exec_command(command), timeout, max_bytes)
        stopped = _stopped(res)
        cannot = stopped or res.missing_command or (res.rc is None and not res.ok)
        if cannot and machine_shared(command):
            outside = self.outer.run(command, timeout, max_bytes)
            if outside.ok:
                seen = _OUTSIDE.get()
                if seen is not None:
                    why = (
                        "it is not running"
                        if stopped
                        else (res.error or res.stderr.strip() or f"exit {res.rc}")[:120]
                    )
                    seen.append(f"`{command}` could not run inside: {why}")
                return outside
        if stopped:
            return failure(
                self.name,
                command,
                f"container {self.container} on {self.outer.name} is not running, so "
                f"{command!r} cannot run inside it ({stopped})",
                f"read its state and logs instead (container_inspect, container_logs), or start "
                f"it again: {self.cli()} start {self.container}",
            )
        return res.model_copy(update={"host": self.name, "command": command})

    def read_tail(self, path: str, max_bytes: int = 256_000) -> FileTail:
        inside = self._read_tail_inside(path, max_bytes)
        if inside.data or inside.exists and inside.error is None:
            return inside
        # a stopped container shows no files, and a log the operator tee'd on the machine is
        # not inside it: the same path on the machine is the file they named (said so by host)
        outside = self.outer.read_tail(path, max_bytes)
        if outside.exists and outside.error is None:
            return outside
        # a file on a volume: the machine holds it at the mount's source (a stopped container's
        # log in `-v /srv/logs:/logs` is /srv/logs/x.log, read whether it runs or not)
        source = self._on_the_machine(path)
        if source is not None:
            mounted = self.outer.read_tail(source, max_bytes)
            if mounted.exists and mounted.error is None:
                return mounted.model_copy(update={"path": path})
        return inside

    def _on_the_machine(self, path: str) -> str | None:
        """Where a path inside the container lies on the machine, through its bind mounts."""
        best = max(
            (
                (dst, src)
                for dst, src in self._bind_mounts()
                if path == dst or path.startswith(dst + "/")
            ),
            key=lambda m: len(m[0]),
            default=None,
        )
        return best[1] + path[len(best[0]) :] if best else None

    def _bind_mounts(self) -> list[tuple[str, str]]:
        """(destination, source) of the container's mounts, read once from its record."""
        with self._lock:
            if self._mounts is not None:
                return self._mounts
        cli = self.cli()
        res = (
            self.outer.run(
                f"{cli} inspect --format '{{{{json .Mounts}}}}' {shlex.quote(self.container)}",
                timeout=20,
            )
            if cli
            else None
        )
        try:
            raw = json.loads(res.stdout) if res is not None and res.ok else []
        except ValueError:
            raw = []
        mounts = [
            (str(m.get("Destination") or "").rstrip("/"), str(m.get("Source") or "").rstrip("/"))
            for m in raw if isinstance(m, dict)
        ]  # fmt: skip
        with self._lock:
            self._mounts = [(d, s) for d, s in mounts if d and s]
            return self._mounts

    def _read_tail_inside(self, path: str, max_bytes: int) -> FileTail:
        q = shlex.quote(path)
        # two plain reads (the size, then the bytes) that every Host answers, a replayed one too
        size_res = self.run(f"stat -c %s {q}", timeout=15)
        if size_res.rc not in (0, None) and "No such file" in size_res.stderr:
            return missing_file(self.name, path)
        res = self.run(f"tail -c {int(max_bytes)} {q}", timeout=30, max_bytes=max_bytes)
        if not res.ok:
            if "No such file" in res.stderr:
                return missing_file(self.name, path)
            return FileTail(
                host=self.name,
                path=path,
                exists=False,
                error=res.error or f"cannot read {path} in {self.name}: {res.stderr.strip()[:200]}",
                fix=res.fix or "check the path inside the container",
            )
        data = res.stdout.encode("utf-8", errors="surrogateescape")
        first = size_res.stdout.split()[:1]
        size = int(first[0]) if first and first[0].isdigit() else len(data)
        return FileTail(host=self.name, path=path, data=data, size=size, bytes_read=len(data))

    def write_file(self, path: str, data: bytes, mode: int | None = None) -> CommandResult:
        if len(data) > MAX_WRITE_BYTES:
            return failure(
                self.name,
                f"write {path}",
                f"{len(data)} bytes is too much to write into {self.name} through exec",
                "copy it in with `docker cp` / `podman cp`, or change the file on a mounted volume",
            )
        octal = "".join(f"\\{b:03o}" for b in data)
        q, tmp = shlex.quote(path), shlex.quote(path + ".pivot-tmp")
        chmod = f" && chmod {mode:o} {tmp}" if mode is not None else ""
        res = self.run(f"printf '{octal}' > {tmp}{chmod} && mv -f {tmp} {q}", timeout=30)
        return res.model_copy(update={"command": f"write {path}"})

    def clock(self) -> float:
        return self.outer.clock()

    def sleep(self, seconds: float) -> None:
        self.outer.sleep(seconds)

    def close(self) -> None:
        if self.own_outer:
            self.outer.close()  # else the outer host belongs to whoever opened it


_STOPPED = re.compile(
    r"is not running|container state improper|can only create exec sessions on running",
    re.I,
)


def _stopped(res: CommandResult) -> str:
    if res.rc != 0:
        for ln in (res.stderr or "").splitlines():
            if _STOPPED.search(ln):
                return ln.strip()[:200]
    return ""


def container_of(host: Host) -> ContainerHost | None:
    """The container a host reads inside, or None for a plain machine."""
    return host if isinstance(host, ContainerHost) else None


def machine_of(host: Host) -> Host:
    """The machine a container runs on (the host itself when it is no container): where a pid
    from the machine's process table is read."""
    box = container_of(host)
    return box.outer if box is not None else host


#: The machine's answers for a container, within one tool call (a context variable: a tool's
#: reads may run on other threads, each in a copy of the caller's context, sharing this list).
_OUTSIDE: ContextVar[list[str] | None] = ContextVar("pivot_answered_outside", default=None)


@contextmanager
def answered_outside() -> Iterator[list[str]]:
    """Collect the commands the machine answered for a container inside this block: a call
    that collected any read the machine, and its result says so. Nested blocks share one list."""
    seen = _OUTSIDE.get()
    if seen is not None:
        yield seen
        return
    seen = []
    token = _OUTSIDE.set(seen)
    try:
        yield seen
    finally:
        _OUTSIDE.reset(token)
