"""Eval throughput: the rulebook brain over evals/incidents/ with --jobs 2, in cards per second.

Target (issue 4): >= 50 cards/s on 2 cores. Workers are started and one untimed pass is run
first (imports, Runner construction, lazily loaded signatures), then three timed passes over
the same warm workers; the median is the figure. Card loading is not timed (done once).

    .venv/bin/python bench/eval_throughput.py [--jobs 2] [--runs 3] [--profile]

`--profile` runs one extra single-process pass under cProfile, with every thread profiled (the
graph runs nodes in a thread pool), and prints where the time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from evals.harness import EvalOptions, Evaluator, discover, load_cards  # noqa: E402

TARGET = 50.0


def profile_pass(cards: list, top: int = 25) -> None:  # type: ignore[type-arg]
    import concurrent.futures.thread as cft

    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()
    original = cft._WorkItem.run

    def run(self):  # type: ignore[no-untyped-def]
        p = cProfile.Profile()
        p.enable()
        try:
            return original(self)
        finally:
            p.disable()
            with lock:
                profiles.append(p)

    with Evaluator(EvalOptions(jobs=1)) as ev:
        ev.run(cards)
        cft._WorkItem.run = run  # type: ignore[method-assign]
        main = cProfile.Profile()
        try:
            main.enable()
            ev.run(cards)
            main.disable()
        finally:
            cft._WorkItem.run = original  # type: ignore[method-assign]
    stats = pstats.Stats(main)
    for p in profiles:
        stats.add(p)
    stats.sort_stats("tottime").print_stats(top)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=[str(ROOT / "evals" / "incidents")])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()

    cards, errors = load_cards(discover(args.paths))
    print(f"{len(cards)} cards ({len(errors)} did not load) from {', '.join(args.paths)}")
    if not cards:
        print(f"FAIL cards_per_second 0 (target >= {TARGET:.0f})")
        return 1
    rates: list[float] = []
    with Evaluator(EvalOptions(brain="rulebook", jobs=args.jobs)) as ev:
        ev.warm()
        ev.run(cards)  # untimed warm-up pass
        for i in range(args.runs):
            start = time.perf_counter()
            results = ev.run(cards)
            secs = time.perf_counter() - start
            rates.append(len(results) / secs)
            passed = sum(r.passed for r in results)
            print(
                f"run {i + 1}: {len(results)} cards in {secs:.3f} s = {rates[-1]:.1f} cards/s "
                f"({passed} passed)"
            )
    if args.profile:
        profile_pass(cards)
    rate = statistics.median(rates)
    verdict = "PASS" if rate >= TARGET else "FAIL"
    print(f"{verdict} cards_per_second {rate:.1f} (target >= {TARGET:.0f})")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main())
