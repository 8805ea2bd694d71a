"""`log_tail`: the last N lines of a log as a person would see them on a terminal.

Reads from the end of the file in growing windows (64 KiB, then 256 KiB, then 1 MiB) so the
cost does not depend on the file's size, then cleans the text (ANSI stripped, carriage-return
progress bars collapsed to their latest state). The error a crashed loader printed right after
thousands of progress updates is the line the agent needs; a raw tail buries it.

With `watch_s` it is also the liveness check: the log is polled over an adaptive window (see
`tools/log_window.py`) until it grows, and the result says whether it grew, how long was waited
and the newest progress bar with its ETA. A missing path, a directory, an unreadable file or
binary content comes back failed with a `problem`, the path and the fix; binary bytes are never
shown as lines.
"""

from __future__ import annotations

import shlex

from pydantic import BaseModel, Field

from tools.base import ToolResult, ToolSpec, bound_lines
from tools.host import CommandResult, Host
from tools.log_window import (
    DEFAULT_BASE_S,
    Progress,
    cap_note,
    last_progress,
    max_window_s,
    poll_interval,
    window_for,
)
from tools.logfile import binary_reason, diagnose
from tools.logtime import longest_silence
from tools.textclean import CleanText, clean_bytes

FIRST_WINDOW = 64 * 1024
WINDOW_GROWTH = 4
MAX_WINDOW = 1024 * 1024
MAX_TAIL_LINES = 1000


class Args(BaseModel):
    path: str = Field(description="absolute path of the log on the host")
    lines: int = Field(200, ge=1, le=MAX_TAIL_LINES, description="how many lines to return")
    watch_s: float | None = Field(
        None,
        ge=0,
        le=3600,
        description="liveness: wait up to this many seconds for the log to grow, polling, and "
        "stop as soon as it does; longer when the last line is a progress bar or a slow phase. "
        "Every watch is capped at PIVOT_LIVENESS_MAX_S (30 s by default; the result says when "
        "it cut one): to watch longer, read again. None: one read",
    )


class Result(ToolResult):
    path: str = ""
    size: int = Field(0, description="file size in bytes; compare two reads to see it grow")
    tail: list[str] = Field(default_factory=list, description="the last lines, cleaned")
    requested: int = 200
    bytes_read: int = Field(0, description="bytes read from the host over all windows")
    window: int = Field(0, description="bytes of the file's end the tail was cut from")
    truncated: bool = Field(False, description="the file holds more than the window read")
    cut: bool = Field(False, description="fewer lines than asked: the window cap was reached")
    progress_collapsed: int = Field(0, description="carriage-return updates dropped")
    problem: str | None = Field(
        None, description="missing | directory | permission_denied | unreadable | binary"
    )
    binary: bool = Field(False, description="the file is not text; no line of it is shown")
    watched: bool = Field(False, description="read over a window (watch_s given)")
    grew: bool | None = Field(None, description="the size changed during the window")
    grew_bytes: int = Field(0, description="size change during the window")
    waited_s: float = Field(0.0, description="seconds waited on the host's clock")
    asked_s: float | None = Field(None, description="the watch_s asked for")
    window_s: float = Field(0.0, description="the window it was willing to wait")
    silence_s: float | None = Field(
        None, description="the longest gap between the log's own stamped lines (its pace)"
    )
    modified: str | None = Field(
        None, description="when the file was last written, on the host's wall clock"
    )
    owner: str | None = Field(
        None,
        description="the user owning the file (stat %U): who its writer runs as; None unknown",
    )
    born: str | None = Field(
        None, description="when the file was created, on the host's wall clock; None unknown"
    )
    last_progress: Progress | None = Field(
        None, description="the newest progress bar or slow phase in the last lines, with ETA"
    )

    def lines(self) -> list[str]:
        if self.error:
            return super().lines()
        head = (
            f"# {self.path} on {self.host}: {self.size} bytes"
            f"{f', owner {self.owner}' if self.owner else ''}; last {len(self.tail)} lines"
            f"{' (file holds more)' if self.truncated else ''}"
        )
        notes = [head]
        if self.progress_collapsed:
            notes.append(
                f"# {self.progress_collapsed} carriage-return progress updates collapsed "
                "to their latest state"
            )
        if self.cut:
            notes.append(
                f"# only {len(self.tail)} lines in the last {self.window} bytes "
                "(read cap reached; use log_search for older lines)"
            )
        if self.watched:
            capped = cap_note(self.asked_s, self.window_s)
            if capped:
                notes.append(f"# watch window{capped}")
            if self.grew:
                notes.append(
                    f"# watched it for {self.waited_s:.1f} s: it grew by {self.grew_bytes} bytes"
                    if self.grew_bytes >= 0
                    else f"# watched it for {self.waited_s:.1f} s: it shrank by "
                    f"{-self.grew_bytes} bytes (rotated or truncated)"
                )
            else:
                why = (
                    " (longer than the base window: the last line is a progress bar or a slow "
                    "phase; PIVOT_LIVENESS_MAX_S caps it)"
                    if self.last_progress is not None
                    else f" (as long as this log has already gone quiet between its lines, "
                    f"{self.silence_s:.0f} s; PIVOT_LIVENESS_MAX_S caps it)"
                    if self.silence_s is not None and self.silence_s + 1.0 > DEFAULT_BASE_S
                    else ""
                )
                notes.append(f"# watched it for {self.waited_s:.1f} s{why}: it did NOT grow")
        if self.last_progress is not None:
            notes.append(f"# progress: {self.last_progress.describe()}")
        return notes + bound_lines(self.tail, max_lines=max(self.requested, 1) + 1)


def parse_tail(data: bytes, n: int, partial_start: bool) -> CleanText:
    """Clean a window of the file's end and keep its last `n` lines."""
    cleaned = clean_bytes(data, partial_start=partial_start)
    cleaned.lines = cleaned.lines[-n:] if n > 0 else []
    return cleaned


def _failed(host: Host, args: Args, error: str | None, fix: str | None) -> Result:
    p = diagnose(host, args.path, error, fix)
    return Result(
        host=host.name,
        ok=False,
        path=args.path,
        requested=args.lines,
        problem=p.kind,
        error=p.error,
        fix=p.fix,
    )


def read_once(host: Host, args: Args) -> Result:
    """One tail read in growing windows; failures and binary content as a failed result."""
    window = FIRST_WINDOW
    total_read = 0
    while True:
        ft = host.read_tail(args.path, max_bytes=window)
        if ft.error or not ft.exists:
            return _failed(host, args, ft.error, ft.fix)
        if total_read == 0:
            why = binary_reason(ft.data)
            if why is not None:
                return Result(
                    host=host.name,
                    ok=False,
                    path=args.path,
                    size=ft.size,
                    requested=args.lines,
                    bytes_read=ft.bytes_read,
                    problem="binary",
                    binary=True,
                    error=f"{args.path} on {host.name} is binary, not a text log ({why}); "
                    "no line of it is shown or usable as evidence",
                    fix="pass the server's text log (its stdout/stderr file); find_logs lists "
                    "recent logs on the host",
                )
        total_read += ft.bytes_read
        partial = ft.bytes_read < ft.size
        cleaned = parse_tail(ft.data, args.lines, partial_start=partial)
        enough = len(cleaned.lines) >= args.lines
        if not partial or enough or window >= MAX_WINDOW:
            break
        window = min(window * WINDOW_GROWTH, MAX_WINDOW)
    tail = cleaned.lines
    return Result(
        host=host.name,
        path=args.path,
        size=ft.size,
        tail=tail,
        requested=args.lines,
        bytes_read=total_read,
        window=ft.bytes_read,
        truncated=partial,
        cut=partial and len(tail) < args.lines,
        progress_collapsed=cleaned.progress_collapsed,
        last_progress=last_progress(tail),
        modified=ft.modified,
        owner=ft.owner,
        born=ft.born,
    )


def size_command(path: str) -> str:
    return f"stat -L -c %s -- {shlex.quote(path)}"


def parse_size(res: CommandResult) -> int | None:
    tok = res.stdout.split()[:1] if res.rc == 0 else []
    return int(tok[0]) if tok and tok[0].isdigit() else None


def size_now(host: Host, path: str) -> int | None:
    """The file's size without reading it (a replayed card answers for the last read)."""
    return parse_size(host.run(size_command(path), timeout=10, max_bytes=1000))


def watch(host: Host, args: Args) -> Result:
    """Poll the log until it grows or the (adaptive) window ends; the last read is returned."""
    base_s = float(args.watch_s or 0.0)
    limit = max(max_window_s(), 0.0)
    t0 = host.clock()
    baseline = size_now(host, args.path)
    res = read_once(host, args)
    if not res.ok:
        return res
    if baseline is None:
        baseline = res.size
    window = 0.0
    while True:
        grew = res.size != baseline
        silence = longest_silence(res.tail)
        window = window_for(base_s, res.last_progress, limit, silence)
        elapsed = host.clock() - t0
        if grew or elapsed >= window:
            break
        host.sleep(min(poll_interval(elapsed), window - elapsed))
        nxt = read_once(host, args)
        if not nxt.ok:
            nxt.waited_s = round(host.clock() - t0, 3)
            nxt.watched = True
            return nxt
        res = nxt
    res.watched = True
    res.asked_s = float(args.watch_s) if args.watch_s is not None else None
    res.grew = res.size != baseline
    res.grew_bytes = res.size - baseline
    res.waited_s = round(host.clock() - t0, 3)
    res.window_s = round(window, 3)
    res.silence_s = silence
    return res


def run(host: Host, args: Args) -> Result:
    if args.watch_s is not None:
        return watch(host, args)
    return read_once(host, args)


SPEC = ToolSpec(
    name="log_tail",
    description=(
        "Last N lines of a log file, read from its end (cost independent of size), with ANSI "
        "stripped and carriage-return progress bars collapsed to their latest state. watch_s=N "
        "polls it up to N seconds (longer for a progress bar) and reports grew, waited_s and "
        "the newest progress bar with an ETA: use it to tell a slow loader from a hung one."
    ),
    args=Args,
    result=Result,
    fn=run,
    scanned=True,
    launch_log=True,
    verdict_needs=True,
    facts=("log_growth", "log_watch", "log_ranks"),
)
