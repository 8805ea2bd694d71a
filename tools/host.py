"""The one seam between Pivot and a machine.

Every tool talks to a `Host`; SSH, local and replay implementations live beside this file.
Expected failures (non-zero exit, timeout, missing file, unreachable host) come back as a
`CommandResult` with `error` and `fix` filled in, so the agent can pivot instead of crash.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple, Protocol, runtime_checkable

from pydantic import BaseModel, Field

DEFAULT_TIMEOUT_S = 15.0
#: Hard cap on what one command may hand back; a tool never gets megabytes.
DEFAULT_MAX_BYTES = 1_000_000


class CommandResult(BaseModel):
    """What one command did on one host, bounded."""

    host: str
    command: str
    rc: int | None = Field(None, description="exit status; None when it never finished")
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    timed_out: bool = False
    truncated: bool = Field(False, description="output was cut at max_bytes")
    error: str | None = Field(None, description="why it failed, in words, naming host and command")
    fix: str | None = Field(None, description="what to do about the failure")

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.error is None and not self.timed_out

    @property
    def missing_command(self) -> bool:
        return self.rc == 127


class FileTail(BaseModel):
    """The last bytes of a file, read from its end so the cost is independent of its size."""

    host: str
    path: str
    data: bytes = b""
    size: int = 0
    bytes_read: int = 0
    exists: bool = True
    error: str | None = None
    fix: str | None = None
    #: when the file was last written, as the host's own wall clock says it ("2026-12-01
    #: 23:30:01"), comparable with `dmesg -T` lines; None when not known (a replayed card)
    modified: str | None = None
    #: the file's owner as the host names it (`stat -c %U`): who the writer of a log runs as,
    #: for a launch none of whose processes is alive; None when not known (a replayed card)
    owner: str | None = None
    #: when the file was created, on the same clock as `modified`; None when the filesystem keeps
    #: no birth time or it is not known: a kill before it cannot have ended the file's writer
    born: str | None = None


#: `stat`'s format for a tail's head line: size, owner, birth and modification (seconds since
#: the epoch; birth 0 where the filesystem keeps none) and modification as local wall time
#: (GNU coreutils)
STAT_HEAD = "%s %U %W %Y %y"


class StatHead(NamedTuple):
    size: int
    owner: str | None
    modified: str | None
    born: str | None


def parse_stat_head(head: bytes) -> StatHead | None:
    """STAT_HEAD's line ("52 alice 1796214400 1796214460 2026-12-01 23:30:01.1 +0000") or the
    older "size owner %y" form; None when the line is neither. `UNKNOWN` (a uid with no name
    here) is no owner. The birth time is said on the same wall clock as the modification (the
    modification's local time less the seconds between the two), so no time zone is needed."""
    parts = head.strip().split(b" ")
    if len(parts) < 2 or not parts[0].isdigit():
        return None
    owner = parts[1].decode("utf-8", "replace") if len(parts) > 2 else None
    born_s = mtime_s = None
    rest = parts[2:] if len(parts) > 2 else parts[1:]
    if len(rest) >= 3 and rest[0].isdigit() and rest[1].isdigit():
        born_s, mtime_s = int(rest[0]), int(rest[1])
        rest = rest[2:]
    modified = b" ".join(rest).decode("ascii", "replace")[:19] or None
    born = None
    if modified and born_s and mtime_s and born_s <= mtime_s:
        try:
            at = datetime.strptime(modified, "%Y-%m-%d %H:%M:%S")
            born = (at - timedelta(seconds=mtime_s - born_s)).strftime("%Y-%m-%d %H:%M:%S")
        except ValueError:
            born = None
    return StatHead(int(parts[0]), None if owner == "UNKNOWN" else owner, modified, born)


@runtime_checkable
class Host(Protocol):
    """A machine Pivot can read (and, with approval, change)."""

    name: str

    def run(
        self, command: str, timeout: float = DEFAULT_TIMEOUT_S, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> CommandResult:
        """Run a non-interactive shell command; never raises for expected failures."""
        ...

    def read_tail(self, path: str, max_bytes: int = 256_000) -> FileTail:
        """Read at most `max_bytes` from the end of `path`."""
        ...

    def write_file(self, path: str, data: bytes, mode: int | None = None) -> CommandResult:
        """Atomically replace `path` (temp file in the same dir, fsync, rename)."""
        ...

    def clock(self) -> float:
        """Seconds on the investigation's clock: monotonic time live, virtual time on replay."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait on the investigation's clock. Live hosts really wait; a replayed host only
        advances its virtual clock, so an eval never sleeps but still has to wait."""
        ...

    def close(self) -> None: ...


def failure(host: str, command: str, error: str, fix: str, **kw: object) -> CommandResult:
    """An expected failure as data: the agent reads `error` and `fix`, it never sees a traceback."""
    return CommandResult(host=host, command=command, error=error, fix=fix, **kw)  # type: ignore[arg-type]


def missing_file(host: str, path: str) -> FileTail:
    """The one way every Host says a file is not there, so the agent sees the same fix."""
    return FileTail(
        host=host,
        path=path,
        exists=False,
        error=f"{path} does not exist on {host}",
        fix="check the path, or list the log directory to find the current log",
    )


def clip(data: bytes, max_bytes: int) -> tuple[bytes, bool]:
    if len(data) <= max_bytes:
        return data, False
    return data[:max_bytes], True


def decode(data: bytes) -> str:
    """Logs are not guaranteed UTF-8; never let a stray byte stop an investigation."""
    return data.decode("utf-8", errors="replace")
