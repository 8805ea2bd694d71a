"""`log_search`: a regex over a log with context lines, bounded.

The tail shows how a launch ended; the search finds where it went wrong earlier (the first
NCCL WARN, the OOM an hour before). It reads at most the last `MAX_SEARCH_BYTES` of the file
through `read_tail` and says so when the file is bigger, so one call never pulls gigabytes.
Lines are cleaned exactly as in `log_tail`, so a match can be quoted as evidence verbatim.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from tools.base import MAX_LINES, ToolResult, ToolSpec, bound_lines
from tools.host import Host
from tools.textclean import clean_bytes

MAX_SEARCH_BYTES = 8 * 1024 * 1024


class Args(BaseModel):
    path: str = Field(description="absolute path of the log on the host")
    pattern: str = Field(description="Python regular expression, matched per line")
    context: int = Field(2, ge=0, le=10, description="lines shown before and after each match")
    max_matches: int = Field(50, ge=1, le=200)
    ignore_case: bool = False


class Match(BaseModel):
    line_no: int = Field(description="1-based, counted from the start of the searched window")
    line: str
    before: list[str] = Field(default_factory=list)
    after: list[str] = Field(default_factory=list)


class Result(ToolResult):
    path: str = ""
    pattern: str = ""
    size: int = 0
    searched_bytes: int = 0
    truncated: bool = Field(False, description="the file is bigger than the searched window")
    total_matches: int = Field(0, description="matches in the window, including those not shown")
    matches: list[Match] = Field(default_factory=list)

    def lines(self) -> list[str]:
        if self.error:
            return super().lines()
        scope = (
            f"the last {self.searched_bytes} of {self.size} bytes; line numbers count from there"
            if self.truncated
            else f"all {self.size} bytes"
        )
        out = [
            f"# /{self.pattern}/ in {self.path} on {self.host}: {self.total_matches} matches "
            f"in {scope}"
            + (
                f"; first {len(self.matches)} shown"
                if self.total_matches > len(self.matches)
                else ""
            )
        ]
        shown: dict[int, str] = {}
        for m in self.matches:
            start = m.line_no - len(m.before)
            for i, ln in enumerate([*m.before, m.line, *m.after]):
                shown[start + i] = ln
        run_start = prev = -1
        block: list[str] = []
        for no in sorted(shown):
            if no != prev + 1:
                if block:
                    out.append(f"# lines {run_start}-{prev}")
                    out.extend(block)
                block, run_start = [], no
            block.append(shown[no])
            prev = no
        if block:
            out.append(f"# lines {run_start}-{prev}")
            out.extend(block)
        return bound_lines(out, max_lines=MAX_LINES * 2)


def search_lines(
    lines: list[str], regex: re.Pattern[str], context: int, max_matches: int
) -> tuple[list[Match], int]:
    """Pure: matches with context over already-cleaned lines; returns (shown, total)."""
    shown: list[Match] = []
    total = 0
    for i, line in enumerate(lines):
        if not regex.search(line):
            continue
        total += 1
        if len(shown) < max_matches:
            shown.append(
                Match(
                    line_no=i + 1,
                    line=line,
                    before=lines[max(0, i - context) : i],
                    after=lines[i + 1 : i + 1 + context],
                )
            )
    return shown, total


def run(host: Host, args: Args) -> Result:
    try:
        regex = re.compile(args.pattern, re.IGNORECASE if args.ignore_case else 0)
    except re.error as exc:
        return Result(
            host=host.name,
            ok=False,
            path=args.path,
            pattern=args.pattern,
            error=f"invalid regular expression {args.pattern!r}: {exc}",
            fix="fix the pattern (Python `re` syntax); escape literal ( [ . * + ? with a backslash",
        )
    ft = host.read_tail(args.path, max_bytes=MAX_SEARCH_BYTES)
    if ft.error or not ft.exists:
        return Result(
            host=host.name,
            ok=False,
            path=args.path,
            pattern=args.pattern,
            error=ft.error or f"{args.path} does not exist on {host.name}",
            fix=ft.fix or "check the path; find_logs lists recent logs on the host",
        )
    partial = ft.bytes_read < ft.size
    cleaned = clean_bytes(ft.data, partial_start=partial)
    matches, total = search_lines(cleaned.lines, regex, args.context, args.max_matches)
    return Result(
        host=host.name,
        path=args.path,
        pattern=args.pattern,
        size=ft.size,
        searched_bytes=ft.bytes_read,
        truncated=partial,
        total_matches=total,
        matches=matches,
    )


SPEC = ToolSpec(
    name="log_search",
    description=(
        "Regex search over a log (the last 8 MiB at most) with context lines; lines cleaned "
        "as in log_tail. Use it to find the first error, an earlier warning, or when a "
        "phase started."
    ),
    args=Args,
    result=Result,
    fn=run,
)
