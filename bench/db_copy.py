"""`pivot db copy` of a home with 10k sessions into a real PostgreSQL: rows equal, time taken.

The home is built from one real investigation (a replay card on the rulebook), whose rows
(session, events, observations, hypotheses, conclusion) are cloned under fresh session ids
until the home holds N sessions, plus a todo and a handoff per hundred. Then the path users
run is timed: `pivot db copy --from sqlite --to URL` as a child process, which verifies every
table row for row and exits 1 on any difference. Final line: PASS|FAIL <metric> <value>.

    .venv/bin/python bench/db_copy.py [--sessions 10000]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import verdict  # noqa: E402
from tests.postgres import start_postgres  # noqa: E402

CARD = ROOT / "evals" / "incidents" / "h200-stale-process-cuda-oom.yaml"
TABLES = ["sessions", "events", "observations", "hypotheses", "conclusions", "todos", "handoffs"]


def build_home(home: Path, sessions: int) -> dict[str, int]:
    from agent.runner import Runner
    from agent.settings import Settings
    from cards.model import load_card
    from cards.replay import ReplayHost
    from store.memory.sqlite import Memory

    card = load_card(CARD)
    runner = Runner(Settings(home=home, database_url=None))
    seed = runner.start(ReplayHost(card, name="node-0"), card.symptom).session_id
    runner.close()
    mem = Memory(home / "memory.db")
    db = mem.db
    template = {t: list(db[t].rows_where("session_id = ?", [seed])) for t in TABLES[1:5]}
    template["sessions"] = list(db["sessions"].rows_where("id = ?", [seed]))
    with db.conn:
        for i in range(1, sessions):
            sid = uuid.uuid4().hex[:12]
            host = f"node-{i % 500}"
            db["sessions"].insert_all(
                [{**r, "id": sid, "host": host} for r in template["sessions"]]
            )
            for t in TABLES[1:5]:
                db[t].insert_all(
                    [
                        {**r, "session_id": sid, **({"host": host} if "host" in r else {})}
                        for r in template[t]
                    ]
                )
            if i % 100 == 0:
                db["todos"].insert({"host": host, "text": f"check {host}", "done": 0,
                                    "created": "2026-12-01T00:00:00.000+00:00", "session_id": sid})  # fmt: skip
                db["handoffs"].insert({"host": host, "text": f"handoff {host}",
                                       "created": "2026-12-01T00:00:00.000+00:00", "session_id": sid})  # fmt: skip
    counts = {t: db.execute(f"select count(*) from {t}").fetchone()[0] for t in TABLES}
    mem.close()
    return counts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=10_000)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="pivot-bench-copy-")) / "home"
    t0 = time.perf_counter()
    counts = build_home(home, args.sessions)
    print(f"home built in {time.perf_counter() - t0:.1f} s: {counts}")
    size = (home / "memory.db").stat().st_size
    pg = start_postgres()
    try:
        url = pg.new_database()
        env = {**os.environ, "PIVOT_HOME": str(home), "PYTHONPATH": str(ROOT)}
        env.pop("PIVOT_DATABASE_URL", None)
        t0 = time.perf_counter()
        p = subprocess.run(
            [sys.executable, "-m", "agent.cli", "db", "copy", "--from", "sqlite", "--to", url],
            env=env, capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
        took = time.perf_counter() - t0
        print(p.stdout.rstrip())
        if p.returncode != 0:
            print(p.stderr[-2000:])
        import psycopg

        with psycopg.connect(url) as conn:
            theirs = {t: conn.execute(f"select count(*) from {t}").fetchone()[0] for t in TABLES}  # type: ignore[index]
        src = sqlite3.connect(home / "memory.db")
        ours = {t: src.execute(f"select count(*) from {t}").fetchone()[0] for t in TABLES}
        src.close()
    finally:
        pg.stop()
    rows = sum(ours.values())
    print(f"memory.db {size / 1e6:.1f} MB, {rows} rows; copied and verified in {took:.1f} s "
          f"({rows / took:,.0f} rows/s)")  # fmt: skip
    verdict(
        p.returncode == 0 and ours == theirs,
        "db_copy_10k_sessions",
        f"{took:.1f} s, {rows} rows equal" if ours == theirs else "rows differ",
        "rows equal on both sides; time reported",
    )


if __name__ == "__main__":
    main()
