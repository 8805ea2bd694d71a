"""`disk`: free space per mount, /dev/shm's size, and host RAM.

Three classic failures live here: a model download or compile cache filling a disk ("No space
left on device", or a download that silently stalls), docker's 64 MB /dev/shm that breaks NCCL
and worker IPC, and host RAM too small for loading. `df -hP` is asked for every mount and for
/dev/shm and the given paths explicitly (a card may hold only those), `free -m` for memory.
"""

from __future__ import annotations

import re
import shlex

from pydantic import BaseModel, Field

from tools.base import ToolResult, ToolSpec, bound_lines
from tools.batch import run_batch
from tools.host import Host
from tools.shared_reads import shared

FULL_PCT = 95
SHM_MIN_BYTES = 1 << 30
_PATH = re.compile(r"^/[A-Za-z0-9_.,+@%/-]*$")


class Args(BaseModel):
    paths: list[str] = Field(
        default_factory=list,
        description="directories the launch writes to (model cache, logs, /tmp)",
        max_length=10,
    )


class Mount(BaseModel):
    filesystem: str
    size: str
    used: str
    avail: str
    use_pct: int | None = None
    mount: str
    size_bytes: int | None = None
    raw: str = ""


class Memory(BaseModel):
    total_mib: int | None = None
    used_mib: int | None = None
    free_mib: int | None = None
    available_mib: int | None = None
    swap_total_mib: int | None = None
    swap_used_mib: int | None = None
    raw_lines: list[str] = Field(default_factory=list)


class Result(ToolResult):
    df_header: str = ""
    mounts: list[Mount] = Field(default_factory=list)
    full: list[str] = Field(default_factory=list, description=f"mounts >= {FULL_PCT}% used")
    shm: Mount | None = None
    shm_too_small: bool | None = None
    memory: Memory | None = None
    notes: list[str] = Field(default_factory=list)

    def lines(self) -> list[str]:
        header = self.df_header or "Filesystem Size Used Avail Use% Mounted on"
        interesting = [m for m in self.mounts if m.mount in self.full or m is self.shm]
        rest = [m for m in self.mounts if m not in interesting]
        out = [header] if self.mounts else []
        out += [m.raw for m in interesting + rest if m.raw]
        if self.memory:
            out += self.memory.raw_lines
        for mnt in self.full:
            out.append(f"# {mnt} is nearly full (>= {FULL_PCT}%)")
        if self.shm is not None:
            out.append(
                f"# /dev/shm is {self.shm.size}"
                + (" — too small for NCCL / worker IPC (< 1 GiB)" if self.shm_too_small else "")
            )
        if self.memory and self.memory.total_mib is not None:
            out.append(
                f"# host RAM {self.memory.total_mib} MiB, available {self.memory.available_mib} MiB"
            )
        out += [f"# note: {n}" for n in self.notes]
        return bound_lines(out + super().lines())


_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


def human_bytes(s: str) -> int | None:
    """df -h sizes: '64M', '128G', '4.0K', '0'."""
    m = re.fullmatch(r"(\d+(?:[.,]\d+)?)([BKMGTP]?)i?B?", s.strip())
    if not m:
        return None
    return int(float(m.group(1).replace(",", ".")) * _UNITS[m.group(2)])


def parse_df(text: str) -> list[Mount]:
    """`df -hP` rows; POSIX format keeps one row per mount, mount points may contain spaces."""
    out: list[Mount] = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or parts[0] == "Filesystem":
            continue
        pct = re.fullmatch(r"(\d+)%", parts[4])
        if not pct and parts[4] != "-":
            continue
        out.append(
            Mount(
                filesystem=parts[0],
                size=parts[1],
                used=parts[2],
                avail=parts[3],
                use_pct=int(pct.group(1)) if pct else None,
                mount=parts[5],
                size_bytes=human_bytes(parts[1]),
                raw=line,
            )
        )
    return out


def parse_free(text: str) -> Memory:
    """`free -m` (a card's `free -g` keeps its numbers in the unit it was asked for)."""
    mem = Memory()
    header: list[str] = []
    header_line = ""
    for line in text.splitlines():
        toks = line.split()
        if toks[:1] == ["total"]:
            header, header_line = toks, line
            continue
        if toks[:1] not in (["Mem:"], ["Swap:"]):
            continue
        nums = [int(t) if t.isdigit() else None for t in toks[1:]]
        row = dict(zip(header or ["total", "used", "free"], nums, strict=False))
        if toks[0] == "Mem:":
            mem.total_mib, mem.used_mib = row.get("total"), row.get("used")
            mem.free_mib, mem.available_mib = row.get("free"), row.get("available")
        else:
            mem.swap_total_mib, mem.swap_used_mib = row.get("total"), row.get("used")
        mem.raw_lines.append(line)
    if mem.raw_lines and header_line:
        mem.raw_lines.insert(0, header_line)
    if mem.total_mib is not None and 0 < mem.total_mib < 512:
        # no host that runs a GPU server has under 512 MiB of RAM: these numbers are GiB (a
        # `free -g` answered for `free -m`), so they are scaled, never shown as MiB
        g = 1024
        for k in (
            "total_mib",
            "used_mib",
            "free_mib",
            "available_mib",
            "swap_total_mib",
            "swap_used_mib",
        ):
            v = getattr(mem, k)
            if v is not None:
                setattr(mem, k, v * g)
    return mem


def run(host: Host, args: Args) -> Result:
    notes: list[str] = []
    bad = [p for p in args.paths if not _PATH.match(p)]
    if bad:
        return Result(
            host=host.name,
            ok=False,
            error=f"refusing paths that are not plain absolute paths: {bad}",
            fix="pass absolute directory paths without shell characters",
        )
    mounts: dict[str, Mount] = {}
    explicit = ["/dev/shm", *args.paths]
    # both df's over one channel where the host can batch (the first sweep is CPU-bound)
    res, one = run_batch(
        host, ["df -hP", "df -hP " + " ".join(shlex.quote(p) for p in explicit)], timeout=20
    )
    if res.ok or res.stdout.strip():  # df exits 1 when one mount is unreadable, still prints
        for m in parse_df(res.stdout):
            mounts.setdefault(m.mount, m)
    elif not res.ok:
        notes.append(f"df -hP failed: {(res.error or res.stderr).strip()[:200]}")
    shm: Mount | None = None
    for i, m in enumerate(parse_df(one.stdout)):
        mounts.setdefault(m.mount, m)
        if m.mount == "/dev/shm" or (i == 0 and shm is None and "shm" in m.mount):
            shm = mounts[m.mount]
    shm = shm or mounts.get("/dev/shm")
    notes += [ln.strip() for ln in one.stderr.splitlines() if ln.strip()][:5]
    df_header = next(
        (ln for ln in (res.stdout + "\n" + one.stdout).splitlines() if ln.startswith("Filesystem")),
        "",
    )
    fr = shared(host, "free -m", lambda: host.run("free -m", timeout=10))
    memory = parse_free(fr.stdout) if fr.ok else None
    if not mounts and memory is None:
        return Result(
            host=host.name,
            ok=False,
            error=f"'df -hP' and 'free -m' both failed on {host.name}: "
            f"{(res.error or res.stderr or one.stderr).strip()[:200]}",
            fix="install coreutils/procps, or read /proc/mounts and /proc/meminfo",
            notes=notes,
        )
    if not mounts and not (res.ok or one.ok):
        # df could not be read at all: disk use is unknown, which must not read as "no mount is
        # full" (a df that ran and listed nothing is still an answer)
        return Result(
            host=host.name,
            ok=False,
            error=f"'df -hP' failed on {host.name}, disk use is unknown: "
            f"{(res.error or res.stderr or one.error or one.stderr).strip()[:200]}",
            fix=res.fix or one.fix or "read df -hP on the host (or /proc/mounts with statfs)",
            memory=memory,
            notes=notes,
        )
    ordered = sorted(mounts.values(), key=lambda m: m.mount)
    return Result(
        host=host.name,
        df_header=df_header,
        mounts=ordered,
        full=[m.mount for m in ordered if m.use_pct is not None and m.use_pct >= FULL_PCT],
        shm=shm,
        shm_too_small=None
        if shm is None or shm.size_bytes is None
        else shm.size_bytes < SHM_MIN_BYTES,
        memory=memory,
        notes=notes,
    )


SPEC = ToolSpec(
    name="disk",
    description=(
        "Disk space per mount (df -hP), /dev/shm's size (docker's 64 MB default breaks NCCL and "
        "worker IPC) and host RAM (free -m). Flags mounts >= 95% full. paths= adds the "
        "directories a launch writes to (model cache, logs). Use it on 'No space left on "
        "device', stalled downloads, shm/NCCL errors, or a 'Killed' during loading."
    ),
    args=Args,
    result=Result,
    fn=run,
    first_sweep=4,
    verdict_needs=True,
    facts=("shm_mib", "shm_use_pct", "full_mounts"),
)
