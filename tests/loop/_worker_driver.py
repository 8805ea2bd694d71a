"""A fleet worker that SIGKILLs itself in the benchmark of the first experiment of KIND it runs
(`search`: a TPE trial; `ranked`: a ranked experiment).

The kill comes from the loop's own `on_phase` hook, right after the phase is committed, so it
lands mid-trial every time (a poll from outside can miss it). SIGKILL: no `finally`, no atexit,
the worker's server and its changed config left as they are for the fleet to clean.

    python -m tests.loop._worker_driver PLAN STATE SLOT KIND [TERM]

With TERM it sends itself SIGTERM instead: the worker stops, reverts and re-queues on its own,
and exits 143 as `pivot loop run` does.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

from loop.plan import load_plan
from loop.stopping import Interrupted
from loop.workers import FleetWorker
from store.ledger.base import ExperimentRow


def main() -> None:
    plan_path, state, slot, kind = sys.argv[1:5]
    sig = signal.SIGTERM if sys.argv[5:] == ["TERM"] else signal.SIGKILL

    def hook(row: ExperimentRow, now: str) -> None:
        if row.kind == kind and now == "benchmark" and row.attempts == 1:
            print(f"killing in {row.name} {now}", flush=True)
            threading.Timer(0.2, os.kill, (os.getpid(), sig)).start()

    try:
        FleetWorker(load_plan(Path(plan_path)), state, slot=slot, on_phase=hook).run()
    except Interrupted as stop:
        print("; ".join(stop.actions), flush=True)
        sys.exit(stop.exit_code)
    print(f"the night ended before this worker ran a {kind} experiment", flush=True)
    sys.exit(3)


if __name__ == "__main__":
    main()
