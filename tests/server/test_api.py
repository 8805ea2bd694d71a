"""Sessions end to end on replay hosts through the real Runner, memory routes, hosts, limits,
and path checks, all against real uvicorn over TCP."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from tests.server.conftest import Live, card_dir, read_stream, start_live, wait_status
from tools.cards import load_card

TERMINAL = ("concluded", "insufficient_evidence", "budget_exhausted", "error")
CARD = "h200-port-in-use"


def test_session_end_to_end_on_replay_host(live: Live) -> None:
    card = load_card(card_dir() / f"{CARD}.yaml")
    with live.client() as c:
        r = c.post("/api/sessions", json={"host": f"replay:{CARD}", "symptom": card.symptom})
        assert r.status_code == 201, r.text
        sid = r.json()["session_id"]
        assert r.json()["events_url"] == f"/api/sessions/{sid}/events"
        events = read_stream(c, sid)
        types = [e.type for e in events]
        assert types[-1] == "conclusion" and "observation" in types
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        d = wait_status(c, sid, TERMINAL)
        assert d["status"] == "concluded", d["status"]
        assert d["report"]["root_cause"] == card.expected.root_cause
        assert d["observations"] and d["hypotheses"]
        assert d["conclusion"] is not None
        assert len(d["events"]) == len(events)
        listed = c.get("/api/sessions").json()
        assert any(
            s["session_id"] == sid and s["root_cause"] == card.expected.root_cause for s in listed
        )
        hits = c.get("/api/conclusions", params={"q": card.expected.root_cause}).json()
        assert any(h["session_id"] == sid for h in hits)


def test_unknown_host_and_session(live: Live) -> None:
    with live.client() as c:
        r = c.post("/api/sessions", json={"host": "replay:no-such-card", "symptom": "x"})
        assert r.status_code == 404
        assert c.get("/api/sessions/nosuchsession").status_code == 404
        assert c.get("/api/sessions/nosuchsession/events").status_code == 404
        r = c.post("/api/sessions/nosuchsession/messages", json={"text": "hi"})
        assert r.status_code == 404
        assert c.post("/api/sessions", json={"host": "local"}).status_code == 422


def test_follow_up_message_streams_an_answer(live: Live) -> None:
    with live.client() as c:
        sid = c.post("/api/sessions", json={"host": f"replay:{CARD}", "symptom": "why?"}).json()[
            "session_id"
        ]
        first = read_stream(c, sid)
        wait_status(c, sid, TERMINAL)
        r = c.post(f"/api/sessions/{sid}/messages", json={"text": "check dmesg too"})
        assert r.status_code == 202, r.text
        more = read_stream(c, sid, last_event_id=first[-1].seq)
        assert more and all(e.seq > first[-1].seq for e in more)
        assert any(e.type == "message" for e in more)


def test_todos_handoffs_and_search(live: Live) -> None:
    host = "replay:h200-still-loading"
    with live.client() as c:
        t = c.post(f"/api/hosts/{host}/todos", json={"text": "relaunch with 0.50"})
        assert t.status_code == 201
        tid = t.json()["id"]
        assert [x["text"] for x in c.get(f"/api/hosts/{host}/todos").json()] == [
            "relaunch with 0.50"
        ]
        assert c.post(f"/api/todos/{tid}/close").json() == {"todo_id": tid, "closed": True}
        assert c.post(f"/api/todos/{tid}/close").status_code == 404
        assert c.get(f"/api/hosts/{host}/todos").json() == []
        assert len(c.get(f"/api/hosts/{host}/todos", params={"all": True}).json()) == 1
        for text in ("first note", "second note"):
            assert c.post(f"/api/hosts/{host}/handoffs", json={"text": text}).status_code == 201
        notes = c.get(f"/api/hosts/{host}/handoffs", params={"limit": 1}).json()
        assert [n["text"] for n in notes] == ["second note"]
        assert c.get("/api/conclusions", params={"q": ""}).json() == []


def test_hosts_lists_cards_local_and_ssh_reachability(tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    up = listener.getsockname()[1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        down = s.getsockname()[1]  # bound then closed: nothing listens there
    cfg = tmp_path / "ssh_config"
    cfg.write_text(
        f"Host gpu-up\n  HostName 127.0.0.1\n  Port {up}\n"
        f"Host gpu-down\n  HostName 127.0.0.1\n  Port {down}\nHost *\n  User nobody\n"
    )
    srv = start_live(tmp_path / "home", ssh_config=cfg, reach_timeout_s=0.5)
    try:
        with srv.client() as c:
            hosts = {h["name"]: h for h in c.get("/api/hosts").json()}
        assert hosts["local"]["kind"] == "local"
        assert hosts["gpu-up"]["kind"] == "ssh" and hosts["gpu-up"]["reachable"] is True
        assert hosts["gpu-down"]["reachable"] is False
        shipped = {p.stem for p in card_dir().glob("*.yaml")}
        assert {n[len("replay:") :] for n in hosts if n.startswith("replay:")} == shipped
        assert "*" not in hosts
    finally:
        srv.stop()
        listener.close()


def test_body_size_limit(live: Live) -> None:
    with live.client() as c:
        big = "x" * (70 * 1024)
        r = c.post("/api/sessions", json={"host": "local", "symptom": big})
        assert r.status_code == 413
        r = c.post(
            "/api/hosts/local/todos",
            content=(b'{"text": "' + b"y" * 100_000 + b'"}'),
            headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
        )
        assert r.status_code == 413
        assert c.post("/api/hosts/local/todos", json={"text": "small"}).status_code == 201


@pytest.fixture(scope="module")
def rooted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Live, Path]:
    base = tmp_path_factory.mktemp("roots")
    root = base / "logs"
    root.mkdir()
    (root / "server.log").write_text("line one\nNot enough memory\n")
    outside = base / "secret.txt"
    outside.write_text("do not read me\n")
    os.symlink(outside, root / "innocent.log")
    srv = start_live(base / "home", read_roots={"*": [str(root)]})
    yield srv, root
    srv.stop()


def test_file_read_inside_roots(rooted: tuple[Live, Path]) -> None:
    srv, root = rooted
    with srv.client() as c:
        r = c.get("/api/hosts/local/file", params={"path": str(root / "server.log")})
        assert r.status_code == 200, r.text
        assert r.json()["text"].endswith("Not enough memory\n")


@pytest.mark.parametrize(
    "path,status",
    [
        ("{root}/../secret.txt", 400),
        ("{root}/./../../etc/passwd", 400),
        ("relative/server.log", 400),
        ("/etc/passwd", 403),
        ("{root}-evil/x.log", 403),
        ("{root}/innocent.log", 403),  # symlink inside the root pointing out of it
    ],
)
def test_path_traversal_refused(rooted: tuple[Live, Path], path: str, status: int) -> None:
    srv, root = rooted
    with srv.client() as c:
        r = c.get("/api/hosts/local/file", params={"path": path.format(root=root)})
    assert r.status_code == status, r.text
    assert "do not read me" not in r.text and "root:" not in r.text


def test_loop_ledger_read_from_the_loops_own_ledger(
    tmp_path: Path, database: str | None, request: pytest.FixtureRequest
) -> None:
    """On SQLite the service finds the loop's ledger file; on PostgreSQL, the team database."""
    from store.factory import open_ledger
    from store.ledger.base import ExperimentRow

    state = tmp_path / "loop"
    ledger = open_ledger(state / "demo-plan" / "ledger.db", database)
    night, _ = ledger.open_night("demo-plan", "digest", str(state / "demo-plan"))
    rows = [
        ("baseline", "baseline", "ok", 100.0),
        ("fewer-nccl-channels", "ranked", "failed", None),
        ("mem-fraction-0.6", "ranked", "kept", 112.5),
    ]
    for seq, (name, kind, status, metric) in enumerate(rows, 1):
        ledger.add(
            ExperimentRow(
                id=f"e{seq}", night_id=night.id, seq=seq, name=name, kind=kind,  # type: ignore[arg-type]
                status=status, metric_mean=metric, label="kv_cache_no_room" if metric is None else None,
            )
        )  # fmt: skip
    ledger.close()
    srv = start_live(tmp_path / "home", loop_state=state)
    other = request.getfixturevalue("postgres").new_database() if database else None
    empty = start_live(tmp_path / "home2", database_url=other, loop_state=tmp_path / "nothing")
    try:
        with srv.client() as c:
            led = c.get("/api/loop/ledger").json()
            st = c.get("/api/loop/status").json()
        with empty.client() as c:
            assert c.get("/api/loop/ledger").json()["available"] is False
            assert c.get("/api/loop/status").json()["available"] is False
    finally:
        srv.stop()
        empty.stop()
    assert led["available"] and led["plan"] == "demo-plan" and led["baseline"] == 100.0
    assert [(e["name"], e["status"], e["metric"]) for e in led["entries"]] == [
        (n, s, m) for n, _, s, m in rows
    ]
    assert led["entries"][1]["label"] == "kv_cache_no_room"
    assert st["available"] and st["status"]["experiments"] == 3
    assert st["status"]["by_status"] == {"ok": 1, "failed": 1, "kept": 1}


def test_eval_run_over_shipped_cards(live: Live) -> None:
    cards = ["h200-port-in-use.yaml", "seed-sglang-fewchan-kv-oom.yaml"]
    with live.client() as c:
        assert c.post("/api/evals", json={"paths": ["../../etc/passwd"]}).status_code == 400
        assert c.post("/api/evals", json={"paths": ["no-such-card.yaml"]}).status_code == 404
        r = c.post("/api/evals", json={"paths": cards})
        assert r.status_code == 202, r.text
        eid = r.json()["eval_id"]
        deadline = time.monotonic() + 60
        while (run := c.get(f"/api/evals/{eid}").json())["status"] == "running":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert c.get("/api/evals/nope").status_code == 404
    assert run["status"] == "done", run.get("error")
    assert run["result"]["summary"]["cards"] == 2
