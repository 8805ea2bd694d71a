"""`dmesg`: what the kernel said about memory and GPUs.

A server that dies with a bare "Killed" or a CUDA error that names no cause is explained here:
the OOM killer's "Out of memory: Killed process 1234 (python3)", NVIDIA Xid errors, NVRM
messages, "fallen off the bus", segfaults. The tail is read with `dmesg -T` (falling back to
plain `dmesg`, then `journalctl -k`, then /var/log/kern.log). A kernel log this user may not read
(kernel.dmesg_restrict=1 for a non-root SSH user) is never an empty, clean result: it comes back
failed with `denied`, lines saying the OOM killer and Xid errors are UNKNOWN because of it, and
the ways to read it (sudo, the adm group, the host's own kernel log).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from tools.base import ToolResult, ToolSpec, bound_lines
from tools.batch import can_batch, run_batch
from tools.host import CommandResult, Host

COMMANDS = (
    "dmesg -T",
    "dmesg",
    "journalctl -k --no-pager -n 2000",
    "tail -n 2000 /var/log/kern.log",
)

_OOM = re.compile(
    r"Out of memory:|oom-kill:|invoked oom-killer|oom_reaper|Memory cgroup out of memory", re.I
)
_KILLED = re.compile(r"(?:Killed|Kill) process (\d+) \(([^)]*)\)")
_XID = re.compile(r"NVRM: Xid \(([^)]*)\): (\d+),(?:\s*pid=(\d+|'<unknown>'))?")
_NVRM = re.compile(r"NVRM:")
_BUS = re.compile(r"fallen off the bus|GPU has fallen off", re.I)
#: the IOMMU blocking a device's DMA (GPU peer-to-peer writes) and PCIe errors on a GPU's link
_DEVICE = re.compile(
    r"DMAR: \[DMA|AMD-Vi: Event logged|IO_PAGE_FAULT|PCIe Bus Error|AER: (?:Uncorrected|Multiple)",
    re.I,
)
#: storage that stalls or fails under a loading server: an NFS server not answering, a task
#: blocked in the kernel for minutes (a read of weights off a hung mount), I/O errors
_STORAGE = re.compile(
    r"nfs: server \S+ (?:not responding|OK)|blocked for more than \d+ seconds|"
    r"(?:Buffer )?I/O error|EXT4-fs error|XFS \(\S+\): .*(?:error|shutdown)|"
    r"blk_update_request|critical medium error",
    re.I,
)
_SEGV = re.compile(r"segfault at|general protection fault|traps: .* trap ", re.I)
_DENIED = re.compile(
    r"Operation not permitted|Permission denied|read kernel buffer failed|not seeing messages "
    r"from other users|Users in groups?",
    re.I,
)
FIX_DENIED = (
    "run as root: sudo dmesg -T (or sudo journalctl -k); or let this user read the kernel log: "
    "sudo usermod -aG adm USER (then /var/log/kern.log and journalctl -k are readable), or "
    "sudo sysctl kernel.dmesg_restrict=0"
)

#: Xid codes that mean hardware or driver trouble rather than an application bug.
HARDWARE_XIDS = {48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140}


#: the most kernel lines one read may ask for (`pivot capture` keeps this many)
MAX_TAIL = 5000


class Args(BaseModel):
    tail: int = Field(500, ge=10, le=MAX_TAIL, description="how many of the newest lines to scan")
    pattern: str | None = Field(None, description="also keep lines matching this regex")


class Xid(BaseModel):
    code: int
    device: str
    pid: int | None = None
    line: str


class OomKill(BaseModel):
    pid: int
    name: str
    line: str


class DmesgParse(BaseModel):
    oom_lines: list[str] = Field(default_factory=list)
    oom_kills: list[OomKill] = Field(default_factory=list)
    xids: list[Xid] = Field(default_factory=list)
    nvrm_lines: list[str] = Field(default_factory=list)
    bus_lines: list[str] = Field(default_factory=list)
    segfault_lines: list[str] = Field(default_factory=list)
    device_lines: list[str] = Field(
        default_factory=list, description="IOMMU DMA faults and PCIe errors (P2P, a failing link)"
    )
    storage_lines: list[str] = Field(
        default_factory=list,
        description="storage stalls and errors (NFS not responding, hung tasks, I/O errors)",
    )
    matched_lines: list[str] = Field(default_factory=list)
    total_lines: int = 0


class Result(DmesgParse, ToolResult):
    source: str = Field("", description="the command whose output this is")
    hardware_fault: bool = Field(False, description="an Xid code that means hardware/driver")
    readable: bool = Field(True, description="the kernel log could be read at all")
    denied: bool = Field(False, description="reading it was refused (permissions)")
    tried: list[str] = Field(default_factory=list, description="each source tried, and why not")

    def lines(self) -> list[str]:
        if not self.readable:
            out = [
                "# kernel log: UNKNOWN, not empty: OOM-killer kills, Xid errors and segfaults "
                "can not be ruled out from it"
            ]
            out += [f"# tried {t}" for t in self.tried]
            return bound_lines(out + super().lines())
        seen: set[str] = set()
        out: list[str] = []
        for ln in (
            self.oom_lines
            + [x.line for x in self.xids]
            + self.nvrm_lines
            + self.bus_lines
            + self.segfault_lines
            + self.device_lines
            + self.storage_lines
            + self.matched_lines
        ):
            if ln not in seen:
                seen.add(ln)
                out.append(ln)
        if self.ok:
            out.append(
                f"# {self.total_lines} kernel lines scanned ({self.source}): "
                f"{len(self.oom_kills)} OOM kills, {len(self.xids)} Xid, "
                f"{len(self.bus_lines)} fallen-off-the-bus, {len(self.segfault_lines)} segfaults"
                + (f", {len(self.device_lines)} IOMMU/PCIe faults" if self.device_lines else "")
                + (
                    f", {len(self.storage_lines)} storage stalls/errors"
                    if self.storage_lines
                    else ""
                )
            )
            out += [f"# OOM killer killed pid {k.pid} ({k.name})" for k in self.oom_kills]
            codes = sorted({x.code for x in self.xids})
            if codes:
                out.append(
                    f"# Xid codes {codes}"
                    + (" (hardware/driver fault)" if self.hardware_fault else "")
                )
        return bound_lines(out + super().lines())


def parse_dmesg(text: str, pattern: str | None = None) -> DmesgParse:
    out = DmesgParse()
    extra: re.Pattern[str] | None = None
    if pattern:
        try:
            extra = re.compile(pattern, re.I)
        except re.error:
            extra = re.compile(re.escape(pattern), re.I)
    for line in text.splitlines():
        if not line.strip():
            continue
        out.total_lines += 1
        if _OOM.search(line):
            out.oom_lines.append(line)
            m = _KILLED.search(line)
            if m:
                out.oom_kills.append(OomKill(pid=int(m.group(1)), name=m.group(2), line=line))
        m = _XID.search(line)
        if m:
            pid = m.group(3)
            out.xids.append(
                Xid(
                    code=int(m.group(2)),
                    device=m.group(1),
                    pid=int(pid) if pid and pid.isdigit() else None,
                    line=line,
                )
            )
        elif _NVRM.search(line):
            out.nvrm_lines.append(line)
        if _BUS.search(line):
            out.bus_lines.append(line)
        if _SEGV.search(line):
            out.segfault_lines.append(line)
        if _DEVICE.search(line) and len(out.device_lines) < 20:
            out.device_lines.append(line)
        if _STORAGE.search(line) and len(out.storage_lines) < 20:
            out.storage_lines.append(line)
        if extra is not None and extra.search(line):
            out.matched_lines.append(line)
    return out


def _why(res: CommandResult) -> str:
    if res.missing_command:
        return "not installed"
    said = (res.stderr or "").strip().splitlines()
    if said:
        return said[0][:200]
    return res.error or ("printed nothing" if res.rc == 0 else f"exit {res.rc}")


def _full(cmd: str, tail: int) -> str:
    """The command as run: `| tail` hides dmesg's exit status, but its refusal still goes to
    stderr; kern.log is tailed as deep as asked."""
    if cmd.startswith("dmesg"):
        return f"{cmd} | tail -n {tail}"
    if cmd.startswith("tail"):
        return cmd.replace("2000", str(tail))
    return cmd


def run(host: Host, args: Args) -> Result:
    attempts: list[CommandResult] = []
    tried: list[str] = []
    ahead: dict[str, CommandResult] = {}
    for cmd in COMMANDS:
        if cmd == "dmesg" and attempts and _DENIED.search(attempts[-1].stderr):
            # the kernel refused its buffer (dmesg_restrict), not the -T flag: plain dmesg reads
            # the same buffer and is refused the same way, so its channel is not spent
            tried.append(f"{cmd}: not asked, the kernel refused `dmesg -T` its buffer")
            continue
        full = _full(cmd, args.tail)
        if full in ahead:
            res = ahead.pop(full)
        elif cmd.startswith("journalctl") and can_batch(host):
            # dmesg said nothing usable: the two file-backed fallbacks go over one channel
            rest = [_full(c, args.tail) for c in COMMANDS[COMMANDS.index(cmd) :]]
            res, *later = run_batch(host, rest, timeout=15)
            ahead.update(zip(rest[1:], later, strict=True))
        else:
            res = host.run(full, timeout=15)
        res.command = cmd if cmd.startswith("dmesg") else full
        attempts.append(res)
        if res.timed_out:
            # a hung kernel-log read (stuck driver, huge journal) will not go faster with a
            # fallback: say so now instead of spending another timeout on the next command
            return Result(
                host=host.name,
                ok=False,
                readable=False,
                tried=[*tried, f"{cmd}: timed out"],
                error=res.error or f"{full!r} timed out on {host.name}",
                fix=res.fix or "read the kernel log by hand; the driver may be hung",
            )
        # journalctl's "-- No entries --" / "-- Logs begin ..." are not kernel lines; a
        # refusal printed on stdout (dmesg 2>&1 above) is not one either
        text = "\n".join(
            ln
            for ln in res.stdout.splitlines()
            if not ln.startswith("-- ") and not _DENIED.search(ln) and not ln.startswith("dmesg:")
        )
        if text.strip():
            parsed = parse_dmesg(text, args.pattern)
            return Result(
                host=host.name,
                source=cmd,
                tried=tried,
                hardware_fault=any(x.code in HARDWARE_XIDS for x in parsed.xids)
                or bool(parsed.bus_lines),
                **parsed.model_dump(),
            )
        said = (res.stdout + "\n" + res.stderr).strip()
        first = next((ln for ln in said.splitlines() if _DENIED.search(ln)), "")
        tried.append(f"{res.command}: {first[:200] if first else _why(res)}")
    denied = next((r for r in attempts if _DENIED.search(r.stderr + r.stdout)), None)
    if denied is not None:
        said = next(
            ln for ln in (denied.stderr + "\n" + denied.stdout).splitlines() if _DENIED.search(ln)
        )
        return Result(
            host=host.name,
            ok=False,
            readable=False,
            denied=True,
            tried=tried,
            error=f"the kernel log on {host.name} is restricted for this user, so an OOM kill "
            f"or Xid is unknown because {denied.command!r} was refused ({said.strip()[:200]})",
            fix=FIX_DENIED,
        )
    unrecorded = [r for r in attempts if "not recorded in this card" in (r.error or "")]
    if unrecorded and len(unrecorded) == len(attempts):
        return Result(
            host=host.name,
            ok=False,
            readable=False,
            tried=tried,
            error=f"{unrecorded[0].error} on {host.name}: an OOM kill or Xid is unknown, not absent",
            fix=unrecorded[0].fix or "read the kernel log on the live host",
        )
    return Result(
        host=host.name,
        ok=False,
        readable=False,
        tried=tried,
        error=f"no kernel log on {host.name}: an OOM kill or Xid is unknown because dmesg, "
        "journalctl -k and /var/log/kern.log gave nothing",
        fix="in a container the host's kernel log is not visible: read it on the host itself "
        "(sudo dmesg -T there)",
    )


SPEC = ToolSpec(
    name="dmesg",
    description=(
        "The kernel log's newest lines, with OOM-killer kills ('Out of memory: Killed process "
        "PID (NAME)'), NVIDIA Xid errors, NVRM messages, 'fallen off the bus' and segfaults "
        "picked out. Use it when a process died with 'Killed' or no error of its own, or on "
        "CUDA/ECC/'unknown error' failures. pattern= keeps other matching lines too."
    ),
    args=Args,
    result=Result,
    fn=run,
    first_sweep=3,
    reads_machine=True,
    scanned=True,
    verdict_needs=True,
    facts=("dmesg_lines", "dmesg_summary"),
)
