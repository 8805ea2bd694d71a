"""The live event stream of one session (Server-Sent Events), resumable with Last-Event-ID.

Order of work matters: subscribe first, then replay stored events after the client's last seq,
then forward live ones, skipping any seq already sent and reading from the store any seq that
arrives after a later one. That way nothing falls in the gap between the replay and the live
feed, nor between two writers of one session. With replicas on one PostgreSQL, a session run by another
replica is followed too: its events arrive through the hub's relay (LISTEN/NOTIFY).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Path, Query
from sse_starlette import EventSourceResponse, ServerSentEvent

from server.deps import Config, Hub, Mem
from server.runs import END, RunHub
from store.records import Event

router = APIRouter(prefix="/api/sessions", tags=["events"])


def _sse(ev: Event) -> ServerSentEvent:
    return ServerSentEvent(id=str(ev.seq), event=ev.type, data=ev.model_dump_json())


async def _stream(
    hub: RunHub, mem: object, session_id: str, after: int
) -> AsyncIterator[ServerSentEvent]:
    queue = hub.subscribe(session_id)
    try:
        last = after
        for ev in mem.events(session_id, after_seq=after):  # type: ignore[attr-defined]
            yield _sse(ev)
            last = ev.seq
        live_here = hub.active(session_id) or hub.waiting(session_id)
        if not live_here and not hub.followable(session_id):
            return  # finished (or run by another process): everything there is was replayed
        while True:
            item = await queue.get()
            if item is END:
                return
            if item.seq <= last:
                continue
            if item.seq > last + 1:
                # two writers (the run and an answer to a question asked mid-run) store in seq
                # order but may hand over out of it: the events in the gap are stored already
                # (a seq is taken under the store's lock and committed before it is handed on),
                # so read them rather than skip them when they arrive late
                for ev in mem.events(session_id, after_seq=last):  # type: ignore[attr-defined]
                    yield _sse(ev)
                    last = ev.seq
                continue
            yield _sse(item)
            last = item.seq
    finally:
        hub.unsubscribe(session_id, queue)


@router.get(
    "/{session_id}/events",
    response_class=EventSourceResponse,
    responses={
        200: {
            "description": "`id: <seq>`, `event: <type>`, `data: <Event JSON>` per event",
            "content": {"text/event-stream": {}},
        },
        404: {"description": "no such session"},
    },
)
async def session_events(
    session_id: Annotated[str, Path(max_length=100, pattern=r"^[A-Za-z0-9_-]+$")],
    hub: Hub,
    mem: Mem,
    config: Config,
    last_event_id: Annotated[str | None, Header(max_length=20)] = None,
    after: Annotated[int | None, Query(ge=0, description="same as Last-Event-ID")] = None,
) -> EventSourceResponse:
    if hub.state(session_id) is None and mem.get_session(session_id) is None:
        raise HTTPException(404, f"no session {session_id}")
    start = after or 0
    if last_event_id:
        try:
            start = max(0, int(last_event_id))
        except ValueError as exc:
            raise HTTPException(400, "Last-Event-ID must be an event seq (integer)") from exc
    return EventSourceResponse(
        _stream(hub, mem, session_id, start),
        ping=config.ping_s,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
