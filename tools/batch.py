"""Several cheap read-only commands asked over one channel, answered as one result each.

The first sweep is CPU-bound on a small box: every command on its own channel costs the client
a channel, the remote sshd a fork and a shell, and `host_facts` alone asked nine. A host that
can (SSH: `SSHHost.run_batch`) runs the cheap one-liners in one shell, each between two marker
lines that carry a per-call nonce (a log or an environment value cannot forge them), and splits
the output back into one `CommandResult` per command. Other hosts (local, replayed, a
container, a deadline) answer each command through their own `run`, at once: the tool's path
and its parsing are the same either way.

Each command's stderr is merged into its output (`2>&1`): a batch keeps one stream. A command
whose end marker never came (the batch timed out or was killed) has no exit status.
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
    """One shell script printing each command's merged output between its marker lines; each
    in a subshell, so an `exit` or a failed builtin ends only its own part."""
    parts = []
    for i, cmd in enumerate(commands):
        parts.append(
            f"printf '\\n@@{nonce} {i} begin\\n'; ( {cmd}\n) </dev/null 2>&1; "
            f"printf '\\n@@{nonce} {i} rc=%s\\n' \"$?\""
        )
    return "\n".join(parts)


def split(output: str, nonce: str, n: int) -> list[tuple[int | None, str]]:
    """(exit status, merged output) per command, in order; (None, what came) for a command
    whose end marker is missing."""
    out: list[tuple[int | None, str]] = [(None, "")] * n
    begin = re.compile(rf"^@@{re.escape(nonce)} (\d+) begin$", re.M)
    for m in begin.finditer(output):
        i = int(m.group(1))
        if i >= n:
            continue
        end = re.compile(rf"\n@@{re.escape(nonce)} {i} rc=(\d+)$", re.M).search(output, m.end())
        body = output[m.end() + 1 : end.start() if end else len(output)]
        out[i] = (int(end.group(1)) if end else None, body)
    return out


def results(
    host_name: str, commands: list[str], whole: CommandResult, nonce: str
) -> list[CommandResult]:
    """The batch's one result as one result per command."""
    parts = split(whole.stdout, nonce, len(commands))
    res = []
    for cmd, (rc, text) in zip(commands, parts, strict=True):
        unfinished = rc is None
        res.append(
            CommandResult(
                host=host_name,
                command=cmd,
                rc=rc,
                stdout=text if rc == 0 else "",
                stderr=text if rc != 0 else "",
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


def new_nonce() -> str:
    return f"pivot-{secrets.token_hex(6)}"
