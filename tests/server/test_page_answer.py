"""The answer first, in headless Debian Chromium (Playwright, as tests/server/test_browser.py).

After a finished investigation the pinned header holds the cause in words, the confidence, the
next step and "seen before", inside the first viewport on first paint at 360, 768 and 1280 px;
at 360 px the top bar is one row, every tap target is at least 44 px, and the next step comes
before the lists. The header says "Signed in" once the token is accepted. A paused run's page
says why the proposed change is not the next step, and keeps Approve off until the diff is shown.
Screenshots go to test-artifacts/ (the repo's browser-test folder, git-ignored).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.server.conftest import SEED, TOKEN, Live, start_live, wait_status
from tests.server.serve_proc import ARGS, ARTIFACTS, CHROMIUM, Console

PORT_CARD = "replay:h200-port-in-use"
SYMPTOM = 'Died at start-up with "Not enough memory". GPUs held?'
#: what must be a tap target of its own at 360 px (links inside prose are exempt, as in WCAG)
TARGETS = "header button, header input, header a, #tabs button, #answer button, #chat-form button"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    live = start_live(tmp_path_factory.mktemp("home"), database_url=None)
    yield live
    live.stop()


def _browser(p: Any) -> Any:
    from playwright.sync_api import expect

    expect.set_options(timeout=60_000)
    return p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)


def _finished_twice(live: Live) -> dict[str, Any]:
    """Two runs of one card: the second is a finished investigation with a "seen before"."""
    with live.client() as c:
        for _ in range(2):
            sid = c.post("/api/sessions", json={"host": PORT_CARD, "symptom": "port taken?"})
            d = wait_status(c, sid.json()["session_id"], ("concluded",))
        causes = c.get("/api/causes").json()
    assert d["report"]["seen_before"], d["report"]
    return {**d, "words": causes[d["report"]["root_cause"]]}


def _sign_in(page: Any) -> None:
    from playwright.sync_api import expect

    expect(page.locator("#token-dialog")).to_be_visible()
    expect(page.locator("#token-btn")).to_have_text("Sign in")
    page.fill("#token-input", TOKEN)
    page.click("#token-save")


def test_answer_header_first_at_three_widths(served: Live) -> None:
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    done = _finished_twice(served)
    report = done["report"]
    with sync_playwright() as p:
        browser = _browser(p)
        for width, height in ((360, 740), (768, 1024), (1280, 800)):
            ctx = browser.new_context(viewport={"width": width, "height": height})
            page = ctx.new_page()
            console = Console(page)
            page.goto(f"{served.base_url}/s/{done['session_id']}")
            _sign_in(page)
            answer = page.locator("#answer")
            expect(answer).to_be_visible()
            expect(answer.locator("#a-next")).to_have_text(report["next_step"])
            page.screenshot(path=str(ARTIFACTS / f"page-answer-{width}.png"))
            expect(page.locator("#token-btn")).to_have_text("Signed in")
            box = answer.bounding_box()
            assert box is not None
            assert box["y"] >= 0 and box["y"] + box["height"] <= height, (width, box)
            assert box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5, (width, box)
            text = answer.text_content() or ""
            assert done["words"][:30].lower() in text.lower(), (done["words"], text)
            assert report["root_cause"] in text
            assert f"{round(report['confidence'] * 100)}% sure" in text
            assert report["next_step"][:40] in text
            assert "Seen before" in text and report["seen_before"][0][:30] in text
            if width == 360:
                _phone_checks(page, width)
            assert console.errors == [], (width, console.errors)
            ctx.close()
        browser.close()


def _phone_checks(page: Any, width: int) -> None:
    """One header row, 44 px targets, no sideways scroll, the next step before the lists."""
    tops = page.eval_on_selector_all(
        "header > *",
        "els => els.filter(e => e.offsetParent).map(e => e.getBoundingClientRect())"
        ".map(r => [r.top, r.bottom])",
    )
    header = page.locator("header").bounding_box()
    assert header is not None and header["height"] <= 56, header
    assert all(t < tops[0][1] and b > tops[0][0] for t, b in tops), tops  # one row
    small = page.eval_on_selector_all(
        TARGETS,
        "els => els.filter(e => e.offsetParent).map(e => [e.id || e.textContent.trim(),"
        " e.getBoundingClientRect()]).filter(([, r]) => r.height < 44 || r.width < 44)"
        ".map(([n, r]) => `${n}: ${Math.round(r.width)}x${Math.round(r.height)}`)",
    )
    assert small == [], small
    assert page.evaluate("document.scrollingElement.scrollWidth") <= width
    order = page.evaluate(
        """() => { const c = document.querySelector('#conclusion');
        const next = c.querySelector('.next'), lists = [...c.querySelectorAll('h4')]
          .filter(h => /Cited lines|Ruled out/.test(h.textContent));
        return lists.every(h => next.compareDocumentPosition(h) & Node.DOCUMENT_POSITION_FOLLOWING)
          && next.getBoundingClientRect().top < lists[0].getBoundingClientRect().top; }"""
    )
    assert order, "the next step comes before the cited lines and the ruled-out list"


def test_paused_run_says_why_the_change_is_not_the_next_step(served: Live) -> None:
    """The seed card's next step raises --mem-fraction-static; its change restores
    sitecustomize.py. The page says they differ and why, and Approve waits for the diff."""
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with served.client() as c:
        sid = c.post("/api/sessions", json={"host": SEED, "symptom": SYMPTOM}).json()
        sid = sid["session_id"]
        wait_status(c, sid, ("awaiting_approval",))
    with sync_playwright() as p:
        browser = _browser(p)
        ctx = browser.new_context(viewport={"width": 360, "height": 740})
        ctx.add_init_script(f"localStorage.setItem('pivot.token', {TOKEN!r})")
        page = ctx.new_page()
        console = Console(page)
        page.route("**/diff", lambda route: route.abort())  # the diff cannot be read (yet)
        page.goto(f"{served.base_url}/s/{sid}")
        card = page.locator("#approvals")
        expect(card).to_contain_text("could not load the change")
        approve = card.get_by_role("button", name="Approve")
        expect(approve).to_be_disabled()  # never approved unseen
        expect(card.get_by_role("button", name="Deny")).to_be_enabled()
        expect(page.locator("#answer #a-state")).to_contain_text("waiting for your approval")
        link = page.locator("#conclusion a.to-approval")
        expect(link).not_to_contain_text("for this next step is below")
        page.unroute("**/diff")
        card.get_by_role("button", name="load the change again").click()
        expect(card.locator(".diff")).to_be_visible()
        expect(approve).to_be_enabled()
        fit = card.locator(".fit.differs")
        expect(fit).to_contain_text("is not this next step")
        expect(fit).to_contain_text("--mem-fraction-static")
        expect(fit).to_contain_text("sitecustomize.py")
        expect(link).to_contain_text("is not this next step")
        expect(link).not_to_contain_text("for this next step is below")
        page.screenshot(path=str(ARTIFACTS / "page-answer-approval-360.png"), full_page=True)
        errors = [e for _, e in console.errors if "diff" not in e and "Failed to load" not in e]
        assert errors == [], console.errors
        browser.close()
    with served.client() as c:  # leave nothing paused for the module's other test
        req = next(a for a in c.get("/api/approvals").json() if a["session_id"] == sid)
        c.post(f"/api/approvals/{req['id']}", json={"approve": False})
