"""Run leases: whoever drives a session holds it, the CLI as much as a replica, and a process
that dies (its connection closed) leaves it free for another."""

from __future__ import annotations

import time
from pathlib import Path

from agent.runner import Runner
from agent.settings import Settings
from cards.model import load_card
from cards.replay import ReplayHost
from store.leases import RunLeases
from store.records import Event
from tests.agent.conftest import card_path
from tests.postgres import Postgres


def test_one_holder_counted_holds_and_freed_by_death(postgres: Postgres) -> None:
    url = postgres.new_database()
    a, b = RunLeases(url), RunLeases(url)
    try:
        assert a.try_hold("s1") and a.try_hold("s1")  # counted: the hub, then the Runner
        assert not b.try_hold("s1")
        a.release("s1")
        assert not b.try_hold("s1") and a.held("s1")
        a.release("s1")
        assert b.try_hold("s1")
        assert not a.try_hold("s1")
        b.close()  # the holder's connection goes, as with SIGKILL
        # the server frees the lock when its backend sees the connection end: soon, not at once
        deadline = time.monotonic() + 10
        while not a.try_hold("s1"):
            assert time.monotonic() < deadline, "a dead holder's lease was never freed"
            time.sleep(0.05)
    finally:
        a.close()


def test_a_cli_run_holds_its_session_while_it_runs(tmp_path: Path, postgres: Postgres) -> None:
    url = postgres.new_database()
    other = RunLeases(url)  # a service replica's view, in the same database
    seen: list[bool] = []

    def probe(ev: Event) -> None:
        if other.try_hold(ev.session_id):  # would have adopted the CLI's run
            other.release(ev.session_id)
            seen.append(True)
        else:
            seen.append(False)

    runner = Runner(Settings(home=tmp_path / "home", database_url=url))
    card = load_card(card_path("h200-stale-process-cuda-oom"))
    try:
        report = runner.start(ReplayHost(card), card.symptom, on_event=probe)
    finally:
        runner.close()
    assert report.status == "concluded"
    assert seen and not any(seen), "a replica could take a session the CLI was running"
    assert other.try_hold(report.session_id)  # and free once the run is over
    other.close()
