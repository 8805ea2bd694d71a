"""`pivot db migrate` and `pivot db copy` on a populated home, through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import psycopg

from agent.runner import Runner
from agent.settings import Settings
from cards.model import load_card
from cards.replay import ReplayHost
from store.ledger.base import ExperimentRow
from store.ledger.sqlite import Ledger
from store.memory.sqlite import Memory
from tests.agent.conftest import ROOT, card_path
from tests.postgres import Postgres

PIVOT = [sys.executable, "-m", "agent.cli"]


def _pivot(*args: str, home: Path, url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PIVOT_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("PIVOT_LLM_BASE_URL", None)
    env.pop("PIVOT_DATABASE_URL", None)
    if url:
        env["PIVOT_DATABASE_URL"] = url
    return subprocess.run(
        [*PIVOT, *args], capture_output=True, text=True, env=env, timeout=180, cwd=home.parent
    )


def _populate(home: Path) -> str:
    """Real runs on SQLite: two concluded sessions, one paused for approval, notes, a night."""
    s = Settings(home=home, database_url=None)
    runner = Runner(s)
    stale = load_card(card_path("h200-stale-process-cuda-oom"))
    kv = load_card(card_path("seed-sglang-fewchan-kv-oom"))
    runner.start(ReplayHost(stale, name="node-17"), stale.symptom)
    runner.start(ReplayHost(stale, name="node-3"), stale.symptom)
    kv_spec = f"replay:{card_path('seed-sglang-fewchan-kv-oom').resolve()}"
    paused = runner.start(ReplayHost(kv), kv.symptom, host_spec=kv_spec)
    assert paused.status == "awaiting_approval"
    runner.memory.add_todo("node-17", "ask who owns pid 471")
    t = runner.memory.add_todo("node-17", "reboot after drain")
    runner.memory.close_todo(t.id)
    runner.memory.add_handoff("node-17", "stale holder found")
    runner.close()
    ledger = Ledger(home / "loop" / "plan-a" / "ledger.db")
    night, _ = ledger.open_night("plan-a", "digest", str(home / "loop" / "plan-a"))
    for i in range(3):
        ledger.add(
            ExperimentRow(
                id=f"{night.id}:e{i}", night_id=night.id, seq=i, name=f"e{i}", kind="ranked",
                change={"x": i}, metric_values=[1.0 + i], metric_mean=1.0 + i, status="ok",
                metrics={"ttft_p99_ms": [40.0 + i]}, slo="met", ci_low=0.5, ci_high=1.5,
            )
        )  # fmt: skip
    ledger.update_night(night.id, heartbeat=1.5, loop_pid=4242, loop_host="node-17")
    ledger.add_event(night.id, "signal", "SIGTERM: stopped after the running experiment")
    ledger.save_baseline_file(night.id, "node-17", "/etc/a.yaml", b"\x00bytes\n")
    ledger.close()
    study = optuna.create_study(
        study_name="plan-a", storage=f"sqlite:///{home}/loop/plan-a/optuna.db"
    )
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=4)
    return paused.session_id


def test_copy_moves_every_row_and_a_paused_session_resumes_from_postgres(
    tmp_path: Path, postgres: Postgres
) -> None:
    home = tmp_path / "home"
    paused = _populate(home)
    url = postgres.new_database()
    first = _pivot("db", "copy", "--from", "sqlite", "--to", url, home=home)
    assert first.returncode == 0, first.stdout + first.stderr
    assert " NO" not in first.stdout
    src = Memory(home / "memory.db")
    with psycopg.connect(url) as conn:
        for table in ("sessions", "events", "todos", "handoffs", "conclusions", "observations"):
            theirs = conn.execute(f"select count(*) from {table}").fetchone()
            ours = src.db.execute(f"select count(*) from {table}").fetchone()
            assert theirs is not None and ours is not None
            assert theirs[0] == ours[0] > 0, table
        assert conn.execute("select count(*) from experiments").fetchone() == (3,)
        assert conn.execute("select metrics, slo from experiments where seq = 2").fetchone() == (
            '{"ttft_p99_ms": [42.0]}',
            "met",
        )
        assert conn.execute("select loop_pid from nights").fetchone() == (4242,)
        assert conn.execute("select kind from night_events").fetchone() == ("signal",)
        blob = conn.execute("select content from baseline_files").fetchone()
        assert blob is not None and bytes(blob[0]) == b"\x00bytes\n"
    src.close()
    assert "study:plan-a" in first.stdout
    trials = optuna.load_study(
        study_name="plan-a", storage="postgresql+psycopg://" + url.split("://", 1)[1]
    ).trials
    assert len(trials) == 4

    again = _pivot("db", "copy", "--from", "sqlite", "--to", url, home=home)  # nothing doubles
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout == first.stdout

    # The team database is now the whole home: new ids follow the copied ones, search finds the
    # copied conclusions, and the paused session resumes from its copied checkpoint.
    team = tmp_path / "team-home"
    added = _pivot("todo", "add", "node-17", "after the move", home=team, url=url)
    assert added.returncode == 0 and added.stdout.strip() == "added #3", added.stdout
    done = _pivot("investigate", "--resume", paused, "--approve", "--json", home=team, url=url)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "concluded" and report["root_cause"] == "kv_cache_no_room"
    assert not (team / "memory.db").exists() and not (team / "checkpoints.db").exists()


def test_migrate_is_named_and_idempotent(tmp_path: Path, postgres: Postgres) -> None:
    url = postgres.new_database()
    first = _pivot("db", "migrate", home=tmp_path / "h", url=url)
    second = _pivot("db", "migrate", home=tmp_path / "h", url=url)
    assert first.returncode == 0 and second.returncode == 0, first.stderr
    assert "memory/003_host_spec" in first.stdout and "ledger/002_left_in_place" in first.stdout
    assert "ledger/003_liveness_events" in first.stdout and "ledger/005_intervals" in first.stdout
    assert first.stdout.startswith("postgresql: applied ") and "up to date" not in first.stdout
    assert second.stdout.startswith("postgresql: up to date (")
    assert "memory/003_host_spec" in second.stdout and "ledger/005_intervals" in second.stdout
    lite = _pivot("db", "migrate", home=tmp_path / "h")
    assert lite.returncode == 0 and "003_host_spec" in lite.stdout and "applied" in lite.stdout
    assert (tmp_path / "h" / "memory.db").exists()
    again = _pivot("db", "migrate", home=tmp_path / "h")
    assert again.returncode == 0 and "up to date" in again.stdout, again.stdout
