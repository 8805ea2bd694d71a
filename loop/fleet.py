"""The fleet's board in the team's PostgreSQL: who works on a night, who holds which experiment.

Why PostgreSQL and not a broker: the ledger already lives there, and a claim is one row lock
(`SELECT … FOR UPDATE SKIP LOCKED` on the experiment row, then `status = 'running'` in the same
transaction), so two workers never take the same experiment and none waits for another's lock.
A worker proves it is alive by stamping its row here with the DATABASE's clock (workers on
several machines never compare their own clocks); a worker whose stamp is older than the lease
is lost, and whoever notices first cleans up after it (loop/workers.py), under one advisory lock
per night so two live workers never clean up the same loss twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

from psycopg import Connection
from pydantic import BaseModel, Field

from store.ledger.base import ExperimentRow
from store.ledger.codec import load_experiment
from store.pg import Migration, migrate

WorkerStatus = Literal["running", "done", "stopped", "lost"]
#: The database's clock in epoch seconds: one clock for the whole fleet.
NOW = "extract(epoch from clock_timestamp())"


class WorkerRow(BaseModel):
    """One `pivot loop run --worker` process on one night."""

    night_id: str
    name: str = Field(description="the host slot it drives; the ledger's `host` column")
    machine: str = Field(description="where the worker process runs (its hostname)")
    pid: int
    spec: str = Field(description="its HostSpec as JSON, so another worker can reach its host")
    store_root: str | None = None
    started: float
    heartbeat: float
    status: WorkerStatus = "running"
    note: str | None = None


class Requeue(BaseModel):
    """An experiment handed back to the fleet because the worker running it was lost."""

    night_id: str
    exp_id: str
    worker: str
    at: float
    why: str


def _m001_fleet(conn: Connection[Any]) -> None:
    conn.execute(
        """
        create table fleet_workers (
            night_id text not null, name text not null, machine text not null,
            pid integer not null, spec text not null, store_root text,
            started double precision not null, heartbeat double precision not null,
            status text not null, note text, primary key (night_id, name));
        create table fleet_requeues (
            night_id text not null, exp_id text not null, worker text not null,
            at double precision not null, why text not null);
        create index fleet_requeues_night on fleet_requeues (night_id, exp_id);
        """
    )


MIGRATIONS: list[Migration] = [("001_fleet", _m001_fleet)]


class FleetBoard:
    """Claims, liveness and re-queues for the workers of one night; needs the PostgreSQL
    ledger (`store/ledger/postgres.py`), whose pool it shares."""

    def __init__(self, ledger: Any) -> None:
        pool = getattr(ledger, "pool", None)
        if pool is None:
            raise RuntimeError("fleet workers need the PostgreSQL ledger (PIVOT_DATABASE_URL)")
        self.ledger = ledger
        self.pool = pool
        migrate(pool, "fleet", MIGRATIONS)

    # workers
    def register(self, row: WorkerRow) -> None:
        """Join the night (again, after a restart: same name, fresh pid and stamp)."""
        d = row.model_dump(exclude={"started", "heartbeat"})
        with self.pool.connection() as conn:
            conn.execute(
                f"""insert into fleet_workers
                    (night_id, name, machine, pid, spec, store_root, status, note,
                     started, heartbeat)
                    values (%(night_id)s, %(name)s, %(machine)s, %(pid)s, %(spec)s,
                            %(store_root)s, %(status)s, %(note)s, {NOW}, {NOW})
                    on conflict (night_id, name) do update set machine = excluded.machine,
                        pid = excluded.pid, spec = excluded.spec,
                        store_root = excluded.store_root, status = 'running', note = null,
                        heartbeat = excluded.heartbeat""",
                d,
            )

    def beat(self, night_id: str, name: str) -> bool:
        """Stamp the worker alive; False when the fleet already declared it lost."""
        with self.pool.connection() as conn:
            row = conn.execute(
                f"""update fleet_workers set heartbeat = {NOW}
                    where night_id = %s and name = %s and status <> 'lost' returning name""",
                [night_id, name],
            ).fetchone()
        return row is not None

    def set_status(
        self, night_id: str, name: str, status: WorkerStatus, note: str | None = None
    ) -> None:
        """Lost stays lost (a worker that learns it late must not say `stopped` over it);
        only `register` starts a worker afresh."""
        with self.pool.connection() as conn:
            conn.execute(
                """update fleet_workers set status = %s, note = %s
                   where night_id = %s and name = %s and (status <> 'lost' or %s = 'lost')""",
                [status, note, night_id, name, status],
            )

    def workers(self, night_id: str) -> list[WorkerRow]:
        with self.pool.connection() as conn:
            rows = conn.execute(
                "select * from fleet_workers where night_id = %s order by started, name",
                [night_id],
            ).fetchall()
        return [WorkerRow(**r) for r in rows]

    def stale(self, night_id: str, lease_s: float) -> list[tuple[WorkerRow, float]]:
        """Running workers with no stamp for longer than the lease, with the stamp's age."""
        with self.pool.connection() as conn:
            rows = conn.execute(
                f"""select *, {NOW} - heartbeat as age from fleet_workers
                    where night_id = %s and status = 'running' and heartbeat < {NOW} - %s""",
                [night_id, lease_s],
            ).fetchall()
        return [(WorkerRow(**{k: v for k, v in r.items() if k != "age"}), r["age"]) for r in rows]

    # experiments
    def claim(self, night_id: str, kinds: tuple[str, ...], worker: str) -> ExperimentRow | None:
        """Take the first pending experiment of these kinds for `worker`, or None.

        The row lock makes the claim exclusive; SKIP LOCKED lets the other workers take the
        next row instead of queueing behind this one."""
        with self.pool.connection() as conn, conn.transaction():
            row = conn.execute(
                """select id from experiments
                   where night_id = %s and status = 'pending' and kind = any(%s)
                     and (kind <> 'baseline' or name = 'baseline')
                   order by seq limit 1 for update skip locked""",
                [night_id, list(kinds)],
            ).fetchone()
            if row is None:
                return None
            got = conn.execute(
                "update experiments set status = 'running', host = %s where id = %s returning *",
                [worker, row["id"]],
            ).fetchone()
        return load_experiment(got)

    def skip_pending(self, night_id: str, kinds: tuple[str, ...], why: str) -> int:
        with self.pool.connection() as conn:
            cur = conn.execute(
                """update experiments set status = 'skipped', phase = 'done', diagnosis = %s
                   where night_id = %s and status = 'pending' and kind = any(%s)""",
                [why, night_id, list(kinds)],
            )
            return cur.rowcount

    def add_requeue(self, night_id: str, exp_id: str, worker: str, why: str) -> None:
        with self.pool.connection() as conn:
            conn.execute(
                """insert into fleet_requeues (night_id, exp_id, worker, at, why)
                   values (%s, %s, %s, %s, %s)""",
                [night_id, exp_id, worker, time.time(), why],
            )

    def requeues(self, night_id: str) -> list[Requeue]:
        with self.pool.connection() as conn:
            rows = conn.execute(
                "select * from fleet_requeues where night_id = %s order by at", [night_id]
            ).fetchall()
        return [Requeue(**r) for r in rows]

    # locks
    @contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """A session advisory lock on `key` for the block; freed if the process dies."""
        with self.pool.connection() as conn:
            conn.execute("select pg_advisory_lock(hashtext(%s))", [key])
            try:
                yield
            finally:
                conn.execute("select pg_advisory_unlock(hashtext(%s))", [key])

    @contextmanager
    def try_lock(self, key: str) -> Iterator[bool]:
        """Like `lock`, but never waits: yields whether this process got it."""
        with self.pool.connection() as conn:
            got = conn.execute("select pg_try_advisory_lock(hashtext(%s)) as ok", [key]).fetchone()
            try:
                yield bool(got and got["ok"])
            finally:
                if got and got["ok"]:
                    conn.execute("select pg_advisory_unlock(hashtext(%s))", [key])


def fleet_lines(ledger: Any, night_id: str) -> list[str]:
    """The report's "Fleet" section: which worker ran what, which were lost, what was re-queued.
    Empty for a night run by one process (no worker rows, or the SQLite ledger)."""
    if getattr(ledger, "pool", None) is None:
        return []
    board = FleetBoard(ledger)
    workers = board.workers(night_id)
    if not workers:
        return []
    rows = ledger.experiments(night_id)
    lines = [
        "## Fleet",
        "",
        "| worker | machine | pid | status | experiments it ran |",
        "|---|---|---|---|---|",
    ]
    for w in workers:
        ran = ", ".join(f"{r.name} ({r.status})" for r in rows if r.host == w.name) or "-"
        status = w.status + (f": {w.note}" if w.note else "")
        lines.append(f"| {w.name} | {w.machine} | {w.pid} | {status} | {ran} |")
    requeued = board.requeues(night_id)
    lines += [""]
    for q in requeued:
        lines.append(f"- {q.exp_id.split(':', 1)[-1]} taken back from {q.worker}: {q.why}")
    if requeued:
        lines.append("")
    return lines


def worker_lines(ledger: Any, night_id: str, now: float | None = None) -> list[str]:
    """`pivot loop status`: one line per worker of the night (none for a one-process night)."""
    if getattr(ledger, "pool", None) is None:
        return []
    now = time.time() if now is None else now
    out = []
    for w in FleetBoard(ledger).workers(night_id):
        running = [r.name for r in ledger.experiments(night_id)
                   if r.host == w.name and r.phase not in ("pending", "done")]  # fmt: skip
        out.append(
            f"worker {w.name} on {w.machine} (pid {w.pid}): {w.status}, heartbeat "
            f"{now - w.heartbeat:.0f}s ago"
            + (f", running {', '.join(running)}" if running else "")
            + (f" ({w.note})" if w.note else "")
        )
    return out
