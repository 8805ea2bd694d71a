"""`py_stacks`: where a live, silent process waits: its Python stacks (py-spy), or the kernel's view.

A server that is alive but prints nothing is either working (compiling kernels, loading weights)
or stuck (a collective waiting for a peer that never comes). The log cannot tell them apart; the
stacks can. `py-spy dump --pid PID` prints every Python thread with its frames, innermost first:

    Thread 1234 (active): "MainThread"
        all_reduce (torch/distributed/distributed_c10d.py:2501)

py-spy is looked for on PATH, then in ~/.local/bin, beside the process's own interpreter (the
server's venv), in /usr/local/bin and /opt/conda/bin, and on a local host in Pivot's own venv.
It reads the process through ptrace; where that is not allowed (another user's process, yama
ptrace_scope, a container without SYS_PTRACE) the result falls back to /proc/PID/status, wchan
and (root only) /proc/PID/stack, says that the Python stacks are unknown, why, and how to get
them. Read-only: py-spy pauses the process for the few milliseconds of one sample, nothing more.

`waiting_in` classifies the whole process (collective > cuda_sync > compile > load > io > sleep
> other; "unknown" without Python stacks) and `collective_frame` is the verbatim line of the
innermost collective frame, so a rule can cite it.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from tools import engines
from tools.base import ToolResult, ToolSpec, bound_lines
from tools.container_host import machine_of
from tools.host import CommandResult, Host

Category = Literal["collective", "cuda_sync", "compile", "load", "io", "sleep", "other", "unknown"]
#: Most specific first: a process with any thread in a collective waits in a collective.
PRIORITY: tuple[Category, ...] = (
    "collective",
    "cuda_sync",
    "compile",
    "load",
    "io",
    "sleep",
    "other",
)

FIX_DENIED = (
    'run py-spy as root on the host: sudo py-spy dump --pid {pid} (or sudo env "PATH=$PATH" '
    "py-spy dump --pid {pid}); in docker start the container with --cap-add SYS_PTRACE (or exec "
    "into it as root); where yama restricts ptrace, sudo sysctl kernel.yama.ptrace_scope=0"
)
FIX_MISSING = (
    "install py-spy on the host (pip install py-spy, into the server's venv or ~/.local), then "
    "py-spy dump --pid {pid}"
)

# -- py-spy output --------------------------------------------------------------------------------
_THREAD = re.compile(r'^Thread (0x[0-9A-Fa-f]+|\d+)(?: \(([^)]*)\))?(?:: "(.*)")?\s*$')
_FRAME = re.compile(r"^ {4}(\S.*) \(([^()]*)\)\s*$")
_PROCESS = re.compile(r"^Process (\d+): ")
_PYTHON = re.compile(r"^Python v\S+")
_DENIED = re.compile(
    r"Permission denied|Operation not permitted|elevated permissions|ptrace_scope|SYS_PTRACE|"
    r"os error 1\b|os error 13\b",
    re.I,
)
_GONE = re.compile(r"Check that the process is running|No such process|os error 3\b", re.I)
_NOT_PYTHON = re.compile(r"Failed to find python version|not a python|python interpreter", re.I)
_MISSING = re.compile(r"py-spy: (?:command )?not found|command not found", re.I)


class Frame(BaseModel):
    function: str
    file: str
    line: int | None = None
    native: bool = Field(False, description="a C/C++ frame (py-spy --native), not Python")
    text: str = Field("", description="the verbatim frame line of py-spy's output")


class PyThread(BaseModel):
    id: str = Field(description="the thread id as py-spy printed it (OS tid, or a hex handle)")
    tid: int | None = None
    name: str | None = None
    status: str = Field("", description="py-spy's word: idle, active, active+gil, ...")
    idle: bool = False
    header: str = Field("", description='the verbatim line, e.g. Thread 1234 (idle): "MainThread"')
    frames: list[Frame] = Field(default_factory=list, description="innermost first")
    waiting_in: Category = "other"
    waiting_frame: str | None = Field(None, description="verbatim innermost frame of waiting_in")


class StacksParse(BaseModel):
    process: str = Field("", description="py-spy's 'Process PID: command' line")
    python: str = Field("", description="py-spy's 'Python vX.Y.Z (path)' line")
    threads: list[PyThread] = Field(default_factory=list)
    waiting_in: Category = "unknown"
    waiting_thread: str | None = Field(None, description="header line of the deciding thread")
    waiting_frame: str | None = Field(None, description="verbatim innermost frame of waiting_in")
    collective_frame: str | None = Field(
        None, description="verbatim line of the innermost collective frame, when there is one"
    )
    awaits: Literal["replies", "work"] | None = Field(
        None,
        description="replies: the engine waits for its workers to answer an RPC; work: a worker "
        "waits for its next command (idle); None: neither shown",
    )
    awaits_frame: str | None = Field(None, description="verbatim frame that shows `awaits`")
    raw: list[str] = Field(default_factory=list, description="py-spy's output lines, verbatim")


class Args(BaseModel):
    pid: int = Field(ge=1, description="the process to dump (the server or one of its ranks)")
    native: bool = Field(False, description="also show C/C++ frames (NCCL, CUDA): py-spy --native")
    timeout: float = Field(20.0, ge=1.0, le=120.0, description="seconds py-spy may take")
    machine_pid: bool = Field(False, description="a pid of the machine's ps, not the container's")


class Result(StacksParse, ToolResult):
    pid: int = 0
    method: Literal["py-spy", "proc", "none"] = Field(
        "none", description="py-spy: Python stacks; proc: kernel view only; none: nothing read"
    )
    command: str | None = Field(None, description="the py-spy command whose output this is")
    py_spy_error: str | None = Field(None, description="why py-spy gave no stacks")
    py_spy_missing: bool = Field(False, description="py-spy is not installed on the host")
    denied: bool = Field(False, description="ptrace refused: py-spy is not permitted here")
    not_python: bool = Field(False, description="the pid is not a Python process")
    alive: bool | None = Field(None, description="the process exists (None: not known)")
    state: str | None = Field(None, description="/proc/PID/status State, e.g. 'S (sleeping)'")
    voluntary_ctxt_switches: int | None = None
    nonvoluntary_ctxt_switches: int | None = None
    wchan: str | None = Field(None, description="the kernel function the main thread sleeps in")
    kernel_stack: list[str] = Field(default_factory=list, description="/proc/PID/stack, verbatim")
    children: list[int] = Field(default_factory=list, description="child pids (not Python case)")
    proc_lines: list[str] = Field(default_factory=list, description="/proc lines read, verbatim")

    def lines(self) -> list[str]:
        out: list[str] = []
        if self.method == "py-spy":
            out += self.raw
            out.append(
                f"# Python stacks of pid {self.pid} by py-spy ({self.command}): "
                f"{len(self.threads)} threads, "
                f"{sum(not t.idle for t in self.threads)} active; waiting in {self.waiting_in}"
            )
            if self.waiting_thread and self.waiting_frame:
                out.append(f"# deciding thread: {self.waiting_thread.strip()}")
                out.append(f"# innermost {self.waiting_in} frame: {self.waiting_frame.strip()}")
            if self.collective_frame:
                out.append(f"# collective frame: {self.collective_frame.strip()}")
            if self.awaits == "replies" and self.awaits_frame:
                out.append(
                    "# an RPC to its workers, waiting for their replies (a message-queue read, "
                    f"not a collective of its own): {self.awaits_frame.strip()}"
                )
            elif self.awaits == "work" and self.awaits_frame:
                out.append(
                    "# a worker idle in its command loop, waiting for its next command: "
                    f"{self.awaits_frame.strip()}"
                )
            m = _PROCESS.match(self.process)
            if m and int(m.group(1)) != self.pid:
                out.append(
                    f"# note: these stacks are of pid {m.group(1)}, not of the pid asked ({self.pid})"
                )
            return bound_lines(out)
        if self.method == "proc":
            out.append(
                f"# Python stacks of pid {self.pid}: UNKNOWN, py-spy was not used: "
                f"{self.py_spy_error or '-'}"
            )
            out.append(f"# fix: {self.fix or '-'}")
            out.append("# kernel view instead (/proc): where the process sleeps, not which Python")
            out += self.proc_lines
            summary = f"# state {self.state or '?'}, wchan {self.wchan or '?'}"
            if self.voluntary_ctxt_switches is not None:
                summary += f", {self.voluntary_ctxt_switches} voluntary ctxt switches"
            out.append(summary + f"; waiting in {self.waiting_in}")
            if self.children:
                out.append(f"# child pids: {' '.join(map(str, self.children))}")
            return bound_lines(out)
        return bound_lines(super().lines())


# -- classification -------------------------------------------------------------------------------
_COLL_NAMES = re.compile(
    r"(?:^|[.:_])(?:all_reduce\w*|all_gather\w*|reduce_scatter\w*|all_to_all\w*|barrier|"
    r"monitored_barrier|_store_based_barrier|init_process_group|init_distributed_environment|"
    r"custom_all_reduce|nccl[A-Z]\w*|ncclCommInit\w*)$"
)
_COLL_FILES = re.compile(
    r"torch/distributed/(?!elastic/)(?!run\.py)(?!launch\.py)|"  # the launcher (elastic agent, metrics) only watches its ranks
    rf"(?:{engines.collective_dirs()})/"
    r"distributed/|pynccl|custom_all_reduce|device_communicators/|communication_op|"
    r"deepspeed/comm/|mpi4py/|parallel_state\.py"
)
#: mpi4py.futures' pool manager (a parent's thread) waiting for its spawned workers' futures:
#: no peer exchange of its own; a worker's `client_sync` connecting back to it is one
_POOL_MANAGER = re.compile(r"^_manager_\w+$")
_COLL_GENERIC = re.compile(
    r"(?:^|[.:_])(?:broadcast\w*|send|recv|isend|irecv|gather|scatter|reduce|wait|"
    r"batch_isend_irecv|new_group)$"
)
_COLL_NATIVE = re.compile(
    r"\bnccl[A-Z]\w*|c10d::|gloo::|TCPStore|ProcessGroupNCCL|WorkNCCL|libnccl|"
    r"\bcustom_all_reduce|cross_device_reduce|pynccl",
)
_CUDA_SYNC = re.compile(
    r"cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|cuStreamSynchronize|"
    r"cuCtxSynchronize|cuEventSynchronize|_local_scalar_dense|cudaMemcpy(?!Async)\b|"
    r"cudaStreamBeginCapture|cudaStreamEndCapture|cudaGraphInstantiate"
)
_CUDA_FILES = re.compile(r"torch/cuda/|cuda_graph_runner|cuda_graph|cudagraph", re.I)
_CUDA_FUNCS = re.compile(r"(?:^|[._])(?:synchronize|capture\w*|capture_begin|capture_end|item)$")
_COMPILE_FILES = re.compile(
    r"torch/_inductor/|torch/_dynamo/|triton/compiler/|triton/runtime/|triton/backends/|"
    r"deep_gemm/jit|deep_gemm/.*(?:compile|build)|flashinfer/jit/|torch/utils/cpp_extension|"
    r"tilelang/|tvm_ffi/|torch/_functorch/aot|torch/fx/experimental/|nvcc",
    re.I,
)
_COMPILE_FUNCS = re.compile(r"(?:^|[._])(?:compile\w*|_compile\w*|jit_compile|build_\w*|nvcc\w*)$")
_LOAD_FILES = re.compile(
    r"safetensors/|torch/serialization\.py|model_loader|weight_utils|huggingface_hub/|"
    r"modelopt/.*load|gguf/",
)
_LOAD_FUNCS = re.compile(
    r"(?:^|[._])(?:load_weights?|load_model|load_state_dict|_load_state_dict\w*|load_file|"
    r"safe_open|load_checkpoint\w*|snapshot_download|hf_hub_download)$"
)
_IO_FILES = re.compile(
    r"(?:^|/)(?:socket|ssl|selectors|select)\.py|asyncio/|zmq/|http/client\.py|urllib3/|"
    r"requests/|multiprocessing/connection\.py|uvloop|aiohttp/|grpc/"
)
_IO_NATIVE = re.compile(
    r"^(?:epoll_wait|epoll_pwait|__poll|poll|ppoll|select|pselect\w*|recv\w*|read)$"
)
_SLEEP = re.compile(r"(?:^|[._])(?:sleep|clock_nanosleep|nanosleep|time_sleep)$")
#: An engine's RPC to its workers, waiting for their answers (vLLM's executors: the EngineCore
#: broadcasts a call and reads each worker's reply off a message queue), and a worker waiting
#: for its next command. Both sit in a message-queue read that looks like a collective; which
#: side of the RPC a process is on tells "my workers have not answered" from "I have nothing to do".
_AWAITS_REPLIES = re.compile(r"^(?:get_response|collective_rpc)$")
#: The frames of a blocked queue read, above the RPC or the command loop (and nothing else).
_QUEUE_READ = re.compile(
    r"shm_broadcast\.py$|message_queue|zmq/|multiprocessing/(?:connection|queues)\.py$|"
    r"(?:^|/)(?:queue|threading|selectors|socket)\.py$"
)
_AWAITS_WORK = re.compile(r"^worker_busy_loop$")


def classify_frame(f: Frame) -> Category | None:
    """Which kind of wait one frame shows, or None when it says nothing on its own."""
    fn, path = f.function, f.file
    if f.native:
        if _COLL_NATIVE.search(fn) or "libnccl" in path:
            return "collective"
        if _CUDA_SYNC.search(fn):
            return "cuda_sync"
        if _SLEEP.search(fn):
            return "sleep"
        if _IO_NATIVE.search(fn):
            return "io"
        return None
    if "mpi4py/futures/" in path and _POOL_MANAGER.match(fn):
        return None
    if (
        _COLL_FILES.search(path)
        or _COLL_NAMES.search(fn)
        or _COLL_NATIVE.search(fn)
        or (_COLL_GENERIC.search(fn) and re.search(r"distributed|nccl|gloo|c10d|mpi", path))
    ):
        return "collective"
    if _CUDA_FILES.search(path) and _CUDA_FUNCS.search(fn):
        return "cuda_sync"
    if _COMPILE_FILES.search(path) or (_COMPILE_FUNCS.search(fn) and "re.py" not in path):
        return "compile"
    if _LOAD_FILES.search(path) or _LOAD_FUNCS.search(fn):
        return "load"
    if _IO_FILES.search(path):
        return "io"
    if _SLEEP.search(fn):
        return "sleep"
    return None


def classify_thread(t: PyThread) -> tuple[Category, str | None]:
    """The most specific kind of wait anywhere on the thread, and its innermost frame line.

    For a collective, the innermost frame that names it (`all_reduce`, `barrier`, ...) is
    preferred over a helper below it in the same module."""
    found: dict[Category, str] = {}
    named: str | None = None  # the innermost frame that names the collective (all_reduce, ...)
    for f in t.frames:  # innermost first: the first hit of a kind is its innermost frame
        cat = classify_frame(f)
        if cat is not None and cat not in found:
            found[cat] = f.text
        if (
            cat == "collective"
            and named is None
            and not f.native
            and _COLL_NAMES.search(f.function)
        ):
            named = f.text
    if named is not None:
        found["collective"] = named
    for cat in PRIORITY:
        if cat in found:
            return cat, found[cat]
    return "other", (t.frames[0].text if t.frames else None)


def _frame(text: str) -> Frame | None:
    m = _FRAME.match(text)
    if not m:
        return None
    fn, where = m.group(1), m.group(2)
    line: int | None = None
    file = where
    head, sep, tail = where.rpartition(":")
    if sep and tail.isdigit():
        file, line = head, int(tail)
    native = not (file.endswith((".py", ".pyx", ".pyi")) or file.startswith("<"))
    return Frame(function=fn, file=file, line=line, native=native, text=text)


def parse_py_spy(text: str) -> StacksParse:
    """`py-spy dump` output -> threads and frames; never raises on odd input."""
    out = StacksParse()
    cur: PyThread | None = None
    in_header = True
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        if not line.strip():
            out.raw.append(line) if out.raw else None
            continue
        out.raw.append(line)
        m = _THREAD.match(line)
        if m:
            in_header = False
            ident, status, name = m.group(1), (m.group(2) or ""), m.group(3)
            cur = PyThread(
                id=ident,
                tid=int(ident) if ident.isdigit() else None,
                name=name,
                status=status,
                idle="idle" in status,
                header=line,
            )
            out.threads.append(cur)
            continue
        if in_header:
            if _PROCESS.match(line) and not out.process:
                out.process = line
            elif _PYTHON.match(line) and not out.python:
                out.python = line
            continue
        if cur is not None and line.startswith("    ") and not line.startswith("        "):
            f = _frame(line)
            if f is not None:
                cur.frames.append(f)
    while out.raw and not out.raw[-1].strip():
        out.raw.pop()
    best: tuple[int, PyThread] | None = None
    for t in out.threads:
        t.waiting_in, t.waiting_frame = classify_thread(t)
        if t.frames:
            rank = PRIORITY.index(t.waiting_in)
            if best is None or rank < best[0]:
                best = (rank, t)
        if out.collective_frame is None and t.waiting_in == "collective":
            out.collective_frame = t.waiting_frame
    out.awaits, out.awaits_frame = _awaits(out.threads)
    if best is not None:
        t = best[1]
        out.waiting_in, out.waiting_thread, out.waiting_frame = (
            t.waiting_in,
            t.header,
            t.waiting_frame,
        )
    return out


def _awaits(threads: list[PyThread]) -> tuple[Literal["replies", "work"] | None, str | None]:
    """Which side of its engine's RPC the process waits on, from its main thread: the innermost
    frame of the RPC (`get_response` under `collective_rpc`) or of a worker's command loop, when
    the thread is blocked reading the queue (its innermost frames a collective-looking read)."""
    main = next((t for t in threads if t.name == "MainThread"), threads[0] if threads else None)
    if main is None or main.waiting_in not in ("collective", "io"):
        return None, None
    for f in main.frames:
        if f.native:
            continue
        if _AWAITS_REPLIES.search(f.function):
            return "replies", f.text
        if _AWAITS_WORK.search(f.function):
            return "work", f.text
        if not _QUEUE_READ.search(f.file):
            return None, None  # a collective op, a compile, a load sits above the read
    return None, None


# -- /proc fallback -------------------------------------------------------------------------------
_KERNEL_IO = re.compile(
    r"ep_poll|do_select|do_sys_poll|poll_schedule|sk_wait|tcp_recv|unix_stream|pipe_read|wait_woken|inet_csk_accept"
)
_KERNEL_SLEEP = re.compile(r"hrtimer_nanosleep|do_nanosleep|clock_nanosleep")


def parse_status(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for ln in text.splitlines():
        k, sep, v = ln.partition(":")
        if sep:
            out[k.strip()] = v.strip()
    return out


def _int(v: str | None) -> int | None:
    return int(v) if v and v.strip().isdigit() else None


def kernel_wait(state: str | None, wchan: str | None, stack: list[str]) -> Category:
    """What the kernel view alone can say: io or sleep; never a collective (that needs Python)."""
    text = " ".join([wchan or "", *stack])
    if _KERNEL_SLEEP.search(text):
        return "sleep"
    if _KERNEL_IO.search(text):
        return "io"
    return "unknown"


# -- running it -----------------------------------------------------------------------------------
def _locate_command(pid: int, extra: list[str], native: bool) -> str:
    """Find py-spy where it is usually installed when it is not on PATH, and run it."""
    flags = f"dump --pid {pid}" + (" --native" if native else "")
    cands = [
        '"$HOME/.local/bin/py-spy"',
        f'"$(dirname "$(readlink /proc/{pid}/exe 2>/dev/null)" 2>/dev/null)/py-spy"',
        f"\"$(dirname \"$(tr '\\0' '\\n' < /proc/{pid}/cmdline 2>/dev/null | head -n 1)\" "
        '2>/dev/null)/py-spy"',
        "/usr/local/bin/py-spy",
        "/opt/conda/bin/py-spy",
        *(shlex.quote(p) for p in extra),
    ]
    return (
        f'for p in {" ".join(cands)}; do if [ -x "$p" ] && [ -f "$p" ]; then '
        f'echo "pivot: py-spy at $p" >&2; exec "$p" {flags}; fi; done; '
        "echo 'py-spy: command not found' >&2; exit 127"
    )


def _local_candidates(host: Host) -> list[str]:
    from tools.local_host import LocalHost

    if isinstance(host, LocalHost):
        p = Path(sys.executable).parent / "py-spy"
        return [str(p)]
    return []


def _said(res: CommandResult) -> str:
    text = "\n".join(
        ln
        for ln in (res.stderr + "\n" + res.stdout).splitlines()
        if ln.strip() and not ln.startswith("pivot: py-spy at")
    )
    if res.error:
        return res.error
    first = next(
        (ln.strip() for ln in text.splitlines() if _DENIED.search(ln) or ln.startswith("Error")),
        text.strip().splitlines()[0].strip() if text.strip() else "",
    )
    return first[:300] or (f"exit {res.rc}" if res.rc is not None else "no answer")


def run(host: Host, args: Args) -> Result:
    host = machine_of(host) if args.machine_pid else host
    pid = args.pid
    cmd = f"py-spy dump --pid {pid}" + (" --native" if args.native else "")
    res = host.run(cmd, timeout=args.timeout)
    used = cmd
    if res.missing_command or (res.rc not in (0, None) and _MISSING.search(res.stderr)):
        res = host.run(_locate_command(pid, _local_candidates(host), args.native), args.timeout)
        where = re.search(r"^pivot: py-spy at (.+)$", res.stderr, re.M)
        if where:
            used = f"{where.group(1)} dump --pid {pid}" + (" --native" if args.native else "")
    if any(_THREAD.match(ln) for ln in res.stdout.splitlines()):
        parsed = parse_py_spy(res.stdout)
        return Result(
            host=host.name,
            pid=pid,
            method="py-spy",
            command=used,
            alive=True,
            **parsed.model_dump(),
        )

    # py-spy gave no stacks: say why, then read what the kernel shows
    said = _said(res)
    missing = res.missing_command or bool(_MISSING.search(res.stderr))
    denied = not missing and bool(_DENIED.search(res.stderr + "\n" + res.stdout))
    not_python = bool(_NOT_PYTHON.search(res.stderr + "\n" + res.stdout))
    if res.timed_out:
        why = f"{cmd!r} timed out after {args.timeout:.0f}s (the process may be in D state)"
    elif missing:
        why = f"py-spy is not installed on {host.name} (not on PATH, ~/.local/bin or beside the process's interpreter)"
    elif denied:
        why = f"ptrace is not permitted for this user on {host.name}: {said}"
    elif not_python:
        why = f"pid {pid} is not a Python process: {said}"
    else:
        why = f"{cmd!r} on {host.name} failed: {said}"

    status = host.run(f"cat /proc/{pid}/status", timeout=10)
    if status.ok and status.stdout.strip():
        fields = parse_status(status.stdout)
    else:
        fields = {}
        gone = _GONE.search(res.stderr) or "No such file" in (status.stderr or "")
        if gone and status.rc not in (None, 0):
            return Result(
                host=host.name,
                pid=pid,
                ok=False,
                alive=False,
                py_spy_error=why,
                error=f"no process {pid} on {host.name}: it is not running (py-spy: {said})",
                fix="list the processes again: the server (or this rank) has exited",
            )
    wchan_res = host.run(f"cat /proc/{pid}/wchan", timeout=10)
    wchan = wchan_res.stdout.strip() if wchan_res.ok else ""
    stack_res = host.run(f"cat /proc/{pid}/stack", timeout=10)
    stack = [ln for ln in stack_res.stdout.splitlines() if ln.strip()] if stack_res.ok else []
    children: list[int] = []
    if not_python:
        kids = host.run(f"cat /proc/{pid}/task/{pid}/children", timeout=10)
        children = [int(w) for w in kids.stdout.split() if w.isdigit()] if kids.ok else []

    proc_lines: list[str] = []
    for ln in status.stdout.splitlines() if status.ok else []:
        if ln.split(":", 1)[0] in (
            "Name",
            "State",
            "Threads",
            "voluntary_ctxt_switches",
            "nonvoluntary_ctxt_switches",
        ):
            proc_lines.append(ln)
    if wchan and wchan != "0":
        proc_lines.append(wchan)
    proc_lines += stack
    if not stack:
        why_stack = _said(stack_res) if not stack_res.ok else "empty"
        proc_lines.append(f"# /proc/{pid}/stack not read: {why_stack} (root only)")

    if missing:
        fix = FIX_MISSING.format(pid=pid)
    elif not_python:
        fix = (
            f"dump a Python process instead: a child of {pid}"
            + (f" ({', '.join(map(str, children))})" if children else "")
            + ", e.g. py-spy dump --pid CHILD"
        )
    elif res.error and res.rc is None and not res.timed_out:
        fix = res.fix or FIX_DENIED.format(pid=pid)
    else:
        fix = FIX_DENIED.format(pid=pid)
    if not fields and not wchan and not stack:
        return Result(
            host=host.name,
            pid=pid,
            ok=False,
            method="none",
            command=used,
            py_spy_error=why,
            py_spy_missing=missing,
            denied=denied,
            not_python=not_python,
            error=f"no stacks of pid {pid} on {host.name}: {why}; /proc/{pid} could not be read "
            f"either ({_said(status)})",
            fix=fix,
        )
    state = fields.get("State")
    return Result(
        host=host.name,
        pid=pid,
        method="proc",
        command=used,
        py_spy_error=why,
        py_spy_missing=missing,
        denied=denied,
        not_python=not_python,
        alive=True if fields else None,
        state=state,
        voluntary_ctxt_switches=_int(fields.get("voluntary_ctxt_switches")),
        nonvoluntary_ctxt_switches=_int(fields.get("nonvoluntary_ctxt_switches")),
        wchan=wchan or None,
        kernel_stack=stack,
        children=children,
        proc_lines=proc_lines,
        waiting_in=kernel_wait(state, wchan, stack),
        fix=fix,
    )


SPEC = ToolSpec(
    name="py_stacks",
    description=(
        "Where a live process waits: its Python stacks (py-spy dump --pid PID), classified as "
        "waiting in a collective (all_reduce, barrier, ncclCommInit), cuda_sync, compile, load, "
        "io, sleep or other, with the verbatim frame. Use it when the server is alive but its "
        "log stopped. Without ptrace it falls back to /proc (state, wchan, kernel stack). "
        "native=true adds C/C++ frames."
    ),
    args=Args,
    result=Result,
    fn=run,
)
