"""`ReplayHost`: answers from an incident card's `host` section and from nothing else.

It stands in for a live machine in evals and demos. Canonical reads (nvidia-smi, ps, dmesg, env,
files) map to the card's keys; any other command is looked up in `host.commands` (exact, then the
closest command of the same program); a command the card does not hold answers like a missing
command on a real host (rc 127). List values advance one snapshot per read, the last repeating.
Writes land in an in-memory overlay so approved changes can be replayed without touching disk.
"""

from __future__ import annotations

import fnmatch
import posixpath
import shlex
import time
from functools import lru_cache

from tools.cards import HostSnapshot, IncidentCard, Snapshots, card_text_bytes
from tools.host import (
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT_S,
    CommandResult,
    FileTail,
    clip,
    decode,
    missing_file,
)


class _Cursor:
    """One read pointer per key, so each read of a list value sees the next snapshot."""

    def __init__(self) -> None:
        self._pos: dict[str, int] = {}

    def read(self, key: str, value: Snapshots) -> str:
        if isinstance(value, str):
            return value
        if not value:
            return ""
        i = self._pos.get(key, 0)
        self._pos[key] = i + 1
        return value[min(i, len(value) - 1)]

    def peek(self, key: str, value: Snapshots) -> str:
        if isinstance(value, str):
            return value
        if not value:
            return ""
        i = self._pos.get(key, 0)
        return value[min(max(i - 1, 0), len(value) - 1)]


@lru_cache(maxsize=4096)
def _tokens_cached(command: str) -> tuple[str, ...]:
    return tuple(_split(command))


def _tokens(command: str) -> list[str]:
    """The first pipeline stage's words, without sudo/command/exec (memoised: cards are reread)."""
    return list(_tokens_cached(command))


def _split(command: str) -> list[str]:
    first = command.split("|", 1)[0].strip()
    try:
        toks = shlex.split(first)
    except ValueError:
        toks = first.split()
    while toks and toks[0] in ("sudo", "command", "exec"):
        toks = toks[1:]
    return toks


def _find_roots(args: list[str]) -> list[str]:
    roots: list[str] = []
    for a in args:
        if a.startswith(("-", "(", "!", "\\(")):
            break
        roots.append(a)
    return roots or ["."]


def _under(path: str, root: str) -> bool:
    if root == "/":
        return True
    if any(c in root for c in "*?["):
        parts = root.count("/")
        prefix = "/".join(path.split("/")[: parts + 1])
        return fnmatch.fnmatchcase(prefix, root) and len(path) > len(prefix)
    return path.startswith(root + "/")


def _paths(args: list[str]) -> set[str]:
    return {posixpath.normpath(a) for a in args if a.startswith("/")}


def _verb(args: list[str]) -> str:
    """The sub-command (`logs`, `describe`, `show`), singular, or '' when there is none."""
    words = [a for a in args if not a.startswith(("-", "/", "'", '"')) and "=" not in a]
    return words[0].rstrip("s") if words else ""


def _words(args: list[str]) -> set[str]:
    """Sub-commands and names (not flags, not paths): `logs`, `get`, a container name."""
    return {a for a in args if not a.startswith(("-", "/", "'", '"')) and "=" not in a}


def _flags(args: list[str]) -> set[str]:
    """`-hP` and `-h -P` are the same flags; long options compare by name."""
    out: set[str] = set()
    for a in args:
        if a.startswith("--"):
            out.add(a.split("=", 1)[0])
        elif a.startswith("-") and len(a) > 1:
            out.update(f"-{c}" for c in a[1:])
        elif not a.startswith("/"):
            out.add(a)
    return out


class ReplayHost:
    def __init__(self, card: IncidentCard, name: str | None = None) -> None:
        # Keep only the host snapshot: expected answers and transcripts never reach a tool.
        self._snap: HostSnapshot = card.host.model_copy(deep=True)
        self.name = name or f"replay:{card.id}"
        self._cursor = _Cursor()
        self._overlay: dict[str, bytes] = {}
        self._now = 0.0  # the investigation's virtual clock: waits advance it, never sleep

    def clock(self) -> float:
        return self._now

    def sleep(self, seconds: float) -> None:
        self._now += max(0.0, seconds)

    # -- Host protocol -------------------------------------------------------------------------
    def run(
        self, command: str, timeout: float = DEFAULT_TIMEOUT_S, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> CommandResult:
        start = time.monotonic()
        out = self._answer(command)
        if out is None:
            prog = (_tokens(command) or ["sh"])[0]
            return CommandResult(
                host=self.name,
                command=command,
                rc=127,
                stderr=f"sh: 1: {prog}: not found\n",
                duration_s=time.monotonic() - start,
            )
        data, truncated = clip(out.encode("utf-8", errors="surrogateescape"), max_bytes)
        return CommandResult(
            host=self.name,
            command=command,
            rc=0,
            stdout=decode(data),
            truncated=truncated,
            duration_s=time.monotonic() - start,
        )

    def read_tail(self, path: str, max_bytes: int = 256_000) -> FileTail:
        data = self._file_bytes(path, advance=True)
        if data is None:
            return missing_file(self.name, path)
        tail = data[-max_bytes:] if max_bytes > 0 else b""
        return FileTail(host=self.name, path=path, data=tail, size=len(data), bytes_read=len(tail))

    def write_file(self, path: str, data: bytes, mode: int | None = None) -> CommandResult:
        self._overlay[path] = bytes(data)
        return CommandResult(host=self.name, command=f"write {path}", rc=0)

    def close(self) -> None:
        return None

    # -- what the card can answer --------------------------------------------------------------
    def file_paths(self) -> list[str]:
        return sorted(set(self._snap.files) | set(self._overlay))

    def _file_bytes(self, path: str, advance: bool) -> bytes | None:
        path = posixpath.normpath(path)
        if path in self._overlay:
            return self._overlay[path]
        value = self._snap.files.get(path)
        if value is None:
            return None
        text = (
            self._cursor.read(f"file:{path}", value)
            if advance
            else self._cursor.peek(f"file:{path}", value)
        )
        return card_text_bytes(text)

    def _key(self, key: str) -> str | None:
        value = getattr(self._snap, key)
        if value is None:
            return None
        return self._cursor.read(key, value)

    def _answer(self, command: str) -> str | None:
        exact = self._snap.commands.get(command)
        if exact is not None:
            return self._cursor.read(f"cmd:{command}", exact)
        toks = _tokens(command)
        if not toks:
            return None
        prog = posixpath.basename(toks[0])
        args = toks[1:]
        if prog == "nvidia-smi":
            joined = " ".join(args)
            if "--query-gpu" in joined:
                return self._key("nvidia_smi")
            if not args:
                return self._key("nvidia_smi_full")
        elif prog == "ps":
            return self._key("ps")
        elif prog == "dmesg":
            out = self._key("dmesg")
            if out is not None:
                return out
        elif prog in ("env", "printenv"):
            return self._key("env")
        elif prog in ("cat", "head", "tail") and args:
            path = args[-1]
            if path.startswith("/proc/") and path.endswith("/environ"):
                env = self._key("env")
                return None if env is None else env.replace("\n", "\0")
            data = self._file_bytes(path, advance=True)
            if data is not None:
                return data.decode("utf-8", errors="surrogateescape")
        elif prog == "stat" and args:
            data = self._file_bytes(args[-1], advance=False)
            if data is not None:
                return f"{len(data)} {int(time.time())}\n"
        elif prog == "find" and args:
            # Every leading operand is a root (find A B -maxdepth ...); globs match as the
            # shell would have expanded them.
            roots = [a.rstrip("/") or "/" for a in _find_roots(args)]
            hits = [p for p in self.file_paths() if any(_under(p, r) for r in roots)]
            return "".join(f"{p}\n" for p in hits)
        return self._closest_command(prog, args)

    def _closest_command(self, prog: str, args: list[str]) -> str | None:
        """A card records the command its author typed; ours may differ in flags or pipes."""
        best: tuple[int, str] | None = None
        for key in self._snap.commands:
            ktoks = _tokens(key)
            if not ktoks or posixpath.basename(ktoks[0]) != prog:
                continue
            kargs = ktoks[1:]
            ours, theirs = _paths(args), _paths(kargs)
            if ours and theirs and not ours & theirs:
                continue  # `cat /proc/net/tcp` is not `cat /proc/driver/nvidia/version`
            score = len(_flags(args) & _flags(kargs)) + len(ours & theirs)
            if _verb(args) and _verb(args) == _verb(kargs):
                score += 2  # `kubectl describe ...` answers `kubectl describe ...` before `get`
            if prog == "nvidia-smi" and score == 0:
                continue  # `-q -d ECC` and `--query-compute-apps` answer different questions
            if score == 0 and (_words(args) or _words(kargs)):
                continue  # `docker ps` is not `docker logs X`; `free -m` and `free -g` still match
            if best is None or score > best[0]:
                best = (score, key)
        if best is None:
            return None
        return self._cursor.read(f"cmd:{best[1]}", self._snap.commands[best[1]])
