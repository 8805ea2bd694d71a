"""Launch detached, watch a starting server until it is ready or has clearly failed, stop it whole.

The watch is one shell command per tick (process state, log size, new log bytes, probe), so it
costs one round trip over SSH, and a death is seen within a tick (~150 ms), not after a
20-minute poll. Crash lines count only when the signature KB calls them `fatal`: the seeds'
false "CRASHED" came from a bare grep for "Exception" in harmless import lines.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel

from tools.host import Host
from tools.launch import MARKER_VAR, launch
from tools.launch import Args as LaunchArgs
from tools.launch import Result as LaunchResult

TICK_S = 0.15
SEP = "---pivot-log---"


class Verdict(BaseModel):
    state: Literal["ready", "died", "crashed", "hung", "timeout"]
    detail: str
    evidence: str | None = None
    label: str | None = None
    elapsed_s: float
    log_bytes: int = 0


def start(
    host: Host,
    command: str,
    workdir: str,
    env: dict[str, str],
    log_path: str,
    marker: str,
    inherit_env: list[str] | None = None,
) -> LaunchResult:
    """Launch detached; with `inherit_env` the server gets `env` plus only those variables of
    the loop's own environment (an exported NCCL_* in the shell must not decide a night)."""
    return launch(
        host,
        LaunchArgs(
            command=command,
            workdir=workdir,
            env=env,
            log_path=log_path,
            marker=marker,
            inherit_env=inherit_env,
        ),
    )


#: State letters of a process that is gone: zombie, dead, or `GONE` (no /proc entry, no pid).
#: Never "D": uninterruptible sleep is a live process blocked in the kernel, and a server just
#: exec'd from a cold disk (or a vfork parent) sits in it for a moment; calling that "dead"
#: made a healthy launch end as "exited after 0.0s with no fatal line".
GONE = "-"
DEAD_STATES = ("Z", "X", GONE)


def _state_shell(pid: int) -> str:
    """Shell that prints the process state letter of `pid`, or GONE."""
    return (
        f"st=$(grep -s '^State:' /proc/{pid}/status | cut -f2 | cut -c1); "
        f'[ -n "$st" ] || {{ kill -0 {pid} 2>/dev/null && st=R || st={GONE}; }}; echo "$st"'
    )


def tick_command(pid: int | None, log_path: str, offset: int, url: str | None, curl: bool) -> str:
    """State letter (see DEAD_STATES), log size, HTTP code, then the log bytes past `offset`.

    `pivot watch` may know no pid (state "R": only the log and the probe decide) or no port
    (code 0); the loop always knows both."""
    q = shlex.quote
    probe = (
        "echo 0"
        if url is None
        else f"curl -s -o /dev/null -w '%{{http_code}}' --max-time 0.5 {q(url)} 2>/dev/null || true"
        if curl
        else "python3 -c "
        + q(
            "import sys,urllib.request as u\ntry: print(u.urlopen(sys.argv[1],timeout=0.5).status)\n"
            "except Exception as e: print(getattr(e,'code',0))"
        )
        + f" {q(url)}"
    )
    return (
        f"{_state_shell(pid) if pid is not None else 'st=R; echo R'}; "
        f"stat -c %s {q(log_path)} 2>/dev/null || echo 0; "
        f'case "$st" in Z|X|{GONE}) echo 0;; *) {probe};; esac; echo; '
        f"echo {SEP}; tail -c +{offset + 1} {q(log_path)} 2>/dev/null | head -c 262144"
    )


def signatures() -> tuple[Any, ...]:
    """The signature KB, or none when it cannot load (a KB being edited must not stop a night;
    liveness still decides by the pid, the log and the probe)."""
    try:
        from agent.signatures import load_signatures

        return load_signatures()
    except Exception as exc:  # ImportError, a YAML or validation error in someone's KB file
        _warn_once(f"signature KB unavailable, deciding by liveness only: {exc}")
        return ()


_warned: set[str] = set()


def _warn_once(msg: str) -> None:
    if msg not in _warned:
        _warned.add(msg)
        import sys

        print(f"pivot loop: {msg.splitlines()[0]}", file=sys.stderr)


def _fatal(lines: list[str]) -> tuple[str, str | None] | None:
    """The first line the signature KB calls fatal, with its label (empty KB -> None)."""
    from agent.signatures import scan

    kb = signatures()
    if not kb:
        return None
    for m in scan(lines, kb):
        if m.strength == "fatal":
            return m.line, m.label
    return None


_ERRORISH = re.compile(r"^\s*(?:\w+\.)*\w*(?:Error|Exception|Killed)\b.*|^\S*Error: .*")


def last_error_line(lines: list[str]) -> str | None:
    """When the KB knows nothing: the last traceback-final line, never an 'Ignore import' one."""
    for line in reversed(lines):
        s = line.strip()
        if s and _ERRORISH.match(s) and "Ignore import error" not in s:
            return s
    return None


def watch_until_ready(
    host: Host,
    pid: int,
    log_path: str,
    url: str,
    ready_s: float,
    stall_s: float,
    on_tick: Callable[[float, int], None] | None = None,
    tick_s: float = TICK_S,
    fatal_grace_s: float = 2.0,
) -> Verdict:
    curl = host.run("command -v curl", timeout=5).ok
    start_t = time.monotonic()
    offset = 0
    partial = ""
    seen: list[str] = []
    last_growth = start_t
    fatal_at: float | None = None
    fatal_hit: tuple[str, str | None] | None = None
    while True:
        now = time.monotonic()
        res = host.run(tick_command(pid, log_path, offset, url, curl), timeout=10)
        elapsed = time.monotonic() - start_t
        head, _, new = res.stdout.partition(SEP + "\n")
        parts = head.split()
        state = parts[0] if parts else "R"
        code = parts[2] if len(parts) > 2 else "0"
        if new:
            offset += len(new.encode("utf-8", errors="replace"))
            last_growth = now
            chunks = re.split(r"[\r\n]", partial + new)
            partial = chunks.pop()
            fresh = [c for c in chunks if c.strip()]
            seen = (seen + fresh)[-400:]
            if fatal_hit is None:
                fatal_hit = _fatal(fresh)
                if fatal_hit:
                    fatal_at = now
        if on_tick:
            on_tick(elapsed, offset)
        if state in DEAD_STATES:
            # the last lines may land between this tick's log read and the exit: read once more
            final = host.run(tick_command(pid, log_path, offset, url, curl), timeout=10)
            rest = final.stdout.partition(SEP + "\n")[2]
            if rest:
                tail_chunks = re.split(r"[\r\n]", partial + rest)
                partial = tail_chunks.pop()
                seen = (seen + [c for c in tail_chunks if c.strip()])[-400:]
            hit = fatal_hit or _fatal(seen + ([partial] if partial else []))
            line = hit[0] if hit else last_error_line(seen + [partial])
            return Verdict(
                state="died",
                detail=f"pid {pid} exited after {elapsed:.1f}s"
                + (" (fatal line in log)" if hit else " with no fatal line in its log"),
                evidence=line,
                label=hit[1] if hit else None,
                elapsed_s=elapsed,
                log_bytes=offset,
            )
        if code.startswith("2"):
            return Verdict(
                state="ready",
                detail=f"probe {url} answered {code}",
                elapsed_s=elapsed,
                log_bytes=offset,
            )
        if fatal_hit and fatal_at is not None and now - fatal_at > fatal_grace_s:
            return Verdict(
                state="crashed",
                detail=f"fatal line in log; pid {pid} still alive {fatal_grace_s:.0f}s later",
                evidence=fatal_hit[0],
                label=fatal_hit[1],
                elapsed_s=elapsed,
                log_bytes=offset,
            )
        if now - last_growth > stall_s:
            return Verdict(
                state="hung",
                detail=f"pid {pid} alive but its log has not grown for {stall_s:.0f}s",
                evidence=(seen[-1] if seen else None),
                elapsed_s=elapsed,
                log_bytes=offset,
            )
        if elapsed > ready_s:
            return Verdict(
                state="timeout",
                detail=f"not ready after {ready_s:.0f}s, still alive and logging",
                evidence=(seen[-1] if seen else None),
                label="still_starting",
                elapsed_s=elapsed,
                log_bytes=offset,
            )
        time.sleep(max(0.0, tick_s - (time.monotonic() - now)))


def marked_pids(host: Host, marker: str | None = None, prefix: str | None = None) -> list[int]:
    """Pids whose environment carries the run marker: exactly `marker`, else starting with
    `prefix`, else any value."""
    needle = f"{MARKER_VAR}={marker or prefix or ''}"
    flags = "-lazxF" if marker else "-lazF"
    res = host.run(
        f"grep {flags} {shlex.quote(needle)} /proc/[0-9]*/environ 2>/dev/null; true", timeout=15
    )
    pids = []
    for line in res.stdout.splitlines():
        m = re.match(r"/proc/(\d+)/environ", line.strip())
        if m:
            pids.append(int(m.group(1)))
    return sorted(set(pids))


def stop(host: Host, pid: int | None, marker: str | None, grace_s: float = 5.0) -> list[int]:
    """TERM the process group, KILL it after `grace_s`, then KILL re-parented orphans by marker.

    Returns the pids still alive afterwards (empty = clean).
    """
    if pid:
        host.run(f"kill -TERM -- -{pid} 2>/dev/null; kill -TERM {pid} 2>/dev/null; true", timeout=5)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and group_alive(host, pid):
            time.sleep(0.05)
        host.run(f"kill -KILL -- -{pid} 2>/dev/null; kill -KILL {pid} 2>/dev/null; true", timeout=5)
    left: list[int] = []
    for _ in range(20):
        left = [p for p in (marked_pids(host, marker) if marker else []) if _alive(host, p)]
        if pid and _alive(host, pid):
            left.append(pid)
        if not left:
            return []
        host.run("kill -KILL " + " ".join(map(str, left)) + " 2>/dev/null; true", timeout=5)
        time.sleep(0.1)
    return left


def group_alive(host: Host, pgid: int) -> bool:
    """Any non-zombie member left in the process group (a zombie waits on a slow reaper and
    holds nothing; `kill -0 -PGID` would call it alive)."""
    res = host.run(
        f"ps -eo pgid=,stat= | awk '$1 == {pgid} && $2 !~ /^Z/ {{ n++ }} END {{ print n + 0 }}'",
        timeout=5,
    )
    return res.ok and res.stdout.strip() not in ("", "0")


def _alive(host: Host, pid: int) -> bool:
    res = host.run(_state_shell(pid), timeout=5)
    return res.stdout.strip() not in (*DEAD_STATES, "")
