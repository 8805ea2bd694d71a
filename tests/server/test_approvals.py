"""Approval round trip with the real rulebook brain: the seed card's config differs from its
known-good copy, so the agent asks to revert it; approve/deny resumes the checkpointed graph,
also after the service restarted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.server.conftest import SEED, Live, read_stream, start_live, wait_status

SYMPTOM = 'It died during start-up with "Not enough memory". Is something holding the GPUs?'


def _paused(events: list) -> bool:
    return bool(events) and events[-1].type == "approval_request"


def _decision(events: list) -> dict:
    """The `approval` event of a resumed run (the graph may repeat its request event first:
    on resume LangGraph re-enters the approval node from the top)."""
    return next(e.data["data"] for e in events if e.type == "approval")


def _start_and_wait(c, symptom: str = SYMPTOM) -> tuple[str, list, dict]:
    sid = c.post("/api/sessions", json={"host": SEED, "symptom": symptom}).json()["session_id"]
    events = read_stream(c, sid, stop=_paused, timeout=30)
    assert events[-1].type == "approval_request", [e.type for e in events]
    wait_status(c, sid, ("awaiting_approval",))
    pending = [a for a in c.get("/api/approvals").json() if a["session_id"] == sid]
    assert len(pending) == 1
    return sid, events, pending[0]


def test_approve_a_revert_round_trip(live: Live) -> None:
    with live.client() as c:
        sid, before, req = _start_and_wait(c)
        # The revert to the known-good copy (config_apply of its content, or config_revert).
        assert req["tool"] in ("config_apply", "config_revert")
        assert req["args"]["path"].endswith("sitecustomize.py")
        assert before[-1].data["data"]["tool"] == req["tool"]
        diff = c.get(f"/api/approvals/{req['id']}/diff").json()
        assert diff["path"] == req["args"]["path"] and diff["diff"], diff
        lines = diff["diff"].splitlines()
        assert lines[0].startswith("--- ") and lines[1].startswith("+++ ")
        changed = [x for x in lines[2:] if x[:1] in "+-"]
        assert '-os.environ.setdefault("NCCL_MIN_NCHANNELS", "1")' in changed or any(
            x.startswith("-") and "NCCL_MIN_NCHANNELS" in x for x in changed
        ), changed
        assert " import os" in lines  # unchanged lines are context, not part of the change
        assert c.get("/api/approvals/nope/diff").status_code == 404
        r = c.post(f"/api/approvals/{req['id']}", json={"approve": True, "reason": "go ahead"})
        assert r.status_code == 202 and r.json()["session_id"] == sid
        after = read_stream(c, sid, last_event_id=before[-1].seq)
        decided = _decision(after)
        assert decided["approved"] and decided["reason"] == "go ahead"
        assert after[-1].type == "conclusion"
        d = wait_status(c, sid, ("concluded",))
        assert d["report"]["root_cause"] == "kv_cache_no_room"
        assert "stale_gpu_process" in d["report"]["ruled_out"]
        assert f"Applied with approval: {req['tool']}" in d["report"]["next_step"]
        assert all(a["session_id"] != sid for a in c.get("/api/approvals").json())
        assert c.post(f"/api/approvals/{req['id']}", json={"approve": True}).status_code == 404


def test_deny_still_concludes(live: Live) -> None:
    with live.client() as c:
        sid, before, req = _start_and_wait(c)
        r = c.post(f"/api/approvals/{req['id']}", json={"approve": False, "reason": "not now"})
        assert r.status_code == 202
        after = read_stream(c, sid, last_event_id=before[-1].seq)
        assert _decision(after)["approved"] is False
        d = wait_status(c, sid, ("concluded",))
        assert "Applied with approval" not in d["report"]["next_step"]


def test_messages_refused_while_running_and_bad_ids(live: Live) -> None:
    with live.client() as c:
        assert c.post("/api/approvals/nope", json={"approve": True}).status_code == 404
        assert c.post("/api/approvals/nope", json={"approve": "maybe"}).status_code == 422


@pytest.mark.usefixtures("database")
def test_pending_approval_survives_a_restart(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = start_live(home)
    try:
        with first.client() as c:
            sid, before, req = _start_and_wait(c)
    finally:
        first.stop()
    second = start_live(home)
    try:
        with second.client() as c:
            assert [a["id"] for a in c.get("/api/approvals").json()] == [req["id"]]
            assert c.post(f"/api/approvals/{req['id']}", json={"approve": True}).status_code == 202
            after = read_stream(c, sid, last_event_id=before[-1].seq)
            assert after[-1].type == "conclusion"
            assert wait_status(c, sid, ("concluded",))["report"]["root_cause"] == "kv_cache_no_room"
    finally:
        second.stop()


def test_the_diff_says_whether_the_change_is_the_next_step(live: Live) -> None:
    """The seed card's next step raises --mem-fraction-static; the change restores
    sitecustomize.py: the diff says they differ, and why, from the report's own fields."""
    with live.client() as c:
        sid, _, req = _start_and_wait(c)
        fit = c.get(f"/api/approvals/{req['id']}/diff").json()["fit"]
        assert fit["agrees"] is False
        assert "--mem-fraction-static" in fit["why"] and "kv_cache_no_room" in fit["why"]
        assert "sitecustomize.py" in fit["why"] and "known-good" in fit["why"]
        c.post(f"/api/approvals/{req['id']}", json={"approve": False})
        wait_status(c, sid, ("concluded",))
