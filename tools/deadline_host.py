"""`DeadlineHost`: any Host, with every read clipped to one deadline for the whole host.

Why: a fleet sweep gives each host a fixed time. A host that answers slowly or stops answering
mid-sweep must end with what it had, not hold a worker (and a connection slot) for each tool's
own timeout in turn. Each command's timeout becomes min(its own, time left); past the deadline
every call fails at once, as data naming the host and the fix, like any other expected failure.
"""

from __future__ import annotations

from tools.host import DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT_S, CommandResult, FileTail, Host, failure


class DeadlineHost:
    """Delegates to `inner` until `deadline` (a `time.monotonic()` value), then refuses."""

    def __init__(self, inner: Host, deadline: float, budget_s: float) -> None:
        self.inner = inner
        self.name = inner.name
        self.deadline = deadline
        self.budget_s = budget_s

    def left(self) -> float:
        return self.deadline - self.inner.clock()

    def late(self, what: str) -> tuple[str, str]:
        """The error and fix for `what`, cut off by the deadline."""
        return (
            f"{what} on {self.name} not run: the host's {self.budget_s:g}s fleet deadline passed",
            f"investigate {self.name} alone (pivot investigate --host {self.name}), "
            "or raise --deadline",
        )

    def run(
        self, command: str, timeout: float = DEFAULT_TIMEOUT_S, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> CommandResult:
        left = self.left()
        if left <= 0:
            error, fix = self.late(repr(command))
            return failure(self.name, command, error, fix, timed_out=True)
        return self.inner.run(command, timeout=min(timeout, left), max_bytes=max_bytes)

    def read_tail(self, path: str, max_bytes: int = 256_000) -> FileTail:
        if self.left() <= 0:
            error, fix = self.late(f"reading {path}")
            return FileTail(host=self.name, path=path, exists=True, error=error, fix=fix)
        return self.inner.read_tail(path, max_bytes)

    def write_file(self, path: str, data: bytes, mode: int | None = None) -> CommandResult:
        if self.left() <= 0:
            error, fix = self.late(f"writing {path}")
            return failure(self.name, f"write {path}", error, fix)
        return self.inner.write_file(path, data, mode)

    def clock(self) -> float:
        return self.inner.clock()

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(max(0.0, min(seconds, self.left())))

    def close(self) -> None:
        self.inner.close()
