"""`LocalHost`: the Host protocol through subprocess, for running on the GPU box itself."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import tempfile
import time

from tools.host import (
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT_S,
    CommandResult,
    FileTail,
    clip,
    decode,
    failure,
    missing_file,
)


class LocalHost:
    def __init__(self, name: str = "localhost") -> None:
        self.name = name

    def run(
        self, command: str, timeout: float = DEFAULT_TIMEOUT_S, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> CommandResult:
        start = time.monotonic()
        # Own process group so a timeout kills the whole pipeline, not just /bin/sh.
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", command],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            return failure(
                self.name, command, f"cannot start /bin/sh: {exc}", "check the host's shell"
            )
        try:
            out, err = _communicate_bounded(proc, timeout, max_bytes)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, err = b"", b""
            return CommandResult(
                host=self.name,
                command=command,
                rc=None,
                timed_out=True,
                duration_s=time.monotonic() - start,
                error=f"{command!r} on {self.name} ran past its {timeout:.0f}s timeout and was killed",
                fix="raise the timeout or check why the command hangs (a stuck driver, NFS, ...)",
            )
        so, t1 = clip(out, max_bytes)
        se, t2 = clip(err, max_bytes)
        return CommandResult(
            host=self.name,
            command=command,
            rc=proc.returncode,
            stdout=decode(so),
            stderr=decode(se),
            duration_s=time.monotonic() - start,
            truncated=t1 or t2,
        )

    def read_tail(self, path: str, max_bytes: int = 256_000) -> FileTail:
        """The file's end, its size, owner and times (birth where the filesystem keeps it)."""
        try:
            with open(path, "rb") as fh:
                st = os.fstat(fh.fileno())
                size = st.st_size
                offset = max(0, size - max_bytes)
                fh.seek(offset)
                data = fh.read(max_bytes)
        except FileNotFoundError:
            return missing_file(self.name, path)
        except OSError as exc:
            return FileTail(
                host=self.name,
                path=path,
                exists=False,
                error=f"cannot read {path} on {self.name}: {exc}",
                fix="check permissions on the file",
            )
        modified = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st.st_mtime))
        try:
            owner: str | None = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:  # a uid with no name here (stat's UNKNOWN)
            owner = None
        return FileTail(
            host=self.name,
            path=path,
            data=data,
            size=size,
            bytes_read=len(data),
            modified=modified,
            owner=owner,
            born=_born(path, st.st_mtime),
        )

    def write_file(self, path: str, data: bytes, mode: int | None = None) -> CommandResult:
        directory = os.path.dirname(os.path.abspath(path))
        cmd = f"write {path}"
        try:
            if mode is None and os.path.exists(path):
                mode = os.stat(path).st_mode & 0o7777
            fd, tmp = tempfile.mkstemp(prefix=".pivot-", dir=directory)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                if mode is not None:
                    os.chmod(tmp, mode)
                os.replace(tmp, path)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
            dfd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as exc:
            return failure(
                self.name,
                cmd,
                f"cannot write {path} on {self.name}: {exc}",
                "check that the directory exists and is writable",
            )
        return CommandResult(host=self.name, command=cmd, rc=0)

    def clock(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def close(self) -> None:
        return None


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _communicate_bounded(
    proc: subprocess.Popen[bytes], timeout: float, max_bytes: int
) -> tuple[bytes, bytes]:
    """Read stdout/stderr without holding more than max_bytes each; kill a flood."""
    import selectors

    assert proc.stdout is not None and proc.stderr is not None
    bufs: dict[int, bytearray] = {
        proc.stdout.fileno(): bytearray(),
        proc.stderr.fileno(): bytearray(),
    }
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    sel.register(proc.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    open_streams = 2
    while open_streams:
        left = deadline - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        for key, _ in sel.select(timeout=min(left, 0.5)):
            chunk = os.read(key.fd, 65536)
            if not chunk:
                sel.unregister(key.fileobj)
                open_streams -= 1
                continue
            buf = bufs[key.fd]
            if len(buf) < max_bytes + 1:
                buf.extend(chunk[: max_bytes + 1 - len(buf)])
            elif all(len(b) > max_bytes for b in bufs.values()) or len(buf) > max_bytes:
                # A flood: we already hold more than we will return; stop the producer.
                _kill_group(proc)
                return bytes(bufs[proc.stdout.fileno()]), bytes(bufs[proc.stderr.fileno()])
    left = max(0.0, deadline - time.monotonic())
    proc.wait(timeout=left if left > 0 else 0.1)
    return bytes(bufs[proc.stdout.fileno()]), bytes(bufs[proc.stderr.fileno()])


def _born(path: str, mtime: float) -> str | None:
    """The file's birth as local wall time: Python's os.stat has no birth time on Linux before
    3.12 (statx), so ask `stat -c %W` as the SSH read does; None where the filesystem keeps none."""
    try:
        out = subprocess.run(
            ["stat", "-L", "-c", "%W", "--", path], capture_output=True, timeout=5, check=False
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    if not out.isdigit() or int(out) <= 0 or int(out) > mtime + 1:
        return None
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(out)))
