"""Paths that arrive in requests are checked against the host's allowed roots before any read.

Two layers: a lexical check (absolute, no `..`, no NUL, under a root) and, where the host can
answer, the same check on the path with every symlink resolved, so a link inside a root that
points outside it is refused too.
"""

from __future__ import annotations

import posixpath
import shlex

from tools.host import Host


class PathRefused(Exception):
    """Why a path may not be read; `status` is the HTTP status the edge should answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _under(path: str, root: str) -> bool:
    root = posixpath.normpath(root)
    return root == "/" or path == root or path.startswith(root.rstrip("/") + "/")


def check_lexical(path: str, roots: list[str]) -> str:
    if not path or "\x00" in path:
        raise PathRefused(400, "empty path or NUL byte in path")
    if not path.startswith("/"):
        raise PathRefused(400, f"{path!r} is not absolute")
    if ".." in path.split("/"):
        raise PathRefused(400, f"{path!r} contains '..'")
    norm = posixpath.normpath(path)
    if not any(_under(norm, r) for r in roots):
        raise PathRefused(403, f"{norm} is outside the allowed roots {roots}")
    return norm


def check_on_host(host: Host, path: str, roots: list[str]) -> str:
    """Lexical check, then resolve symlinks on the host itself and check the target too."""
    norm = check_lexical(path, roots)
    res = host.run(f"readlink -f -- {shlex.quote(norm)}", timeout=5, max_bytes=8192)
    real = res.stdout.strip() if res.ok else ""
    if real and real.startswith("/") and not any(_under(real, r) for r in roots):
        raise PathRefused(403, f"{norm} resolves to {real}, outside the allowed roots")
    return norm
