"""The page in headless Debian Chromium (Playwright, no browser download): token, host picker,
an investigation that fills the board, approving the revert, the conclusion; a screenshot is
kept under test-artifacts/."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.server.conftest import SEED, TOKEN, Live

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = pytest.mark.skipif(
    shutil.which(CHROMIUM) is None, reason="Debian chromium not installed (scripts/system-deps.sh)"
)


def test_investigate_approve_and_conclude_in_the_page(live: Live) -> None:
    from playwright.sync_api import expect, sync_playwright

    from loop.ledger import ExperimentRow, open_ledger

    ARTIFACTS.mkdir(exist_ok=True)
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
    with live.client() as c:  # a todo and a handoff for the host, so the side panel has content
        c.post(f"/api/hosts/{SEED}/todos", json={"text": "retry fewer-channels with 0.50"})
        c.post(
            f"/api/hosts/{SEED}/handoffs", json={"text": "baseline 0.55 works; NCCL exp 1b died"}
        )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.set_default_timeout(20_000)
            page.goto(live.base_url)
            expect(page.locator("#token-dialog")).to_be_visible()
            page.fill("#token-input", TOKEN)
            page.press("#token-input", "Enter")
            expect(page.locator(f'#host option[value="{SEED}"]')).to_have_count(1)
            page.select_option("#host", SEED)
            expect(page.locator("#todos")).to_contain_text("retry fewer-channels with 0.50")
            expect(page.locator("#handoff")).to_contain_text("NCCL exp 1b died")
            expect(page.locator("#ledger tbody tr")).to_have_count(4)
            assert page.locator("#ledger-chart svg rect").count() == 3  # the failed one has no bar
            assert page.locator("#ledger-chart svg line[stroke-dasharray]").count() == 1

            page.fill("#chat-text", 'Died at start-up with "Not enough memory". GPUs held?')
            page.press("#chat-text", "Enter")  # Enter sends
            expect(page.locator("#observations li").first).to_be_visible()
            expect(page.locator("#board .hyp").first).to_be_visible()
            approve = page.get_by_role("button", name="Approve")
            expect(approve).to_be_visible()
            expect(page.locator("#approvals")).to_contain_text("sitecustomize.py.known-good")
            page.fill("#approvals input", "revert to known-good")
            page.screenshot(path=str(ARTIFACTS / "server-page-approval.png"), full_page=True)
            approve.click()

            expect(page.locator("#conclusion")).to_be_visible()
            # the diagnosis shows before the fix is offered; after approval it is re-rendered
            expect(page.locator("#conclusion")).to_contain_text("Applied with approval")
            expect(page.locator("#conclusion")).to_contain_text("kv_cache_no_room")
            expect(page.locator('#board .col[data-status="confirmed"]')).to_contain_text(
                "kv_cache_no_room"
            )
            expect(page.locator('#board .col[data-status="refuted"]')).to_contain_text(
                "stale_gpu_process"
            )
            expect(page.locator("#chat")).to_contain_text("approved: revert to known-good")
            ev = page.locator("#conclusion .ev").first
            expect(ev).to_contain_text("Not enough memory")
            assert "monospace" in ev.evaluate("e => getComputedStyle(e).fontFamily")
            expect(page.locator("#sessions li")).not_to_have_count(0)
            page.screenshot(path=str(ARTIFACTS / "server-page.png"), full_page=True)
        finally:
            browser.close()
    assert (ARTIFACTS / "server-page.png").stat().st_size > 10_000
