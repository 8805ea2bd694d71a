"""Liveness over a real window: is the log still advancing, and how long until it is done?

A loader that prints one shard every 4 s looks dead to a reread 0.25 s later. `watch` polls
the log (every 0.25 s, then 0.5 s) through the Host's own clock and sleep, so a live host really
waits and a replayed one only advances its virtual clock, and stops as soon as the file grows.
It waits `base_s` (6 s unless told) and longer, up to PIVOT_LIVENESS_MAX_S (30 s unless set),
when the last line is a progress bar or a phase known to be slow and silent (CUDA graph capture,
compilation). Progress bars (`3/200 [00:12<13:00, 4.00s/it]`) are parsed into position, total,
rate and an ETA: "shard 3/200 at 4.0 s each: about 13 minutes left".
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, Field

ENV_MAX = "PIVOT_LIVENESS_MAX_S"
DEFAULT_BASE_S = 6.0
DEFAULT_MAX_S = 30.0
POLL_FAST_S = 0.25
POLL_SLOW_S = 0.5
FAST_PHASE_S = 2.0
#: the cadence of watches whose every read runs a program on the host (see poll_interval)
HEAVY_FAST_S = 2.0
HEAVY_SLOW_S = 5.0
HEAVY_FAST_PHASE_S = 10.0

# tqdm: "desc: 12%|###   | 3/200 [00:12<13:00,  4.00s/it]" and its "it/s", "?it/s" forms
_TQDM = re.compile(
    r"(?P<done>\d+)/(?P<total>\d+)\s*\[\s*(?P<elapsed>[\d:]+)\s*(?:<\s*(?P<left>[\d:?]+))?"
    r"\s*(?:,\s*(?P<rate>[\d.]+|\?)\s*(?P<unit>s/it|it/s|s/\w+|\w+/s))?"
)
# "Loading weights 3/200", "shard 3 of 200", "[3/200]" without a tqdm bracket
_PLAIN = re.compile(
    r"(?i)(?P<desc>shard|checkpoint|layer|weight|batch|step|graph|capturing|loading|load|download)"
    r"[^\d\n]{0,40}?(?P<done>\d+)\s*(?:/|of)\s*(?P<total>\d+)\b"
)
# an ETA printed beside a plain count: TGI's "Download: [3/9] -- ETA: 0:34:50"
_ETA = re.compile(r"(?i)\bETA:?\s*(?P<eta>\d+(?::\d\d){1,2})")
# phases that print nothing for a long time while healthy
SLOW_PHASE = re.compile(
    r"(?i)captur\w* (?:cuda|the cuda|batches|graphs?)|cuda graph|compil(?:e|ing)|"
    r"torch\.compile|autotun|warm(?:ing)? ?up|profil(?:e|ing) (?:run|the)|"
    r"load(?:ing)? (?:weights?|checkpoint|safetensors|model)|building (?:the )?engine|"
    r"downloading|memory profiling|Dynamo bytecode transform"
)
# ...unless the line says the phase is over
PHASE_OVER = re.compile(r"(?i)\b(?:took|done|finished|completed?|ended?|elapsed)\b")
# ...or it is an error's, not a phase's ("Compile with `TORCH_USE_CUDA_DSA` ..." under a CUDA error)
NOT_A_PHASE = re.compile(r"\b(?:ERROR|CRITICAL|FATAL)\b|\w(?:Error|Exception)\b|TORCH_USE_CUDA_DSA")
_BAR_DESC = re.compile(r"^\s*(?:\[[^\]]*\]\s*)*(?P<desc>[^:|\d][^:|]*?)\s*:")


def _clock_s(text: str | None) -> float | None:
    """tqdm's "13:00" / "1:02:03" / "05" as seconds."""
    if not text or "?" in text:
        return None
    try:
        parts = [int(p) for p in text.split(":")]
    except ValueError:
        return None
    s = 0.0
    for p in parts:
        s = s * 60 + p
    return s


class Progress(BaseModel):
    """The newest progress bar or slow phase in the log's last lines."""

    label: str = Field("", description="what advances: 'Loading safetensors checkpoint shards'")
    done: int | None = None
    total: int | None = None
    s_per_item: float | None = Field(None, description="seconds per item (tqdm rate)")
    elapsed_s: float | None = Field(None, description="the bar's own elapsed time at this line")
    s_per_print: float | None = Field(
        None,
        description="seconds between this bar's printed lines (its elapsed times): a bar that "
        "prints every tenth item is silent ten items long",
    )
    eta_s: float | None = Field(None, description="seconds left at that rate")
    slow_phase: bool = Field(False, description="a phase that prints little while healthy")
    line: str = Field("", description="the log line it was read from, verbatim")

    def describe(self) -> str:
        what = self.label or "progress"
        if self.done is None or self.total is None:
            return f"{what}: a phase that can stay silent for a while"
        item = "shard" if "shard" in what.lower() else "item"
        out = f"{what}: {item} {self.done}/{self.total}"
        if self.s_per_item is not None:
            each = (
                f"{self.s_per_item:.1f} s each"
                if self.s_per_item >= 0.1
                else f"{1 / self.s_per_item:.0f} per second"
                if self.s_per_item > 0
                else "no measurable time each"
            )
            out += f" at {each}"
        if self.eta_s is not None:
            out += f": {human_s(self.eta_s)} left" if self.done < self.total else ": done"
        if self.s_per_print is not None and self.s_per_print > (self.s_per_item or 0.0):
            out += f"; it prints a line every {human_s(self.s_per_print).removeprefix('about ')}"
        return out

    def step_s(self) -> float | None:
        """How long the bar may stay silent while it works: one item, or the gap between its
        printed lines when it prints less often than every item."""
        known = [v for v in (self.s_per_item, self.s_per_print) if v is not None]
        return max(known) if known else None


def human_s(s: float) -> str:
    if s < 90:
        return f"about {max(1, round(s))} seconds"
    if s < 90 * 60:
        return f"about {round(s / 60)} minutes"
    return f"about {s / 3600:.1f} hours"


def parse_progress(line: str) -> Progress | None:
    """A progress bar or a slow phase in one cleaned line, else None."""
    m = _TQDM.search(line)
    if m:
        done, total = int(m.group("done")), int(m.group("total"))
        if total <= 0 or done > total:
            return None
        rate = m.group("rate")
        unit = m.group("unit") or ""
        spi: float | None = None
        if rate and rate != "?":
            r = float(rate)
            if unit.startswith("s/"):
                spi = r
            elif r > 0:
                spi = 1.0 / r
        elapsed = _clock_s(m.group("elapsed"))
        if spi is None and elapsed is not None and done > 0:
            spi = elapsed / done
        eta = (total - done) * spi if spi is not None else _clock_s(m.group("left"))
        d = _BAR_DESC.match(line[: m.start()])
        label = (d.group("desc").strip() if d else "").strip(" -")
        return Progress(
            label=label,
            done=done,
            total=total,
            s_per_item=spi,
            elapsed_s=elapsed,
            eta_s=eta,
            line=line,
        )
    m = _PLAIN.search(line)
    if m:
        done, total = int(m.group("done")), int(m.group("total"))
        if total > 0 and done <= total:
            label = line[: m.start("done")].strip(" :[-") or m.group("desc")
            e = _ETA.search(line)
            eta = _clock_s(e.group("eta")) if e else None
            # the ETA over the items left is the pace of one item (a step of the bar)
            spi = eta / (total - done) if eta is not None and total > done else None
            return Progress(
                label=label[:80], done=done, total=total, s_per_item=spi, eta_s=eta, line=line
            )
    if SLOW_PHASE.search(line) and not PHASE_OVER.search(line) and not NOT_A_PHASE.search(line):
        return Progress(label=line.strip()[:80], slow_phase=True, line=line)
    return None


def last_progress(lines: list[str], look_back: int = 5, history: int = 200) -> Progress | None:
    """The newest progress among the last few lines (a warning may follow the bar), with the
    gap to the same bar's previous printed line (by the bar's own elapsed times) among the
    `history` lines before it: the pace at which its log moves, whatever its rate per item."""
    for back, ln in enumerate(reversed(lines[-look_back:])):
        p = parse_progress(ln)
        if p is None:
            continue
        if p.elapsed_s is not None and p.done is not None:
            end = len(lines) - back - 1
            for prev_ln in reversed(lines[max(0, end - history) : end]):
                q = parse_progress(prev_ln)
                if q is None or q.label != p.label or q.total != p.total or q.done is None:
                    continue
                if q.done < p.done and q.elapsed_s is not None and q.elapsed_s < p.elapsed_s:
                    p.s_per_print = p.elapsed_s - q.elapsed_s
                break
        return p
    return None


def env_seconds(name: str, default: float) -> float:
    """A duration from the environment (`name`), else `default`; never negative, at most an hour."""
    raw = os.environ.get(name, "")
    try:
        v = float(raw) if raw.strip() else default
    except ValueError:
        v = default
    return min(max(v, 0.0), 3600.0)


def max_window_s() -> float:
    """PIVOT_LIVENESS_MAX_S, or 30 s."""
    return env_seconds(ENV_MAX, DEFAULT_MAX_S)


def cap_note(asked_s: float | None, window_s: float) -> str:
    """What a watch's header says when it waited less than it was asked: the cap, by name, so
    a reader never takes a 30 s watch for the 120 s one it asked for."""
    limit = max_window_s()
    if asked_s is None or asked_s <= limit + 0.5 or window_s > limit + 0.5:
        return ""
    return f" (asked {asked_s:.0f} s; {ENV_MAX} caps a watch at {limit:.0f} s)"


def step_window_s(s_per_item: float) -> float:
    """How long a watch of a bar must last for silence to mean something: one and a half of its
    steps (steps vary about their mean) and a second. A shorter window, capped by the liveness
    limit, that saw nothing saw what a working loader looks like."""
    return 1.5 * s_per_item + 1.0


def window_for(
    base_s: float, progress: Progress | None, limit_s: float, silence_s: float | None = None
) -> float:
    """How long to wait for growth: the base, longer for a bar or slow phase, never past the
    limit. A bar with a known rate gets 1.5 items and a second; one without, the limit. A log
    that has already been silent for `silence_s` between two of its own lines (a long prefill,
    a slow step) and went on is not stalled after less than that: it gets that and a second."""
    base = min(base_s, limit_s)
    if silence_s is not None and base_s > 0:
        base = max(base, min(limit_s, silence_s + 1.0))
    if progress is None:
        return base
    step = progress.step_s()
    if step is not None and progress.done is not None:
        return min(limit_s, max(base, step_window_s(step)))
    return max(base, limit_s)


def poll_interval(elapsed_s: float, heavy: bool = False) -> float:
    """Seconds to the next read of a watch. A log read is a cheap stat-and-seek on the open
    connection, so it is polled often (death or growth is seen within half a second); a
    `heavy` read starts a program on the host each time (nvidia-smi, a cache listing) and moves
    in coarse steps, so it is polled every few seconds."""
    if heavy:
        return HEAVY_FAST_S if elapsed_s < HEAVY_FAST_PHASE_S else HEAVY_SLOW_S
    return POLL_FAST_S if elapsed_s < FAST_PHASE_S else POLL_SLOW_S


class Watched(BaseModel):
    """What a read watched over a window says of it (a container's or a pod's log)."""

    watched: bool = Field(False, description="read over a window (watch_s given)")
    grew: bool | None = Field(None, description="new lines arrived during the window")
    waited_s: float = 0.0
    window_s: float = Field(0.0, description="how long the watch was allowed to wait")
    asked_s: float | None = Field(None, description="the watch_s asked for")
    last_progress: Progress | None = Field(
        None, description="the newest progress bar in the last lines, with its pace and ETA"
    )


W = TypeVar("W", bound=Watched)


def watch(
    host: Any,
    first: W,
    again: Callable[[], W],
    key: Callable[[W], Any],
    tail: Callable[[W], list[str]],
    watch_s: float,
    heavy: bool = False,
) -> W:
    """Read `again()` over a window from `first` until `key` changes (a progress bar as the last
    line earns the longer window, its own pace saying when it moves next), through the host's
    clock and sleep; the result says whether it grew and how long was waited. A failed re-read
    ends the watch with the last good read."""
    t0 = host.clock()
    res, base = first, key(first)
    window = window_for(float(watch_s), last_progress(tail(first)), max(max_window_s(), 0.0), None)
    while key(res) == base and host.clock() - t0 < window:
        elapsed = host.clock() - t0
        host.sleep(min(poll_interval(elapsed, heavy=heavy), window - elapsed))
        nxt = again()
        if not getattr(nxt, "ok", True):
            break
        res = nxt
    res.watched, res.grew = True, key(res) != base
    res.waited_s = round(host.clock() - t0, 3)
    res.window_s = round(window, 3)
    res.asked_s = float(watch_s)
    res.last_progress = last_progress(tail(res))
    return res
