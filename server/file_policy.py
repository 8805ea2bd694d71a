"""Which files the file API may read: host logs and configs, never Pivot's own state or secrets.

Why so strict: opening and closing Pivot's SQLite files inside the server process drops the
process's POSIX locks on them (locks are per process, not per descriptor), after which a CLI
run can delete the server's WAL and rows are lost. And a token in /tmp or /etc/shadow is one
GET away from anyone who holds the API token. So a read must pass three checks:

1. the path matches a read root (a directory tree, or a glob such as `/tmp/**/*.log`);
2. no deny pattern matches it (credentials, SQLite files, shell rc files);
3. neither the path nor its symlink-resolved target lies under a protected directory
   (PIVOT_HOME, the memory and checkpoint databases, the loop's state), and its inode is not
   the inode of a protected file (a hard link to memory.db is still memory.db, a hard link to
   /etc/shadow is still /etc/shadow).

On the machine the service runs on, `server.local_read` makes these checks on the open
descriptor rather than on the name, so nothing can change between the check and the read.

The patterns are data (`file_policy.yaml` beside this file), validated on load.
"""

from __future__ import annotations

import glob as globlib
import os
import posixpath
import re
import stat
from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import BaseModel, Field

POLICY_FILE = Path(__file__).resolve().parent / "file_policy.yaml"


class FilePolicyData(BaseModel):
    """The shipped defaults: read roots for every host, and what is never readable."""

    read_roots: list[str] = Field(min_length=1)
    deny: list[str] = Field(min_length=1)
    protected_files: list[str] = Field(default_factory=list)

    def credential_inodes(self) -> set[tuple[int, int]]:
        """(st_dev, st_ino) of the credential files present here, by `stat` alone."""
        found: set[tuple[int, int]] = set()
        for pattern in self.protected_files:
            for name in (n for g in expand(pattern) for n in globlib.glob(g, recursive=True)):
                try:
                    st = os.stat(name)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    found.add((st.st_dev, st.st_ino))
        return found


@lru_cache(maxsize=1)
def shipped() -> FilePolicyData:
    return FilePolicyData.model_validate(yaml.safe_load(POLICY_FILE.read_text(encoding="utf-8")))


def expand(glob: str) -> list[str]:
    """`/a/{b,c}/d` -> [`/a/b/d`, `/a/c/d`] (first brace group first, recursively)."""
    m = re.search(r"\{([^{}]*)\}", glob)
    if m is None:
        return [glob]
    out: list[str] = []
    for alt in m.group(1).split(","):
        out.extend(expand(glob[: m.start()] + alt + glob[m.end() :]))
    return out


def _one(glob: str) -> str:
    """`**` crosses directories, `*` and `?` do not; a pattern without wildcards is a tree."""
    if not any(c in glob for c in "*?["):
        root = posixpath.normpath(glob)
        return r"/.*" if root == "/" else re.escape(root) + r"(?:/.*)?"
    out = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append(r"(?:[^/]*/)*")
            i += 3
        elif glob.startswith("**", i):
            out.append(r".*")
            i += 2
        elif glob[i] == "[":
            j = glob.find("]", i)
            if j < 0:
                out.append(re.escape(glob[i:]))
                break
            out.append("[" + glob[i + 1 : j].replace("\\", "\\\\") + "]")
            i = j + 1
        else:
            out.append({"*": r"[^/]*", "?": r"[^/]"}.get(glob[i], re.escape(glob[i])))
            i += 1
    return "".join(out)


@lru_cache(maxsize=512)
def _pattern(glob: str) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{_one(g)})" for g in expand(glob)))


def matches(path: str, glob: str) -> bool:
    return _pattern(glob).fullmatch(path) is not None


def under(path: str, directory: str) -> bool:
    d = posixpath.normpath(directory)
    return path == d or path.startswith(d.rstrip("/") + "/")


class Protected(BaseModel):
    """Pivot's own state on this machine: directories (with their real paths) and file inodes."""

    dirs: list[str] = Field(default_factory=list)
    inodes: set[tuple[int, int]] = Field(default_factory=set)

    @classmethod
    def of(cls, *paths: Path | None) -> Protected:
        dirs: list[str] = []
        inodes: set[tuple[int, int]] = set()
        for p in paths:
            if p is None:
                continue
            for form in {str(p.absolute()), os.path.realpath(p)}:
                dirs.append(posixpath.normpath(form))
            targets = [p] if p.is_file() else (list(p.rglob("*")) if p.is_dir() else [])
            for f in targets:
                try:
                    st = f.stat()  # stat only: never open Pivot's files in this process
                except OSError:
                    continue
                if f.is_file():
                    inodes.add((st.st_dev, st.st_ino))
        return cls(dirs=sorted(set(dirs)), inodes=inodes)

    def covers(self, path: str) -> bool:
        return any(under(path, d) for d in self.dirs)


def refusal(path: str, roots: list[str], deny: list[str], protected: Protected) -> str | None:
    """Why `path` (absolute, normalised) may not be read; None when it may."""
    if protected.covers(path):
        return (
            f"{path} is Pivot's own state (PIVOT_HOME, its databases); the file API never reads it"
        )
    for glob in deny:
        if matches(path, glob):
            return f"{path} matches the deny pattern {glob!r} (credentials and databases are never read)"
    if not any(matches(path, r) for r in roots):
        return (
            f"{path} is outside the read roots (host logs and configs only; "
            "PIVOT_ALLOWED_ROOTS or `pivot serve --read-root DIR` adds yours)"
        )
    return None
