"""`ports`: who listens on which TCP port.

"address already in use" is answered by naming the process that holds the port. `ss -ltnp` is
asked first, then `netstat -ltnp`; hosts with neither (the real H200 had no ss, netstat nor
lsof) are read from /proc/net/tcp and /proc/net/tcp6, whose socket inodes are mapped to pids
through /proc/*/fd where those are readable.

As a non-root user `ss -p` names only that user's processes, and other users' /proc/PID/fd are
unreadable: a listener whose owner could not be named is said to be UNKNOWN (`owners_unknown`,
`partial`), with `sudo ss -ltnp` as the fix; it is never shown as a port without an owner.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from tools.base import ToolResult, ToolSpec, bound_lines
from tools.host import Host

SS = "ss -ltnp"
NETSTAT = "netstat -ltnp"
PROC_TCP = "cat /proc/net/tcp /proc/net/tcp6"
#: One `ls` for every fd dir we may read (a fork per fd took seconds); unreadable ones skipped.
PROC_FDS = "ls -l /proc/[0-9]*/fd 2>/dev/null | grep -E '^/proc/|socket:'"
#: every owner's name in one round trip: `/proc/PID/comm:NAME` lines
PROC_COMM = "grep -H . {paths} 2>/dev/null"
_COMM_LINE = re.compile(r"^/proc/(\d+)/comm:(.*)$")


class Args(BaseModel):
    port: int | None = Field(None, ge=1, le=65535, description="a port to check for a listener")


class Listener(BaseModel):
    addr: str
    port: int
    pid: int | None = None
    process: str | None = None
    inode: int | None = None
    raw: str = ""


class Result(ToolResult):
    listeners: list[Listener] = Field(default_factory=list)
    port: int | None = None
    port_free: bool | None = Field(None, description="whether the asked port has no listener")
    source: str = ""
    owners_unknown: int = Field(0, description="listeners whose process could not be named")
    partial: bool = Field(False, description="some owners are unknown (permissions), not absent")

    def unknown_why(self) -> str:
        how = (
            "other users' /proc/PID/fd are not readable"
            if self.source.startswith("/proc")
            else f"{self.source.split()[0] if self.source else 'ss'} -p names only the "
            "connected user's processes unless run as root"
        )
        return f"unknown because {how}"

    def fix_line(self) -> str:
        sport = f" 'sport = :{self.port}'" if self.port else ""
        return f"sudo ss -ltnp{sport} to name the owner (or sudo lsof -iTCP -sTCP:LISTEN -P)"

    def lines(self) -> list[str]:
        shown = [ln for ln in self.listeners if self.port is None or ln.port == self.port]
        out = [ln.raw for ln in shown if ln.raw]
        for ln in shown:
            who = (
                f"pid {ln.pid} ({ln.process or '?'})"
                if ln.pid
                else f"a process Pivot could not name ({self.unknown_why()})"
            )
            out.append(f"# {ln.addr}:{ln.port} is held by {who}")
        if self.ok:
            out.append(f"# {len(self.listeners)} TCP listeners ({self.source})")
        if self.port is not None and self.port_free is not None:
            out.append(f"# port {self.port} is " + ("free" if self.port_free else "IN USE"))
        if self.partial and any(ln.pid is None for ln in shown):
            out.append(
                f"# owner of {self.owners_unknown} listener(s) UNKNOWN, {self.unknown_why()}; "
                f"run {self.fix_line()}"
            )
        return bound_lines(out + super().lines())


def _split_addr(s: str) -> tuple[str, int] | None:
    m = re.match(r"^(.*)[:.](\d+|\*)$", s)
    if not m or m.group(2) == "*":
        return None
    return m.group(1).strip("[]") or "*", int(m.group(2))


_SS_USER = re.compile(r'\(\("([^"]*)",pid=(\d+)')
_NETSTAT_PROG = re.compile(r"^(\d+)/(.+)$")


def parse_ss(text: str) -> list[Listener]:
    """`ss -ltnp` rows (State Recv-Q Send-Q Local Peer Process) or `ss -ltnp` without State."""
    out: list[Listener] = []
    for line in text.splitlines():
        toks = line.split()
        if not toks or toks[0] in ("State", "Netid", "Recv-Q"):
            continue
        if toks[0] != "LISTEN" and not (toks[0] == "tcp" and "LISTEN" in toks):
            continue
        i = toks.index("LISTEN")
        if len(toks) < i + 4:
            continue
        hp = _split_addr(toks[i + 3])
        if hp is None:
            continue
        m = _SS_USER.search(line)
        out.append(
            Listener(
                addr=hp[0],
                port=hp[1],
                pid=int(m.group(2)) if m else None,
                process=m.group(1) if m else None,
                raw=line,
            )
        )
    return out


def parse_netstat(text: str) -> list[Listener]:
    """`netstat -ltnp`: Proto Recv-Q Send-Q Local Foreign State PID/Program."""
    out: list[Listener] = []
    for line in text.splitlines():
        toks = line.split()
        if len(toks) < 6 or not toks[0].startswith("tcp") or "LISTEN" not in toks:
            continue
        hp = _split_addr(toks[3])
        if hp is None:
            continue
        m = _NETSTAT_PROG.match(" ".join(toks[6:]))  # "812/sshd: /usr/sbin" has spaces
        out.append(
            Listener(
                addr=hp[0],
                port=hp[1],
                pid=int(m.group(1)) if m else None,
                process=m.group(2).split(":")[0].strip() if m else None,
                raw=line,
            )
        )
    return out


def _hex_ip(h: str) -> str | None:
    try:
        raw = bytes.fromhex(h)
    except ValueError:
        return None
    if len(raw) == 4:
        return ".".join(str(b) for b in reversed(raw))
    if len(raw) == 16:
        # Four little-endian 32-bit words.
        words = [raw[i : i + 4][::-1] for i in range(0, 16, 4)]
        b = b"".join(words)
        if b[:12] == b"\x00" * 10 + b"\xff\xff":
            return ".".join(str(x) for x in b[12:])  # v4-mapped
        groups = [f"{(b[i] << 8) | b[i + 1]:x}" for i in range(0, 16, 2)]
        import ipaddress

        return str(ipaddress.IPv6Address(":".join(groups)))
    return None


def parse_proc_net_tcp(text: str) -> list[Listener]:
    """/proc/net/tcp{,6}: `sl local rem st ... uid timeout inode`; state 0A is LISTEN."""
    out: list[Listener] = []
    for line in text.splitlines():
        toks = line.split()
        if len(toks) < 10 or not toks[0].endswith(":") or toks[3] != "0A":
            continue
        local = toks[1].split(":")
        if len(local) != 2:
            continue
        ip = _hex_ip(local[0])
        try:
            port = int(local[1], 16)
            inode = int(toks[9])
        except ValueError:
            continue
        if ip is None or not 0 < port < 65536:
            continue
        out.append(Listener(addr=ip, port=port, inode=inode, raw=line))
    return out


_FD_DIR = re.compile(r"^/proc/(\d+)/fd:$")
_FD_SOCKET = re.compile(r"-> socket:\[(\d+)\]")


def parse_socket_fds(text: str) -> dict[int, int]:
    """`ls -l /proc/*/fd` (a `/proc/PID/fd:` line, then `N -> socket:[INODE]` lines) -> inode -> pid."""
    out: dict[int, int] = {}
    pid: int | None = None
    for line in text.splitlines():
        m = _FD_DIR.match(line.strip())
        if m:
            pid = int(m.group(1))
            continue
        m = _FD_SOCKET.search(line)
        if m and pid is not None:
            out.setdefault(int(m.group(1)), pid)
    return out


def parse_comm(text: str) -> dict[int, str]:
    """`grep -H . /proc/PID/comm ...` -> pid -> process name (a gone pid simply has no line)."""
    out: dict[int, str] = {}
    for line in text.splitlines():
        m = _COMM_LINE.match(line.strip())
        if m:
            out.setdefault(int(m.group(1)), m.group(2).strip())
    return out


def run(host: Host, args: Args) -> Result:
    listeners: list[Listener] | None = None
    source = ""
    tried: list[str] = []
    for cmd, parser in ((SS, parse_ss), (NETSTAT, parse_netstat)):
        res = host.run(cmd, timeout=15)
        if res.ok and (parser(res.stdout) or "Local" in res.stdout or not res.stdout.strip()):
            listeners, source = parser(res.stdout), cmd
            break
        tried.append(
            f"{cmd}: " + ("not installed" if res.missing_command else res.error or f"rc {res.rc}")
        )
    if listeners is None:
        res = host.run(PROC_TCP, timeout=15)
        if "local_address" in res.stdout:  # a card may answer `cat` with another file
            listeners, source = parse_proc_net_tcp(res.stdout), "/proc/net/tcp"
            if listeners:
                fds = host.run(PROC_FDS, timeout=20)
                owners = parse_socket_fds(fds.stdout) if fds.ok else {}
                for ln in listeners:
                    ln.pid = owners.get(ln.inode or -1)
                pids = sorted({ln.pid for ln in listeners if ln.pid})[:20]
                if pids:
                    paths = " ".join(f"/proc/{pid}/comm" for pid in pids)
                    comm = host.run(PROC_COMM.format(paths=paths), timeout=15)
                    names = parse_comm(comm.stdout)
                    for ln in listeners:
                        ln.process = names.get(ln.pid or -1)
        else:
            tried.append(f"{PROC_TCP}: {res.error or f'rc {res.rc}'}")
    if listeners is None:
        return Result(
            host=host.name,
            ok=False,
            port=args.port,
            error=f"cannot list listening sockets on {host.name}: " + "; ".join(tried),
            fix="install iproute2 (ss) or net-tools (netstat), or check /proc is mounted",
        )
    listeners.sort(key=lambda ln: (ln.port, ln.addr))
    port_free = None if args.port is None else all(ln.port != args.port for ln in listeners)
    unknown = sum(1 for ln in listeners if ln.pid is None)
    return Result(
        host=host.name,
        listeners=listeners,
        port=args.port,
        port_free=port_free,
        source=source,
        owners_unknown=unknown,
        partial=unknown > 0,
    )


SPEC = ToolSpec(
    name="ports",
    description=(
        "TCP listeners on the host: address, port and the pid/process holding it (ss, netstat, "
        "or /proc/net/tcp when neither exists). port= tells whether that port is free. Use it "
        "on 'address already in use' or when a server's port does not answer."
    ),
    args=Args,
    result=Result,
    fn=run,
    first_sweep=5,
    verdict_needs=True,
    facts=("listeners", "listener_pids"),
)
