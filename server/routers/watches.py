"""Watched launches: `pivot watch --serve` reports each change, the page lists them live."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path

from server.deps import Watches
from server.schemas import WatchedLaunch
from watch.live import WATCH_ID, LaunchReport

router = APIRouter(prefix="/api/watches", tags=["watches"])


@router.put("/{watch_id}", response_model=WatchedLaunch)
def report_watch(
    watch_id: Annotated[str, Path(pattern=WATCH_ID)], body: LaunchReport, board: Watches
) -> WatchedLaunch:
    """The launch as the watch sees it now (phase, progress, ETA), or how it ended."""
    if body.watch_id != watch_id:
        raise HTTPException(422, f"the body is about watch {body.watch_id}, the path {watch_id}")
    return WatchedLaunch(first_seen=board.put(body), **body.model_dump())


@router.get("", response_model=list[WatchedLaunch])
def list_watches(board: Watches) -> list[WatchedLaunch]:
    """Launches watched with `--serve`, the most recently reported first."""
    return [WatchedLaunch(first_seen=f, **r.model_dump()) for f, r in board.list()]
