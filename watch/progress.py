"""Where a launch is: its phase (the engine registry's markers) and an ETA from its loader's rate.

The phase names come from tools/engines.yaml (`phases:`), never from a list here. The rate is
measured, not read off the bar: a loader that prints "shard 3/8" without tqdm's rate still gets
an ETA. Each item's time is the log's own stamp when the line carries one (a launch attached to
mid-load has its whole history at once, so only the stamps say how fast it went), else the
moment the watch first saw it.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from tools import engines
from tools.log_window import Progress, parse_progress
from tools.logtime import stamp


class EngineMarkers(BaseModel):
    """What one engine's log says about its start-up (a view of its registry entry)."""

    model_config = {"arbitrary_types_allowed": True}

    engine: str | None = None
    phases: list[tuple[str, re.Pattern[str]]] = Field(default_factory=list)
    ready: list[re.Pattern[str]] = Field(default_factory=list)


def markers(engine: str | None) -> EngineMarkers:
    """The phase and ready markers of `engine`; with no engine known, every engine's ready
    markers (a ready line is specific) and no phases (`Connected` alone names no phase)."""
    reg = engines.registry()
    e = reg.engines.get(engine or "")
    if e is not None:
        return EngineMarkers(engine=e.name, phases=list(e.phases.items()), ready=e.ready_markers)
    return EngineMarkers(ready=[p for x in reg.engines.values() for p in x.ready_markers])


def engine_of(lines: list[str], command: str | None = None) -> str | None:
    """The engine of a launch: its process's command line first, else its log's launch or
    phase markers (the engine that recognises the most of them)."""
    if command:
        m = engines.classify(command)
        if m.engine:
            return m.engine
    best, best_n = None, 0
    for name, e in engines.registry().engines.items():
        pats = [*e.launch_markers, *e.phases.values()]
        n = sum(1 for ln in lines for p in pats if p.search(ln))
        if n > best_n:
            best, best_n = name, n
    return best


def phase_of(line: str, m: EngineMarkers) -> str | None:
    for name, pat in m.phases:
        if pat.search(line):
            return name
    return None


def is_ready_line(line: str, m: EngineMarkers) -> bool:
    return any(p.search(line) for p in m.ready)


#: "[2025-06-01 10:00:12 TP0] " or "INFO 06-05 21:06:12 [core.py:93] " before a bar's label
_STAMP_PREFIX = re.compile(
    r"^\s*(?:\[?[^\]]*?\d\d:\d\d:\d\d[^\]]*\]|\w+ \d\d-\d\d \S+ \[[^\]]*\])\s*"
)


def _secs(line: str) -> float | None:
    s = stamp(line)
    if s is None:
        return None
    return float((((s[1] * 31 + s[2]) * 24 + s[3]) * 60 + s[4]) * 60 + s[5])


def _slope(pts: list[tuple[float, int]]) -> float | None:
    """Seconds per item, least squares over (time, item) points: one late read (a busy host, a
    slow tick) bends the line less than it moves a two-point rate."""
    if len(pts) < 2:
        return None
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    md = sum(d for _, d in pts) / n
    var = sum((d - md) ** 2 for _, d in pts)
    if var <= 0:
        return None
    spi = sum((t - mt) * (d - md) for t, d in pts) / var
    return spi if spi > 0 else None


class LoadRate(BaseModel):
    """The current progress bar and the times its items were reached."""

    bar: Progress | None = None
    stamped: list[tuple[float, int]] = Field(default_factory=list)
    seen: list[tuple[float, int]] = Field(default_factory=list)

    def observe(self, line: str, now: float, backlog: bool = False) -> Progress | None:
        """Read one line; `backlog` lines were written before the watch began (their seen time
        says nothing of the rate). Returns the bar when the line is one."""
        p = parse_progress(line)
        if p is None or p.done is None or p.total is None:
            return None
        old = self.bar
        if old is None or old.total != p.total or (old.done or 0) > p.done:
            self.stamped, self.seen = [], []
        self.bar = p.model_copy(update={"label": _STAMP_PREFIX.sub("", p.label)})
        t = _secs(line)
        if t is not None and (not self.stamped or self.stamped[-1][1] != p.done):
            self.stamped.append((t, p.done))
        # seen once, when the item is first read: a backlog's last bar read again (a tqdm bar
        # ends its line when the next one begins) is not news
        if not backlog and (old is None or old.done != p.done):
            self.seen.append((now, p.done))
        return p

    def s_per_item(self) -> float | None:
        """Seconds per item: from the log's stamps, else from when items were seen, else the
        bar's own rate (tqdm's), else unknown."""
        for pts in (self.stamped, self.seen):
            spi = _slope(pts[-12:])
            if spi is not None:
                return spi
        own = self.bar.s_per_item if self.bar else None
        return own if own else None  # 0 s an item: a bar whose clock has not ticked yet

    def eta_s(self) -> float | None:
        """Seconds left when the last item was reached (None while the rate is unknown)."""
        if self.bar is None or self.bar.done is None or self.bar.total is None:
            return None
        spi = self.s_per_item()
        if spi is None:
            return None
        return max(0.0, (self.bar.total - self.bar.done) * spi)

    def measured(self) -> Progress | None:
        """The bar with the measured rate and ETA in place of its printed ones."""
        if self.bar is None:
            return None
        return self.bar.model_copy(update={"s_per_item": self.s_per_item(), "eta_s": self.eta_s()})
