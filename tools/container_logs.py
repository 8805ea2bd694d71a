"""`container_logs`: the server container's own log (its stdout and stderr), tail or search.

A server in a container usually logs to stdout, so there is no file to tail: `docker logs` /
`podman logs` is the log. Both keep the output of every instance of the container, so after a
restart the previous instance's lines (where a restart loop's cause is) are still there; with
`--timestamps` each line says when, and the container's current `StartedAt` splits the current
instance from the earlier ones. Lines are shown without the CLI's timestamp (the engine's own
line, byte for byte); `# ` lines mark where an instance starts.
"""

from __future__ import annotations

import re
import shlex
from datetime import datetime

from pydantic import BaseModel, Field

from tools.base import ToolResult, ToolSpec, bound_lines, failed
from tools.container_inspect import parse_inspect, target
from tools.host import Host
from tools.log_window import Watched, watch
from tools.logfile import to_ere
from tools.textclean import clean_lines

#: The CLI's --timestamps prefix: RFC 3339 with nanoseconds (Docker: Z; Podman: Z or +00:00).
STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) ")


class Args(BaseModel):
    name: str | None = Field(None, description="container; the investigated one when omitted")
    tail: int = Field(300, ge=1, le=5000, description="how many of the newest lines")
    pattern: str | None = Field(
        None, description="search the whole log (every instance) for this regex instead"
    )
    previous: bool = Field(False, description="only the instances before the current one")
    watch_s: float | None = Field(
        None,
        ge=0,
        le=600,
        description="liveness: read again over this window (longer for a progress bar) until "
        "the log grows; capped at PIVOT_LIVENESS_MAX_S (30 s by default): to watch longer, read "
        "again. The result says whether it grew and how long was waited",
    )


class LogLine(BaseModel):
    at: str = ""
    text: str
    previous: bool = False


class Result(ToolResult, Watched):
    cli: str = ""
    container: str = ""
    command: str = ""
    started_at: str = ""
    restart_count: int = 0
    entries: list[LogLine] = Field(default_factory=list)
    previous_lines: int = Field(0, description="lines from instances before the current one")
    pattern: str | None = Field(None, description="the search it was, if one (pattern=)")

    def lines(self) -> list[str]:
        if self.error:
            return super().lines()
        out = [f"# {self.cli} log of container {self.container} ($ {self.command})"]
        if self.watched:
            from tools.log_window import cap_note

            out.append(
                f"# watched it for {self.waited_s:.1f} s{cap_note(self.asked_s, self.window_s)}: "
                + ("new lines arrived" if self.grew else "no new line")
            )
        if self.restart_count:
            out.append(
                f"# restarted {self.restart_count} times; {self.previous_lines} lines are from "
                f"earlier instances, the current one started {self.started_at}"
            )
        was_previous: bool | None = None
        for e in self.entries:
            if e.previous != was_previous and self.restart_count:
                out.append(
                    f"# --- {'an earlier instance' if e.previous else 'the current instance'}"
                    + (f" (from {e.at})" if e.at else "")
                )
                was_previous = e.previous
            out.append(e.text)
        if not self.entries:
            # a search that found nothing says nothing of how much the container printed
            out.append(
                f"# no line of the container's log matches {self.pattern!r}"
                if self.pattern
                else "# the container printed nothing"
            )
        return bound_lines(out)


def _when(stamp: str) -> datetime | None:
    s = stamp.replace("Z", "+00:00")
    m = re.match(r"(.*T\d\d:\d\d:\d\d)(\.\d+)?(.*)", s)
    if not m:
        return None
    frac = (m.group(2) or ".0")[:7]
    try:
        return datetime.fromisoformat(m.group(1) + frac + m.group(3))
    except ValueError:
        return None


def parse_logs(text: str, started_at: str = "") -> list[LogLine]:
    """`CLI logs [--timestamps]` output -> lines, each marked as before the current instance
    or not (when both the line and `started_at` carry a time)."""
    start = _when(started_at) if started_at else None
    out: list[LogLine] = []
    for raw in clean_lines(text).lines:
        m = STAMP.match(raw)
        at, line = (m.group(1), raw[m.end() :]) if m else ("", raw)
        when = _when(at) if at else None
        prev = bool(start and when and when < start)
        out.append(LogLine(at=at, text=line, previous=prev))
    return out


def _key(res: Result) -> tuple[int, str, str]:
    """What changes when a container prints something: the count and the newest line."""
    last = res.entries[-1] if res.entries else None
    return (len(res.entries), last.at if last else "", last.text if last else "")


def run(host: Host, args: Args) -> Result:
    if args.watch_s is None:
        return read_once(host, args)
    res = read_once(host, args)
    if not res.ok:
        return res
    return watch(
        host,
        res,
        lambda: read_once(host, args),
        _key,
        lambda r: [e.text for e in r.entries],
        float(args.watch_s),
    )


def read_once(host: Host, args: Args) -> Result:
    found = target(host, args.name)
    if isinstance(found, ToolResult):
        return Result(host=host.name, ok=False, error=found.error, fix=found.fix)
    outer, name, cli = found
    started, restarts = "", 0
    rec = outer.run(f"{cli} inspect {name}", timeout=20)
    if rec.ok:
        try:
            state = parse_inspect(rec.stdout)
            started, restarts = state.started_at, state.restart_count
        except (ValueError, IndexError, KeyError, TypeError):
            pass
    if args.pattern:
        # the pattern is a Python regex: grep -E cannot read `(?i)` or `\d` (it prints nothing,
        # and the pipeline's tail still exits 0), so it is said in ERE, or grep -P where it can't
        ere = to_ere(args.pattern)
        flag, pat = ("-E", ere[0]) if ere is not None else ("-P", args.pattern)
        command = (
            f"{cli} logs --timestamps {name} 2>&1 | grep -a {flag} -i -e {shlex.quote(pat)} "
            f"| tail -n {args.tail}"
        )
    else:
        command = f"{cli} logs --timestamps --tail {args.tail} {name} 2>&1"
    res = outer.run(command, timeout=30)
    if res.error or (res.rc not in (0, 1) if args.pattern else res.rc != 0):
        return failed(Result, res, cli=cli, container=name, command=command)
    entries = parse_logs(res.stdout, started)
    if args.previous:
        entries = [e for e in entries if e.previous]
    return Result(
        host=outer.name,
        cli=cli,
        container=name,
        command=command,
        started_at=started,
        restart_count=restarts,
        entries=entries,
        previous_lines=sum(e.previous for e in entries),
        pattern=args.pattern,
    )


SPEC = ToolSpec(
    name="container_logs",
    description=(
        "The server container's own log (`docker logs` / `podman logs`: its stdout and stderr) "
        "with timestamps: the newest tail lines, or pattern= to search every instance's lines. "
        "After restarts it marks which lines come from earlier instances (previous=true keeps "
        "only those): a restart loop's cause is in them."
    ),
    args=Args,
    result=Result,
    fn=run,
    first_sweep=9,
    container_only=True,
    scanned=True,
    launch_log=True,
    verdict_needs=True,
    facts=("log_growth", "log_watch"),
)
