"""Several cheap read-only commands asked over one channel, answered as one result each.

The first sweep is CPU-bound on a small box: every command on its own channel costs the client
a channel, the remote sshd a fork and a shell, and `host_facts` alone asked nine. A host that
can (SSH: `SSHHost.run_batch`) runs the cheap one-liners in one shell, each between two marker
lines that carry a per-call nonce (a log or an environment value cannot forge them), and splits
the output back into one `CommandResult` per command. Other hosts (local, replayed, a
container, a deadline) answer each command through their own `run`, at once: the tool's path
and its parsing are the same either way.

Each command's stdout and stderr stay apart, as `run` keeps them: the markers are written to
both streams, so a `df` that prints its mounts and exits 1 over one unreadable mount reads the
same batched as alone. A command whose end marker never came (the batch timed out or was
killed) has no exit status.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable

from tools.host import CommandResult, Host
from tools.shared_reads import at_once

#: commands run at once where the host cannot batch (below sshd's MaxSessions with a wave's
#: other reads)
_PARALLEL = 4


def compose(commands: list[str], nonce: str) -> str:
    """One shell script running each command between marker lines written to both streams;
    each in a subshell, so an `exit` or a failed builtin ends only its own part."""
    parts = []
    for i, cmd in enumerate(commands):
        mark = f"@@{nonce} {i}"
        parts.append(
            f"printf '\\n{mark} begin\\n'; printf '\\n{mark} begin\\n' >&2; "
            f"( {cmd}\n) </dev/null; "
            f"printf '\\n{mark} rc=%s\\n' \"$?\"; printf '\\n{mark} end\\n' >&2"
        )
    return "\n".join(parts)


def _bodies(text: str, nonce: str, n: int, end: str) -> list[tuple[str | None, str]]:
    """(what the end marker carried, the body) per command; (None, what came) where the end
    marker is missing."""
    out: list[tuple[str | None, str]] = [(None, "")] * n
    begin = re.compile(rf"^@@{re.escape(nonce)} (\d+) begin$", re.M)
    for m in begin.finditer(text):
        i = int(m.group(1))
        if i >= n:
            continue
        stop = re.compile(rf"\n@@{re.escape(nonce)} {i} {end}$", re.M).search(text, m.end())
        body = text[m.end() + 1 : stop.start() if stop else len(text)]
        out[i] = (stop.group(1) if stop else None, body)
    return out


def split(stdout: str, stderr: str, nonce: str, n: int) -> list[tuple[int | None, str, str]]:
    """(exit status, stdout, stderr) per command, in order; no status for a command whose end
    marker is missing."""
    outs = _bodies(stdout, nonce, n, r"rc=(\d+)")
    errs = _bodies(stderr, nonce, n, r"(end)")
    return [
        (int(rc) if rc is not None else None, out, err)
        for (rc, out), (_e, err) in zip(outs, errs, strict=True)
    ]


def results(
    host_name: str, commands: list[str], whole: CommandResult, nonce: str
) -> list[CommandResult]:
    """The batch's one result as one result per command."""
    parts = split(whole.stdout, whole.stderr, nonce, len(commands))
    res = []
    for cmd, (rc, out, err) in zip(commands, parts, strict=True):
        unfinished = rc is None
        res.append(
            CommandResult(
                host=host_name,
                command=cmd,
                rc=rc,
                stdout=out,
                stderr=err,
                duration_s=whole.duration_s,
                timed_out=whole.timed_out and unfinished,
                truncated=whole.truncated and unfinished,
                error=(whole.error or f"{cmd!r} did not finish in its batch")
                if unfinished
                else None,
                fix=whole.fix if unfinished else None,
            )
        )
    return res


def run_batch(
    host: Host, commands: list[str], timeout: float = 15.0, max_bytes: int = 200_000
) -> list[CommandResult]:
    """Each command's result, over one channel where the host can batch."""
    batch: Callable[..., list[CommandResult]] | None = getattr(host, "run_batch", None)
    if batch is not None and len(commands) > 1:
        return batch(commands, timeout=timeout, max_bytes=max_bytes)
    return at_once(
        lambda c: host.run(c, timeout=timeout, max_bytes=max_bytes),
        commands,
        _PARALLEL,
        "pivot-batch",
    )


def can_batch(host: Host) -> bool:
    """Whether `host` runs a batch over one channel (a tool may then ask ahead for a read it
    will most likely need, at no extra channel)."""
    return getattr(host, "run_batch", None) is not None


def new_nonce() -> str:
    return f"pivot-{secrets.token_hex(6)}"
