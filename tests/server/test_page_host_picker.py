"""The host picker, in headless Debian Chromium (Playwright, as tests/server/test_browser.py).

With the 143 shipped cards and a few SSH aliases the picker is a search box: typing narrows the
list to the hosts whose alias, address or card title match; real hosts and the replayed demo
cards sit in two groups; the arrow keys and Enter pick; Escape gives the earlier pick back; the
entries are 44 px tall at 360 px; the picked host is the one the investigation starts on.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.server.conftest import SEED, TOKEN, start_live
from tests.server.serve_proc import ARGS, ARTIFACTS, CHROMIUM, Console

SSH_CONFIG = """\
Host trainer-a
  HostName 192.0.2.41
Host trainer-b
  HostName 192.0.2.42
Host inference-h200
  HostName 192.0.2.77
"""


def _shown(page: Any, group: str) -> list[str]:
    opts = page.locator(f'#host-list [data-group="{group}"] [role="option"]')
    return [opts.nth(i).get_attribute("data-value") for i in range(opts.count())]


def _matching(hosts: list[dict[str, Any]], q: str, demo: bool) -> list[str]:
    return [
        h["name"]
        for h in hosts
        if (h["kind"] == "replay") == demo
        and q.lower() in f"{h['name']} {h['address']} {h['title']}".lower()
    ]


def test_search_group_pick_and_start(tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    ssh = tmp_path / "ssh_config"
    ssh.write_text(SSH_CONFIG)
    live = start_live(tmp_path / "home", database_url=None, ssh_config=ssh, reach_timeout_s=0.2)
    try:
        with live.client() as c:
            hosts = c.get("/api/hosts", params={"check": "false"}).json()
        assert len(hosts) > 100 and {"trainer-a", "inference-h200", SEED} <= {
            h["name"] for h in hosts
        }
        with sync_playwright() as p:
            expect.set_options(timeout=60_000)
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            page = browser.new_page(viewport={"width": 360, "height": 800})
            page.add_init_script(f"localStorage.setItem('pivot.token', {TOKEN!r})")
            console = Console(page)
            page.goto(live.base_url)
            box = page.locator("#host")
            expect(box).to_have_value("local")  # the first real host, as the plain list had it
            box.click()
            listbox = page.locator("#host-list")
            expect(listbox).to_be_visible()
            expect(box).to_have_attribute("aria-expanded", "true")
            # everything, in two groups: real hosts first, then the demo cards apart
            heads = page.locator("#host-list .hp-head")
            expect(heads).to_have_count(2)
            expect(heads.nth(0)).to_contain_text("Hosts")
            expect(heads.nth(1)).to_contain_text("Demo cards (replayed)")
            real = [h["name"] for h in hosts if h["kind"] != "replay"]
            assert sorted(real) == ["inference-h200", "local", "trainer-a", "trainer-b"]
            assert _shown(page, "real") == real  # the hosts API's order
            assert len(_shown(page, "demo")) == len(hosts) - 4
            assert all(v.startswith("replay:") for v in _shown(page, "demo"))

            box.press_sequentially("trai")  # by alias: only the two trainers
            expect(page.locator('#host-list [role="option"]')).to_have_count(2)
            assert sorted(_shown(page, "real")) == ["trainer-a", "trainer-b"]
            assert _shown(page, "demo") == []
            expect(page.locator('#host-list [data-group="demo"]')).to_have_count(0)

            box.fill("")
            box.press_sequentially("192.0.2.7")  # by address
            expect(page.locator('#host-list [role="option"]')).to_have_count(1)
            assert _shown(page, "real") == ["inference-h200"]

            box.fill("")
            box.press_sequentially("fewer-ch")  # by card title: demo cards only, still apart
            want = _matching(hosts, "fewer-ch", demo=True)
            assert SEED in want and _matching(hosts, "fewer-ch", demo=False) == []
            expect(page.locator('#host-list [role="option"]')).to_have_count(len(want))
            assert _shown(page, "demo") == want
            expect(page.locator('#host-list [data-group="real"]')).to_have_count(0)
            expect(page.locator("#host-list .hp-head")).to_contain_text("Demo cards (replayed)")
            page.screenshot(path=str(ARTIFACTS / "page-host-picker-360.png"))
            for i in range(len(want)):  # tap targets at 360 px
                bb = page.locator('#host-list [role="option"]').nth(i).bounding_box()
                assert bb and bb["height"] >= 44, bb
            assert (box.bounding_box() or {}).get("height", 0) >= 44

            # keyboard: down to the seed card, Enter picks it and closes the list
            for _ in range(want.index(SEED) + 1):
                box.press("ArrowDown")
            expect(box).to_have_attribute("aria-activedescendant", re.compile(r"hp-opt-\d+"))
            box.press("Enter")
            expect(box).to_have_value(SEED)
            expect(listbox).to_be_hidden()
            expect(page.locator("#todo-host")).to_contain_text(SEED)  # the memory panel follows

            box.click()  # a search abandoned with Escape keeps the pick
            box.press_sequentially("zzz-nothing")
            expect(listbox).to_contain_text("no host matches")
            box.press("Escape")
            expect(box).to_have_value(SEED)
            expect(listbox).to_be_hidden()

            page.fill("#chat-text", "Not enough memory at start-up")
            page.press("#chat-text", "Enter")  # start, as before
            expect(page).to_have_url(re.compile(r"/s/[A-Za-z0-9_-]+$"))
            sid = page.url.rsplit("/", 1)[1]
            with live.client() as c:
                assert c.get(f"/api/sessions/{sid}").json()["host"] == SEED
            expect(page.locator(f'#sessions button[data-session="{sid}"]')).to_contain_text(SEED)
            assert page.evaluate("localStorage.getItem('pivot.host')") == SEED
            page.reload()  # the pick survives a reload
            expect(box).to_have_value(SEED)
            assert console.outside([]) == []
            browser.close()
    finally:
        live.stop()
