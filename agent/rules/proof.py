"""What a log line proves by its shape, and what a cited line is.

The guardrails used to accept a crash only when the cited line was in our signature list, which
capped every brain at the size of a hand-written list. A line is fatal by *structure* instead:
the final exception line of a Python traceback, an ERROR/FATAL/CRITICAL-level line, an NCCL or
CUDA error string, a kernel kill or Xid line, an exit-status or signal line. The patterns are data
(`knowledge/structure.yaml`); these functions are small and pure, each tested on its own table.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel

from tools import yamlio

#: A cited fragment shorter than this is not a quote ("E", "error"): it proves nothing.
MIN_FRAGMENT = 16
#: Kinds checked without the not-fatal filter: an NCCL WARN or a kernel line is never "just a warning".
_UNFILTERED = ("kernel", "nccl")
_FILTERED = ("cuda", "exit_signal", "error_level", "exception")


class LabelHint(BaseModel):
    label: str
    pattern: str


class _Structure(BaseModel):
    exception: list[str]
    exception_after_traceback: list[str]
    error_level: list[str]
    nccl: list[str]
    cuda: list[str]
    kernel: list[str]
    exit_signal: list[str]
    not_fatal: list[str]
    traceback_start: str
    external_end: list[str]
    wrapper: list[str] = []
    label_hints: list[LabelHint] = []
    frame_hints: list[LabelHint] = []
    log_pid: list[str] = []
    log_main_pid: list[str] = []
    quiet_phase: list[str] = []
    collective_phase: list[str] = []
    device_init: list[str] = []
    wait_message: list[str] = []
    peer_lost: list[str] = []
    frontend_only: list[str] = []
    component_failed: list[str] = []
    frontend_access: list[str] = []
    served_request: list[str] = []
    resource_wait: list[str] = []
    crashed_pod: list[str] = []
    error_shaped: list[str] = []
    column_header: list[str] = []
    phase_warning: list[str] = []
    shm_need: list[str] = []
    slowdown: list[str] = []
    script_step: str = "(?!x)x"
    output_flag: str = "(?!x)x"


def _any(patterns: list[str]) -> re.Pattern[str]:
    """One regex for a list; a leading (?i) stays scoped to its own pattern."""
    parts = [f"(?i:{p[4:]})" if p.startswith("(?i)") else f"(?:{p})" for p in patterns]
    return re.compile("|".join(parts))


@lru_cache(maxsize=1)
def _structure() -> _Structure:
    """structure.yaml, read and checked once for every table below."""
    raw = yamlio.safe_load(
        (Path(__file__).parents[1] / "knowledge" / "structure.yaml").read_text(encoding="utf-8")
    )
    return _Structure.model_validate(raw)


def _patterns(field: str) -> tuple[re.Pattern[str], ...]:
    """One of structure.yaml's lists of patterns, each compiled on its own (their groups matter)."""
    return tuple(re.compile(p) for p in getattr(_structure(), field))


@lru_cache(maxsize=1)
def _rx() -> dict[str, re.Pattern[str]]:
    s = _structure()
    return {
        "exception": _any(s.exception),
        "exception_after_traceback": _any(s.exception_after_traceback),
        "error_level": _any(s.error_level),
        "nccl": _any(s.nccl),
        "cuda": _any(s.cuda),
        "kernel": _any(s.kernel),
        "exit_signal": _any(s.exit_signal),
        "not_fatal": _any(s.not_fatal),
        "traceback_start": re.compile(s.traceback_start),
        "external_end": _any(s.external_end),
        "wrapper": _any(s.wrapper or ["(?!x)x"]),
        "quiet_phase": _any(s.quiet_phase or ["(?!x)x"]),
        "collective_phase": _any(s.collective_phase or ["(?!x)x"]),
        "device_init": _any(s.device_init or ["(?!x)x"]),
        "wait_message": _any(s.wait_message or ["(?!x)x"]),
        "peer_lost": _any(s.peer_lost or ["(?!x)x"]),
        "frontend_only": _any(s.frontend_only or ["(?!x)x"]),
        "component_failed": _any(s.component_failed or ["(?!x)x"]),
        "frontend_access": _any(s.frontend_access or ["(?!x)x"]),
        "served_request": _any(s.served_request or ["(?!x)x"]),
        "error_shaped": _any(s.error_shaped or ["(?!x)x"]),
        "column_header": _any(s.column_header or ["(?!x)x"]),
        "phase_warning": _any(s.phase_warning or ["(?!x)x"]),
        "slowdown": _any(s.slowdown or ["(?!x)x"]),
    }


@lru_cache(maxsize=1 << 16)
def fatal_kind(line: str, after_traceback: bool = False) -> str | None:
    """The kind of fatal line this is by its shape, or None. `after_traceback`: a Python
    traceback's frames came before it in the same read, so an exception name anywhere counts."""
    rx = _rx()
    for kind in _UNFILTERED:
        if rx[kind].search(line):
            return kind
    if rx["not_fatal"].search(line):
        return None
    for kind in _FILTERED:
        if rx[kind].search(line):
            return kind
    if after_traceback and rx["exception_after_traceback"].search(line):
        return "exception"
    return None


def fatal_lines(lines: list[str]) -> list[tuple[int, str]]:
    """(index, kind) of every line fatal by structure, reading tracebacks in order."""
    rx = _rx()
    out: list[tuple[int, str]] = []
    in_tb = False
    for i, ln in enumerate(lines):
        if rx["traceback_start"].search(ln):
            in_tb = True
            continue
        kind = fatal_kind(ln, after_traceback=in_tb)
        if kind == "error_level" and in_tb and rx["exception_after_traceback"].search(ln):
            kind = "exception"  # the traceback's last line, under a logger's ERROR prefix too
        if kind is not None:
            out.append((i, kind))
            if kind == "exception":
                in_tb = False
    return out


def kind_in_context(lines: list[str], index: int) -> str | None:
    """The fatal kind of lines[index], knowing whether a traceback is open above it."""
    rx = _rx()
    start = max(0, index - 400)
    in_tb = any(rx["traceback_start"].search(ln) for ln in lines[start:index])
    kind = fatal_kind(lines[index], after_traceback=in_tb)
    if kind is not None and in_tb and rx["exception_after_traceback"].search(lines[index]):
        return "traceback"  # the last line of a traceback: that component died of it
    return kind


@lru_cache(maxsize=1)
def _log_pid_rx() -> tuple[re.Pattern[str], ...]:
    return _patterns("log_pid")


@lru_cache(maxsize=1)
def _crashed_pod_rx() -> tuple[re.Pattern[str], ...]:
    return _patterns("crashed_pod")


def crashed_pod(line: str) -> str | None:
    """The pod a line names as crashed (structure.yaml `crashed_pod`), if it names one."""
    for rx in _crashed_pod_rx():
        m = rx.search(line)
        if m:
            return m.group(1)
    return None


def log_pids(lines: list[str]) -> dict[int, str]:
    """pid -> the first line that names it as the line's writer (NCCL's host:PID:TID prefix,
    vLLM's `(Worker pid=N)`, uvicorn's `Started server process [N]`, nccl-tests' rank table)."""
    out: dict[int, str] = {}
    for ln in lines:
        for rx in _log_pid_rx():
            m = rx.search(ln)
            if m:
                out.setdefault(int(m.group(1)), ln)
    return out


@lru_cache(maxsize=1)
def _main_pid_rx() -> tuple[re.Pattern[str], ...]:
    return _patterns("log_main_pid")


def main_log_pids(lines: list[str]) -> set[int]:
    """Pids a log names as the server's main process itself (glog's pid column, uvicorn's
    `Started server process [N]`), not a worker's."""
    out: set[int] = set()
    for ln in lines:
        for rx in _main_pid_rx():
            m = rx.search(ln)
            if m:
                out.add(int(m.group(1)))
    return out


def column_header(line: str) -> bool:
    """A table's header row (ps, nvidia-smi csv, ss, df, kubectl get): it holds no state."""
    return bool(_rx()["column_header"].search(line))


def quiet_phase(line: str) -> bool:
    """A phase that may run for minutes without printing (torch.compile, graph capture, JIT,
    autotuning, an engine build): a silence after it is not yet a stall."""
    return bool(_rx()["quiet_phase"].search(line))


def collective_phase(line: str) -> bool:
    """Distributed set-up or a collective (NCCL INFO, a process group, a rendezvous): a launch
    stopped silent on such a line waits on its peers."""
    return bool(_rx()["collective_phase"].search(line))


def device_init(line: str) -> bool:
    """A frame or line of a process still setting up its CUDA device (before any load)."""
    return bool(_rx()["device_init"].search(line))


def frontend_only(line: str) -> bool:
    """A probe or scrape the HTTP front-end answered: not proof the engine behind it works."""
    return bool(_rx()["frontend_only"].search(line))


def frontend_access(line: str) -> bool:
    """An HTTP access-log line: the front end handled a request (any path, any status)."""
    return bool(_rx()["frontend_access"].search(line))


@lru_cache(maxsize=1)
def _resource_waits() -> tuple[re.Pattern[str], ...]:
    return _patterns("resource_wait")


def resource_wait_s(line: str) -> float | None:
    """How long the engine says it has waited for GPUs its cluster lacks (a pending placement
    group), or None: each pattern names the seconds as group `s`."""
    for rx in _resource_waits():
        m = rx.search(line)
        if m:
            return float(m.group("s"))
    return None


def served_request(line: str) -> bool:
    """A generation request answered 200: the engine itself did work, not only its front end."""
    return bool(_rx()["served_request"].search(line))


def component_failed(line: str) -> bool:
    """One unit of a multi-model server failed to load while the server runs on: that unit's
    death, not an error the server worked past."""
    return bool(_rx()["component_failed"].search(line))


def peer_lost(line: str) -> bool:
    """A survivor's error that only says its peer went away (gloo's "Connection closed by peer",
    NCCL's "remote process exited"): a consequence, never the process's own cause."""
    return bool(_rx()["peer_lost"].search(line))


@lru_cache(maxsize=1)
def _shm_need_rx() -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in _structure().shm_need)


@lru_cache(maxsize=1 << 16)
def shm_need_bytes(line: str) -> int | None:
    """The bytes of /dev/shm a line says the launch maps (vLLM's message-queue ring: its chunk
    size times its chunk count), or None. tmpfs hands pages out as they are written, so a
    ring bigger than /dev/shm starts fine and dies of SIGBUS once traffic fills it."""
    for rx in _shm_need_rx():
        m = rx.search(line)
        if m is not None:
            return int(m.group("bytes")) * int(m.groupdict().get("count") or 1)
    return None


def script_step(line: str) -> str | None:
    """The command a script's trace line says it runs next ("+ trtllm-build ..."), or None."""
    m = re.match(_structure().script_step, line)
    return line[m.end() :] if m is not None else None


def output_paths(command: str) -> list[str]:
    """The paths a command's flags say it writes (--output_dir X, -o X)."""
    return [p.rstrip("/") for p in re.findall(_structure().output_flag, command) if len(p) > 1]


def traceback_start(line: str) -> bool:
    """ "Traceback (most recent call last):": a Python traceback begins."""
    return bool(_rx()["traceback_start"].search(line))


def slowdown(line: str) -> bool:
    """The engine warns that a setting in effect slows every step (VLLM_TRACE_FUNCTION)."""
    return bool(_rx()["slowdown"].search(line))


def phase_warning(line: str) -> bool:
    """A warning-level line that is no error: printed inside a phase (a workspace grown, a
    fallback taken), it names no phase of its own, so the phase is the line before it."""
    return bool(_rx()["phase_warning"].search(line)) and not error_shaped(line)


def wait_message(line: str) -> bool:
    """A line an engine repeats while it waits for its workers (vLLM's shm_broadcast notice)."""
    return bool(_rx()["wait_message"].search(line))


@lru_cache(maxsize=1)
def _hints() -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((h.label, re.compile(h.pattern)) for h in _structure().label_hints)


def label_hint(line: str) -> str | None:
    """The label a fatal line no signature knows points at, by its words, or None."""
    for label, rx in _hints():
        if rx.search(line):
            return label
    return None


@lru_cache(maxsize=1)
def _frame_hints() -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((h.label, re.compile(h.pattern)) for h in _structure().frame_hints)


def frame_hint(lines: list[str], index: int) -> str | None:
    """The label the innermost traceback frame above lines[index] points at (the code the
    exception was raised in), or None when no traceback is open above it or no frame is known."""
    start = _rx()["traceback_start"]
    for ln in reversed(lines[max(0, index - 200) : index]):
        if start.search(ln):
            return None
        for label, rx in _frame_hints():
            if rx.search(ln):
                return label
    return None


def is_wrapper(line: str) -> bool:
    """A line reporting that another part failed: it proves the end, never the cause."""
    return bool(_rx()["wrapper"].search(line))


def external_end(line: str) -> bool:
    """A positive sign that something outside ended the process (a signal, a probe, a timeout)."""
    return bool(_rx()["external_end"].search(line))


def error_shaped(line: str) -> bool:
    """A line shaped like an error (structure.yaml `error_shaped`), not a warning, not an HTTP
    access line: whatever it says, the process reported a problem of its own there."""
    rx = _rx()
    if rx["not_fatal"].search(line) or rx["frontend_access"].search(line):
        return False
    return bool(rx["error_shaped"].search(line) or rx["exception"].search(line))


def open_traceback(lines: list[str]) -> str | None:
    """The last traceback frame when a log ends inside a traceback (its final exception line was
    never written: the process died mid-report, or the read was cut): an error, not silence."""
    rx = _rx()
    start = None
    for i, ln in enumerate(lines):
        if rx["traceback_start"].search(ln):
            start = i
        elif start is not None and fatal_kind(ln, after_traceback=True) is not None:
            start = None
    if start is None:
        return None
    frames = [ln for ln in lines[start + 1 :] if ln.strip()]
    return frames[-1] if frames else lines[start]


def unexplained_error(lines: list[str], last: int = 40) -> str | None:
    """The newest error-shaped line among a log's last lines that no positive sign of an outside
    end explains (a signal, a probe, a kill, a peer gone), or a traceback left open: the clue a
    conclusion from absence must not talk over."""
    tb = open_traceback(lines)
    if tb is not None:
        return tb
    for ln in reversed(lines[-last:]):
        if not ln.strip() or external_end(ln) or peer_lost(ln) or is_wrapper(ln):
            continue
        if error_shaped(ln):
            return ln
    return None


def quote_problem(cited: str, lines: list[str]) -> str | None:
    """None when `cited` is a verbatim quote of one of `lines`: a whole (stripped) line, or a
    substring of at least MIN_FRAGMENT characters of one line. Otherwise why it is not."""
    text = cited.strip()
    if not text:
        return "cites an empty line"
    for ln in lines:
        if ln.strip() == text:
            return None
    if len(text) < MIN_FRAGMENT:
        return f"cites a fragment of {len(text)} characters ({text!r}); quote the whole line"
    if any(text in ln for ln in lines):
        return None
    return None if any(text in ln.strip() for ln in lines) else "not found verbatim"


def locate(cited: str, lines: list[str]) -> int | None:
    """Index of the line a verbatim quote comes from (the last such line: the newest event)."""
    text = cited.strip()
    hit = None
    for i, ln in enumerate(lines):
        if ln.strip() == text or (len(text) >= MIN_FRAGMENT and text in ln):
            hit = i
    return hit
