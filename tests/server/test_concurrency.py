"""50 investigations at once on replay hosts: every request answered without an error, every
stream complete, ordered and only about its own session."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from tests.server.conftest import Live, card_dir, read_stream

N = 50


def test_fifty_concurrent_sessions(live: Live) -> None:
    cards = sorted(p.stem for p in card_dir().glob("*.yaml"))
    hosts = [f"replay:{cards[i % len(cards)]}" for i in range(N)]

    def one(host: str) -> tuple[str, int, list]:
        with live.client() as c:
            r = c.post("/api/sessions", json={"host": host, "symptom": "why did my launch die?"})
            assert r.status_code == 201, r.text
            sid = r.json()["session_id"]
            events = read_stream(
                c, sid, stop=lambda evs: evs[-1].type == "approval_request", timeout=120
            )
            return sid, r.status_code, events

    t0 = time.monotonic()
    with ThreadPoolExecutor(N) as pool:
        results = list(pool.map(one, hosts))
    elapsed = time.monotonic() - t0
    sids = {sid for sid, _, _ in results}
    assert len(sids) == N
    for sid, _, events in results:
        assert {e.data["session_id"] for e in events} == {sid}
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert events[-1].type in ("conclusion", "approval_request"), events[-1]
        assert not any(e.type == "error" and "error" in e.data["data"] for e in events)
    with live.client() as c:
        listed = {s["session_id"] for s in c.get("/api/sessions", params={"limit": 500}).json()}
    assert sids <= listed
    print(f"{N} concurrent sessions streamed to their end in {elapsed:.2f} s")
