"""Loop workers on one PostgreSQL: how fast the board hands out experiments, and a whole night.

1. Claims: N pending experiments in one night, W worker processes each claiming through
   `FleetBoard.claim` (the row lock workers take) until none is left. Every experiment must be
   claimed exactly once; prints claims per second and the p50/p95 of one claim.
2. A night: one, then three `pivot loop run --worker` processes on the emulator slots of the
   test's plan (tests/loop/test_workers.py, nobody killed; each server takes --load-s to start,
   as a real engine takes minutes); prints the wall time of each and the rows the night wrote
   (ledger, fleet board, Optuna), for docs/scale.md's "rows per night".

Target: every experiment claimed once and >= 100 claims/s (a night claims a few dozen in hours).
Final line: PASS|FAIL <metric> <value> (target ...).

    .venv/bin/python bench/loop_workers.py [--experiments 2000] [--workers 8]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import verdict  # noqa: E402
from tests.postgres import start_postgres  # noqa: E402

TARGET = 100.0


def _claimer(url: str, night_id: str, name: str, out: mp.Queue) -> None:  # type: ignore[type-arg]
    from loop.fleet import FleetBoard
    from store.ledger.postgres import PgLedger

    ledger = PgLedger(url)
    board = FleetBoard(ledger)
    got: list[str] = []
    took: list[float] = []
    while True:
        t0 = time.perf_counter()
        row = board.claim(night_id, ("ranked",), name)
        took.append(time.perf_counter() - t0)
        if row is None:
            break
        got.append(row.id)
    ledger.close()
    out.put((got, took))


def claims(url: str, n: int, workers: int) -> tuple[float, list[float], bool]:
    from loop.fleet import FleetBoard
    from store.ledger.base import ExperimentRow
    from store.ledger.postgres import PgLedger

    ledger = PgLedger(url)
    FleetBoard(ledger)  # migrations once, before the race
    night, _ = ledger.open_night("bench-claims", "-", "/tmp")
    for i in range(n):
        ledger.add(
            ExperimentRow(id=f"{night.id}:e{i}", night_id=night.id, seq=i + 1, name=f"e{i}",
                          kind="ranked")
        )  # fmt: skip
    q: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    procs = [mp.Process(target=_claimer, args=(url, night.id, f"w{i}", q)) for i in range(workers)]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    results = [q.get(timeout=600) for _ in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
    ids = [i for got, _ in results for i in got]
    took = [t for _, ts in results for t in ts]
    once = len(ids) == n and len(set(ids)) == n
    left = [r for r in ledger.experiments(night.id) if r.status != "running"]
    ledger.close()
    return n / wall, took, once and not left


def night(url: str, workers: int, load_s: float) -> tuple[float, dict[str, int]]:
    """`workers` CLI workers (of the plan's three slots), one night, nobody killed: wall time
    and rows written."""
    import psycopg
    import yaml

    from tests.loop.test_workers import _plan, _worker

    tmp = Path(tempfile.mkdtemp(prefix="bench-loop-workers-"))
    plan, cfgs = _plan(tmp, load_s=load_s)
    plan_file = tmp / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan.model_dump(mode="json")))
    env = {**os.environ, "PIVOT_DATABASE_URL": url, "PIVOT_HOME": str(tmp / "home")}
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            _worker(plan_file, tmp / f"state-{s}", s), cwd=ROOT, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        for s in list(cfgs)[:workers]
    ]  # fmt: skip
    for p in procs:
        _, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"worker failed: {err[-2000:]}")
    wall = time.perf_counter() - t0
    rows: dict[str, int] = {}
    with psycopg.connect(url) as conn:
        nid = conn.execute("select id from nights where plan_name = %s", [plan.name]).fetchone()[0]  # type: ignore[index]
        for table in (
            "experiments",
            "baseline_files",
            "night_events",
            "fleet_workers",
            "fleet_requeues",
        ):
            rows[table] = conn.execute(
                f"select count(*) from {table} where night_id = %s", [nid]
            ).fetchone()[0]  # type: ignore[index]
        rows["optuna trials"] = conn.execute("select count(*) from trials").fetchone()[0]  # type: ignore[index]
        rows["optuna params+values+attrs"] = sum(
            conn.execute(f"select count(*) from {t}").fetchone()[0]  # type: ignore[index]
            for t in ("trial_params", "trial_values", "trial_system_attributes",
                      "trial_user_attributes")
        )  # fmt: skip
    return wall, rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--experiments", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--no-night", action="store_true", help="only the claim race")
    ap.add_argument("--load-s", type=float, default=3.0, help="emulated server start-up time")
    a = ap.parse_args()
    pg = start_postgres()
    try:
        rate, took, once = claims(pg.new_database(), a.experiments, a.workers)
        ms = sorted(t * 1000 for t in took)
        print(
            f"claims: {a.experiments} experiments, {a.workers} worker processes: {rate:.0f}/s; "
            f"one claim p50 {statistics.median(ms):.1f} ms, p95 {ms[int(0.95 * len(ms))]:.1f} ms; "
            f"each claimed once: {once}"
        )
        if not a.no_night:
            for n in (1, 3):
                wall, rows = night(pg.new_database(), n, a.load_s)
                print(
                    f"night, {n} worker(s), baseline + 3 ranked + 4 trials, server start-up "
                    f"{a.load_s:g} s: {wall:.1f} s wall"
                )
            print("rows: " + ", ".join(f"{k} {v}" for k, v in rows.items()))
    finally:
        pg.stop()
    verdict(once and rate >= TARGET, "claims_per_s", f"{rate:.0f}", f">= {TARGET:.0f}, each once")


if __name__ == "__main__":
    main()
