"""Paths that arrive in requests are checked before any read or approved write.

Two layers: a lexical check (absolute, no `..`, no NUL, allowed by the policy) and, where the
host can answer, the same check on the path with every symlink resolved plus an inode check,
so neither a link out of a root nor a hard link to Pivot's own database gets through.
"""

from __future__ import annotations

import posixpath
import shlex

from server.file_policy import Protected, refusal
from tools.host import Host


class PathRefused(Exception):
    """Why a path may not be read; `status` is the HTTP status the edge should answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def check_lexical(
    path: str, roots: list[str], deny: list[str] | None = None, protected: Protected | None = None
) -> str:
    if not path or "\x00" in path:
        raise PathRefused(400, "empty path or NUL byte in path")
    if not path.startswith("/"):
        raise PathRefused(400, f"{path!r} is not absolute")
    if ".." in path.split("/"):
        raise PathRefused(400, f"{path!r} contains '..'")
    norm = posixpath.normpath(path)
    why = refusal(norm, roots, deny or [], protected or Protected())
    if why:
        raise PathRefused(403, why)
    return norm


def check_on_host(
    host: Host, path: str, roots: list[str], deny: list[str], protected: Protected
) -> str:
    """Lexical check, then resolve symlinks and read the inode and file type on the host itself,
    check all three; returns the path to read: the resolved one, so a final symlink flipped after
    this check is not followed again. (On this machine `server.local_read` closes the race
    entirely, checking the open descriptor.)"""
    norm = check_lexical(path, roots, deny, protected)
    q = shlex.quote(norm)
    res = host.run(
        f"readlink -f -- {q}; stat -L -c '%d:%i %F' -- {q} 2>/dev/null", timeout=5, max_bytes=8192
    )
    lines = res.stdout.splitlines() if res.stdout else []
    real = lines[0].strip() if lines else ""
    if real.startswith("/") and real != norm:
        why = refusal(real, roots, deny, protected)
        if why:
            raise PathRefused(403, f"{norm} resolves to {real}: {why}")
    if len(lines) > 1:
        ident, _, kind = lines[1].strip().partition(" ")
        dev, _, ino = ident.partition(":")
        if dev.isdigit() and ino.isdigit():  # a real `stat` answered (a replay host may not)
            if (int(dev), int(ino)) in protected.inodes:
                raise PathRefused(
                    403, f"{norm} is the same file as one of Pivot's own (a hard link)"
                )
            if kind and "regular" not in kind:
                raise PathRefused(415, f"{norm} is not a regular file ({kind})")
    return posixpath.normpath(real) if real.startswith("/") else norm
