"""Turn raw host bytes into the lines a person would see on a terminal.

Logs of inference servers are full of terminal noise: ANSI colours, cursor moves from multi-bar
progress displays, and carriage-return progress bars that rewrite one line thousands of times.
A plain `tail` hands all of it to the agent (megabytes of `Loading 37%` on one "line") and, worse,
hides the line that matters behind it. These helpers keep every kept character verbatim, so
evidence quoted from a cleaned line is still a substring of what the host printed.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

# CSI (ESC [ ... final), OSC (ESC ] ... BEL | ESC \), other ESC sequences (charset selection,
# keypad modes, ...). Order matters: the longer forms first.
_ANSI = re.compile(
    r"""
    \x1b\[[0-?]*[ -/]*[@-~]            # CSI: colours, cursor moves, erase line
    | \x1b\][^\x07\x1b]*(?:\x07|\x1b\\|$)  # OSC: window titles, hyperlinks (possibly cut)
    | \x1b[PX^_][^\x1b]*(?:\x1b\\|$)   # DCS, SOS, PM, APC strings
    | \x1b[ -/]*[0-~]                  # two/three-byte escapes: ESC ( B, ESC =, ESC 7 ...
    | \x1b                             # a lone ESC (cut sequence)
    """,
    re.VERBOSE,
)
# Control characters a terminal would not print; tab, newline and carriage return are handled.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")
# What varies between two updates of one progress bar: digits, bar glyphs, spaces.
_BAR_NOISE = re.compile(r"[\d\s#=>.\-\u2580-\u259f\u25a0-\u25ff|]+")

#: One physical line never turns into more than this many kept segments.
MAX_SEGMENTS_PER_LINE = 8
_SHAPE_CHARS = 24
_EXTRA_TEXT = 16


def safe_decode(data: bytes) -> str:
    """UTF-8 with replacement: a stray byte, or a read that starts mid-character, never fails."""
    return data.decode("utf-8", errors="replace")


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences and unprintable control characters."""
    return _CONTROL.sub("", _ANSI.sub("", text))


def _shape(segment: str) -> str:
    """Two updates of one progress bar have the same shape; an error message does not."""
    return _BAR_NOISE.sub("", segment)[:_SHAPE_CHARS]


def collapse_cr(line: str) -> tuple[list[str], int]:
    """Collapse one physical line that holds carriage-return updates to its latest state(s).

    Keeps the last non-empty segment of each distinct shape, in order of their last appearance:
    `"\\rLoading 1%\\rLoading 2%...\\rLoading 100%"` becomes `["Loading 100%"]`, while a message
    another process wrote between two updates (`"\\rLoad 5%\\r[TP1] RuntimeError: x\\rLoad 6%"`)
    survives as its own segment. Text printed right after an update without a newline stays in
    that segment (`"Capturing 50%Traceback ..."`), so nothing an error wrote is dropped.
    Returns the kept segments and how many updates were dropped.
    """
    if "\r" not in line:
        return [line], 0
    segments = [s for s in line.split("\r") if s.strip()]
    if not segments:
        return [""], 0
    shapes = [_shape(seg) for seg in segments]
    last_by_shape: dict[str, int] = {}
    for i, shape in enumerate(shapes):
        last_by_shape[shape] = i
    # A segment is superseded by a later update of the same bar: same shape, or the later one
    # is that bar with text glued on ("Capturing 50%Traceback ...").
    keep_set: set[int] = set()
    later_prefixes: set[str] = set()
    for i in range(len(segments) - 1, -1, -1):
        if shapes[i] not in later_prefixes:
            keep_set.add(i)
        later_prefixes.update(shapes[i][:k] for k in range(len(shapes[i]) + 1))
    # An update that is much longer than the bar's final state carries text of its own
    # (an error printed right after it, then overwritten by the next update): keep it too.
    for i, shape in enumerate(shapes):
        if len(segments[i]) > len(segments[last_by_shape[shape]]) + _EXTRA_TEXT:
            keep_set.add(i)
    keep = sorted(keep_set)[-MAX_SEGMENTS_PER_LINE:]
    return [segments[i] for i in keep], len(segments) - len(keep)


class CleanText(BaseModel):
    """Lines after cleaning, and how much noise was removed."""

    lines: list[str]
    progress_collapsed: int = 0
    first_line_partial: bool = False


def clean_lines(text: str, partial_start: bool = False) -> CleanText:
    """ANSI-strip, split on newlines and collapse carriage-return progress on every line.

    `partial_start`: the text starts mid-file (a tail read), so its first line is cut. If that
    line holds carriage returns, its segments after the first one are whole and are kept;
    otherwise the cut line is dropped rather than shown half.
    """
    text = strip_ansi(text)
    physical = text.split("\n")
    if physical and physical[-1] == "":
        physical.pop()
    first_partial = False
    if partial_start and physical:
        first_partial = True
        head = physical[0]
        cut = head.find("\r")
        if cut < 0:
            physical.pop(0)
        else:
            physical[0] = head[cut:]
    out: list[str] = []
    collapsed = 0
    for line in physical:
        kept, dropped = collapse_cr(line)
        out.extend(kept)
        collapsed += dropped
    return CleanText(lines=out, progress_collapsed=collapsed, first_line_partial=first_partial)


def clean_bytes(data: bytes, partial_start: bool = False) -> CleanText:
    return clean_lines(safe_decode(data), partial_start=partial_start)
