"""Sessions: start an investigation, list them, read one whole, send a follow-up message."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, status

from server.deps import Catalog, Config, Hub, Mem
from server.hosts import UnknownHost
from server.runs import BrainFailed, Busy, NotFound
from server.schemas import (
    Accepted,
    MessageIn,
    SessionCreate,
    SessionCreated,
    SessionDetail,
    SessionSummary,
)

router = APIRouter(prefix="/api/sessions", tags=["sessions"])
SessionId = Annotated[str, Path(max_length=100, pattern=r"^[A-Za-z0-9_-]+$")]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=SessionCreated,
    responses={422: {"description": "bad body, or the brain could not start (session failed)"}},
)
def create_session(
    body: SessionCreate, hub: Hub, config: Config, catalog: Catalog
) -> SessionCreated:
    """Start an investigation in the background; follow it on `events_url`."""
    if not catalog.known(body.host):
        raise HTTPException(404, f"unknown host {body.host!r}; GET /api/hosts lists them")
    try:
        sid = hub.start(
            body.host, body.symptom, body.brain or config.default_brain, container=body.container
        )
    except UnknownHost as exc:
        raise HTTPException(404, str(exc)) from exc
    except BrainFailed as exc:
        detail = {"error": exc.error, "session_id": exc.session_id, "status": "error"}
        raise HTTPException(422, detail) from exc
    return SessionCreated(session_id=sid, events_url=f"/api/sessions/{sid}/events")


@router.get("", response_model=list[SessionSummary])
def list_sessions(
    mem: Mem,
    hub: Hub,
    host: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    q: Annotated[
        str,
        Query(max_length=200, description="words that must all appear in host, symptom or cause"),
    ] = "",
) -> list[SessionSummary]:
    """Newest first; `q` searches past sessions by host, symptom and root cause."""
    words = q.lower().split()
    out = []
    for row in mem.list_sessions(host=host, limit=500 if words else limit):
        hay = f"{row.host} {row.symptom} {row.root_cause or ''} {row.id}".lower()
        if words and not all(w in hay for w in words):
            continue
        if len(out) >= limit:
            break
        phase = hub.phase(row.id)
        alert = mem.alert(row.id)
        out.append(
            SessionSummary(
                session_id=row.id,
                host=row.host,
                symptom=row.symptom,
                status=_status(row.status, phase),
                root_cause=row.root_cause,
                created=row.created,
                alertname=alert.alertname if alert else None,
            )
        )
    return out


def _status(stored: str, phase: str | None) -> str:
    """The live phase wins while this process runs the session; memory's status otherwise."""
    if phase in ("queued", "running", "awaiting_approval"):
        return phase
    return stored


@router.get("/{session_id}", response_model=SessionDetail)
def get_session(session_id: SessionId, mem: Mem, hub: Hub) -> SessionDetail:
    """The whole trajectory: observations, hypotheses, conclusion/report and every event."""
    row = mem.get_session(session_id)
    if row is None:
        raise HTTPException(404, f"no session {session_id}")
    traj = mem.trajectory(session_id)
    st = hub.state(session_id)
    report = traj.get("report")
    if report is None and st is not None and st.report is not None:
        report = st.report.model_dump(mode="json")
    conclusion = None
    for ev in reversed(traj.get("events", [])):
        if ev["type"] == "conclusion":
            conclusion = ev["data"]
            break
    hypotheses = traj.get("hypotheses") or (report or {}).get("hypotheses", [])
    return SessionDetail(
        session_id=row.id,
        host=row.host,
        symptom=row.symptom,
        brain=row.brain,
        status=_status(row.status, st.phase if st else None),
        phase=st.phase if st else None,
        observations=traj.get("observations", []),
        hypotheses=hypotheses,
        conclusion=conclusion,
        report=report,
        events=traj.get("events", []),
        error=st.error if st else None,
        alert=mem.alert(session_id),
    )


@router.post(
    "/{session_id}/messages", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted
)
def post_message(session_id: SessionId, body: MessageIn, hub: Hub) -> Accepted:
    """A follow-up: a question ("why did you want to restore it?") gets one prose answer from
    the board, also while the run goes on; a request for a read ("check dmesg too") resumes the
    run once it pauses (409 while it runs). Answers arrive on the session's event stream."""
    try:
        hub.message(session_id, body.text)
    except NotFound as exc:
        raise HTTPException(404, str(exc)) from exc
    except Busy as exc:
        raise HTTPException(409, str(exc)) from exc
    except UnknownHost as exc:
        raise HTTPException(409, f"the session's host is gone: {exc}") from exc
    return Accepted(session_id=session_id)
