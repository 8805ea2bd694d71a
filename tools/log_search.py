"""`log_search`: a regex over a log since its last launch, with context lines, bounded.

The tail shows how a launch ended; the search finds where it went wrong earlier (the first
NCCL WARN, the OOM 12 MB before the end). The last 8 MiB come through `read_tail`; when the file
is bigger, the last launch marker (tools/engines.yaml) is looked for BACKWARDS
in bounded chunks by one remote command each, and the region from it to the 8 MiB window is
searched by grep on the host, so only matching lines (with context) travel. The result says
exactly what was searched (`searched_from`, `bytes_searched`, `launch_found`,
`whole_since_launch`) and what was not. Lines are cleaned exactly as in `log_tail` and every
match is re-checked with the Python regex, so a match can be quoted as evidence verbatim.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from tools.base import MAX_LINES, ToolResult, ToolSpec, bound_lines
from tools.host import Host
from tools.logfile import (
    binary_reason,
    diagnose,
    find_last_launch,
    grep_region,
    last_launch_in,
)
from tools.textclean import clean_bytes, collapse_cr, strip_ansi

MAX_SEARCH_BYTES = 8 * 1024 * 1024
#: matching lines grep may return from the region before the 8 MiB window
REMOTE_CAP = 1000


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
    counted_from: int = Field(0, description="byte offset of the line `line_no` 1 would be")


class Result(ToolResult):
    path: str = ""
    pattern: str = ""
    size: int = 0
    searched_bytes: int = Field(0, description="same as bytes_searched (older name)")
    truncated: bool = Field(False, description="part of the file was NOT searched")
    total_matches: int = Field(0, description="matches found, including those not shown")
    total_capped: bool = Field(False, description="grep stopped counting at its cap")
    matches: list[Match] = Field(default_factory=list)
    searched_from: int = Field(0, description="byte offset the search started at")
    bytes_searched: int = Field(0, description="bytes from searched_from to the end")
    launch_found: bool = Field(False, description="a launch marker line was found")
    launch_offset: int | None = Field(None, description="byte offset of the last launch line")
    launch_line: str = ""
    whole_since_launch: bool = Field(
        False,
        description="everything since the last launch (or the whole file when it holds no "
        "launch marker) was searched; only then does 0 matches mean absent",
    )
    not_read: str = Field("", description="what was not searched and why, in words")
    problem: str | None = Field(
        None, description="missing | directory | permission_denied | unreadable | binary"
    )
    binary: bool = False

    def scope(self) -> str:
        span = f"bytes {self.searched_from}-{self.size} ({self.bytes_searched} bytes)"
        if self.whole_since_launch:
            if self.launch_found and self.searched_from > 0:
                why = f"everything since the last launch (line at byte {self.launch_offset})"
            elif self.launch_found:
                why = "the whole file (one launch)"
            else:
                why = "the whole file (no launch marker in it)"
            return f"{span}: {why}"
        return f"{span} only"

    def lines(self) -> list[str]:
        if self.error:
            return super().lines()
        out = [
            f"# /{self.pattern}/ in {self.path} on {self.host}: "
            f"{'at least ' if self.total_capped else ''}{self.total_matches} matches "
            f"in {self.scope()}"
            + (
                f"; first {len(self.matches)} shown"
                if self.total_matches > len(self.matches)
                else ""
            )
        ]
        if self.launch_line and self.whole_since_launch and self.searched_from > 0:
            out.append(f"# last launch: {self.launch_line[:300]}")
        if not self.whole_since_launch:
            out.append(f"# NOT searched: {self.not_read}")
        shown: dict[tuple[int, int], str] = {}
        for m in self.matches:
            start = m.line_no - len(m.before)
            for i, ln in enumerate([*m.before, m.line, *m.after]):
                shown[(m.counted_from, start + i)] = ln
        run_start = prev = -1
        base = -1
        block: list[str] = []

        def flush() -> None:
            if block:
                where = f" (counted from byte {base})" if base else ""
                out.append(f"# lines {run_start}-{prev}{where}")
                out.extend(block)

        for key in sorted(shown):
            frm, no = key
            if frm != base or no != prev + 1:
                flush()
                block, run_start, base = [], no, frm
            block.append(shown[key])
            prev = no
        flush()
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


def _remote_matches(
    host: Host, args: Args, regex: re.Pattern[str], start: int, length: int
) -> tuple[list[Match], int, bool] | None:
    """Matches in bytes [start, start+length) found by grep on the host; None when it cannot."""
    got = grep_region(
        host, args.path, start, length, args.pattern, args.ignore_case, args.context, REMOTE_CAP
    )
    if not got.ok:
        return None
    out: list[Match] = []
    total = 0
    for group in got.groups:
        segs: list[str] = []
        for gl in group:
            kept, _ = collapse_cr(strip_ansi(gl.text))
            segs.extend(kept)
        found, n = search_lines(segs, regex, args.context, args.max_matches)
        total += n
        first = group[0].line_no
        for m in found:
            m.line_no += first - 1
            m.counted_from = start
        out.extend(found)
    return out, total, got.hits >= REMOTE_CAP


def _failed(host: Host, args: Args, error: str | None, fix: str | None) -> Result:
    p = diagnose(host, args.path, error, fix)
    return Result(
        host=host.name,
        ok=False,
        path=args.path,
        pattern=args.pattern,
        problem=p.kind,
        error=p.error,
        fix=p.fix,
    )


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
        return _failed(host, args, ft.error, ft.fix)
    why = binary_reason(ft.data)
    if why is not None:
        return Result(
            host=host.name,
            ok=False,
            path=args.path,
            pattern=args.pattern,
            size=ft.size,
            problem="binary",
            binary=True,
            error=f"{args.path} on {host.name} is binary, not a text log ({why}); "
            "no line of it is searched or usable as evidence",
            fix="pass the server's text log (its stdout/stderr file); find_logs lists recent logs",
        )
    size = ft.size
    data = ft.data
    held_from = size - ft.bytes_read  # where the bytes in hand start
    partial = held_from > 0
    if partial:
        nl = data.find(b"\n")
        if nl >= 0:  # the cut first line belongs to the region before, searched whole there
            data = data[nl + 1 :]
            held_from += nl + 1
            partial = False
    off, count = last_launch_in(data, first_is_line_start=not partial)
    remote: list[Match] = []
    remote_total, capped = 0, False
    launch_found = off is not None
    launch_at: int | None = None
    not_read = ""
    launch_line = ""
    if off is not None:
        launch_at = held_from + off
        # one marker in a file read whole: it is that launch's own log from the first byte
        searched_from = 0 if (held_from == 0 and count == 1) else launch_at
        whole = True
    elif held_from == 0:
        searched_from, whole = 0, True
    else:
        scan = find_last_launch(host, args.path, held_from)
        if not scan.ok:
            searched_from, whole = held_from, False
            not_read = (
                f"bytes 0-{held_from} ({held_from} bytes before the last "
                f"{size - held_from}); the host could not scan them ({scan.why_stopped})"
            )
        else:
            if scan.found:
                launch_found, launch_at = True, scan.offset
                launch_line = scan.line
                searched_from = (
                    0 if scan.markers == 1 and scan.scanned_from == 0 else int(scan.offset or 0)
                )
                whole = True
            elif scan.scanned_from == 0:
                searched_from, whole = 0, True
            else:
                searched_from, whole = scan.scanned_from, False
                not_read = (
                    f"bytes 0-{scan.scanned_from} ({scan.scanned_from} bytes at the start): no "
                    f"launch marker in the last {size - scan.scanned_from} bytes and the scan "
                    f"stopped at its {scan.why_stopped}"
                )
            got = _remote_matches(host, args, regex, searched_from, held_from - searched_from)
            if got is None:
                not_read = (
                    f"bytes 0-{held_from} ({held_from} bytes before the last "
                    f"{size - held_from}); grep on the host failed"
                )
                searched_from, whole = held_from, False
            else:
                remote, remote_total, capped = got
    # the bytes in hand, from the launch line when it is among them
    local = data[searched_from - held_from :] if searched_from > held_from else data
    local_from = max(searched_from, held_from)
    cleaned = clean_bytes(local, partial_start=partial)
    held, held_total = search_lines(cleaned.lines, regex, args.context, args.max_matches)
    for m in held:
        m.counted_from = local_from
    matches = (remote + held)[: args.max_matches]
    if launch_at is not None and launch_at >= held_from:
        rel = launch_at - held_from
        end = data.find(b"\n", rel)
        launch_line = data[rel : end if end >= 0 else None].decode("utf-8", "replace")
    launch_line = strip_ansi(launch_line)[:400]
    if not whole and not not_read:
        not_read = f"bytes 0-{searched_from}"
    return Result(
        host=host.name,
        path=args.path,
        pattern=args.pattern,
        size=size,
        searched_bytes=size - searched_from,
        bytes_searched=size - searched_from,
        truncated=not whole,
        total_matches=remote_total + held_total,
        total_capped=capped,
        matches=matches,
        searched_from=searched_from,
        launch_found=launch_found,
        launch_offset=launch_at,
        launch_line=launch_line,
        whole_since_launch=whole,
        not_read="" if whole else not_read,
    )


SPEC = ToolSpec(
    name="log_search",
    description=(
        "Regex search over a log since its last launch (found by reading backwards, any size) "
        "with context lines; lines cleaned as in log_tail. The result says what was searched "
        "(whole_since_launch, searched_from) and what was not. Use it to find the first "
        "error, an earlier warning, or when a phase started."
    ),
    args=Args,
    result=Result,
    fn=run,
    scanned=True,
    verdict_needs=True,
)
