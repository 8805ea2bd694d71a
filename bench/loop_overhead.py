"""Loop overhead per experiment beyond launch + benchmark (target <= 2 s).

Runs a short night on the emulator and times every phase from the ledger's phase callback:
overhead = the experiment's wall time minus [launch -> ready] and [benchmark], i.e. what the
loop itself adds (pre-flight, config apply, stop + orphan cleanup, revert + verify, bookkeeping).

    .venv/bin/python bench/loop_overhead.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loop.cli import prepare_demo  # noqa: E402
from loop.night import Night  # noqa: E402
from store.ledger.base import ExperimentRow  # noqa: E402

TARGET_S = 2.0


def main() -> int:
    marks: dict[str, list[tuple[str, float]]] = defaultdict(list)

    def on_phase(row: ExperimentRow, phase: str) -> None:
        marks[row.name].append((phase, time.monotonic()))

    with tempfile.TemporaryDirectory() as tmp:
        plan = prepare_demo(Path(tmp), load_s=0.5)
        # Only experiments that run to a benchmark; no search, no final slot.
        plan.experiments = [
            e for e in plan.experiments if e.name in ("graph-bs-16", "nccl-proto-simple")
        ]
        plan.search = None
        plan.budget.final_slot = False
        night = Night(plan, tmp, diagnoser=None, on_phase=on_phase)
        result = night.run()
        overheads = []
        for row in night.ledger.experiments(result.id):
            ph = dict(marks[row.name])
            if "benchmark" not in ph:
                print(f"{row.name}: {row.status} ({row.diagnosis}) - not measured")
                continue
            end = ph.get("done", time.monotonic())
            total = end - ph["preflight"]
            launch_ready = ph["benchmark"] - ph["launch"]
            bench = ph["stop"] - ph["benchmark"]
            over = total - launch_ready - bench
            overheads.append(over)
            print(
                f"{row.name:18s} total {total:5.2f}s  launch->ready {launch_ready:5.2f}s  "
                f"benchmark {bench:5.2f}s  overhead {over:5.2f}s "
                f"(preflight {ph['apply'] - ph['preflight']:.2f}, stop+revert {end - ph['stop']:.2f})"
            )
    med = statistics.median(overheads)
    ok = max(overheads) <= TARGET_S
    print(
        f"{'PASS' if ok else 'FAIL'} loop_overhead_s {max(overheads):.3f} (max of {len(overheads)}; median {med:.3f}; target <= {TARGET_S})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
