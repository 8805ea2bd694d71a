"""`find_logs`: which logs and configs exist on a host the agent has never seen.

One `find` over the usual places (GNU find's `-printf` gives mtime and size in the same pass),
newest first, bounded. Logs and config-like files (sitecustomize.py, .env, launch scripts,
YAML/JSON under config dirs) are listed separately: the first tells the agent what to tail,
the second what to read with config_read.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
import shlex
from typing import Literal

from pydantic import BaseModel, Field

from tools.base import ToolResult, ToolSpec, bound_lines, failed
from tools.host import Host

DEFAULT_ROOTS = [
    "/var/log",
    "/tmp",
    "/data",
    "/workspace",
    "~",
    "~/logs",
    "/root",
    "/app",
    "/opt",
    "/etc/pivot",
    "/usr/lib/python3*",
    "/usr/local/lib/python3*",
]
_LOG_NAMES = [
    "*.log",
    "*.log.[0-9]",
    "*.out",
    "*.err",
    "nohup.out",
    # people tee a launch into a .txt too; only names that say so (not requirements.txt)
    "*log*.txt",
    "*serve*.txt",
    "*run*.txt",
    "*output*.txt",
    "*err*.txt",
    "*crash*.txt",
]
_LOG_PATHS = ["*/logs/*.txt", "*/log/*.txt"]
#: Any other .txt may be a launch's output teed to a file (`| tee all_reduce_4_gpus.txt`,
#: `modal-container.txt`): listed after the named logs, never before them. Text files that are
#: known not to be output are left out.
_WEAK_LOG_NAMES = ["*.txt"]
_NOT_OUTPUT_TXT = [
    "requirements*.txt",
    "constraints*.txt",
    "LICENSE*",
    "COPYING*",
    "NOTICE*",
    "README*",
    "CHANGELOG*",
    "CMakeLists.txt",
    "*vocab*.txt",
    "merges.txt",
    "*tokenizer*",
    "robots.txt",
    "entry_points.txt",
    "top_level.txt",
    "SOURCES.txt",
    "dependency_links.txt",
    "*.dist-info",
    "*.egg-info",
    "*notes*.txt",
    "*todo*.txt",
    "*TODO*.txt",
]
_CONFIG_NAMES = [
    "sitecustomize.py",
    "usercustomize.py",
    "*.env",
    ".env",
    "*.sh",
    "*.yaml",
    "*.yml",
    "*.service",  # a systemd unit: who starts the server, with which timeouts
]
_CONFIG_DIR_NAMES = ["*.json", "*.toml", "*.pbtxt", "*.ini", "*.conf"]
_CONFIG_DIRS = ["*/conf/*", "*/config/*", "*/configs/*", "*/etc/*", "*/k8s/*", "*/deploy/*"]
#: Hidden dirs (.git, .cache, .pyenv, .npm), package trees and caches hold other tools' files.
_NOT_UNDER = ["*-packages/*", "*/.*/*", "*/node_modules/*", "*/__pycache__/*"]
#: Trees a walk from "/" never enters: pseudo-filesystems and the OS's own files hold no server
#: logs or launch configs, and walking them costs most of the sweep's time (/proc alone has a
#: directory per thread). Explicit roots under them (/usr/lib/python3*) are still walked.
_PRUNE = [
    "/proc",
    "/sys",
    "/dev",
    "/run",
    "/boot",
    "/snap",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/usr/bin",
    "/usr/sbin",
    "/usr/lib",
    "/usr/lib32",
    "/usr/lib64",
    "/usr/libexec",
    "/usr/include",
    "/usr/share",
    "/usr/src",
    "/var/cache",
    "/var/lib/dpkg",
    "/var/lib/apt",
    # trees that hold code, packages and caches, never a server's own log: pruned wherever they
    # are, so a deeper search for logs in project directories stays cheap
    "*/.git",
    "*/.venv",
    "*/venv/lib",
    "*/site-packages",
    "*/dist-packages",
    "*/node_modules",
    "*/__pycache__",
    "*/.cache/huggingface/hub",
    "*/.cache/pip",
    "*/.mirror",
    # toolchains and kernel caches: thousands of files each on a GPU box (Triton's and
    # torch.compile's caches grow with every launch), none of them a log
    "*/.pyenv",
    "*/.rustup",
    "*/.cargo",
    "*/.npm",
    "*/.nvm",
    "*/.m2",
    "*/.triton",
    "*/.cache/torch",
    "*/.cache/vllm",
    "*/.cache/flashinfer",
    "*/miniconda3/pkgs",
    "*/anaconda3/pkgs",
    "*/miniforge3/pkgs",
    "*/.conda/pkgs",
]
#: Lines asked of the host; the classification in Python takes `limit` of each kind from them.
HOST_LINE_CAP = 4000


class Args(BaseModel):
    roots: list[str] = Field(default_factory=lambda: list(DEFAULT_ROOTS))
    max_depth: int = Field(4, ge=1, le=10)
    limit: int = Field(30, ge=1, le=200, description="files listed per kind")
    kind: Literal["logs", "configs", "all"] = "all"


class FoundFile(BaseModel):
    path: str
    kind: Literal["log", "config"]
    mtime: float | None = Field(None, description="epoch seconds; None on replay hosts")
    size: int | None = None
    line: str = Field(description="the host's output line, verbatim")


class Result(ToolResult):
    command: str = ""
    logs: list[FoundFile] = Field(default_factory=list)
    configs: list[FoundFile] = Field(default_factory=list)
    capped: bool = Field(False, description="the host listed more files than were read")

    def lines(self) -> list[str]:
        if self.error:
            return super().lines()
        out = [f"# each line: mtime(epoch s) size(bytes) path, newest first; on {self.host}"]
        for title, files in (("log files", self.logs), ("config files", self.configs)):
            out.append(f"# {len(files)} {title}")
            out.extend(f.line for f in files)
        if self.capped:
            out.append(f"# the host listed more than {HOST_LINE_CAP} files; narrow the roots")
        return bound_lines(out, max_lines=2 * 200 + 4)


class _AnyOf:
    """Matches what `any(fnmatch.fnmatch(x, p) for p in patterns)` matches (POSIX paths:
    fnmatch's normcase is the identity), with compiled regexes. A host lists thousands of files
    and classify runs on each, inside the process that also drives every other read of the
    wave: per-pattern fnmatch calls cost ~60 ms of the first sweep's CPU. A pattern that starts
    with `*` is searched for as the rest anchored at the end (`*.log` is a search for `\\.log\\Z`),
    which is the same test: fnmatch's leading `.*` made re try every split of the string, for
    every pattern, from the start (half of classify's time on a box's 4000 paths)."""

    def __init__(self, patterns: list[str]) -> None:
        def one(ps: list[str]) -> re.Pattern[str] | None:
            return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in ps)) if ps else None

        self._whole = one([p for p in patterns if not p.startswith("*")])
        self._tail = one([p[1:] for p in patterns if p.startswith("*")])

    def match(self, text: str) -> bool:
        return bool(
            (self._whole is not None and self._whole.match(text))
            or (self._tail is not None and self._tail.search(text))
        )


def _any_of(patterns: list[str]) -> _AnyOf:
    return _AnyOf(patterns)


_SITECUSTOMIZE = _any_of(["sitecustomize.py*"])
_NOT_UNDER_RE = _any_of(_NOT_UNDER)
_LOG_NAMES_RE = _any_of(_LOG_NAMES)
_LOG_PATHS_RE = _any_of(_LOG_PATHS)
_CONFIG_NAMES_RE = _any_of(_CONFIG_NAMES)
_CONFIG_DIR_NAMES_RE = _any_of(_CONFIG_DIR_NAMES)
_CONFIG_DIRS_RE = _any_of(_CONFIG_DIRS)
_WEAK_LOG_NAMES_RE = _any_of(_WEAK_LOG_NAMES)
_NOT_OUTPUT_TXT_RE = _any_of(_NOT_OUTPUT_TXT)


def classify(path: str) -> Literal["log", "config"] | None:
    """Pure: what a path looks like, by name and directory (mirrors the find expression)."""
    kind = _kind(path)
    return "log" if kind == "weak" else kind


def _kind(path: str) -> Literal["log", "weak", "config"] | None:
    """classify, telling a teed .txt candidate (`weak`, listed after named logs) apart."""
    name = posixpath.basename(path)
    if _SITECUSTOMIZE.match(name) or name == "usercustomize.py":
        return "config"
    if _NOT_UNDER_RE.match(path):
        return None
    if _LOG_NAMES_RE.match(name) or _LOG_PATHS_RE.match(path):
        return "log"
    if _CONFIG_NAMES_RE.match(name):
        return "config"
    if _CONFIG_DIR_NAMES_RE.match(name) and _CONFIG_DIRS_RE.match(path):
        return "config"
    if weak_log(path):
        return "weak"
    return None


def weak_log(path: str) -> bool:
    """A .txt that may be a launch's teed output: a log candidate after the named ones."""
    name = posixpath.basename(path)
    if not _WEAK_LOG_NAMES_RE.match(name):
        return False
    if _LOG_PATHS_RE.match(path) or _LOG_NAMES_RE.match(name):
        return False
    return not _NOT_OUTPUT_TXT_RE.match(name)


def _root_arg(root: str) -> str:
    """Quote a root for sh, but let `~` and glob characters expand as the user meant."""
    if root == "~" or root.startswith("~/"):
        return '"$HOME"' + shlex.quote(root[1:]) if len(root) > 1 else '"$HOME"'
    if any(c in root for c in "*?[") and all(c.isalnum() or c in "/._-*?[]" for c in root):
        return root
    return shlex.quote(root)


def _or(flag: str, patterns: list[str]) -> str:
    return " -o ".join(f"{flag} {shlex.quote(p)}" for p in patterns)


def _prune_test(pattern: str) -> str:
    """`*/.git` as `-name .git` (the same entries: a basename is what follows the last slash),
    which find compares without scanning the whole path for `*`; other patterns stay -path."""
    rest = pattern[2:]
    if pattern.startswith("*/") and rest and not any(c in rest for c in "/*?["):
        return f"-name {shlex.quote(rest)}"
    return f"-path {shlex.quote(pattern)}"


#: How "/" is spelled to find when other roots under it are walked on their own: the paths of that
#: walk then start with "//" (the same directory on POSIX), so `-path //tmp -prune` skips the
#: second walk of /tmp in it, while the walk rooted at /tmp (a path that is just "/tmp") is left
#: whole. parse_find turns "//" back into "/".
_SLASH_APART = "//"


def _walked_apart(roots: list[str]) -> list[str]:
    """Roots under "/" that are walked on their own. Each goes as deep below itself as the "/"
    walk would, and deeper, so the "/" walk would only list its files a second time: on a box
    with a busy /tmp that was a quarter of the first sweep's slowest read. Globs and ~ are left
    alone (their expansion is the shell's); a root that is a symlink is skipped by both walks,
    as before (find never follows one it meets, nor one it is given without a trailing slash)."""
    if "/" not in roots:
        return []
    return [
        r for r in roots if r.startswith("/") and r.strip("/") and not any(c in r for c in "*?[")
    ]


def _walk_roots(roots: list[str]) -> list[str]:
    return [_SLASH_APART if r == "/" and _walked_apart(roots) else r for r in roots]


def _prunes(roots: list[str]) -> list[str]:
    """_PRUNE, plus the same trees and the roots walked apart as the "//" walk spells them."""
    apart = _walked_apart(roots)
    if not apart:
        return _PRUNE
    absolute = [p for p in _PRUNE if p.startswith("/")]
    return [*_PRUNE, *(_SLASH_APART + p.strip("/") for p in [*absolute, *apart])]


def build_command(args: Args) -> str:
    not_under = " ".join(f"-not -path {shlex.quote(p)}" for p in _NOT_UNDER)
    logs = (
        f"\\( {_or('-name', _LOG_NAMES)} -o {_or('-path', _LOG_PATHS)}"
        f" -o {_or('-name', _WEAK_LOG_NAMES)} \\) {not_under}"
    )
    configs = (
        f"-name 'sitecustomize.py*' -o -name usercustomize.py"
        f" -o \\( \\( {_or('-name', _CONFIG_NAMES[2:])} \\) {not_under} \\)"
        f" -o \\( \\( {_or('-name', _CONFIG_DIR_NAMES)} \\) \\( {_or('-path', _CONFIG_DIRS)} \\)"
        f" {not_under} \\)"
    )
    match = {"logs": logs, "configs": configs, "all": f"{logs} -o {configs}"}[args.kind]
    roots = " ".join(_root_arg(r) for r in _walk_roots(args.roots))
    prune = " -o ".join(_prune_test(p) for p in _prunes(args.roots))
    # LC_ALL=C: find matches every -path/-name byte-wise instead of decoding each path as UTF-8
    # first (measured 2.5x less CPU over a 54k-entry walk, same lines); a name that is not
    # valid UTF-8 still matches `*` then.
    return (
        f"LC_ALL=C find {roots} -maxdepth {args.max_depth} \\( {prune} \\) -prune"
        f" -o -type f \\( {match} \\)"
        f" -printf '%T@ %s %p\\n' 2>/dev/null | sort -rn | head -n {HOST_LINE_CAP}"
    )


def parse_find(output: str) -> list[tuple[float | None, int | None, str, str]]:
    """Pure: `mtime size path` lines (GNU find -printf), or bare paths (replay hosts)."""
    rows: list[tuple[float | None, int | None, str, str]] = []
    for line in output.splitlines():
        if not line.strip():
            continue
        parts = line.split(" ", 2)
        if len(parts) == 3:
            try:
                mtime, size = float(parts[0]), int(parts[1])
            except ValueError:
                pass
            else:
                path = parts[2]
                if path.startswith(_SLASH_APART):  # found by the "/" walk (_walked_apart)
                    path = path[1:]
                    line = f"{parts[0]} {parts[1]} {path}"
                rows.append((mtime, size, path, line))
                continue
        rows.append((None, None, line.strip(), line))
    return rows


def run(host: Host, args: Args) -> Result:
    command = build_command(args)
    res = host.run(command, timeout=30)
    # find exits 1 when a root is missing or unreadable; what it did list is still good.
    if res.timed_out or res.error or res.rc not in (0, 1):
        return failed(Result, res, command=command)
    named: list[FoundFile] = []
    weak: list[FoundFile] = []
    configs: list[FoundFile] = []
    seen: set[str] = set()
    rows = parse_find(res.stdout)
    for mtime, size, path, line in rows:
        if path in seen:  # overlapping roots list a file twice; classify is pure
            continue
        kind = _kind(path)
        if kind is None:
            continue
        if args.kind != "all" and ("config" if kind == "config" else "log") + "s" != args.kind:
            continue
        seen.add(path)
        # named logs first (newest first within each group), teed .txt candidates after them;
        # only the first `limit` of each are kept, so only they are built
        bucket = named if kind == "log" else weak if kind == "weak" else configs
        if len(bucket) < args.limit:
            bucket.append(
                FoundFile(
                    path=path,
                    kind="config" if kind == "config" else "log",
                    mtime=mtime,
                    size=size,
                    line=line,
                )
            )
    return Result(
        host=host.name,
        command=command,
        logs=(named + weak)[: args.limit],
        configs=configs,
        capped=len(rows) >= HOST_LINE_CAP or res.truncated,
    )


SPEC = ToolSpec(
    name="find_logs",
    description=(
        "List recently modified log files (*.log, *.out, *.err, nohup.out, logs/*.txt) and "
        "config-like files (sitecustomize.py, .env, launch scripts, YAML, config-dir JSON) "
        "under the usual roots (/var/log, /tmp, /data, /workspace, ~, /root, /app, /opt), "
        "newest first. Use it first on a host you have not seen."
    ),
    args=Args,
    result=Result,
    fn=run,
    # the usual places first, then the whole tree shallowly: containers put logs in /app,
    # /tensorrtllm_backend, /home/<user>/..., wherever the launch script ran
    first_sweep=7,
    first_sweep_args={"roots": [*DEFAULT_ROOTS, "/home", "/"], "max_depth": 6},
    long_pole=True,
)
