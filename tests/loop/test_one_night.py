"""One night at a time per plan (issue 23, item 5): a second `pivot loop run` on a plan that
is running is refused, names the holder and touches nothing; the first night ends whole.

Real processes: two `pivot loop run` on one plan and one state dir, the second started while
the first benchmarks an env experiment (its config file edited, its server up).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import yaml

from loop import launcher
from loop.night_lock import NightBusy, SqliteHold
from store.ledger.sqlite import Ledger
from tests.loop.conftest import REPO, make_plan
from tests.loop.test_resume import EXPERIMENTS, _loop, _phase_of
from tools.local_host import LocalHost


def test_second_loop_on_a_running_plan_is_refused(state: Path, tmp_path: Path) -> None:
    plan = make_plan(state, EXPERIMENTS, load_s=0.3, tokens=100)
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan.model_dump(mode="json")))
    cfg = Path(plan.baseline.config_file or "")
    before = cfg.read_bytes()
    first = subprocess.Popen(
        _loop(plan_file, state), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _phase_of(state / "ledger.db", "proto-simple") != (
        "benchmark"
    ):
        assert first.poll() is None, first.communicate()
        time.sleep(0.02)
    ours = set(launcher.marked_pids(LocalHost(), prefix=f"{plan.name}/"))
    assert ours

    second = subprocess.run(
        _loop(plan_file, state), cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert second.returncode == 3, (second.returncode, second.stderr[-2000:])
    assert "Traceback" not in second.stderr
    said = second.stderr
    assert f"plan '{plan.name}' is already running: pid {first.pid} on " in said, said
    assert socket.gethostname() in said and " since " in said, said
    # refused before recovery: it stopped no server and reverted no file of the first night
    assert "stopped" not in said and "reverted" not in said, said

    out, err = first.communicate(timeout=180)
    assert first.returncode == 0, err[-2000:]
    ledger = Ledger(state / "ledger.db")
    night = ledger.night()
    assert night is not None and night.status == "done"
    rows = {r.name: r for r in ledger.experiments(night.id)}
    for name in ("proto-simple", "graph-bs-16"):
        assert rows[name].status in ("kept", "discarded", "inconclusive"), rows[name]
    assert cfg.read_bytes() == before
    # the plan is free again once the first loop is done: the owner row is gone
    assert list(ledger.db["night_owner"].rows) == []


def test_a_dead_holder_does_not_lock_the_plan_out(tmp_path: Path) -> None:
    """kill -9 leaves an owner row behind: a holder whose pid is gone is taken over at once;
    a live one (here: this process's parent) is named."""
    ledger = Ledger(tmp_path / "ledger.db")
    dead = subprocess.Popen(["true"])
    dead.wait()
    now = time.time()
    ledger.db["night_owner"].insert(
        {"plan_name": "p", "pid": dead.pid, "host": socket.gethostname(), "since": now,
         "state_dir": "x", "heartbeat": now},
    )  # fmt: skip
    held = SqliteHold(ledger, "p", str(tmp_path), beat_s=5)
    row = next(iter(ledger.db["night_owner"].rows))
    assert row["pid"] == os.getpid()
    held.release()

    ledger.db["night_owner"].insert(
        {"plan_name": "p", "pid": os.getppid(), "host": socket.gethostname(), "since": now,
         "state_dir": "elsewhere", "heartbeat": now},
    )  # fmt: skip
    try:
        SqliteHold(ledger, "p", str(tmp_path), beat_s=5)
    except NightBusy as exc:
        assert f"pid {os.getppid()} on {socket.gethostname()}" in str(exc)
        assert "(state elsewhere)" in str(exc)
    else:
        raise AssertionError("a live holder must be named, not taken over")


def test_postgres_advisory_lock_names_the_holder_and_frees_with_it() -> None:
    """The team database: a session advisory lock per plan; the second claim is refused naming
    pid, host and start; the lock is gone the moment the holder's connection is."""
    from loop.night_lock import hold
    from store.ledger.postgres import PgLedger
    from tests.postgres import start_postgres

    pg = start_postgres()
    try:
        ledger = PgLedger(pg.new_database())  # migrations 001-006 on a real server
        first = hold(ledger, "plan-a", "/state/a", beat_s=5)
        try:
            hold(ledger, "plan-a", "/state/b", beat_s=5)
        except NightBusy as exc:
            said = str(exc)
            assert f"pid {os.getpid()} on {socket.gethostname()[:24]} since " in said, said
        else:
            raise AssertionError("a second claim on a held plan must be refused")
        other = hold(ledger, "plan-b", "/state/b", beat_s=5)  # another plan: its own lock
        other.release()
        first.release()
        again = hold(ledger, "plan-a", "/state/b", beat_s=5)
        again.release()
        ledger.pool.close()
    finally:
        pg.stop()
