"""POST /api/alerts: Alertmanager's payload model, where an alert points, its symptom, the dedup
window, and the route against a real uvicorn (auth, 422s, resolved alerts, dedup, the link)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.alert_intake import AlertTarget, duplicate, resolve, symptom
from server.alertmanager import AmWebhook, shipped_rules
from server.config import ServeConfig
from server.hosts import HostCatalog
from tests.server.conftest import Live, card_dir, start_live, wait_status

CARD = "replay:h200-port-in-use"
TERMINAL = ("concluded", "insufficient_evidence", "budget_exhausted", "error")
RULES = shipped_rules()
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def payload(*alerts: dict[str, Any], group: str = '{}:{alertname="ServerDown"}') -> dict[str, Any]:
    """Alertmanager's webhook body (version 4), as it sends it."""
    return {
        "version": "4",
        "groupKey": group,
        "truncatedAlerts": 0,
        "status": "firing" if any(a["status"] == "firing" for a in alerts) else "resolved",
        "receiver": "pivot",
        "groupLabels": {"alertname": "ServerDown"},
        "commonLabels": {"alertname": "ServerDown"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.example:9093",
        "alerts": list(alerts),
    }


def alert(status: str = "firing", **labels: str) -> dict[str, Any]:
    return {
        "status": status,
        "labels": {"alertname": "ServerDown", **labels},
        "annotations": {"summary": "inference server on port 8000 stopped answering"},
        "startsAt": "2025-06-01T10:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus.example:9090/graph?g0.expr=up%3D%3D0",
        "fingerprint": "a1b2c3d4e5f60718",
    }


@pytest.fixture
def catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> HostCatalog:
    """Replay cards plus one SSH alias whose HostName is 10.0.0.7, read the default way."""
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text("Host gpu-7\n  HostName 10.0.0.7\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    return HostCatalog(ServeConfig(home=tmp_path / "home", card_dirs=[card_dir()]))


# -- the payload model -----------------------------------------------------------------------------
def test_the_payload_reads_alertmanagers_names_and_drops_non_web_links() -> None:
    body = payload(alert(host=CARD))
    body["externalURL"] = "javascript:alert(1)"
    body["someFutureField"] = 1
    note = AmWebhook.model_validate(body)
    assert note.group_key.startswith("{}:") and note.receiver == "pivot"
    assert note.external_url == ""  # never rendered as a link
    a = note.alerts[0]
    assert a.generator_url.startswith("http://prometheus.example") and a.starts_at
    assert a.fingerprint == "a1b2c3d4e5f60718"


# -- where an alert points -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("labels", "host", "by"),
    [
        ({"host": CARD}, CARD, "host"),
        ({"node": "local"}, "local", "node"),
        ({"instance": "10.0.0.7:9100"}, "gpu-7", "instance"),  # HostName of an SSH alias
        ({"instance": "gpu-7:9400"}, "gpu-7", "instance"),  # the alias itself, with a port
        ({"instance": CARD}, CARD, "instance"),  # a name with a colon, known as it is
        ({"host": "gpu-7", "instance": "10.9.9.9:1"}, "gpu-7", "host"),  # host label first
    ],
)
def test_a_label_names_a_known_host(
    catalog: HostCatalog, labels: dict[str, str], host: str, by: str
) -> None:
    got = resolve(labels, RULES, catalog)
    assert isinstance(got, AlertTarget), got
    assert (got.host, got.by_label) == (host, by)


@pytest.mark.parametrize(
    ("labels", "says"),
    [
        ({"host": "gpu-99"}, "host='gpu-99' names no host this service knows"),
        ({"instance": "10.9.9.9:9100"}, "instance='10.9.9.9:9100' is not the address"),
        ({"job": "vllm"}, "no host label: looked for host, hostname, node, instance"),
    ],
)
def test_no_known_host_says_which_labels_it_read(
    catalog: HostCatalog, labels: dict[str, str], says: str
) -> None:
    got = resolve(labels, RULES, catalog)
    assert isinstance(got, str) and says in got


def test_log_container_and_port_labels_reach_the_symptom(catalog: HostCatalog) -> None:
    labels = {"host": "local", "log": "/var/log/vllm.log", "container": "vllm-0", "port": "8000"}
    target = resolve(labels, RULES, catalog)
    assert isinstance(target, AlertTarget)
    assert (target.log, target.container, target.port) == ("/var/log/vllm.log", "vllm-0", 8000)
    note = AmWebhook.model_validate(payload(alert(**labels)))
    text = symptom(note.alerts[0], note, target, RULES)
    assert text.startswith("Prometheus alert ServerDown is firing on local, container vllm-0")
    assert "port 8000, log /var/log/vllm.log" in text and "stopped answering" in text


# -- the dedup window ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "finished", "repeat"),
    [
        (None, None, False),  # the group was never investigated here
        ("running", "2025-06-01T08:00:00+00:00", True),  # running, however old
        ("awaiting_approval", None, True),
        ("concluded", "2025-06-01T11:30:00+00:00", True),  # ended 30 min ago
        ("concluded", "2025-06-01T10:00:00+00:00", False),  # ended 2 h ago: past the window
        ("error", "2025-06-01T11:59:00", True),  # a naive stamp is UTC
    ],
)
def test_a_repeat_starts_nothing_while_running_or_within_the_window(
    status: str | None, finished: str | None, repeat: bool
) -> None:
    assert (duplicate(status, finished, RULES, NOW) is not None) is repeat


# -- the route -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    srv = start_live(tmp_path_factory.mktemp("pivot-home"), database_url=None)
    yield srv
    srv.stop()


def test_alerts_need_the_token(served: Live) -> None:
    with httpx.Client(base_url=served.base_url) as anon:
        r = anon.post("/api/alerts", json=payload(alert(host=CARD)))
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    with served.client(token="wrong") as c:
        assert c.post("/api/alerts", json=payload(alert(host=CARD))).status_code == 401


def test_unknown_or_missing_host_is_422_listing_the_labels(served: Live) -> None:
    with served.client() as c:
        before = len(c.get("/api/sessions").json())
        r = c.post("/api/alerts", json=payload(alert(host="gpu-99", job="vllm")))
        assert r.status_code == 422, r.text
        d = r.json()["detail"]
        assert "no firing alert names a host" in d["error"] and "GET /api/hosts" in d["hint"]
        (u,) = d["unresolved"]
        assert u["labels"] == {"alertname": "ServerDown", "host": "gpu-99", "job": "vllm"}
        assert "gpu-99" in u["reason"]
        r = c.post("/api/alerts", json=payload(alert(job="vllm"), group="g-none"))
        assert r.status_code == 422 and "no host label" in r.text
        assert c.post("/api/alerts", json={"status": "firing"}).status_code == 422  # no groupKey
        assert len(c.get("/api/sessions").json()) == before


def test_resolved_alerts_start_nothing(served: Live) -> None:
    with served.client() as c:
        before = len(c.get("/api/sessions").json())
        r = c.post("/api/alerts", json=payload(alert("resolved", host=CARD), group="g-resolved"))
        assert r.status_code == 200, r.text
        d = r.json()
        assert d["started"] == [] and [s["reason"] for s in d["skipped"]] == ["resolved"]
        assert len(c.get("/api/sessions").json()) == before


def test_a_firing_alert_starts_one_linked_investigation_per_group(served: Live) -> None:
    group = '{}/{severity="page"}:{alertname="ServerDown"}'
    with served.client() as c:
        r = c.post("/api/alerts", json=payload(alert(host=CARD), group=group))
        assert r.status_code == 200, r.text
        (started,) = r.json()["started"]
        sid = started["session_id"]
        assert started["host"] == CARD and started["session_url"] == f"/s/{sid}"
        again = c.post("/api/alerts", json=payload(alert(host=CARD), group=group)).json()
        assert again["started"] == [] and again["skipped"][0]["session_id"] == sid
        d = wait_status(c, sid, TERMINAL)
        assert d["status"] == "concluded"
        assert d["symptom"].startswith("Prometheus alert ServerDown is firing on " + CARD)
        link = d["alert"]
        assert link["group_key"] == group and link["alertname"] == "ServerDown"
        assert link["generator_url"].startswith("http://prometheus.example:9090/graph")
        assert link["external_url"] == "http://alertmanager.example:9093"
        listed = {s["session_id"]: s for s in c.get("/api/sessions").json()}
        assert listed[sid]["alertname"] == "ServerDown"
        after = c.post("/api/alerts", json=payload(alert(host=CARD), group=group)).json()
        assert after["started"] == [] and "ended" in after["skipped"][0]["reason"]
