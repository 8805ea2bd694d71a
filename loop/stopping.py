"""SIGTERM and SIGINT end a night the way Ctrl-C always should have: clean, and saying so.

Why an exception and not a flag: the main thread may be deep in a blocking call (a benchmark
run, a readiness tick); an exception raised by the handler unwinds it at once, and the night
then stops every server of its own, reverts every config file and re-queues what was in
flight, exactly as a restart after `kill -9` would, before the process exits.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Interrupted(BaseException):
    """The loop was asked to stop (SIGTERM/SIGINT). A BaseException, like KeyboardInterrupt:
    no `except Exception` on the way may swallow it."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.actions: list[str] = []
        super().__init__(signal.Signals(signum).name if signum else "stop")

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else "stop"

    @property
    def exit_code(self) -> int:
        return 128 + self.signum if self.signum else 1


@contextmanager
def interruptible() -> Iterator[None]:
    """Turn SIGTERM and SIGINT into `Interrupted` in the main thread while the body runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        if fired.is_set():  # the clean-up is under way: a second signal must not cut it short
            return
        fired.set()
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
