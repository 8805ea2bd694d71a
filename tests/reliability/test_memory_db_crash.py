"""Concurrent writers from several processes (API-like and loop-like) on the memory DB and the
loop ledger, each `kill -9`ed mid-write, round after round, on the same two files (WAL).

After every round: PRAGMA integrity_check is ok on both files, and every row a writer reported
as committed is there (todos, handoffs, events, ledger rows at least at the reported phase).
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.reliability._db_worker import PHASES
from tests.reliability._figures import figure, trials

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = trials("PIVOT_RELIABILITY_DB_ROUNDS", 8)
WRITERS = [("api", 2), ("loop", 2)]


def _integrity(path: Path) -> str:
    with sqlite3.connect(path, timeout=30) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def _ids(path: Path, sql: str) -> set[tuple[object, ...]]:
    with sqlite3.connect(path, timeout=30) as conn:
        return {tuple(r) for r in conn.execute(sql).fetchall()}


def test_kill_9_of_concurrent_writers_loses_no_committed_row(tmp_path: Path) -> None:
    mem_db, ledger_db = tmp_path / "memory.db", tmp_path / "ledger.db"
    rng = random.Random(11)
    committed: dict[str, set[tuple[object, ...]]] = {
        "todo": set(),
        "handoff": set(),
        "event": set(),
    }
    ledger_phase: dict[str, int] = {}
    order = ["pending", *PHASES]
    kills = 0
    t0 = time.monotonic()
    for rnd in range(ROUNDS):
        procs = []
        for kind, n in WRITERS:
            for k in range(n):
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "tests.reliability._db_worker",
                            kind,
                            str(mem_db),
                            str(ledger_db),
                            f"{kind}{k}r{rnd}",
                        ],  # fmt: skip
                        cwd=ROOT,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                    )
                )
        for p in procs:  # each has opened its DBs (migrations done) before the clock starts
            assert p.stdout is not None and p.stdout.readline().strip() == "ready", (
                p.stderr.read() if p.stderr else ""
            )
        time.sleep(rng.uniform(0.05, 0.4))
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)
            kills += 1
        for p in procs:
            out, err = p.communicate(timeout=10)
            assert p.returncode == -9, err[-2000:]
            # only whole lines: a SIGKILL can land between two pieces of a buffered write,
            # and what it cut off (the text after the last newline, an empty piece) was not said
            for line in out.split("\n")[:-1]:
                if not line.strip():
                    continue
                kind, *rest = line.split()
                if kind == "todo":
                    committed["todo"].add((int(rest[0]),))
                elif kind == "handoff":
                    committed["handoff"].add((int(rest[0]),))
                elif kind == "event":
                    committed["event"].add((rest[0], int(rest[1])))
                elif kind == "ledger":
                    ledger_phase[rest[0]] = max(ledger_phase.get(rest[0], 0), order.index(rest[1]))

        assert _integrity(mem_db) == "ok" and _integrity(ledger_db) == "ok"
        assert committed["todo"] <= _ids(mem_db, "select id from todos")
        assert committed["handoff"] <= _ids(mem_db, "select id from handoffs")
        assert committed["event"] <= _ids(mem_db, "select session_id, seq from events")
        stored = dict(_ids(ledger_db, "select id, phase from experiments"))
        missing = set(ledger_phase) - set(stored)
        assert not missing, f"round {rnd}: committed ledger rows lost: {missing}"
        behind = [i for i, ph in ledger_phase.items() if order.index(stored[i]) < ph]
        assert not behind, f"round {rnd}: ledger rows behind their committed phase: {behind}"

    assert all(committed.values()) and ledger_phase  # the writers really wrote, every kind
    figure(
        "memory DB + ledger kill -9",
        rounds=ROUNDS,
        writer_processes_killed=kills,
        committed_todos=len(committed["todo"]),
        committed_handoffs=len(committed["handoff"]),
        committed_events=len(committed["event"]),
        ledger_rows=len(ledger_phase),
        lost=0,
        integrity="ok",
        seconds=round(time.monotonic() - t0, 1),
    )
