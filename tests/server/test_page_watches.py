"""The page in headless Debian Chromium: watched launches update live (phase and ETA, then the
verdict linking its session), and a session started by an alert links back to the alert."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.server.conftest import Live, start_live, wait_status
from tests.server.serve_proc import Console
from tests.server.test_alerts import CARD, TERMINAL, alert, payload
from tests.server.test_browser import SET_TOKEN, _browser
from tests.server.test_watches import _loading
from watch.outcome import Diagnosis, Status


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    srv = start_live(tmp_path_factory.mktemp("pivot-home"), database_url=None)
    yield srv
    srv.stop()


def test_the_page_lists_watched_launches_live_and_links_the_alert(served: Live) -> None:
    from playwright.sync_api import expect, sync_playwright

    with served.client() as c:
        r = c.post("/api/alerts", json=payload(alert(host=CARD), group="g-page"))
        sid = r.json()["started"][0]["session_id"]
        wait_status(c, sid, TERMINAL)
        c.put("/api/watches/w-page", json=_loading("w-page").model_dump())
        with sync_playwright() as p:
            browser = _browser(p)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(60_000)
            console = Console(page)
            page.add_init_script(SET_TOKEN)
            page.goto(f"{served.base_url}/")
            row = page.locator('#watches li[data-watch="w-page"]')
            expect(row).to_contain_text("loading")
            expect(row).to_contain_text("phase load_weights")
            expect(row).to_contain_text("about 2 min left")
            # the verdict arrives by the page's own refresh, no reload
            done = _loading("w-page").model_copy(
                update={
                    "status": Status.died,
                    "live": False,
                    "detail": "pid 48211 exited after 70.2 s",
                    "diagnosis": Diagnosis(
                        session_id=sid, status="concluded", root_cause="port_in_use",
                        confidence=0.9,
                    ),
                }
            )  # fmt: skip
            assert c.put("/api/watches/w-page", json=done.model_dump()).status_code == 200
            expect(row.locator(".st-died")).to_have_text("died")
            link = row.locator(f'a[data-session="{sid}"]')
            expect(link).to_have_text("port_in_use (90%)")
            link.click()  # opens the investigation, which an alert started
            expect(page).to_have_url(f"{served.base_url}/s/{sid}")
            note = page.locator("#chat li.alert-link")
            expect(note).to_contain_text("Started by the alert ServerDown (group g-page)")
            expect(note.locator("a", has_text="the alert's rule")).to_have_attribute(
                "href", "http://prometheus.example:9090/graph?g0.expr=up%3D%3D0"
            )
            expect(note.locator("a", has_text="Alertmanager")).to_have_attribute(
                "rel", "noopener noreferrer"
            )
            expect(page.locator(f'#sessions button[data-session="{sid}"]')).to_contain_text(
                "alert ServerDown"
            )
            browser.close()
    assert console.errors == []
