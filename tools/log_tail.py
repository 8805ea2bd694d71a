"""`log_tail`: the last N lines of a log as a person would see them on a terminal.

Reads from the end of the file in growing windows (64 KiB, then 256 KiB, then 1 MiB) so the
cost does not depend on the file's size, then cleans the text (ANSI stripped, carriage-return
progress bars collapsed to their latest state). The error a crashed loader printed right after
thousands of progress updates is the line the agent needs; a raw tail buries it.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from tools.base import ToolResult, ToolSpec, bound_lines
from tools.host import Host
from tools.textclean import CleanText, clean_bytes

FIRST_WINDOW = 64 * 1024
WINDOW_GROWTH = 4
MAX_WINDOW = 1024 * 1024
MAX_TAIL_LINES = 1000


class Args(BaseModel):
    path: str = Field(description="absolute path of the log on the host")
    lines: int = Field(200, ge=1, le=MAX_TAIL_LINES, description="how many lines to return")


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

    def lines(self) -> list[str]:
        if self.error:
            return super().lines()
        head = (
            f"# {self.path} on {self.host}: {self.size} bytes; last {len(self.tail)} lines"
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
        return notes + bound_lines(self.tail, max_lines=max(self.requested, 1) + 1)


def parse_tail(data: bytes, n: int, partial_start: bool) -> CleanText:
    """Clean a window of the file's end and keep its last `n` lines."""
    cleaned = clean_bytes(data, partial_start=partial_start)
    cleaned.lines = cleaned.lines[-n:] if n > 0 else []
    return cleaned


def run(host: Host, args: Args) -> Result:
    window = FIRST_WINDOW
    total_read = 0
    while True:
        ft = host.read_tail(args.path, max_bytes=window)
        if ft.error or not ft.exists:
            return Result(
                host=host.name,
                ok=False,
                path=args.path,
                requested=args.lines,
                error=ft.error or f"{args.path} does not exist on {host.name}",
                fix=ft.fix or "check the path; find_logs lists recent logs on the host",
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
    )


SPEC = ToolSpec(
    name="log_tail",
    description=(
        "Last N lines of a log file, read from its end (cost independent of size), with ANSI "
        "stripped and carriage-return progress bars collapsed to their latest state. Compare "
        "`size` across two calls to tell whether the log still grows."
    ),
    args=Args,
    result=Result,
    fn=run,
)
