"""Follow one launch tick by tick until it is ready, dies, crashes, stalls or the watch gives up.

Every tick is the overnight loop's one shell command (loop/launcher.py `tick_command`: process
state, log size, probe code, new log bytes), so a watch over SSH costs one round trip per
0.15 s and a death is seen within a tick. What counts as fatal is the signature KB's word
(`loop.launcher._fatal`), never a grep for "Exception": the seed incident called a healthy loader
CRASHED from its import warnings. A stall is judged by the liveness window of tools/log_window.py
(longer for a progress bar or a slow phase, and never shorter than the longest silence this log
has already come back from), so a loader printing a shard every 20 s is not called stalled at 6.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable

from pydantic import BaseModel, Field

from loop import launcher
from tools import engines
from tools.host import Host
from tools.log_window import DEFAULT_BASE_S, last_progress, max_window_s, window_for
from tools.logtime import longest_silence
from watch.outcome import EtaSample, Outcome, Status, Target
from watch.progress import LoadRate, engine_of, is_ready_line, markers, phase_of

#: how much of an existing log is read when the watch attaches (its current launch's start
#: usually lies within it; older bytes are an earlier launch or decode noise)
BACKLOG_BYTES = 2 * 1024 * 1024
#: consecutive failed ticks (SSH dropped, host gone) before the watch gives up
MAX_TICK_FAILURES = 20
RECENT_LINES = 400

Note = Callable[[str], None]


class Limits(BaseModel):
    tick_s: float = Field(launcher.TICK_S, description="seconds between ticks (<= 0.2)")
    stall_base_s: float = Field(DEFAULT_BASE_S, description="the stall window before any pace")
    stall_max_s: float = Field(default_factory=max_window_s, description="the longest window")
    timeout_s: float | None = Field(None, description="give up after this long (None: never)")
    fatal_grace_s: float = Field(2.0, description="a fatal line with the pid alive this long")
    past_ready: bool = Field(False, description="keep following after ready, until it exits")


class Follower:
    """One watch. `on_note` gets a line per change (phase, progress with ETA, ready);
    `on_bytes` gets the log's new text as it arrives (`pivot launch` echoes it)."""

    def __init__(
        self,
        host: Host,
        target: Target,
        limits: Limits | None = None,
        on_note: Note | None = None,
        on_bytes: Note | None = None,
    ) -> None:
        self.host = host
        self.t = target
        self.lim = limits or Limits()
        self.note_fn = on_note
        self.on_bytes = on_bytes
        self.t0 = time.monotonic()
        self.offset = 0
        self.partial = ""
        self.recent: list[str] = []
        self.engine: str | None = None
        self.marks = markers(None)
        self.phase: str | None = None
        self.rate = LoadRate()
        self.etas: list[EtaSample] = []
        self.ready_line: str | None = None
        self.fatal: tuple[str, str | None] | None = None
        self.fatal_at: float | None = None
        self.last_growth = self.t0
        self.gap_max: float | None = None
        self.backlog_until = 0
        self.launch_re = re.compile("|".join(f"(?:{p})" for p in engines.launch_patterns()))
        self.was_ready = False
        self.cut_first = False
        self.noted_phase: str | None = None

    # -- output -----------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def note(self, text: str) -> None:
        if self.note_fn:
            self.note_fn(f"[{self.elapsed():6.1f}s] {text}")

    def outcome(self, status: Status, detail: str, **kw: object) -> Outcome:
        bar = self.rate.measured()
        return Outcome(
            status=status,
            detail=detail,
            target=self.t,
            engine=self.engine,
            elapsed_s=round(self.elapsed(), 3),
            phase=self.phase,
            progress=bar.describe() if bar else None,
            etas=self.etas,
            **kw,  # type: ignore[arg-type]
        )

    # -- reading ----------------------------------------------------------------------------
    def _tick(self, curl: bool) -> tuple[str, int, str, str] | str:
        """(state, size, code, new text), or the error when the host did not answer."""
        res = self.host.run(
            launcher.tick_command(
                self.t.pid, self.t.log or "/dev/null", self.offset, self.t.url, curl
            ),
            timeout=10,
        )
        if res.error:
            return f"{res.error}" + (f" (fix: {res.fix})" if res.fix else "")
        head, _, new = res.stdout.partition(launcher.SEP + "\n")
        parts = head.split()
        state = parts[0] if parts else "R"
        size = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        code = parts[2] if len(parts) > 2 else "0"
        return state, size, code, new

    def _command(self) -> str | None:
        if self.t.command or self.t.pid is None:
            return self.t.command
        res = self.host.run(f"tr '\\0' ' ' < /proc/{self.t.pid}/cmdline", timeout=10)
        return res.stdout.strip() or None if res.ok else None

    def _set_engine(self, engine: str | None) -> None:
        if engine and engine != self.engine:
            self.engine = engine
            self.marks = markers(engine)

    def _reset(self) -> None:
        """A launch marker: what came before belongs to an earlier launch in the same log."""
        self.phase, self.ready_line, self.fatal, self.fatal_at = None, None, None, None
        self.rate = LoadRate()

    def _read(self, new: str, now: float, backlog: bool) -> None:
        if not new:
            return
        if not backlog and self.on_bytes:
            self.on_bytes(new)
        self.offset += len(new.encode("utf-8", errors="replace"))
        if not backlog:
            self.gap_max = max(self.gap_max or 0.0, now - self.last_growth)
        self.last_growth = now
        text = self.partial + new
        if self.cut_first:  # attached mid-file: the first line read is a fragment
            self.cut_first = "\n" not in text
            text = text.split("\n", 1)[1] if "\n" in text else ""
        chunks = re.split(r"[\r\n]", text)
        self.partial = chunks.pop()
        fresh = [c for c in chunks if c.strip()]
        if not fresh:
            self._partial_bar(now, backlog)
            return
        self.recent = (self.recent + fresh)[-RECENT_LINES:]
        if self.engine is None:
            self._set_engine(engine_of(self.recent))
        segment: list[str] = []
        for line in fresh:
            if self.launch_re.search(line):
                self._reset()
                segment = []
            segment.append(line)
            ph = phase_of(line, self.marks)
            if ph and ph != self.phase:
                self.phase = ph
            if self.ready_line is None and is_ready_line(line, self.marks):
                self.ready_line = line
            before = self.rate.bar.done if self.rate.bar else None
            bar = self.rate.observe(line, now, backlog)
            if bar is not None and bar.done != before:
                self._eta_sample()
        if self.phase != self.noted_phase:  # once per read: a backlog shows where it is now
            self.noted_phase = self.phase
            self.note(f"phase {self.phase}" + (" (when the watch began)" if backlog else ""))
        self._partial_bar(now, backlog)
        if self.fatal is None:
            hit = launcher._fatal(segment)
            if hit:
                self.fatal, self.fatal_at = hit, now
                self.note(f"fatal line ({hit[1] or 'signature'}): {hit[0][:160]}")
        if backlog and self.rate.bar is not None:
            self._eta_sample()

    def _partial_bar(self, now: float, backlog: bool) -> None:
        """A tqdm bar ends its line only when the next update begins ("\r..."): the bar on
        screen is the unterminated last line, read as progress without being consumed."""
        if not self.partial.strip():
            return
        before = self.rate.bar.done if self.rate.bar else None
        bar = self.rate.observe(self.partial, now, backlog)
        if bar is not None and bar.done != before:
            self._eta_sample()

    def _eta_sample(self) -> None:
        bar = self.rate.measured()
        if bar is None or bar.done is None or bar.total is None:
            return
        s = EtaSample(
            elapsed_s=round(self.elapsed(), 3), done=bar.done, total=bar.total, eta_s=bar.eta_s
        )
        if self.etas and (self.etas[-1].done, self.etas[-1].total) == (s.done, s.total):
            self.etas[-1] = s
            return
        self.etas.append(s)
        self.note(bar.describe())

    def window(self) -> float:
        """The stall window from this launch's own pace (tools/log_window.py)."""
        silences = [s for s in (longest_silence(self.recent), self.gap_max) if s is not None]
        progress = last_progress(self.recent)
        if (
            progress is not None
            and self.rate.bar is not None
            and progress.total == self.rate.bar.total
        ):
            progress = self.rate.measured()
        return window_for(
            self.lim.stall_base_s,
            progress,
            self.lim.stall_max_s,
            max(silences) if silences else None,
        )

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> Outcome:
        probe = self.host.run("command -v curl", timeout=15)
        if probe.error:
            return self.outcome(Status.gave_up, f"cannot reach {self.host.name}: {probe.error}")
        curl = probe.ok
        self._set_engine(engine_of([], self._command()))
        if self.t.log:
            res = self.host.run(f"stat -L -c %s {shlex.quote(self.t.log)} 2>/dev/null", timeout=10)
            size = int(res.stdout.strip()) if res.stdout.strip().isdigit() else 0
            self.offset = max(0, size - BACKLOG_BYTES)
            self.backlog_until = size
            self.cut_first = self.offset > 0
        failures = 0
        first = True
        while True:
            now = time.monotonic()
            got = self._tick(curl)
            if isinstance(got, str):
                failures += 1
                if failures >= MAX_TICK_FAILURES:
                    return self.outcome(Status.gave_up, f"lost {self.host.name}: {got}")
                time.sleep(self.lim.tick_s)
                continue
            failures = 0
            state, size, code, new = got
            if size < self.offset:  # truncated or rotated: a new file from its start
                self.offset, self.partial = 0, ""
            backlog = self.offset < self.backlog_until
            self._read(new, now, backlog)
            if state in launcher.DEAD_STATES:
                return self._died(curl, first)
            first = False
            done = self._judge(code, now)
            if done is not None:
                return done
            time.sleep(max(0.0, self.lim.tick_s - (time.monotonic() - now)))

    def _died(self, curl: bool, first: bool) -> Outcome:
        failed_at = time.time()
        # the last lines may land between the tick's log read and the exit: read once more
        got = self._tick(curl)
        if not isinstance(got, str):
            self._read(got[3], time.monotonic(), False)
        if self.partial.strip():
            self._read("\n", time.monotonic(), False)
        hit = self.fatal or launcher._fatal(self.recent[-200:])
        line = hit[0] if hit else launcher.last_error_line(self.recent)
        when = "before the watch began" if first else f"after {self.elapsed():.1f} s"
        where = f" in phase {self.phase}" if self.phase and not self.was_ready else ""
        detail = f"pid {self.t.pid} exited {when}{where}" + (
            " (fatal line in its log)" if hit else " with no fatal line in its log"
        )
        if self.was_ready:
            detail += " (it had been ready)"
        return self.outcome(
            Status.died, detail, evidence=line, label=hit[1] if hit else None, failed_at=failed_at
        )

    def _judge(self, code: str, now: float) -> Outcome | None:
        if self.was_ready:
            return None
        if code.startswith("2") or self.ready_line is not None:
            why = f"{self.t.url} answered {code}" if code.startswith("2") else "its ready line"
            self.was_ready = True
            self.note(f"ready: {why}")
            if self.lim.past_ready:
                return None
            return self.outcome(
                Status.ready, f"ready after {self.elapsed():.1f} s: {why}", evidence=self.ready_line
            )
        if (
            self.fatal
            and self.fatal_at is not None
            and now - self.fatal_at > self.lim.fatal_grace_s
        ):
            return self.outcome(
                Status.crashed,
                f"fatal line in its log; still alive {self.lim.fatal_grace_s:.0f} s later",
                evidence=self.fatal[0],
                label=self.fatal[1],
                failed_at=time.time(),
            )
        if self.t.log:
            window = self.window()
            if now - self.last_growth > window:
                what = f"pid {self.t.pid} alive but its" if self.t.pid else "its"
                return self.outcome(
                    Status.stalled,
                    f"{what} log has not grown for {now - self.last_growth:.1f} s, past the "
                    f"{window:.1f} s window its own pace allows",
                    evidence=self.recent[-1] if self.recent else None,
                    window_s=round(window, 3),
                    failed_at=time.time(),
                )
        if self.lim.timeout_s is not None and self.elapsed() > self.lim.timeout_s:
            return self.outcome(
                Status.gave_up,
                f"not ready after {self.lim.timeout_s:.0f} s, still alive"
                + (f" in phase {self.phase}" if self.phase else ""),
                evidence=self.recent[-1] if self.recent else None,
            )
        return None
