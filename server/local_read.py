"""Reads of the machine the service runs on that cannot escape the read roots.

Checking a path and then `open()`ing it is a race: a symlink flipped between the two serves
whatever it points at by then, a FIFO named `*.log` blocks the worker thread forever, and a
hard link is the file it links to under an innocent name. So the check is made on the file
that is actually open, never on a name:

1. the path, with symlinks resolved, passes the policy (`server.file_policy.refusal`);
2. that resolved path is opened with `O_PATH | O_NOFOLLOW`: a handle that reads nothing, so
   even a protected SQLite file is never opened for reading here (closing a real descriptor on
   it would drop the server's own POSIX locks);
3. the handle's real path (`/proc/self/fd/N`) must be the checked path, and its `fstat` a
   regular file whose inode is not protected; a hard link (`st_nlink > 1`) to a file other
   users could not read is refused, whatever its name;
4. only then is the same inode reopened through `/proc/self/fd/N` with `O_NONBLOCK | O_NOCTTY`
   and checked again, and its tail read; content that is not text is refused (415).

`/proc` and `/sys` are refused unless a read root names them: `--read-root /` means "any log",
not "the service's own environment".
"""

from __future__ import annotations

import os
import posixpath
import stat

from server.file_policy import Protected, refusal, under
from server.paths import PathRefused

#: Pseudo filesystems whose "files" are the kernel's view of processes (their environments).
PSEUDO = ("/proc", "/sys")

#: Control bytes that text logs do carry (tab, newlines, form feed, backspace, ANSI escape).
TEXT_CONTROLS = frozenset(b"\t\n\r\x0c\x08\x1b")


def _pseudo_refusal(real: str, roots: list[str]) -> str | None:
    for top in PSEUDO:
        if under(real, top) and not any(under(r.split("*")[0] or "/", top) for r in roots if r):
            return f"{real} is under {top}, which is read only when a read root names it"
    return None


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _check_open(
    fd: int, path: str, expected: str, roots: list[str], deny: list[str], protected: Protected
) -> os.stat_result:
    """Everything about the file behind `fd`; raises PathRefused when it may not be read."""
    real = os.readlink(f"/proc/self/fd/{fd}")
    if real != expected:
        raise PathRefused(409, f"{path} changed while it was opened (now {real}); try again")
    why = refusal(real, roots, deny, protected) or _pseudo_refusal(real, roots)
    if why:
        raise PathRefused(403, why)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise PathRefused(415, f"{path} is not a regular file (a FIFO, device or directory)")
    if (st.st_dev, st.st_ino) in protected.inodes:
        raise PathRefused(403, f"{path} is the same file as one of Pivot's own or a credential")
    if st.st_nlink > 1 and not st.st_mode & stat.S_IROTH:
        raise PathRefused(
            403, f"{path} is a hard link to a file other users cannot read (a credential?)"
        )
    return st


def looks_binary(data: bytes) -> bool:
    """NUL bytes, or more than one byte in ten a control character no log writes."""
    if b"\x00" in data:
        return True
    sample = data[:8192]
    odd = sum(1 for b in sample if b < 0x20 and b not in TEXT_CONTROLS)
    return bool(sample) and odd * 10 > len(sample)


def read_tail(
    path: str, roots: list[str], deny: list[str], protected: Protected, max_bytes: int
) -> tuple[int, bytes] | None:
    """(size, last `max_bytes` bytes) of `path`, None when it does not exist.

    `path` has passed `check_lexical` already; every refusal is a PathRefused.
    """
    why = _pseudo_refusal(path, roots)
    if why:
        raise PathRefused(403, why)
    try:
        expected = os.path.realpath(path, strict=True)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a symlink loop, a permission problem on the way
        raise PathRefused(403, f"{path} cannot be resolved: {exc.strerror}") from exc
    expected = posixpath.normpath(expected)
    why = refusal(expected, roots, deny, protected) or _pseudo_refusal(expected, roots)
    if why:
        raise PathRefused(403, f"{path} resolves to {expected}: {why}" if expected != path else why)
    try:
        handle = os.open(expected, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PathRefused(409, f"{path} changed while it was opened: {exc.strerror}") from exc
    try:
        before = _check_open(handle, path, expected, roots, deny, protected)
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        try:
            fd = os.open(f"/proc/self/fd/{handle}", flags)
        except OSError as exc:
            raise PathRefused(403, f"cannot read {path}: {exc.strerror}") from exc
    finally:
        os.close(handle)
    try:
        after = _check_open(fd, path, expected, roots, deny, protected)
        if not _same_file(before, after):
            raise PathRefused(409, f"{path} changed while it was opened; try again")
        offset = max(0, after.st_size - max_bytes)
        data = os.pread(fd, max_bytes, offset)
    finally:
        os.close(fd)
    if looks_binary(data):
        raise PathRefused(415, f"{path} is not text (binary content); the file API reads logs")
    return after.st_size, data
