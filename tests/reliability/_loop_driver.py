"""Runs a night and SIGKILLs itself at an exact phase of one experiment (first attempt only).

Polling the ledger from outside misses phases that last milliseconds (pre-flight, apply,
revert); the loop's own `on_phase` hook fires right after the phase is committed to the
ledger, so the kill lands in that phase every time. SIGKILL is SIGKILL whoever sends it: no
`finally`, no atexit, children left as they are.

    python -m tests.reliability._loop_driver PLAN STATE EXPERIMENT PHASE DELAY_S
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

from loop.night import Night
from loop.plan import load_plan
from store.ledger.base import ExperimentRow


def main() -> None:
    plan_path, state, target, phase, delay = sys.argv[1:6]

    def hook(row: ExperimentRow, now: str) -> None:
        if row.name == target and now == phase and row.attempts == 1:
            print(f"killing in {phase}", flush=True)
            if float(delay) <= 0:
                os.kill(os.getpid(), signal.SIGKILL)
            threading.Timer(float(delay), os.kill, (os.getpid(), signal.SIGKILL)).start()

    Night(load_plan(Path(plan_path)), state, diagnoser=None, on_phase=hook).run()
    print("night ended without reaching the phase", flush=True)
    sys.exit(3)


if __name__ == "__main__":
    main()
