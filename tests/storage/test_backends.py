"""Both memory backends give the same answers; the env var alone picks PostgreSQL for memory,
checkpoints, the ledger and the study, and nothing then lands in SQLite files under the home."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from agent.runner import Runner
from agent.settings import Settings
from cards.model import load_card
from cards.replay import ReplayHost
from store.factory import open_ledger, open_memory, study_storage
from store.ledger.base import ExperimentRow
from store.ledger.postgres import PgLedger
from store.ledger.sqlite import Ledger
from store.memory.postgres import PgMemory
from store.memory.sqlite import Memory
from store.records import AlertRow, Event, Evidence, Report
from tests.agent.conftest import card_path

pytestmark = pytest.mark.usefixtures("database")


def _report(sid: str, host: str, cause: str, line: str) -> Report:
    return Report(
        session_id=sid,
        host=host,
        symptom="server died",
        status="concluded",
        root_cause=cause,
        confidence=0.9,
        summary=f"{cause} on {host}",
        evidence=[Evidence(observation="o1", line=line)],
    )


def test_env_var_alone_picks_the_backend(tmp_path: Path, database: str | None) -> None:
    s = Settings(home=tmp_path / "home")
    mem = open_memory(s.database_url, s.memory_path)
    ledger = open_ledger(tmp_path / "loop" / "ledger.db", Settings().database_url)
    try:
        assert isinstance(mem, PgMemory if database else Memory)
        assert isinstance(ledger, PgLedger if database else Ledger)
        assert (tmp_path / "home" / "memory.db").exists() is (database is None)
        storage = study_storage(tmp_path / "loop", s.database_url)
        assert storage.startswith("postgresql+psycopg://" if database else "sqlite:///")
    finally:
        mem.close()
        ledger.close()


def test_sessions_events_todos_and_search_answer_alike(tmp_path: Path) -> None:
    s = Settings(home=tmp_path / "home")
    mem = open_memory(s.database_url, s.memory_path)
    try:
        sid = mem.create_session("node-17", "oom at startup", "rulebook", "s1")
        assert mem.create_session("node-17", "oom at startup", "rulebook", "s1") == "s1"
        mem.set_host_spec(sid, "replay:card")
        assert mem.host_spec(sid) == "replay:card"
        evs = [
            mem.append_event(Event(session_id=sid, type="message", data={"i": i})) for i in range(3)
        ]
        assert [e.seq for e in evs] == [1, 2, 3]
        assert [e.data["i"] for e in mem.events(sid, after_seq=1)] == [1, 2]
        mem.record_observation(sid, {"id": "o2", "tool": "dmesg", "lines": ["b"]})
        mem.record_observation(sid, {"id": "o1", "tool": "gpu_status", "lines": ["a"], "ok": False})
        assert [(o["id"], o["ok"]) for o in mem.observations(sid)] == [("o2", True), ("o1", False)]
        mem.save_report(_report(sid, "node-17", "stale_gpu_process", "pid 471 holds 80 GiB"))
        mem.create_session("node-3", "slow", "rulebook", "s2")
        mem.save_report(_report("s2", "node-3", "kv_cache_no_room", "KV cache pool is full"))
        row = mem.get_session(sid)
        assert row is not None and row.status == "concluded"
        assert row.root_cause == "stale_gpu_process"
        assert [s.id for s in mem.list_sessions(host="node-17")] == ["s1"]
        assert mem.trajectory(sid)["report"]["root_cause"] == "stale_gpu_process"
        hits = mem.search_conclusions("holds stale_gpu_process")
        assert [h.session_id for h in hits] == ["s1"]
        assert {h.session_id for h in mem.search_conclusions("kv cache OR pid")} == {"s1", "s2"}
        assert mem.search_conclusions('"  ') == [] and mem.search_conclusions("zzz") == []
        t = mem.add_todo("node-17", "ask who owns pid 471", session_id=sid)
        assert [x.text for x in mem.todos("node-17")] == ["ask who owns pid 471"]
        assert mem.close_todo(t.id) and not mem.close_todo(t.id)
        assert mem.todos("node-17") == [] and len(mem.todos("node-17", open_only=False)) == 1
        mem.add_handoff("node-17", "first")
        mem.add_handoff("node-17", "second")
        last = mem.last_handoff("node-17")
        assert last is not None and last.text == "second"
    finally:
        mem.close()


def test_alerts_link_sessions_and_answer_the_group_alike(tmp_path: Path) -> None:
    """The alert that started a session, read back by session and as its group's latest."""
    s = Settings(home=tmp_path / "home")
    mem = open_memory(s.database_url, s.memory_path)
    try:
        for sid, at in (
            ("a1", "2025-06-01T10:00:00.000+00:00"),
            ("a2", "2025-06-01T11:00:00.000+00:00"),
        ):
            mem.create_session("gpu-7", "alert", "rulebook", sid)
            mem.record_alert(
                AlertRow(
                    session_id=sid, group_key='{}:{alertname="Down"}', host="gpu-7",
                    alertname="Down", generator_url="http://prom:9090/graph?g0.expr=up",
                    labels={"host": "gpu-7", "alertname": "Down"},
                    annotations={"summary": "it's down"}, received=at,
                )
            )  # fmt: skip
        got = mem.alert("a1")
        assert got is not None and got.labels == {"host": "gpu-7", "alertname": "Down"}
        assert got.annotations == {"summary": "it's down"} and got.generator_url.endswith("=up")
        last = mem.last_alert('{}:{alertname="Down"}', "gpu-7")
        assert last is not None and last.session_id == "a2"
        assert mem.last_alert('{}:{alertname="Down"}', "gpu-8") is None
        assert mem.alert("nope") is None
    finally:
        mem.close()


def test_concurrent_appends_to_one_session_never_share_a_seq(tmp_path: Path) -> None:
    """Two replicas (here: two stores, four threads) append to one session at once."""
    s = Settings(home=tmp_path / "home")
    stores = [
        open_memory(s.database_url, s.memory_path),
        open_memory(s.database_url, s.memory_path),
    ]
    sid = stores[0].create_session("h", "x", "rulebook")

    def write(k: int) -> None:
        for i in range(25):
            stores[k % 2].append_event(Event(session_id=sid, type="message", data={"k": k, "i": i}))

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seqs = [e.seq for e in stores[1].events(sid)]
    for m in stores:
        m.close()
    assert seqs == list(range(1, 101))


def test_runner_checkpoints_go_to_the_chosen_backend(tmp_path: Path, database: str | None) -> None:
    s = Settings(home=tmp_path / "home")
    card = load_card(card_path("seed-sglang-fewchan-kv-oom"))
    runner = Runner(s)
    try:
        r = runner.start(ReplayHost(card), card.symptom)
        assert r.status == "awaiting_approval"
    finally:
        runner.close()
    assert (tmp_path / "home" / "checkpoints.db").exists() is (database is None)
    if database:
        with psycopg.connect(database) as conn:
            row = conn.execute(
                "select count(*) from checkpoints where thread_id = %s", [r.session_id]
            ).fetchone()
        assert row is not None and row[0] > 0
    again = Runner(s)  # another process would do the same: the pause is found from storage
    try:
        pending = again.pending(r.session_id)
        assert pending is not None and pending.tool == "config_apply"
    finally:
        again.close()


def test_ledger_answers_alike(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path / "loop" / "ledger.db", Settings().database_url)
    try:
        night, resumed = ledger.open_night("plan-a", "d1", str(tmp_path))
        assert not resumed
        again, resumed = ledger.open_night("plan-a", "d1", str(tmp_path))
        assert resumed and again.id == night.id
        row = ExperimentRow(
            id="e1", night_id=night.id, seq=ledger.next_seq(night.id), name="baseline",
            kind="baseline", change={"--mem-fraction-static": 0.8},
        )  # fmt: skip
        ledger.add(row)
        ledger.add(row)  # idempotent
        ledger.update("e1", status="ok", metric_values=[1.0, 2.0], metric_mean=1.5)
        ledger.update(
            "e1", metrics={"ttft_p99_ms": [40.0, 41.0]}, slo="met", ci_low=1.2, ci_high=1.8,
            stats="better than the baseline", remeasured=1,
        )  # fmt: skip
        ledger.set_phase("e1", "done")
        got = ledger.get("e1")
        assert got is not None and got.metric_values == [1.0, 2.0] and got.phase == "done"
        assert got.change == {"--mem-fraction-static": 0.8}
        assert got.metrics == {"ttft_p99_ms": [40.0, 41.0]} and got.slo == "met"
        assert (got.ci_low, got.ci_high, got.remeasured) == (1.2, 1.8, 1)
        ledger.update_night(night.id, heartbeat=12.5, loop_pid=4242, loop_host="node-17")
        ledger.add_event(night.id, "signal", "SIGTERM")
        ledger.add_event(night.id, "resumed", "after a kill")
        assert [e.kind for e in ledger.events(night.id)] == ["signal", "resumed"]
        beat = ledger.night(night.id)
        assert beat is not None and (beat.heartbeat, beat.loop_pid) == (12.5, 4242)
        assert ledger.next_seq(night.id) == 1
        ledger.save_baseline_file(night.id, "h", "/etc/x.yaml", b"a: 1\n\x00")
        assert ledger.baseline_files(night.id, "h") == {"/etc/x.yaml": b"a: 1\n\x00"}
        ledger.update_night(night.id, status="done", left_in_place=[])
        n = ledger.night(night.id)
        assert n is not None and n.status == "done"
        assert [e.id for e in ledger.experiments(night.id)] == ["e1"]
    finally:
        ledger.close()


def test_an_upsert_while_another_thread_reads_does_not_lock_the_table(tmp_path: Path) -> None:
    """The first upsert on a connection used to probe SQLite by dropping a scratch table; with a
    read open on the same connection (another session's thread) that failed with "database
    table is locked" and killed the run (seen once in fifty concurrent sessions)."""
    mem = Memory(tmp_path / "m.db")
    for i in range(3):
        mem.create_session("h", "s", "rules", session_id=f"s{i}")
    reading = mem.db["sessions"].rows_where(order_by="created")
    next(reading)  # a statement stays open on the shared connection, as in a streaming read
    mem.record_observation("s0", {"id": "o1", "tool": "log_tail", "ok": True, "data": {}})
    assert [o["id"] for o in mem.observations("s0")] == ["o1"]
    assert len(list(reading)) == 2
