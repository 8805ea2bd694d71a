"""When a log's lines were written, from the engines' own timestamps (engines.yaml, `common:`).

A host often keeps an earlier run's log beside the current one (`server.log` and
`server-old.log`, yesterday's run under another name). Cards carry no mtimes, and a live host's
mtimes say when a file was last touched, not which run wrote it; the stamps inside do. A log that
ended before another log began speaks for an earlier run: its "ready" line is not this server's.
"""

from __future__ import annotations

import re
from functools import lru_cache

from tools import engines

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

#: (year or None, month, day, hour, minute, second)
Stamp = tuple[int | None, int, int, int, int, int]


@lru_cache(maxsize=1)
def _patterns() -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in engines.registry().common.timestamps)


def stamp(line: str) -> Stamp | None:
    for pat in _patterns():
        m = pat.search(line)
        if m:
            g = m.groupdict()
            mo = _MONTHS.index(g["mon"]) + 1 if g.get("mon") else int(g["mo"])
            d = int(g["d"])
            if not (1 <= mo <= 12 and 1 <= d <= 31):
                continue
            year = int(g["Y"]) if g.get("Y") else None
            return (year, mo, d, int(g["H"]), int(g["M"]), int(g["S"]))
    return None


def span(lines: list[str]) -> tuple[Stamp, Stamp] | None:
    """The first and last stamp in the lines, or None when none carries one."""
    stamps = [s for s in map(stamp, lines) if s is not None]
    return (stamps[0], stamps[-1]) if stamps else None


def before(a: Stamp, b: Stamp) -> bool:
    """a is strictly earlier than b; the year counts only when both lines carry one."""
    if a[0] is not None and b[0] is not None:
        return a < b
    return a[1:] < b[1:]


def earlier_logs(spans: dict[str, tuple[Stamp, Stamp]]) -> set[str]:
    """Logs whose last line is older than another log's first line: an earlier run's."""
    return {
        path
        for path, (_, last) in spans.items()
        if any(before(last, first) for other, (first, _) in spans.items() if other != path)
    }


def _seconds(s: Stamp) -> int:
    """Seconds within the year, near enough to measure gaps between lines of one log."""
    return (((s[1] * 31 + s[2]) * 24 + s[3]) * 60 + s[4]) * 60 + s[5]


def longest_silence(lines: list[str], last: int = 30, cap_s: float = 3600.0) -> float | None:
    """The longest gap between consecutive stamped lines among the last `last` stamped ones:
    how long this log has already gone quiet and then gone on. A jump past `cap_s` (a restart
    the next day, a month boundary) is not a pace and is left out."""
    secs = [_seconds(s) for s in map(stamp, lines) if s is not None][-last:]
    gaps = [b - a for a, b in zip(secs, secs[1:], strict=False) if 0 <= b - a <= cap_s]
    return float(max(gaps)) if gaps else None
