"""`processes`: which processes run, which of them are inference servers, zombies or stuck.

"Is the server still alive?", "is an old one still holding the GPU or the port?" and "is it
stuck in D state on NFS?" are answered from `ps`. The parser reads columns by the header line
it actually gets, so it takes `ps -eo pid,ppid,user,stat,etimes,rss,args` from a live host and
the raw `ps aux` an incident card holds. GPU pids (from `gpu_status`) are linked to their
command lines, which is how a stale process holding memory is named.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from tools import gpu_status
from tools.base import ToolResult, ToolSpec, bound_lines
from tools.host import Host

PS_COMMAND = "ps -ww -eo pid,ppid,user,stat,etimes,rss,args"  # -ww: never cut at $COLUMNS
PS_FALLBACK = "ps auxww"

#: Inference-server kinds, tried in order against the command line.
SERVER_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("sglang", re.compile(r"sglang", re.I)),
    ("vllm", re.compile(r"\bvllm\b|vllm[._-]|VLLM::", re.I)),
    ("trtllm", re.compile(r"trtllm|tensorrt_llm|tensorrt-llm", re.I)),
    ("triton", re.compile(r"tritonserver")),
    ("tgi", re.compile(r"text-generation-(?:launcher|server|router)")),
    ("torchrun", re.compile(r"\btorchrun\b|torch\.distributed\.(?:run|launch)")),
    ("ray", re.compile(r"\bray::|\braylet\b|\bgcs_server\b|\bray start\b")),
    ("lmdeploy", re.compile(r"\blmdeploy\b")),
    ("ollama", re.compile(r"\bollama (?:serve|runner)\b|ollama_llama_server")),
    ("llama.cpp", re.compile(r"\bllama-server\b|\bllama\.cpp\b|/server\s+-m\s")),
    ("aphrodite", re.compile(r"\baphrodite\b")),
    ("deepspeed-mii", re.compile(r"\bmii\b|deepspeed\.launcher|\bdeepspeed\s")),
    ("lightllm", re.compile(r"\blightllm\b")),
    # a script that says it serves: server.py, serve.py, api_server, launch_server
    (
        "server-script",
        re.compile(r"\b(?:api_|launch_)?serv(?:e|er|ing)[\w-]*\.py\b|\bapi_server\b"),
    ),
    # `python -m <module>`, except tooling that is never a server.
    (
        "python-module",
        re.compile(r"^\S*python[0-9.]*\s+(?:-\S+\s+)*-m\s+(?!(?:pytest|pip|venv|ensurepip|ipykernel_launcher|ipykernel|jupyter\w*|notebook|IPython|json\.tool)\b)\S+"),
    ),
]

_COLUMN = {
    "PID": "pid",
    "PPID": "ppid",
    "USER": "user",
    "UID": "user",
    "STAT": "stat",
    "S": "stat",
    "ELAPSED": "etimes",
    "RSS": "rss",
    "RSZ": "rss",
    "%CPU": "cpu",
    "%MEM": "mem",
    "COMMAND": "command",
    "CMD": "command",
    "ARGS": "command",
}


class Args(BaseModel):
    pattern: str | None = Field(
        None, description="regex (or plain text) a command line must match; or a pid"
    )
    link_gpu: bool = Field(True, description="ask gpu_status which pids hold GPU memory")
    gpu_pids: list[int] = Field(
        default_factory=list, description="pids known to hold GPU memory (skips gpu_status)"
    )


class Proc(BaseModel):
    pid: int
    ppid: int | None = None
    user: str = ""
    stat: str = ""
    elapsed_s: int | None = None
    rss_kb: int | None = None
    command: str = ""
    server: str | None = Field(None, description="sglang | vllm | trtllm | ... when a server")
    zombie: bool = False
    d_state: bool = False
    on_gpu: bool = Field(False, description="nvidia-smi lists this pid as a compute process")
    gpu_mib: int | None = Field(None, description="GPU memory this pid holds, when known")
    raw: str = Field("", description="the ps line, verbatim")


class PsParse(BaseModel):
    header: str = ""
    procs: list[Proc] = Field(default_factory=list)


class Result(ToolResult):
    header: str = ""
    processes: list[Proc] = Field(
        default_factory=list,
        description="servers, zombies, D-state, GPU holders and pattern matches",
    )
    total: int = 0
    servers: list[int] = Field(default_factory=list)
    zombies: list[int] = Field(default_factory=list)
    d_state: list[int] = Field(default_factory=list)
    gpu_pids_missing: list[int] = Field(
        default_factory=list, description="GPU pids with no process here (other namespace)"
    )

    def lines(self) -> list[str]:
        out = [self.header] if self.header and self.processes else []
        out += [p.raw for p in self.processes]
        out.append(f"# {self.total} processes; {len(self.processes)} shown")
        for p in self.processes:
            tags = [
                f"server={p.server}" if p.server else "",
                "ZOMBIE" if p.zombie else "",
                "D-state (uninterruptible, often I/O or driver)" if p.d_state else "",
                ("holds GPU memory" + (f" ({p.gpu_mib} MiB)" if p.gpu_mib is not None else ""))
                if p.on_gpu
                else "",
            ]
            if any(tags):
                out.append(f"# pid {p.pid}: " + ", ".join(t for t in tags if t))
        if not self.servers and self.ok:
            out.append("# no inference-server process is running")
        if self.gpu_pids_missing:
            out.append(f"# GPU pids not in this ps (container/namespace?): {self.gpu_pids_missing}")
        return bound_lines(out + super().lines())


def _int(v: str | None) -> int | None:
    return int(v) if v is not None and re.fullmatch(r"\d+", v) else None


def server_kind(command: str) -> str | None:
    if command.startswith("[") and command.endswith("]"):
        return None  # a kernel thread
    for kind, pat in SERVER_PATTERNS:
        if pat.search(command):
            return kind
    return None


def parse_ps(text: str) -> PsParse:
    """Rows of any `ps` output whose header names PID and a command column."""
    out = PsParse()
    names: list[str] | None = None
    for line in text.splitlines():
        if names is None:
            toks = line.split()
            if "PID" in toks and any(_COLUMN.get(t) == "command" for t in toks):
                names = [_COLUMN.get(t, t.lower()) for t in toks]
                out.header = line
            continue
        parts = line.split(None, len(names) - 1)
        if len(parts) < len(names):
            continue
        row = dict(zip(names, parts, strict=False))
        pid = _int(row.get("pid"))
        if pid is None:
            continue
        cmd = row.get("command", "").rstrip()
        stat = row.get("stat", "")
        out.procs.append(
            Proc(
                pid=pid,
                ppid=_int(row.get("ppid")),
                user=row.get("user", ""),
                stat=stat,
                elapsed_s=_int(row.get("etimes")),
                rss_kb=_int(row.get("rss")),
                command=cmd,
                server=server_kind(cmd),
                zombie=stat.startswith("Z") or cmd.endswith("<defunct>"),
                d_state=stat.startswith("D"),
                raw=line,
            )
        )
    return out


def _matcher(pattern: str | None) -> re.Pattern[str] | None:
    if not pattern:
        return None
    try:
        return re.compile(pattern, re.I)
    except re.error:
        return re.compile(re.escape(pattern), re.I)


def run(host: Host, args: Args) -> Result:
    res = host.run(PS_COMMAND, timeout=15)
    parsed = parse_ps(res.stdout) if res.ok else PsParse()
    if not parsed.header:
        res = host.run(PS_FALLBACK, timeout=15)
        parsed = parse_ps(res.stdout) if res.ok else PsParse()
    if not parsed.header:
        detail = res.error or (res.stderr or res.stdout).strip()[:200] or f"rc {res.rc}"
        return Result(
            host=host.name,
            ok=False,
            error=f"{res.command!r} on {host.name} gave no process table: {detail}",
            fix="install procps (ps), or read /proc/<pid>/cmdline for the pids you care about",
        )
    gpu_mib: dict[int, int | None] = {p: None for p in args.gpu_pids}
    if args.link_gpu and not args.gpu_pids:
        gs = gpu_status.run(host, gpu_status.Args())
        gpu_mib = {p.pid: p.used_mib for p in gs.processes}
    match = _matcher(args.pattern)
    own = {p.pid for p in parsed.procs if re.match(r"^ps\s", p.command)}
    shown: list[Proc] = []
    for p in parsed.procs:
        if p.pid in own:
            continue
        if p.pid in gpu_mib:
            p.on_gpu, p.gpu_mib = True, gpu_mib[p.pid]
        hit = match is not None and (match.search(p.command) or args.pattern == str(p.pid))
        if hit or p.server or p.zombie or p.d_state or p.pid in gpu_mib:
            shown.append(p)
    present = {p.pid for p in parsed.procs}
    return Result(
        host=host.name,
        header=parsed.header,
        processes=shown,
        total=len(parsed.procs) - len(own),
        servers=[p.pid for p in shown if p.server],
        zombies=[p.pid for p in shown if p.zombie],
        d_state=[p.pid for p in shown if p.d_state],
        gpu_pids_missing=sorted(p for p in gpu_mib if p not in present),
    )


SPEC = ToolSpec(
    name="processes",
    description=(
        "The host's processes (ps) with inference servers (sglang, vllm, trtllm, triton, "
        "torchrun, ray, python -m ...), zombies and D-state processes marked, and each pid "
        "holding GPU memory linked to its command line. pattern= narrows to matching commands "
        "or one pid. Use it to see whether a server is alive or a stale one holds the GPU."
    ),
    args=Args,
    result=Result,
    fn=run,
)
