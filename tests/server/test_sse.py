"""The event stream over real uvicorn: read as it streams, kept alive while a run waits for
approval, resumable with Last-Event-ID, and isolated per session."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.server.conftest import SEED, Live, read_stream, start_live, wait_status

TERMINAL = ("concluded", "insufficient_evidence", "budget_exhausted", "error")


def paused(events: list) -> bool:
    return bool(events) and events[-1].type == "approval_request"


@pytest.fixture(scope="module")
def pinging(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    srv = start_live(tmp_path_factory.mktemp("ping-home"), ping_s=0.2)
    yield srv
    srv.stop()


def test_stream_arrives_while_open_and_pings_while_waiting(pinging: Live) -> None:
    with pinging.client() as c:
        t0 = time.monotonic()
        sid = c.post("/api/sessions", json={"host": SEED, "symptom": "why did it die?"}).json()[
            "session_id"
        ]
        pings = 0
        got_request_at = None
        with c.stream("GET", f"/api/sessions/{sid}/events", timeout=30) as resp:
            for line in resp.iter_lines():
                if line.startswith("event: approval_request"):
                    got_request_at = time.monotonic()
                if line.startswith(": ping") and got_request_at is not None:
                    pings += 1  # pings while the paused run waits for the approval
                if pings >= 3:
                    break
                # a guard against a hang, not a speed target (that is bench/'s business)
                assert time.monotonic() - t0 < 120, "no approval request / pings in 120 s"
        # The response never ended (the run is paused), yet its events arrived: not buffered.
        assert got_request_at is not None
        assert pings >= 3
        assert wait_status(c, sid, ("awaiting_approval",))["phase"] == "awaiting_approval"


def test_last_event_id_resumes_exactly_after(live: Live) -> None:
    with live.client() as c:
        sid = c.post(
            "/api/sessions", json={"host": "replay:h200-port-in-use", "symptom": "port?"}
        ).json()["session_id"]
        full = read_stream(c, sid)
        assert full[-1].type == "conclusion"
        for k in (0, 1, len(full) // 2, len(full) - 1, len(full)):
            tail = read_stream(c, sid, last_event_id=k)
            assert [(e.seq, e.type) for e in tail] == [(e.seq, e.type) for e in full[k:]]
        assert c.get(f"/api/sessions/{sid}/events?after=2").status_code == 200
        r = c.get(f"/api/sessions/{sid}/events", headers={"Last-Event-ID": "x"})
        assert r.status_code == 400


def test_resume_across_a_pause_gets_only_new_events(live: Live) -> None:
    with live.client() as c:
        sid = c.post("/api/sessions", json={"host": SEED, "symptom": "not enough memory"}).json()[
            "session_id"
        ]
        before = read_stream(c, sid, stop=paused, timeout=30)
        assert before[-1].type == "approval_request"
        wait_status(c, sid, ("awaiting_approval",))
        approval = next(a for a in c.get("/api/approvals").json() if a["session_id"] == sid)
        assert (
            c.post(f"/api/approvals/{approval['id']}", json={"approve": False}).status_code == 202
        )
        after = read_stream(c, sid, last_event_id=before[-1].seq)
        assert after[0].seq == before[-1].seq + 1
        decided = next(e for e in after if e.type == "approval")
        assert decided.data["data"]["approved"] is False
        assert after[-1].type == "conclusion"


def test_sessions_are_isolated(live: Live) -> None:
    hosts = [
        "replay:h200-port-in-use",
        "replay:h200-still-loading",
        SEED,
        "replay:h200-port-in-use",
    ]
    with live.client() as c:
        sids = [
            c.post("/api/sessions", json={"host": h, "symptom": f"case {i}"}).json()["session_id"]
            for i, h in enumerate(hosts)
        ]

        def one(sid: str) -> list:
            with live.client() as cc:
                return read_stream(cc, sid, stop=paused, timeout=30)

        with ThreadPoolExecutor(len(sids)) as pool:
            streams = list(pool.map(one, sids))
    for sid, host, events in zip(sids, hosts, streams, strict=True):
        assert {e.data["session_id"] for e in events} == {sid}
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert events[0].type == "session" and events[0].data["data"]["host"] == host
        texts = " ".join(str(e.data["data"]) for e in events)
        for other in sids:
            if other != sid:
                assert other not in texts
