"""Two real `pivot serve` replicas on one real PostgreSQL: a session moves between them.

Start on A, follow and approve on B; SIGKILL A in the middle of a run and B finishes it from its
checkpoint; fifty sessions spread over both, each readable in full from either.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.postgres import Postgres
from tests.replicas import Replica, shared_home, slow_gpu_bin, start_replica
from tests.server.conftest import SEED, read_stream, wait_status

STALE = "replay:h200-stale-process-cuda-oom"


@pytest.fixture
def pair(tmp_path: Path, postgres: Postgres) -> Iterator[tuple[Replica, Replica]]:
    home = tmp_path / "home"
    token = shared_home(home)
    url = postgres.new_database()
    slow = slow_gpu_bin(tmp_path / "slow-bin", 0.7)
    a = start_replica("a", home, url, token, slow)
    b = start_replica("b", home, url, token, slow)
    yield a, b
    for r in (a, b):
        r.stop()


def _contiguous(events: list) -> bool:
    return [e.seq for e in events] == list(range(events[0].seq, events[0].seq + len(events)))


def test_started_on_a_followed_and_approved_on_b(pair: tuple[Replica, Replica]) -> None:
    a, b = pair
    with a.client() as ca, b.client() as cb:
        sid = ca.post("/api/sessions", json={"host": SEED, "symptom": "why did it die?"}).json()[
            "session_id"
        ]
        before = read_stream(cb, sid, stop=lambda evs: evs[-1].type == "approval_request")
        assert before[0].type == "session" and _contiguous(before)
        wait_status(cb, sid, ("awaiting_approval",))  # the pause is stored just after the event
        approvals = cb.get("/api/approvals").json()
        assert [x["session_id"] for x in approvals] == [sid]
        assert (
            cb.post(f"/api/approvals/{approvals[0]['id']}", json={"approve": True}).status_code
            == 202
        )
        # A second decision, on A this time, loses: the claim on the session's status is taken.
        assert ca.post(
            f"/api/approvals/{approvals[0]['id']}", json={"approve": False}
        ).status_code in (404, 409)
        # Reconnect to A with Last-Event-ID: the rest, run on B, arrives in order and the stream ends.
        after = read_stream(ca, sid, last_event_id=before[-1].seq, timeout=60)
        assert after and after[0].seq == before[-1].seq + 1 and _contiguous(after)
        assert after[-1].type == "conclusion"
        assert any(e.type == "approval" and e.data["data"]["approved"] for e in after)
        done = wait_status(ca, sid, ("concluded",))
        assert done["report"]["root_cause"] == "kv_cache_no_room"
        assert ca.get("/api/approvals").json() == [] and cb.get("/api/approvals").json() == []


def test_replica_killed_mid_run_the_other_finishes_from_the_checkpoint(
    pair: tuple[Replica, Replica],
) -> None:
    a, b = pair
    with a.client() as ca, b.client() as cb:
        sid = ca.post("/api/sessions", json={"host": "local", "symptom": "server died"}).json()[
            "session_id"
        ]
        # Follow on B (a live stream of a session run by A), until A has done real work.
        seen = read_stream(cb, sid, stop=lambda evs: sum(e.type == "observation" for e in evs) >= 2)
        assert cb.get(f"/api/sessions/{sid}").json()["status"] == "running"  # mid-run
        a.kill()
        rest = read_stream(cb, sid, last_event_id=seen[-1].seq, timeout=90)
        events = seen + rest
        assert _contiguous(events) and events[0].seq == 1
        assert events[-1].type in ("conclusion",), [e.type for e in events][-5:]
        detail = wait_status(cb, sid, ("concluded", "insufficient_evidence", "budget_exhausted"))
        assert detail["phase"] == "done"
        # Resumed, not restarted: one session event, and the observations made on A are kept.
        assert [e.type for e in events].count("session") == 1
        first_obs = [e.data["data"]["id"] for e in seen if e.type == "observation"]
        stored = {o["id"] for o in detail["observations"]}
        assert set(first_obs) <= stored
        assert f"session {sid} lost its replica; continuing it here" in b.log.read_text()


def test_fifty_sessions_spread_over_both(pair: tuple[Replica, Replica]) -> None:
    a, b = pair
    with a.client() as ca, b.client() as cb:
        clients = [ca, cb]

        def one(i: int) -> str:
            c = clients[i % 2]
            return c.post("/api/sessions", json={"host": STALE, "symptom": f"oom #{i}"}).json()[
                "session_id"
            ]

        with cf.ThreadPoolExecutor(8) as pool:
            sids = list(pool.map(one, range(50)))
        assert len(set(sids)) == 50
        for i, sid in enumerate(sids):
            other = clients[(i + 1) % 2]  # read each from the replica that did not run it
            d = wait_status(other, sid, ("concluded",), timeout=120)
            assert d["report"]["root_cause"] == "stale_gpu_process"
            evs = read_stream(other, sid)
            assert _contiguous(evs) and evs[-1].type == "conclusion"
        listed = {s["session_id"] for s in ca.get("/api/sessions", params={"limit": 100}).json()}
        assert set(sids) <= listed
