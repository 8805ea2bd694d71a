"""Memory: todos and handoff notes per host, and full-text search over past conclusions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, status

from server.deps import Mem
from server.schemas import Closed, HandoffIn, TodoIn
from store.memory.base import ConclusionRow, HandoffRow, TodoRow

router = APIRouter(prefix="/api", tags=["memory"])
HostName = Annotated[str, Path(min_length=1, max_length=200)]


@router.get("/hosts/{host}/todos", response_model=list[TodoRow])
def list_todos(host: HostName, mem: Mem, all: bool = False) -> list[TodoRow]:
    return mem.todos(host, open_only=not all)


@router.post("/hosts/{host}/todos", status_code=status.HTTP_201_CREATED, response_model=TodoRow)
def add_todo(host: HostName, body: TodoIn, mem: Mem) -> TodoRow:
    return mem.add_todo(host, body.text, session_id=body.session_id)


@router.post("/todos/{todo_id}/close", response_model=Closed)
def close_todo(todo_id: Annotated[int, Path(ge=1, le=2**62)], mem: Mem) -> Closed:
    if not mem.close_todo(todo_id):
        raise HTTPException(404, f"no open todo {todo_id}")
    return Closed(todo_id=todo_id, closed=True)


@router.get("/hosts/{host}/handoffs", response_model=list[HandoffRow])
def list_handoffs(
    host: HostName, mem: Mem, limit: Annotated[int, Query(ge=1, le=100)] = 10
) -> list[HandoffRow]:
    return mem.handoffs(host, limit=limit)


@router.post(
    "/hosts/{host}/handoffs", status_code=status.HTTP_201_CREATED, response_model=HandoffRow
)
def add_handoff(host: HostName, body: HandoffIn, mem: Mem) -> HandoffRow:
    return mem.add_handoff(host, body.text, session_id=body.session_id)


@router.get("/conclusions", response_model=list[ConclusionRow])
def search_conclusions(
    mem: Mem,
    q: Annotated[str, Query(max_length=500)] = "",
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> list[ConclusionRow]:
    return mem.search_conclusions(q, limit=limit)
