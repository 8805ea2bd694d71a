"""A real Alertmanager fires into a real `pivot serve`: one finished investigation per alert group.

Debian's prometheus-alertmanager runs with a generated config whose only receiver is a webhook
to the server's /api/alerts with the printed bearer token. The test posts an alert to
Alertmanager's own API naming a replay host; Alertmanager groups it, waits group_wait, sends its
own payload, and repeats it every repeat_interval. Nothing here builds the webhook body.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.alertmanager import AlertmanagerUnavailable, start_alertmanager
from tests.server.conftest import free_port, wait_status
from tests.server.serve_proc import Served, sign_in_link

CARD = "replay:h200-port-in-use"
NAME = "InferenceServerDown"
TERMINAL = ("concluded", "insufficient_evidence", "budget_exhausted", "error")
#: small on purpose: the first notification after 1 s, a repeat of the same group 2 s later
TIMING = {"group_wait": "1s", "group_interval": "1s", "repeat_interval": "2s"}


def _alert_sessions(c: httpx.Client) -> list[dict[str, Any]]:
    return [
        s for s in c.get("/api/sessions", params={"limit": 500}).json() if s["alertname"] == NAME
    ]


def _until(what: str, fn: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.2)


def test_a_real_alertmanager_alert_ends_in_one_finished_investigation(tmp_path: Path) -> None:
    served = Served(tmp_path / "home", free_port())
    token = sign_in_link(served.start()).split("#token=")[1]
    try:
        am = start_alertmanager(tmp_path / "am", f"{served.url}api/alerts", token, TIMING)
    except AlertmanagerUnavailable as exc:
        served.stop()
        pytest.skip(f"a real prometheus-alertmanager cannot start here: {exc}")
    try:
        am.post_alerts(
            [
                {
                    "labels": {"alertname": NAME, "host": CARD, "severity": "page"},
                    "annotations": {
                        "summary": "the inference server on port 30000 does not answer",
                        "description": "up == 0 for 1m",
                    },
                    "generatorURL": "http://prometheus.example:9090/graph?g0.expr=up%3D%3D0",
                }
            ]
        )
        with httpx.Client(
            base_url=served.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as c:
            (first,) = _until("a session started by the alert", lambda: _alert_sessions(c))
            sid = first["session_id"]
            d = wait_status(c, sid, TERMINAL, timeout=120)
            assert d["status"] == "concluded", d["status"]
            assert d["host"] == CARD and d["report"]["root_cause"]
            assert d["symptom"].startswith(f"Prometheus alert {NAME} is firing on {CARD}")
            assert "does not answer" in d["symptom"]
            link = d["alert"]
            assert f'alertname="{NAME}"' in link["group_key"] and link["receiver"] == "pivot"
            assert link["generator_url"].startswith("http://prometheus.example:9090/graph")
            assert link["external_url"].startswith("http://") and link["fingerprint"]
            # Alertmanager repeats the unchanged group every repeat_interval: let it, by its
            # own count of webhook notifications sent, then there is still one investigation
            _until("a repeat notification", lambda: am.notifications() >= 2, timeout=60)
            assert [s["session_id"] for s in _alert_sessions(c)] == [sid]
    except BaseException:
        print(am.log.read_text()[-4000:])
        raise
    finally:
        am.stop()
        served.stop()
