"""The night's ledger in one SQLite file (WAL) in the state dir, one row per experiment
(`PgLedger`, store/ledger/postgres.py, keeps the same tables in a team's PostgreSQL).

Why its own file: the loop writes while the API and the agent's memory write theirs; separate
files never lock each other.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from store.ledger.base import Event, ExperimentRow, NightRow, Phase
from store.ledger.codec import (
    baseline_file,
    dump_experiment,
    dump_night,
    experiment_fields,
    load_experiment,
    load_night,
    new_night,
    night_fields,
)
from store.sqlite_db import migration_lock, open_database, sqlite_utils


def _m001_init(db: sqlite_utils.Database) -> None:
    db["nights"].create(
        {
            "id": str, "plan_name": str, "plan_digest": str, "state_dir": str, "started": float,
            "ended": float, "status": str, "noise": float, "best": str, "final_pid": int,
            "final_host": str, "note": str,
        },
        pk="id",
    )  # fmt: skip
    db["experiments"].create(
        {
            "id": str, "night_id": str, "seq": int, "name": str, "kind": str, "host": str,
            "change": str, "diff": str, "expect": str, "status": str, "phase": str,
            "metric_mean": float, "metric_spread": float, "metric_values": str, "gain": float,
            "duration_s": float, "label": str, "evidence": str, "diagnosis": str,
            "log_path": str, "pid": int, "attempts": int, "trial_number": int,
            "started": float, "ended": float,
        },
        pk="id",
    )  # fmt: skip
    db["experiments"].create_index(["night_id", "seq"])
    db["baseline_files"].create(
        {"night_id": str, "host": str, "path": str, "sha256": str, "content": bytes},
        pk=("night_id", "host", "path"),
    )


def _m002_left_in_place(db: sqlite_utils.Database) -> None:
    db["nights"].add_column("left_in_place", str)  # JSON list of LeftChange


def _m003_liveness_events(db: sqlite_utils.Database) -> None:
    for col, typ in (("heartbeat", float), ("loop_pid", int), ("loop_host", str)):
        db["nights"].add_column(col, typ)
    db["events"].create({"night_id": str, "at": float, "kind": str, "detail": str})
    db["events"].create_index(["night_id", "at"])


def _m004_metrics_slo(db: sqlite_utils.Database) -> None:
    db["experiments"].add_column("metrics", str)  # JSON {metric: [value per run]}
    db["experiments"].add_column("slo", str)


def _m005_intervals(db: sqlite_utils.Database) -> None:
    for col, typ in (("ci_low", float), ("ci_high", float), ("stats", str), ("remeasured", int)):
        db["experiments"].add_column(col, typ)


def _m006_run_launch(db: sqlite_utils.Database) -> None:
    db["experiments"].add_column("run_launch", str)  # JSON [launch start per run]


def _m007_night_owner(db: sqlite_utils.Database) -> None:
    db["night_owner"].create(  # who runs each plan now (loop/night_lock.py)
        {
            "plan_name": str, "pid": int, "host": str, "since": float, "state_dir": str,
            "heartbeat": float,
        },
        pk="plan_name",
    )  # fmt: skip


MIGRATIONS: list[tuple[str, Callable[[sqlite_utils.Database], None]]] = [
    ("001_init", _m001_init),
    ("002_left_in_place", _m002_left_in_place),
    ("003_liveness_events", _m003_liveness_events),
    ("004_metrics_slo", _m004_metrics_slo),
    ("005_intervals", _m005_intervals),
    ("006_run_launch", _m006_run_launch),
    ("007_night_owner", _m007_night_owner),
]


class Ledger:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        with migration_lock(self.path):  # the service may open the ledger while the loop starts
            self.db = open_database(self.path)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self._migrate()

    def _migrate(self) -> None:
        with self._lock:
            self.db["_migrations"].create(
                {"name": str, "applied": float}, pk="name", if_not_exists=True
            )
            done = {r["name"] for r in self.db["_migrations"].rows}
            for name, fn in MIGRATIONS:
                if name not in done:
                    with self.db.conn:
                        fn(self.db)
                        self.db["_migrations"].insert({"name": name, "applied": time.time()})

    # nights
    def open_night(self, plan_name: str, digest: str, state_dir: str) -> tuple[NightRow, bool]:
        """The running night of this plan (resumed=True), or a new one."""
        with self._lock:
            rows = list(
                self.db["nights"].rows_where(
                    "plan_name = ? and status = 'running'", [plan_name], order_by="started desc"
                )
            )
            if rows:
                return load_night(rows[0]), True
            night = new_night(plan_name, digest, state_dir)
            self.db["nights"].insert(dump_night(night))
            return night, False

    def night(self, night_id: str | None = None) -> NightRow | None:
        with self._lock:
            if night_id:
                rows = list(self.db["nights"].rows_where("id = ?", [night_id]))
            else:
                rows = list(self.db["nights"].rows_where(order_by="started desc", limit=1))
            return load_night(rows[0]) if rows else None

    def update_night(self, night_id: str, **fields: Any) -> None:
        with self._lock, self.db.conn:
            self.db["nights"].update(night_id, night_fields(fields))

    # night events
    def add_event(self, night_id: str, kind: str, detail: str) -> None:
        with self._lock, self.db.conn:
            self.db["events"].insert(
                {"night_id": night_id, "at": time.time(), "kind": kind, "detail": detail}
            )

    def events(self, night_id: str) -> list[Event]:
        with self._lock:
            rows = list(self.db["events"].rows_where("night_id = ?", [night_id], order_by="at"))
        return [Event(**r) for r in rows]

    # baseline files
    def save_baseline_file(self, night_id: str, host: str, path: str, content: bytes) -> None:
        with self._lock, self.db.conn:
            self.db["baseline_files"].upsert(
                baseline_file(night_id, host, path, content), pk=("night_id", "host", "path")
            )

    def baseline_files(self, night_id: str, host: str) -> dict[str, bytes]:
        with self._lock:
            return {
                r["path"]: r["content"]
                for r in self.db["baseline_files"].rows_where(
                    "night_id = ? and host = ?", [night_id, host]
                )
            }

    # experiments
    def add(self, row: ExperimentRow) -> ExperimentRow:
        with self._lock, self.db.conn:
            self.db["experiments"].insert(dump_experiment(row), pk="id", ignore=True)
        return self.get(row.id) or row

    def get(self, exp_id: str) -> ExperimentRow | None:
        with self._lock:
            rows = list(self.db["experiments"].rows_where("id = ?", [exp_id]))
        return load_experiment(rows[0]) if rows else None

    def experiments(self, night_id: str) -> list[ExperimentRow]:
        with self._lock:
            rows = list(
                self.db["experiments"].rows_where("night_id = ?", [night_id], order_by="seq")
            )
        return [load_experiment(r) for r in rows]

    def update(self, exp_id: str, **fields: Any) -> None:
        with self._lock, self.db.conn:
            self.db["experiments"].update(exp_id, experiment_fields(fields))

    def set_phase(self, exp_id: str, phase: Phase) -> None:
        self.update(exp_id, phase=phase)

    def next_seq(self, night_id: str) -> int:
        with self._lock:
            row = self.db.execute(
                "select coalesce(max(seq), -1) + 1 from experiments where night_id = ?", [night_id]
            ).fetchone()
        return int(row[0])

    def close(self) -> None:
        self.db.conn.close()
