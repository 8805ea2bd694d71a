"""Two real replicas behind a proxy that alternates them on EVERY request (tests/roundrobin.py).

What a person behind a round-robin load balancer saw break (issue 24): B answered 409 "the
session's host is gone" for the diff of a run paused on A; A kept showing a finished session as
waiting; a run followed live missed its approval. Each of those is asserted here, through the
proxy and against each replica directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.postgres import Postgres
from tests.replicas import Replica, shared_home, slow_gpu_bin, start_replica
from tests.roundrobin import RoundRobin
from tests.server.conftest import SEED, read_stream, wait_status

SYMPTOM = 'It died during start-up with "Not enough memory". Is something holding the GPUs?'


def _pair(
    tmp_path: Path, postgres: Postgres, own_turns: tuple[str, ...] = ()
) -> Iterator[tuple[Replica, Replica, RoundRobin]]:
    home = tmp_path / "home"
    token = shared_home(home)
    url = postgres.new_database()
    slow = slow_gpu_bin(tmp_path / "slow-bin", 0.2)
    a = start_replica("a", home, url, token, slow)
    b = start_replica("b", home, url, token, slow)
    proxy = RoundRobin([a.port, b.port], own_turns=own_turns).start()
    yield a, b, proxy
    proxy.stop()
    for r in (a, b):
        r.stop()


@pytest.fixture
def behind_proxy(
    tmp_path: Path, postgres: Postgres
) -> Iterator[tuple[Replica, Replica, RoundRobin]]:
    yield from _pair(tmp_path, postgres)


@pytest.fixture
def page_behind_proxy(
    tmp_path: Path, postgres: Postgres
) -> Iterator[tuple[Replica, Replica, RoundRobin]]:
    """For the page: its event streams and approval lists take turns of their own, since how many
    other requests it makes between them varies with timing (the parity once pinned every
    stream to one replica)."""
    yield from _pair(tmp_path, postgres, own_turns=("/events", "/api/approvals"))


def _client(proxy: RoundRobin, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=proxy.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


def _paused(events: list) -> bool:
    return bool(events) and events[-1].type == "approval_request"


def test_diff_of_a_run_paused_on_a_is_served_by_b_and_finished_shows_finished_on_both(
    behind_proxy: tuple[Replica, Replica, RoundRobin],
) -> None:
    a, b, proxy = behind_proxy
    with a.client() as ca, b.client() as cb, _client(proxy, a.token) as cp:
        sid = ca.post("/api/sessions", json={"host": SEED, "symptom": SYMPTOM}).json()["session_id"]
        read_stream(ca, sid, stop=_paused)
        wait_status(ca, sid, ("awaiting_approval",))
        # A ran it and paused it: A holds it in memory, B knows it only from the database.
        assert a.proc.poll() is None
        req = next(x for x in cb.get("/api/approvals").json() if x["session_id"] == sid)
        on_b = cb.get(f"/api/approvals/{req['id']}/diff")
        assert on_b.status_code == 200, on_b.text
        assert on_b.json()["path"].endswith("sitecustomize.py")
        assert "NCCL_MIN_NCHANNELS" in on_b.json()["diff"]
        assert on_b.json() == ca.get(f"/api/approvals/{req['id']}/diff").json()
        for _ in range(4):  # both replicas, through the proxy
            r = cp.get(f"/api/approvals/{req['id']}/diff")
            assert r.status_code == 200 and r.json()["diff"] == on_b.json()["diff"], r.text
        assert proxy.replicas_for("/diff") == {0, 1}

        # Approve through the proxy; follow to the end through the proxy too.
        assert cp.post(f"/api/approvals/{req['id']}", json={"approve": True}).status_code == 202
        rest = read_stream(cp, sid, last_event_id=0, timeout=60)
        assert rest[-1].type == "conclusion"
        wait_status(cp, sid, ("concluded",))
        for c in (ca, cb, cp, cp):  # A paused it, B or A finished it: finished on both
            d = c.get(f"/api/sessions/{sid}").json()
            assert d["status"] == "concluded" and d["phase"] in (None, "done"), d["status"]
            listed = {s["session_id"]: s["status"] for s in c.get("/api/sessions").json()}
            assert listed[sid] == "concluded"
            assert c.get("/api/approvals").json() == []


def test_followed_live_through_the_proxy_the_approval_always_arrives(
    behind_proxy: tuple[Replica, Replica, RoundRobin],
) -> None:
    """Four runs, each started, followed, listed, diffed and approved through the proxy: every
    request lands on the other replica than the one before."""
    a, b, proxy = behind_proxy
    with _client(proxy, a.token) as cp:
        for i in range(4):
            sid = cp.post(
                "/api/sessions", json={"host": SEED, "symptom": f"{SYMPTOM} #{i}"}
            ).json()["session_id"]
            events = read_stream(cp, sid, stop=_paused, timeout=60)
            assert events[-1].type == "approval_request", [e.type for e in events]
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            wait_status(cp, sid, ("awaiting_approval",))
            for _ in range(2):
                req = next(x for x in cp.get("/api/approvals").json() if x["session_id"] == sid)
                diff = cp.get(f"/api/approvals/{req['id']}/diff")
                assert diff.status_code == 200 and diff.json()["diff"], diff.text
            r = cp.post(f"/api/approvals/{req['id']}", json={"approve": True})
            assert r.status_code == 202, r.text
            after = read_stream(cp, sid, last_event_id=events[-1].seq, timeout=60)
            assert after[-1].type == "conclusion"
            assert any(e.type == "approval" for e in after)
            wait_status(cp, sid, ("concluded",))
    assert {r.replica for r in proxy.routed} == {0, 1}
    assert all(x.replica != y.replica for x, y in zip(proxy.routed, proxy.routed[1:], strict=False))


def test_page_through_the_proxy_shows_the_approval_card_every_time(
    page_behind_proxy: tuple[Replica, Replica, RoundRobin],
) -> None:
    """The page itself, in Chromium, behind the alternating proxy: four investigations, each
    followed live until its approval card shows the diff and Approve, then approved."""
    from playwright.sync_api import expect, sync_playwright

    from tests.server.serve_proc import ARGS, ARTIFACTS, CHROMIUM, Console, pick_host

    a, _, proxy = page_behind_proxy
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        expect.set_options(timeout=60_000)
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_page(viewport={"width": 768, "height": 900})
        console = Console(page)
        page.goto(f"{proxy.base_url}/#token={a.token}")
        expect(page.locator("#host")).not_to_have_value("")  # the hosts are in
        for i in range(4):
            if i:
                page.goto(f"{proxy.base_url}/")  # a fresh investigation each time
            pick_host(page, SEED)
            page.fill("#chat-text", f"{SYMPTOM} (try {i})")
            page.press("#chat-text", "Enter")
            card = page.locator("#approvals")
            expect(card.locator(".diff")).to_be_visible()
            expect(card).to_contain_text("NCCL_MIN_NCHANNELS")
            approve = card.get_by_role("button", name="Approve")
            expect(approve).to_be_enabled()
            page.screenshot(path=str(ARTIFACTS / f"page-proxy-approval-{i}.png"))
            approve.click()
            expect(page.locator("#conclusion")).to_contain_text("Applied with approval")
            expect(page.locator("#answer #a-state")).to_contain_text("concluded")
        assert console.errors == [], console.errors
        browser.close()
    assert proxy.replicas_for("/events") == {0, 1}
    assert proxy.replicas_for("/diff") <= {0, 1} and proxy.replicas_for("/api/approvals") == {0, 1}


def test_token_per_home_and_shared_by_copying_its_hash(tmp_path: Path, postgres: Postgres) -> None:
    """What docs/scale.md says about tokens: a home per replica means a token per replica; the
    copied server-token.json (a salted hash) makes one token work on both."""
    import shutil

    from server.auth import TOKEN_FILE

    url = postgres.new_database()
    one, two, three = tmp_path / "one", tmp_path / "two", tmp_path / "three"
    token = shared_home(one)
    two.mkdir()
    shutil.copy(one / TOKEN_FILE, two / TOKEN_FILE)
    other = shared_home(three)  # a home with its own token
    reps = [start_replica("one", one, url, token), start_replica("two", two, url, token)]
    reps.append(start_replica("three", three, url, other))
    try:
        proxy = RoundRobin([r.port for r in reps[:2]]).start()
        with _client(proxy, token) as cp:
            assert [cp.get("/api/sessions").status_code for _ in range(4)] == [200] * 4
        proxy.stop()
        mixed = RoundRobin([reps[0].port, reps[2].port]).start()
        with _client(mixed, token) as cp:
            assert [cp.get("/api/sessions").status_code for _ in range(4)] == [200, 401] * 2
        mixed.stop()
    finally:
        for r in reps:
            r.stop()
