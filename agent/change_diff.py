"""The difference a proposed config change would make, as a unified diff of what was read.

An approval that shows the whole new file asks the operator to find the change themselves; the
lines that differ are what they are asked to approve. The diff is computed from the two
config_read observations the proposal rests on (the current file and its known-good copy), so
it shows exactly what the agent saw, never a fresh read.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

MAX_DIFF_LINES = 40


def _text_of(observations: Iterable[dict[str, Any]], path: str) -> list[str] | None:
    """The newest successful config_read of `path`: the file's lines, else None (never read)."""
    found: list[str] | None = None
    for o in observations:
        if o.get("tool") != "config_read" or not o.get("ok") or o["args"].get("path") != path:
            continue
        text = (o.get("data") or {}).get("text")
        found = (
            list(text)
            if isinstance(text, list)
            else [ln for ln in o["lines"] if not ln.startswith("# ")]
        )
    return found


def config_diff(observations: Iterable[dict[str, Any]], path: str, source: str) -> list[str]:
    """`diff -u path source`: how `path` changes when it is replaced by `source`'s bytes.

    Empty when either file was not read (the caller says so rather than show a guess)."""
    obs = list(observations)
    current, wanted = _text_of(obs, path), _text_of(obs, source)
    if current is None or wanted is None:
        return []
    out = list(
        difflib.unified_diff(
            current, wanted, fromfile=f"{path} (now)", tofile=f"{path} (after)", lineterm="", n=1
        )
    )
    if len(out) > MAX_DIFF_LINES:
        out = [*out[:MAX_DIFF_LINES], f"… {len(out) - MAX_DIFF_LINES} more diff lines"]
    return out


def changed_lines(diff: list[str]) -> tuple[list[str], list[str]]:
    """(lines only in the current file, lines only in the replacement) of a unified diff."""
    gone = [ln[1:] for ln in diff if ln.startswith("-") and not ln.startswith("---")]
    new = [ln[1:] for ln in diff if ln.startswith("+") and not ln.startswith("+++")]
    return gone, new
