"""What the log tools share about the file itself: is it there, is it text, where did the
last launch start, and how to read a region of a big file without pulling it over the wire.

- `diagnose` turns a failed read into a clear answer: missing (with what its directory holds),
  a directory (with the log files in it), permission denied (owner, group, mode, who we are).
- `binary_reason` says when bytes are not a text log (NULs, a high share of non-text bytes), so
  no line of a core dump or a checkpoint is ever cited as evidence.
- `find_last_launch` reads BACKWARDS from a point in bounded chunks with one remote command per
  chunk (`tail -c +N | head -c LEN | grep -b`), so the last launch marker of a 2 GB log is
  found in seconds over SSH and only offsets come back.
- `grep_region` runs a regex over a byte range on the host and returns only the matching lines
  with context, so a search "since the launch" never moves gigabytes.

All of it goes through `Host.run`; a host that cannot run the commands (a replayed card) makes
the caller fall back to what `read_tail` gave, and say what was not read.
"""

from __future__ import annotations

import re
import shlex
from functools import lru_cache

from pydantic import BaseModel, Field

from tools import engines
from tools.host import Host

#: names that look like logs, for "the directory holds ..." answers
LOG_LIKE = re.compile(r"(?i)(\.log|\.out|\.err|\.txt|nohup|stdout|stderr)")
#: bytes a text log does not contain (NUL and C0 controls except \t \n \r ESC, DEL)
_NON_TEXT = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")
_HOLE = re.compile(rb"\x00{512,}")
BINARY_SAMPLE = 64 * 1024
BINARY_SHARE = 0.10
NUL_SHARE = 0.01


# -- bad input -------------------------------------------------------------------------------
class PathProblem(BaseModel):
    kind: str = Field(description="missing | directory | permission_denied | unreadable")
    error: str
    fix: str


def _diag_script(path: str) -> str:
    q = shlex.quote(path)
    return (
        f"p={q}; "
        'if [ -d "$p" ]; then echo "kind=directory"; ls -1At -- "$p" 2>/dev/null | head -n 200; '
        'elif [ ! -e "$p" ]; then echo "kind=missing"; d=$(dirname -- "$p"); '
        'if [ -d "$d" ]; then echo "parent=yes"; ls -1At -- "$d" 2>/dev/null | head -n 200; '
        'else echo "parent=no"; fi; '
        'elif [ ! -r "$p" ]; then echo "kind=permission_denied"; '
        "stat -L -c 'owner=%U group=%G mode=%a' -- \"$p\"; "
        'echo "me=$(id -un) groups=$(id -Gn)"; '
        'else echo "kind=readable"; fi'
    )


def _pick_logs(names: list[str], n: int = 5) -> list[str]:
    names = [x for x in names if x and not x.startswith("kind=") and "=" not in x[:8]]
    logs = [x for x in names if LOG_LIKE.search(x)]
    return (logs or names)[:n]


def diagnose(host: Host, path: str, read_error: str | None, read_fix: str | None) -> PathProblem:
    """Why `path` could not be read, in words that name the path and the fix.

    Asks the host once (a bounded shell test); when it cannot answer (a replayed card) the
    read's own error decides between missing and unreadable."""
    res = host.run(_diag_script(path), timeout=10, max_bytes=64_000)
    out = res.stdout.splitlines() if res.rc == 0 else []
    kind = next((ln[5:] for ln in out if ln.startswith("kind=")), "")
    where = host.name
    base = path.rstrip("/")
    if kind == "directory":
        logs = _pick_logs(out[1:])
        listed = (
            "log files in it, newest first: " + ", ".join(logs)
            if logs
            else "it holds no files (is the server writing its log elsewhere?)"
        )
        example = f"{base}/{logs[0]}" if logs else f"{base}/<file>.log"
        return PathProblem(
            kind="directory",
            error=f"{path} on {where} is a directory, not a log file; {listed}",
            fix=f"pass one file of it, e.g. --log {example} (find_logs lists recent logs)",
        )
    if kind == "missing":
        parent = base.rsplit("/", 1)[0] or "/"
        if "parent=yes" in out:
            logs = _pick_logs(out[2:])
            holds = (
                f"; its directory {parent} holds, newest first: " + ", ".join(logs)
                if logs
                else f"; its directory {parent} is empty"
            )
        elif "parent=no" in out:
            holds = f"; neither does its directory {parent}"
        else:
            holds = ""
        return PathProblem(
            kind="missing",
            error=f"log path {path} does not exist on {where}{holds}",
            fix="check the path (a typo, another host, a rotated log?); find_logs lists the "
            "logs written recently on the host",
        )
    if kind == "permission_denied":
        stat = next((ln for ln in out if ln.startswith("owner=")), "")
        me_line = next((ln for ln in out if ln.startswith("me=")), "")
        facts = dict(kv.split("=", 1) for kv in stat.split() if "=" in kv)
        me = me_line.split()[0][3:] if me_line else "this user"
        group = facts.get("group", "its group")
        return PathProblem(
            kind="permission_denied",
            error=f"permission denied reading {path} on {where}: owner {facts.get('owner', '?')}, "
            f"group {group}, mode {facts.get('mode', '?')}; connected as {me}",
            fix=f"read it as its owner or with sudo, or let {me} read it: "
            f"sudo usermod -aG {group} {me} (then log in again) or sudo chmod o+r {path}",
        )
    # The host could not tell (replay, no shell): go by the read's own words.
    err = read_error or f"cannot read {path} on {where}"
    low = err.lower()
    if "does not exist" in low or "no such file" in low:
        return PathProblem(
            kind="missing",
            error=f"log path {path} does not exist on {where}",
            fix=read_fix or "check the path; find_logs lists the logs written recently",
        )
    if "is a directory" in low:
        return PathProblem(
            kind="directory",
            error=f"{path} on {where} is a directory, not a log file",
            fix="pass one log file inside it; find_logs lists recent logs",
        )
    if "permission denied" in low or "not permitted" in low:
        return PathProblem(
            kind="permission_denied",
            error=f"permission denied reading {path} on {where}",
            fix=f"read it as its owner or with sudo, or sudo chmod o+r {path}",
        )
    return PathProblem(
        kind="unreadable", error=err, fix=read_fix or "check the path and its permissions"
    )


# -- binary content --------------------------------------------------------------------------
def binary_reason(data: bytes) -> str | None:
    """Why these bytes are not a text log, or None when they are text.

    A few stray NULs in a text log (a hostile line, a torn write) are text; a NUL share above
    1%, or more than 10% bytes that are control characters or not UTF-8, is not."""
    sample = data[-BINARY_SAMPLE:]
    if len(sample) < 16:
        return None
    # a hole (a sparse or copytruncate'd log reads as a long run of NULs) is not content
    holes = _HOLE.sub(b"", sample)
    if len(holes) < 16 <= len(sample) - len(holes):
        return "only NUL bytes at its end"
    sample = holes if len(holes) >= 16 else sample
    nul = sample.count(b"\x00")
    if nul > NUL_SHARE * len(sample):
        return f"{nul * 100 // len(sample)}% NUL bytes"
    bad = len(_NON_TEXT.findall(sample))
    text = sample.decode("utf-8", errors="replace")
    # a window may start or end mid-character: two replacement chars are not evidence
    bad += max(0, text.count("\ufffd") - 2)
    share = bad / len(sample)
    if share > BINARY_SHARE:
        return f"{share:.0%} of its bytes are control characters or not UTF-8"
    return None


# -- launch markers --------------------------------------------------------------------------
def launch_patterns() -> tuple[str, ...]:
    """Lines that start a launch: the engine registry's markers (tools/engines.yaml)."""
    return engines.launch_patterns()


@lru_cache(maxsize=1)
def launch_regex() -> re.Pattern[bytes]:
    return re.compile("|".join(f"(?:{p})" for p in launch_patterns()).encode(), re.MULTILINE)


def to_ere(pattern: str) -> tuple[str, bool] | None:
    """A Python regex as GNU grep -E, with whether it asked for (?i); None when it cannot be
    said in ERE (lookarounds, named groups, backrefs...). Lines grep returns are checked with
    the Python regex again, so a slightly wider ERE is fine."""
    icase = False
    if pattern.startswith("(?i)"):
        icase, pattern = True, pattern[4:]
    if "(?" in pattern.replace("(?:", "") or re.search(r"\\[1-9]|\\[AZzgpPN]", pattern):
        return None
    if re.search(r"\[[^\]]*\\[dDsSwW]", pattern):
        return None  # a class shorthand inside brackets
    out = pattern.replace("(?:", "(").replace(r"\d", "[0-9]").replace(r"\D", "[^0-9]")
    return out, icase


def launch_ere() -> str:
    parts = []
    for p in launch_patterns():
        e = to_ere(p)
        parts.append(e[0] if e else re.escape(p))
    return "|".join(f"({p})" for p in parts)


def last_launch_in(data: bytes, first_is_line_start: bool) -> tuple[int | None, int]:
    """(offset of the line that holds the last launch marker, how many markers) in `data`."""
    count = 0
    last: int | None = None
    for m in launch_regex().finditer(data):
        start = data.rfind(b"\n", 0, m.start()) + 1
        if start == 0 and not first_is_line_start:
            continue  # a cut first line is not a launch line
        count += 1
        last = start
    return last, count


CHUNK_FIRST = 4 * 1024 * 1024
CHUNK_MAX = 64 * 1024 * 1024
BACK_CAP = 2 * 1024 * 1024 * 1024
#: read back chunk by chunk this far; the rest in one command
CHUNKED_BYTES = 124 * 1024 * 1024
BACK_TIME_S = 12.0


class LaunchScan(BaseModel):
    found: bool = False
    offset: int | None = Field(None, description="byte offset of the last launch line")
    markers: int = Field(0, description="markers seen in the scanned part")
    scanned_from: int = Field(description="the scan reached back to this offset")
    line: str = Field("", description="the launch line, its first 400 characters")
    ok: bool = Field(True, description="the host could run the scan")
    why_stopped: str = ""


def _complaints(stderr: str) -> str:
    """What a pipeline said on stderr beyond warnings: a missing program, a bad pattern (the
    pipeline's exit status is its last stage's, so this is how grep's failure shows)."""
    bad = [ln for ln in stderr.splitlines() if ln.strip() and "warning" not in ln.lower()]
    return "; ".join(bad)[:300]


def _region_cmd(path: str, start: int, length: int) -> str:
    return f"tail -c +{start + 1} -- {shlex.quote(path)} 2>/dev/null | head -c {length}"


def find_last_launch(host: Host, path: str, end: int) -> LaunchScan:
    """Scan backwards from byte `end` (a line start) for the last launch marker.

    Bounded chunks first, one remote command each (4 MiB, doubling, 124 MiB in all: a launch
    near the end costs milliseconds); then one last command over the rest up to the 2 GiB cap,
    which greps the file itself when that reaches its start (a pipe costs ~1 s per GB more).
    Only offsets and 400 characters of at most three marker lines come back."""
    ere = shlex.quote(launch_ere())
    t0 = host.clock()
    pos = end
    chunk = CHUNK_FIRST
    while pos > 0:
        if end - pos >= BACK_CAP:
            return LaunchScan(scanned_from=pos, why_stopped=f"read cap of {BACK_CAP} bytes")
        left_s = BACK_TIME_S - (host.clock() - t0)
        if left_s <= 0:
            return LaunchScan(scanned_from=pos, why_stopped=f"time limit of {BACK_TIME_S:.0f} s")
        last = end - pos >= CHUNKED_BYTES
        a = max(0, end - BACK_CAP) if last else max(0, pos - chunk)
        if last and a == 0:
            # the whole rest: grep the file directly, no pipe; hits at or past `pos` were
            # already ruled out, so they are filtered, not re-read
            s = 0
            cmd = f"grep -a -b -E -e {ere} -- {shlex.quote(path)} | cut -c1-400 | tail -n 3"
        else:
            # from one byte earlier: a line starting exactly at `a` shows with its own offset
            # (after the "\n" before it), a cut line shows at a-1 and is skipped; up to 1 MiB
            # past `pos` so a marker line crossing `pos` is read whole
            s = max(0, a - 1)
            stop = min(end, pos + 1024 * 1024)
            cmd = (
                f"{_region_cmd(path, s, stop - s)} | grep -a -b -E -e {ere} "
                "| cut -c1-400 | tail -n 3"
            )
        res = host.run(cmd, timeout=max(5.0, left_s) if last else 30, max_bytes=8_000)
        if res.timed_out:
            return LaunchScan(scanned_from=pos, why_stopped=f"time limit ({res.error})")
        if res.rc not in (0, 1) or res.error or _complaints(res.stderr):
            return LaunchScan(
                scanned_from=pos,
                ok=False,
                why_stopped=res.error or _complaints(res.stderr) or f"rc {res.rc}",
            )
        hits: list[tuple[int, str]] = []
        for ln in res.stdout.splitlines():
            off, _, text = ln.partition(":")
            if off.isdigit() and a <= s + int(off) < pos:
                hits.append((s + int(off), text))
        if hits:
            hits.sort()
            return LaunchScan(
                found=True,
                offset=hits[-1][0],
                line=hits[-1][1],
                markers=len(hits),
                scanned_from=a,
            )
        pos = a
        chunk = min(chunk * 2, CHUNK_MAX)
    return LaunchScan(scanned_from=0, why_stopped="reached the start of the file")


class GrepLine(BaseModel):
    line_no: int = Field(description="1-based physical line number from the region start")
    offset: int = Field(description="absolute byte offset of the line")
    match: bool
    text: str


class GrepRegion(BaseModel):
    ok: bool = True
    error: str = ""
    groups: list[list[GrepLine]] = Field(default_factory=list)
    truncated: bool = False
    hits: int = 0


#: a line longer than this (a 64 MiB NUL hole, a CR progress line) is cut on the host
LINE_CAP = 256 * 1024
_GREP_LINE = re.compile(r"^(\d+)([:-])(\d+)[:-]")


def grep_region(
    host: Host,
    path: str,
    start: int,
    length: int,
    pattern: str,
    ignore_case: bool,
    context: int,
    cap: int,
) -> GrepRegion:
    """Lines matching `pattern` (a Python regex) in bytes [start, start+length) of `path`,
    with `context` lines around, found by grep on the host (ERE when the pattern allows,
    else PCRE). Returns the raw groups; the caller re-checks them with Python."""
    ere = to_ere(pattern)
    flavours: list[tuple[str, str, bool]] = []
    if ere is not None:
        flavours.append(("-E", ere[0], ere[1] or ignore_case))
    flavours.append(("-P", pattern, ignore_case))
    last_err = ""
    end = start + length
    for flag, pat, icase in flavours:
        grep = (
            f"grep -a -n -b {flag}{' -i' if icase else ''} -B {context} -A {context} -m {cap} "
            f"-e {shlex.quote(pat)}"
        )
        if start == 0:
            # from the first byte: grep the file itself (a pipe costs ~1 s per GB more) and
            # drop what lies past `end` (the caller has those bytes already)
            cmd = f"{grep} -- {shlex.quote(path)} | cut -b 1-{LINE_CAP}"
        else:
            cmd = f"{_region_cmd(path, start, length)} | {grep} | cut -b 1-{LINE_CAP}"
        res = host.run(cmd, timeout=60, max_bytes=4_000_000)
        if not res.truncated and (res.rc not in (0, 1) or res.error or _complaints(res.stderr)):
            last_err = res.error or _complaints(res.stderr) or f"rc {res.rc}"
            continue
        out = GrepRegion(truncated=res.truncated)
        group: list[GrepLine] = []
        lines = res.stdout.split("\n")
        if res.truncated and lines:
            lines = lines[:-1]  # the cut last line
        for raw in lines:
            if raw == "--":
                if group:
                    out.groups.append(group)
                group = []
                continue
            m = _GREP_LINE.match(raw)
            if not m:
                continue
            is_match = m.group(2) == ":"
            if start + int(m.group(3)) >= end:
                continue
            out.hits += is_match
            group.append(
                GrepLine(
                    line_no=int(m.group(1)),
                    offset=start + int(m.group(3)),
                    match=is_match,
                    text=raw[m.end() :],
                )
            )
        if group:
            out.groups.append(group)
        out.groups = [g for g in out.groups if any(gl.match for gl in g)]
        return out
    return GrepRegion(ok=False, error=last_err)


#: what a rotation appends to a log's name: server.log.1, .old, .bak, -20261201 (not .gz)
_ROTATED = re.compile(r"^(?:\.\d{1,2}|\.old|\.bak|[-.]\d{8}(?:-\d+)?)$")


def rotation_of(path: str, other: str) -> bool:
    """`other` is `path` renamed by a rotation (logrotate, RotatingFileHandler, a supervisor)."""
    return other.startswith(path) and bool(_ROTATED.match(other[len(path) :]))
