"""Follow-up questions over real HTTP: one prose answer on the event stream, no tools run, no
conclusion repeated, the pending approval left as it was; also while the run is still going."""

from __future__ import annotations

from tests.server.conftest import SEED, Live, read_stream, wait_status

SYMPTOM = 'It died during start-up with "Not enough memory". Is something holding the GPUs?'
KV_LINE = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static"


def _answers(events: list) -> list:
    return [e for e in events if e.type == "message" and e.data["data"].get("kind") == "answer"]


def _ask(c, sid: str, text: str) -> None:
    r = c.post(f"/api/sessions/{sid}/messages", json={"text": text})
    assert r.status_code == 202, r.text


def test_why_restore_gets_one_prose_answer_and_the_approval_stays(live: Live) -> None:
    with live.client() as c:
        sid = c.post("/api/sessions", json={"host": SEED, "symptom": SYMPTOM}).json()["session_id"]
        before = read_stream(c, sid, stop=lambda ev: ev[-1].type == "approval_request")
        wait_status(c, sid, ("awaiting_approval",))
        [req] = [a for a in c.get("/api/approvals").json() if a["session_id"] == sid]

        _ask(c, sid, "why did you want to restore sitecustomize.py?")
        after = read_stream(c, sid, last_event_id=before[-1].seq, stop=lambda ev: _answers(ev))
        assert [(e.type, e.data["data"]["role"]) for e in after] == [
            ("message", "user"),
            ("message", "agent"),
        ]
        said = after[-1].data["data"]["text"]
        assert "restore /usr/lib/python3.12/sitecustomize.py from" in said
        assert KV_LINE in said and "waiting for your approval" in said

        d = wait_status(c, sid, ("awaiting_approval",))
        later = [e for e in d["events"] if e["seq"] > before[-1].seq]
        assert [e["type"] for e in later] == ["message", "message"]  # nothing else, no duplicate
        assert [a["id"] for a in c.get("/api/approvals").json() if a["session_id"] == sid] == [
            req["id"]
        ]

        # approve; then a question about the finished run still gets prose, not a new run
        assert c.post(f"/api/approvals/{req['id']}", json={"approve": True}).status_code == 202
        done = read_stream(c, sid, last_event_id=later[-1]["seq"])
        assert done[-1].type == "conclusion"
        wait_status(c, sid, ("concluded",))
        _ask(c, sid, "why not a stale GPU process?")
        tail = read_stream(c, sid, last_event_id=done[-1].seq)
        assert [e.type for e in tail] == ["message", "message"]
        assert "stale_gpu_process" in tail[-1].data["data"]["text"]
        assert "nvidia-smi shows the GPUs free" in tail[-1].data["data"]["text"]
        assert wait_status(c, sid, ("concluded",))["report"]["root_cause"] == "kv_cache_no_room"


def test_a_question_while_the_run_goes_on_is_answered_once(live: Live) -> None:
    with live.client() as c:
        sid = c.post("/api/sessions", json={"host": SEED, "symptom": SYMPTOM}).json()["session_id"]
        _ask(c, sid, "how sure are you?")  # never 409: a question needs no pause
        events = read_stream(
            c,
            sid,
            stop=lambda ev: bool(_answers(ev)) and any(e.type == "approval_request" for e in ev),
        )
        assert len(_answers(events)) == 1
        assert (
            sum(1 for e in events if e.type == "message" and e.data["data"]["role"] == "user") == 1
        )
        wait_status(c, sid, ("awaiting_approval",))
        # a request for another read must wait for the pause, and then runs through the graph
        _ask(c, sid, "check dmesg too")
        more = read_stream(
            c, sid, last_event_id=events[-1].seq, stop=lambda ev: ev[-1].type == "conclusion"
        )
        assert [e.data["data"]["tool"] for e in more if e.type == "observation"][:1] == ["dmesg"]
