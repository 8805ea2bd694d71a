"""The page in headless Debian Chromium (Playwright, no browser download).

A full incident against a real `pivot serve` process: sign in with the printed link, start,
watch the steps, approve from the diff, follow up, reload, SIGKILL and restart the server while
a run waits, and finish it; zero console errors. Then the layout at 360, 768 and 1280 px, and
/docs with every off-machine request blocked. Screenshots are kept under test-artifacts/.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.conftest import SEED, TOKEN, Live, free_port, start_live, wait_status
from tests.server.serve_proc import (
    ARGS,
    ARTIFACTS,
    CHROMIUM,
    Console,
    Served,
    pick_host,
    sign_in_link,
)

#: Signs the page in; skipped inside the sandboxed report frame, which has no storage.
SET_TOKEN = f"if (window === window.top) localStorage.setItem('pivot.token', {TOKEN!r})"
SYMPTOM = 'Died at start-up with "Not enough memory". GPUs held?'
FOLLOW_UP = "why did you want to restore sitecustomize.py?"


def _browser(p: Any) -> Any:
    from playwright.sync_api import expect

    expect.set_options(timeout=60_000)  # a wait, not a limit: CI machines are shared
    # No skip: a missing /usr/bin/chromium fails here (scripts/system-deps.sh installs it).
    return p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)


def _wait_terminal(url: str, token: str, sid: str) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as c:
        wait_status(c, sid, ("concluded", "insufficient_evidence", "budget_exhausted", "error"))


def _tab(page: Any, name: str) -> None:
    """Bring a panel into view: a tap on its tab where the layout has one (phone, tablet)."""
    tab = page.get_by_role("tab", name=name)
    if tab.is_visible():
        tab.click()


@pytest.mark.parametrize("width", [360, 768, 1280])
def test_full_incident_in_the_page(tmp_path: Path, width: int) -> None:
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    served = Served(tmp_path / "home", free_port())
    link = sign_in_link(served.start())
    token = link.split("#token=")[1]
    outages: list[tuple[float, float]] = []
    try:
        with sync_playwright() as p:
            browser = _browser(p)
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.set_default_timeout(60_000)
            console = Console(page)
            page.goto(link)  # sign in: the link carries the token once
            expect(page.locator("#host")).not_to_have_value("")  # the hosts are in
            assert "#token=" not in page.url
            expect(page.locator("#token-dialog")).to_be_hidden()
            pick_host(page, SEED)

            page.fill("#chat-text", SYMPTOM)
            page.press("#chat-text", "Enter")  # start
            expect(page).to_have_url(re.compile(r"/s/[A-Za-z0-9_-]+$"))
            sid = page.url.rsplit("/", 1)[1]
            expect(page.locator("#chat li.step").first).to_be_visible()  # watch
            approval = page.locator("#approvals")
            expect(approval.locator(".diff")).to_be_visible()
            chat_text = page.locator("#chat").inner_text()
            assert "Next check:" not in chat_text and "{'path'" not in chat_text  # sentences
            assert "Checking what the GPUs hold" in chat_text
            expect(page.locator("#chat li.user")).to_have_count(1)  # the symptom, once

            # one state everywhere until answered
            expect(page.locator("#status-line")).to_contain_text("waiting for your approval")
            expect(page.locator("#conclusion .state")).to_have_text("waiting for your approval")
            expect(page.locator(f'#sessions button[data-session="{sid}"]')).to_contain_text(
                "waiting for your approval"
            )
            expect(page.locator("#waiting-banner")).to_be_visible()
            expect(page.locator("#conclusion a.to-approval")).to_be_visible()  # next step -> change
            expect(approval.locator(".diff .del")).not_to_have_count(0)
            expect(approval.locator(".diff")).to_contain_text("NCCL_MIN_NCHANNELS")
            expect(approval).to_contain_text("Because of")
            approval.locator("a[data-obs]").first.click()  # the reason links to the evidence
            expect(page.locator("#evidence-panel")).to_be_visible()
            obs = approval.locator("a[data-obs]").first.get_attribute("data-obs")
            expect(page.locator(f"#obs-{obs}")).to_be_in_viewport()
            _tab(page, "Chat")
            page.fill("#approvals input", "revert to known-good")
            page.screenshot(path=str(ARTIFACTS / f"page-incident-approval-{width}.png"))
            approval.get_by_role("button", name="Approve").click()  # approve where it is read

            expect(page.locator("#conclusion")).to_contain_text("Applied with approval")
            expect(page.locator("#conclusion .state")).to_have_text("concluded")
            expect(page.locator("#waiting-banner")).to_be_hidden()
            expect(page.locator("#chat a.to-approval")).to_have_count(0)
            expect(page.locator("#chat")).to_contain_text("approved: revert to known-good")
            expect(page.locator("#conclusion .ev").first).to_contain_text("Not enough memory")
            expect(page.locator('#board .col[data-status="confirmed"]')).to_contain_text(
                "kv_cache_no_room"
            )
            expect(page.locator("#findings li").first).to_be_attached()
            assert "against stale_gpu_process" in page.locator("#findings").text_content()
            expect(page.locator("#conclusion")).to_contain_text(  # ruled out, with the reason
                "stale_gpu_process: nvidia-smi shows the GPUs free"
            )
            _wait_terminal(served.url, token, sid)

            page.fill("#chat-text", FOLLOW_UP)  # follow up
            page.press("#chat-text", "Enter")
            mine = page.locator("#chat li.user", has_text=FOLLOW_UP)
            expect(mine).to_have_count(1)
            expect(
                page.locator("#chat li.user:has-text('restore sitecustomize') ~ li").first
            ).to_be_visible()
            _wait_terminal(served.url, token, sid)
            time.sleep(0.5)
            expect(mine).to_have_count(1)  # shown once, never twice
            answered = page.locator("#chat li").count()

            page.reload()  # the deep link restores the session
            expect(page).to_have_url(re.compile(f"/s/{sid}$"))
            expect(page.locator("#conclusion")).to_contain_text("kv_cache_no_room")
            expect(mine).to_have_count(1)
            expect(page.locator("#chat li")).to_have_count(answered)

            _tab(page, "Sessions")
            page.click("#new-session")  # a second incident, killed mid-run
            expect(page).to_have_url(re.compile(r"/$"))
            page.fill("#chat-text", SYMPTOM + " (again)")
            page.press("#chat-text", "Enter")
            expect(page.locator("#approvals .diff")).to_be_visible()
            second = page.url.rsplit("/", 1)[1]
            assert second != sid
            t0 = time.monotonic()
            served.kill()
            expect(page.locator("#conn")).to_contain_text("reconnecting")
            page.screenshot(path=str(ARTIFACTS / f"page-incident-server-down-{width}.png"))
            served.start()
            expect(page.locator("#conn")).to_contain_text("reconnected", timeout=30_000)
            outages.append((t0, time.monotonic() + 1))
            assert "TypeError" not in page.locator("body").inner_text()
            page.locator("#approvals").get_by_role("button", name="Approve").click()
            expect(page.locator("#conclusion")).to_contain_text("Applied with approval")
            expect(page.locator(f'#sessions button[data-session="{second}"]')).to_contain_text(
                "concluded"
            )
            page.screenshot(path=str(ARTIFACTS / f"page-incident-done-{width}.png"))

            _tab(page, "Sessions")
            page.click("#new-session")  # a third, on this machine, killed while it runs
            pick_host(page, "local")
            page.fill("#chat-text", "is the inference server up?")
            page.press("#chat-text", "Enter")
            expect(page).to_have_url(
                re.compile(r"/s/[A-Za-z0-9_-]+$")
            )  # started: a run takes seconds
            t0 = time.monotonic()
            served.kill()
            expect(page.locator("#conn")).to_contain_text("reconnecting")
            served.start()
            expect(page.locator("#chat li.error")).to_contain_text("interrupted")
            expect(page.locator("#status-line")).to_contain_text("failed")
            outages.append((t0, time.monotonic() + 1))
            assert console.outside(outages) == []
            browser.close()
    finally:
        served.stop()


def _seed_memory(live: Live) -> tuple[str, str]:
    """A ledger night, a todo, a handoff, and two runs of one card (the second has seen-before)."""
    from store.factory import open_ledger
    from store.ledger.base import ExperimentRow

    # the loop's own ledger: its file, or the team database the service runs on
    team = live.app.state.settings.database_url or ""
    ledger = open_ledger(live.home / "loop" / "nccl-plan" / "ledger.db", team)
    night, _ = ledger.open_night("nccl-plan", "digest", str(live.home / "loop" / "nccl-plan"))
    for seq, (name, kind, metric) in enumerate(
        [("baseline", "baseline", 1000.0), ("nccl-buffsize", "ranked", 1085.0),
         ("fewer-channels", "ranked", None), ("cuda-graph-bs-48", "ranked", 960.0)], 1
    ):  # fmt: skip
        ledger.add(ExperimentRow(id=f"e{seq}", night_id=night.id, seq=seq, name=name,
                                 kind=kind, status="ok" if metric else "failed",  # type: ignore[arg-type]
                                 metric_mean=metric))  # fmt: skip
    ledger.close()
    from loop.report import report_dir

    rdir = report_dir(night)
    rdir.mkdir(parents=True, exist_ok=True)
    (rdir / "report.md").write_text("# Morning report: nccl-plan\n\n- best: **nccl-buffsize**\n")
    host = "replay:h200-port-in-use"
    sids = []
    with live.client() as c:
        c.post(f"/api/hosts/{host}/todos", json={"text": "retry fewer-channels with 0.50"})
        c.post(f"/api/hosts/{host}/handoffs", json={"text": "baseline 0.55 works; exp 1b died"})
        for _ in range(2):
            sid = c.post("/api/sessions", json={"host": host, "symptom": "port taken?"}).json()
            sids.append(sid["session_id"])
            wait_status(c, sids[-1], ("concluded",))
    return sids[0], sids[1]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_layout_memory_and_loop_at_three_widths(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """On both storage backends: memory, sessions and the loop's ledger in SQLite files, or all
    of them in one team PostgreSQL (tests/postgres.py)."""
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    url = request.getfixturevalue("postgres").new_database() if backend == "postgres" else None
    live = start_live(tmp_path / "home", database_url=url)
    widths: dict[int, int] = {}
    try:
        _, sid = _seed_memory(live)
        with sync_playwright() as p:
            browser = _browser(p)
            for width, min_chat in ((360, 330), (768, 450), (1280, 560)):
                ctx = browser.new_context(viewport={"width": width, "height": 800})
                ctx.add_init_script(SET_TOKEN)
                page = ctx.new_page()
                page.set_default_timeout(60_000)
                console = Console(page)
                page.goto(f"{live.base_url}/s/{sid}")
                expect(page.locator("#conclusion")).to_contain_text("port")
                chat = page.locator("#chat-panel").bounding_box()
                assert chat is not None and chat["width"] >= min_chat, (width, chat)
                widths[width] = round(chat["width"])
                assert chat["x"] >= 0 and chat["x"] + chat["width"] <= width + 0.5
                overflow = page.evaluate("document.scrollingElement.scrollWidth")
                assert overflow <= width, (width, overflow)
                page.screenshot(path=str(ARTIFACTS / f"page-{width}.png"), full_page=False)
                if width == 360:  # chat first; the board and evidence a tap away
                    expect(page.locator("#board-panel")).to_be_hidden()
                    page.get_by_role("tab", name="Board").click()
                    expect(page.locator("#board .hyp").first).to_be_visible()
                    expect(page.locator("#chat-panel")).to_be_hidden()
                    page.get_by_role("tab", name="Evidence").click()
                    expect(page.locator("#observations li").first).to_be_visible()
                    page.get_by_role("tab", name="Chat").click()
                    expect(page.locator("#chat-panel")).to_be_visible()
                    page.click("#token-btn")
                    box = page.locator("#token-dialog").bounding_box()
                    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width
                    page.keyboard.press("Escape")
                if width == 1280:  # memory and the loop beside the session
                    expect(page.locator("#seen-before")).to_contain_text("seen before on host")
                    expect(page.locator("#todos")).to_contain_text("retry fewer-channels")
                    expect(page.locator("#handoff")).to_contain_text("exp 1b died")
                    page.fill("#session-search", "no-such-thing-anywhere")
                    expect(page.locator("#sessions")).to_contain_text("no session matches")
                    page.fill("#session-search", "port taken")
                    expect(page.locator("#sessions button")).to_have_count(2)
                    page.get_by_role("tab", name="Evidence").click()  # the file API, from evidence
                    page.locator("#observations .open-file").first.click()
                    expect(page.locator("#observations pre.file").first).to_contain_text(
                        "Address already in use"
                    )
                    page.get_by_role("tab", name="Loop").click()
                    expect(page.locator("#ledger tbody tr")).to_have_count(4)
                    assert page.locator("#ledger-chart svg rect").count() == 3
                    expect(page.locator("#morning")).to_contain_text("4 experiments")
                    expect(page.locator("#morning-report")).to_contain_text(
                        "best: **nccl-buffsize**"
                    )
                    page.screenshot(path=str(ARTIFACTS / "page-1280-loop.png"))
                assert console.errors == [], (width, console.errors)
                ctx.close()
            browser.close()
    finally:
        live.stop()
    for width in (360, 768, 1280):
        assert (ARTIFACTS / f"page-{width}.png").stat().st_size > 5_000
    (ARTIFACTS / "page-chat-widths.json").write_text(json.dumps(widths) + "\n")


def test_docs_render_offline(live: Live) -> None:
    from playwright.sync_api import expect, sync_playwright

    blocked: list[str] = []
    with sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page()
        console = Console(page)

        def only_local(route: Any) -> None:
            if route.request.url.startswith(live.base_url):
                route.continue_()
            else:
                blocked.append(route.request.url)
                route.abort()

        page.route("**/*", only_local)
        page.goto(f"{live.base_url}/docs")
        expect(page.locator(".swagger-ui .info .title")).to_contain_text("Pivot")
        expect(page.locator(".opblock").first).to_be_visible()
        browser.close()
    assert blocked == [] and console.errors == []


def test_eval_page_runs_a_served_card_directory(tmp_path: Path) -> None:
    """A user's own card directory given to the service is run from the eval page; its HTML
    report opens in the page, framed only by the service itself."""
    import shutil

    from playwright.sync_api import expect, sync_playwright

    from server.config import SHIPPED_CARDS

    mine = tmp_path / "my-cards"
    mine.mkdir()
    for name in ("h200-port-in-use.yaml", "seed-sglang-fewchan-kv-oom.yaml"):
        shutil.copy(SHIPPED_CARDS / name, mine / name)
    live = start_live(tmp_path / "home", card_dirs=[SHIPPED_CARDS, mine])
    try:
        with sync_playwright() as p:
            browser = _browser(p)
            ctx = browser.new_context(viewport={"width": 768, "height": 900})
            ctx.add_init_script(SET_TOKEN)
            page = ctx.new_page()
            console = Console(page)
            page.goto(f"{live.base_url}/evals.html")
            page.get_by_role("button", name="run the cards in my-cards").click()
            expect(page.locator("#eval-summary")).to_contain_text("of 2 cards passed")
            report = page.frame_locator("#report")
            expect(report.locator("h1")).to_contain_text("Pivot eval")
            page.screenshot(path=str(ARTIFACTS / "page-evals-768.png"), full_page=True)
            assert console.errors == []
            browser.close()
        with live.client() as c:
            dirs = {d["name"]: d for d in c.get("/api/evals/dirs").json()}
            assert dirs["my-cards"]["cards"] == 2
            assert c.post("/api/evals", json={"directory": "/etc"}).status_code == 404
            assert c.post("/api/evals", json={}).status_code == 422
        with httpx.Client(base_url=live.base_url) as anon:
            assert anon.get("/reports/abc.html", params={"key": "guess"}).status_code == 404
    finally:
        live.stop()
