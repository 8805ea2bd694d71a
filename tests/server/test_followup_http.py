"""Follow-up questions over real HTTP: one prose answer on the event stream, no tools run, no
conclusion repeated, the pending approval left as it was; also while the run is still going."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.scripted_llm import serve, text, tool_call
from tests.server.conftest import SEED, Live, read_stream, start_live, wait_status

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


def test_a_question_mid_run_is_answered_then_and_there_by_the_llm_brain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's decision is held until the question is in: the answer comes while the session
    is still running (from the latest checkpoint), phrased by the model over the board's facts."""
    gate = threading.Event()
    prose = "Still reading; kv_cache_no_room leads so far and nothing is concluded yet."

    def script(body: dict) -> dict:
        if "tools" not in body:  # the prose turn of an answer
            return text(prose)
        gate.wait(30)
        return tool_call("insufficient_evidence", {"why": "held for the test"})

    with serve(script) as (url, requests):
        monkeypatch.setenv("PIVOT_LLM_BASE_URL", url)
        monkeypatch.setenv("PIVOT_LLM_MODEL", "scripted")
        live = start_live(tmp_path / "home")
        try:
            with live.client() as c:
                sid = c.post(
                    "/api/sessions", json={"host": SEED, "symptom": SYMPTOM, "brain": "llm"}
                ).json()["session_id"]
                deadline = time.monotonic() + 60
                while not requests:  # the run is at its first model decision
                    assert time.monotonic() < deadline, "the run never asked the model"
                    time.sleep(0.05)
                assert c.get(f"/api/sessions/{sid}").json()["status"] == "running"
                _ask(c, sid, "how sure are you?")  # 202 while running: no 409 for a question
                # the question is taken while the run still waits on the model (recorded before
                # the run may go on); only then is the model let go
                read_stream(
                    c,
                    sid,
                    stop=lambda ev: any(
                        e.type == "message" and e.data["data"].get("role") == "user" for e in ev
                    ),
                )
                gate.set()
                events = read_stream(
                    c,
                    sid,
                    stop=lambda ev: bool(_answers(ev)) and any(e.type == "conclusion" for e in ev),
                )
        finally:
            gate.set()
            live.stop()
    kinds = [(e.type, e.data["data"].get("role"), e.data["data"].get("kind")) for e in events]
    assert kinds.count(("message", "agent", "answer")) == 1
    assert kinds.count(("message", "user", None)) == 1
    asked = kinds.index(("message", "user", None))
    assert asked < kinds.index(("conclusion", None, None))  # asked and taken while it ran
    assert _answers(events)[0].data["data"]["text"] == prose
    # the model phrased the board as it stood mid-run, not a finished report
    [turn] = [r for r in requests if "tools" not in r]
    facts = turn["messages"][0]["content"]
    assert (
        "how sure are you?" in facts and "Still investigating; leading: kv_cache_no_room" in facts
    )
