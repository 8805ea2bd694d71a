"""`config_apply`: change a config on the host, safely (needs approval).

Snapshots first (the very first change to a path also keeps the original, marked known-good),
then writes atomically and verifies the hash. `set` edits keys in place in the file's own
style (a setdefault line stays a setdefault line, an `export` stays an export, a `--flag v`
keeps its spelling), so the diff an engineer approves is the smallest one possible.
"""

from __future__ import annotations

import re
import shlex

from pydantic import BaseModel, Field, model_validator

from tools.base import ToolResult, ToolSpec, bound_lines
from tools.config_read import _LAUNCH_MARKERS, detect_format
from tools.config_store import ConfigStore, StoreError, sha256, unified_diff
from tools.host import Host


class Args(BaseModel):
    path: str = Field(description="absolute path of the config on the host")
    content: str | None = Field(None, description="the whole new file")
    set: dict[str, str] | None = Field(
        None, description="keys to set in place: env vars as-is, engine flags as --flag"
    )
    copy_from: str | None = Field(
        None,
        description="restore: make the file byte-for-byte equal to this file (e.g. its "
        "known-good copy); CRs, encoding and the final newline are kept exactly",
    )
    reason: str = Field("", description="why; kept with the snapshot")
    store_dir: str | None = Field(
        None, description="snapshot store dir; default ~/.pivot/snapshots"
    )

    @model_validator(mode="after")
    def _one_change(self) -> Args:
        if sum(x is not None for x in (self.content, self.set, self.copy_from)) != 1:
            raise ValueError(
                "give exactly one of `content` (whole file), `set` (keys) or `copy_from` (a file)"
            )
        if not self.path.startswith("/"):
            raise ValueError("path must be absolute")
        return self


class Result(ToolResult):
    path: str = ""
    snapshot_id: str | None = Field(None, description="the state before the change; revert to it")
    applied_snapshot_id: str | None = None
    known_good_id: str | None = None
    diff: str = ""
    changed: bool = False
    new_sha256: str | None = None
    verified: bool = False

    def lines(self) -> list[str]:
        if self.error:
            return super().lines()
        head = (
            f"# {self.path} on {self.host}: "
            + (
                f"changed and verified (sha256 {self.new_sha256})"
                if self.changed
                else "already as asked; nothing written"
            )
            + f"; revert with config_revert to={self.snapshot_id} or to=known-good"
            + f" ({self.known_good_id})"
        )
        return [head, *bound_lines(self.diff.splitlines())]


# -- in-place editing (pure) -------------------------------------------------------------------
def _py_quote(value: str, quote: str) -> str:
    return quote + value.replace("\\", "\\\\").replace(quote, "\\" + quote) + quote


def _sh_quote(value: str) -> str:
    return value if re.fullmatch(r"[\w@%+=:,./-]*", value) and value else shlex.quote(value)


def _set_env(text: str, key: str, value: str, fmt: str) -> tuple[str, bool]:
    k = re.escape(key)
    if fmt == "python":
        rx = re.compile(
            rf"""((?:os\.)?(?:environ\[\s*(["']){k}\2\s*\]\s*=\s*|environ\.setdefault\(\s*(["']){k}\3\s*,\s*|putenv\(\s*(["']){k}\4\s*,\s*))("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^,)\s#]+)"""
        )

        def repl(m: re.Match[str]) -> str:
            old = m.group(5)
            q = old[0] if old[:1] in ("'", '"') else '"'
            return m.group(1) + _py_quote(value, q)

        new, n = rx.subn(repl, text)
        return new, n > 0
    # shell / .env / launch scripts: `export K=V`, `K=V`, `K=V cmd`, `-e K=V`
    rx = re.compile(rf"""(?<![\w$-]){k}=("(?:[^"\\]|\\.)*"|'[^']*'|[^\s;&|]*)""")
    new, n = rx.subn(lambda m: f"{key}={_sh_quote(value)}", text)
    return new, n > 0


def _add_env(text: str, key: str, value: str, fmt: str) -> str:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    if fmt == "python":
        style = (
            "setdefault" if "environ.setdefault(" in text else "assign"
        )  # follow the file's habit
        line = (
            f"os.environ.setdefault({_py_quote(key, chr(34))}, {_py_quote(value, chr(34))})\n"
            if style == "setdefault"
            else f"os.environ[{_py_quote(key, chr(34))}] = {_py_quote(value, chr(34))}\n"
        )
        if "import os" not in text:
            line = "import os\n" + line
        return "".join(lines) + line
    exports = [i for i, ln in enumerate(lines) if ln.lstrip().startswith("export ")]
    if exports:
        lines.insert(exports[-1] + 1, f"export {key}={_sh_quote(value)}\n")
        return "".join(lines)
    is_script = text.startswith("#!") or any(_LAUNCH_MARKERS.search(ln) for ln in lines)
    if not is_script:  # a .env file
        return "".join(lines) + f"{key}={_sh_quote(value)}\n"
    # A launch script: the export must come before the command that reads it.
    at = 0
    while at < len(lines) and (lines[at].startswith("#") or not lines[at].strip()):
        at += 1
    lines.insert(at, f"export {key}={_sh_quote(value)}\n")
    return "".join(lines)


def _set_flag(text: str, flag: str, value: str) -> tuple[str, bool]:
    f = re.escape(flag)
    rx = re.compile(
        rf"""(?<![\w-]){f}(=|[ \t]+(?:\\\n[ \t]*)?)("(?:[^"\\]|\\.)*"|'[^']*'|(?!-)[^\s\\;&|]+)"""
    )
    new, n = rx.subn(lambda m: f"{flag}{m.group(1)}{_sh_quote(value)}", text)
    return new, n > 0


def _add_flag(text: str, flag: str, value: str) -> str | None:
    lines = text.splitlines(keepends=True)
    for i in range(len(lines) - 1, -1, -1):
        ln = lines[i]
        if _LAUNCH_MARKERS.search(ln) and not ln.lstrip().startswith("#"):
            # Walk to the last physical line of this command (backslash continuations).
            j = i
            while j + 1 < len(lines) and lines[j].rstrip("\n").rstrip().endswith("\\"):
                j += 1
            body = lines[j].rstrip("\n")
            end = "\n" if lines[j].endswith("\n") else ""
            quote = body[-1] if body[-1:] in ('"', "'") and body.count(body[-1]) % 2 == 1 else ""
            core = body[:-1] if quote else body
            arg = flag if value == "true" else f"{flag} {_sh_quote(value)}"  # a switch stays bare
            lines[j] = f"{core} {arg}{quote}{end}"
            return "".join(lines)
    return None


def apply_settings(path: str, text: str, changes: dict[str, str]) -> str:
    """Pure: `text` with each key set, in the file's own style; raises ValueError if it can't."""
    fmt = detect_format(path, text)
    if fmt in ("yaml", "json"):
        raise ValueError(f"set= cannot edit {fmt} in place; pass the whole file as content=")
    for key, value in changes.items():
        if key.startswith("-"):
            text, found = _set_flag(text, key, value)
            if not found:
                added = _add_flag(text, key, value)
                if added is None:
                    raise ValueError(
                        f"{key} is not in {path} and it has no launch command to add it to"
                    )
                text = added
        else:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"{key!r} is not an environment variable name or a --flag")
            text, found = _set_env(text, key, value, fmt)
            if not found:
                text = _add_env(text, key, value, fmt)
    return text


def run(host: Host, args: Args) -> Result:
    try:
        store = ConfigStore(host, args.store_dir)
        current = store.read(args.path)
        if args.copy_from is not None:
            source = store.read(args.copy_from)
            if source is None:
                return Result(
                    host=host.name,
                    ok=False,
                    path=args.path,
                    error=f"{args.copy_from} does not exist on {host.name}: nothing to restore from",
                    fix="check the known-good copy's path",
                )
            new = source  # the exact bytes: verified below by sha256 against the source
        elif args.content is not None:
            new = args.content.encode()
        else:
            try:
                new = apply_settings(
                    args.path, (current or b"").decode("utf-8", "surrogateescape"), args.set or {}
                ).encode("utf-8", "surrogateescape")
            except ValueError as exc:
                return Result(
                    host=host.name, ok=False, path=args.path, error=str(exc), fix="pass content="
                )
        before = store.ensure_original(args.path, current)
        known_good = store.get(args.path, "known-good").id
        diff = unified_diff(current, new, f"{args.path} (before)", f"{args.path} (after)")
        if current is not None and current == new:
            return Result(
                host=host.name,
                path=args.path,
                snapshot_id=before.id,
                known_good_id=known_good,
                verified=True,
                new_sha256=sha256(new),
            )
        digest = store.write_verified(args.path, new)
        after = store.snapshot(
            args.path, f"applied: {args.reason}" if args.reason else "applied", new
        )
    except StoreError as exc:
        return Result(host=host.name, ok=False, path=args.path, error=str(exc), fix=exc.fix)
    return Result(
        host=host.name,
        path=args.path,
        snapshot_id=before.id,
        applied_snapshot_id=after.id,
        known_good_id=known_good,
        diff=diff,
        changed=True,
        new_sha256=digest,
        verified=True,
    )


SPEC = ToolSpec(
    name="config_apply",
    description=(
        "Change a config file on the host (needs approval): snapshot first (the first change "
        "keeps the original as known-good), set keys in place (`set`: env vars or --flags, "
        "in the file's own style) or replace it (`content`), atomic write, hash verified. "
        "Returns the diff and the snapshot id to revert to."
    ),
    args=Args,
    result=Result,
    fn=run,
    changing=True,
)
