"""The change an approval would make, as a unified diff, read through the host's read path.

An approval for `config_apply` names the file and either its new text or a file to copy it
from (the known-good copy). The page shows the diff, never the whole new file, so the person
approving reads only what changes.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel

from server.change_fit import ChangeFit
from store.records import ApprovalRequest
from tools.host import Host, decode

NEW_TEXT_KEYS = ("content", "new_text", "text", "data")
SOURCE_KEYS = ("copy_from", "src", "source", "from_path")
MAX_BYTES = 256_000


class ApprovalDiff(BaseModel):
    approval_id: str
    path: str | None = None
    source: str | None = None
    diff: str | None = None
    note: str = ""
    #: whether the change is the report's next step, or why it is not (server/change_fit.py)
    fit: ChangeFit | None = None


def _read(host: Host, path: str) -> tuple[str | None, str]:
    tail = host.read_tail(path, max_bytes=MAX_BYTES)
    if tail.error or not tail.exists:
        return None, tail.error or f"{path} does not exist on {host.name}"
    if tail.size > tail.bytes_read:
        return None, f"{path} is larger than {MAX_BYTES} bytes; no diff shown"
    return decode(tail.data), ""


def _first(args: dict[str, Any], keys: tuple[str, ...]) -> Any:
    return next((args[k] for k in keys if isinstance(args.get(k), str)), None)


def approval_diff(req: ApprovalRequest, host: Host) -> ApprovalDiff:
    path = req.args.get("path") if isinstance(req.args.get("path"), str) else None
    out = ApprovalDiff(approval_id=req.id, path=path)
    if path is None:
        out.note = f"{req.tool} changes no file; its arguments say what it does"
        return out
    new = _first(req.args, NEW_TEXT_KEYS)
    if new is None:
        out.source = _first(req.args, SOURCE_KEYS)
        if out.source is None:
            out.note = f"{req.tool} names no new content for {path}"
            return out
        new, why = _read(host, out.source)
        if new is None:
            out.note = why
            return out
    old, why = _read(host, path)
    if old is None and "does not exist" not in why:
        out.note = why
        return out
    lines = difflib.unified_diff(
        (old or "").splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"{path} (now)" if old is not None else "/dev/null",
        tofile=f"{path} (after{' copying ' + out.source if out.source else ''})",
    )
    out.diff = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    if not out.diff:
        out.note = "the file already has this content: nothing would change"
    return out
