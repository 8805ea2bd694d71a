"""What Pivot remembers across sessions, whatever keeps it: the rows it answers and the one
`MemoryStore` Protocol both backends meet.

`Memory` (store/memory/sqlite.py) keeps it in SQLite via sqlite-utils, the embedded default;
`PgMemory` (store/memory/postgres.py) keeps the same tables in a team's PostgreSQL.
`store.factory.open_memory` picks one; callers never name a backend, and no backend imports the
factory.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel

from store.records import AlertRow, Event, Report


class SessionRow(BaseModel):
    id: str
    host: str
    symptom: str
    brain: str
    status: str
    created: str
    updated: str
    root_cause: str | None = None


class TodoRow(BaseModel):
    id: int
    host: str
    text: str
    done: bool = False
    created: str
    session_id: str | None = None


class HandoffRow(BaseModel):
    id: int
    host: str
    text: str
    created: str
    session_id: str | None = None


class ConclusionRow(BaseModel):
    session_id: str
    host: str
    root_cause: str | None
    summary: str
    evidence: str
    created: str


class MemoryStore(Protocol):
    """What the runner, the service, the CLI and the loop ask of memory, whatever the backend."""

    def create_session(
        self, host: str, symptom: str, brain: str, session_id: str | None = None
    ) -> str: ...
    def set_status(self, session_id: str, status: str) -> None: ...
    def set_host_spec(self, session_id: str, spec: str) -> None: ...
    def claim_status(self, session_id: str, expected: str, new: str) -> bool: ...
    def host_spec(self, session_id: str) -> str | None: ...
    def get_session(self, session_id: str) -> SessionRow | None: ...
    def list_sessions(self, host: str | None = None, limit: int = 50) -> list[SessionRow]: ...
    def save_report(self, report: Report) -> None: ...
    def report(self, session_id: str) -> Report | None: ...
    def record_observation(self, session_id: str, obs: dict[str, Any]) -> None: ...
    def observations(self, session_id: str) -> list[dict[str, Any]]: ...
    def trajectory(self, session_id: str) -> dict[str, Any]: ...
    def append_event(self, event: Event) -> Event: ...
    def events(self, session_id: str, after_seq: int = 0) -> list[Event]: ...
    def add_todo(self, host: str, text: str, session_id: str | None = None) -> TodoRow: ...
    def todos(self, host: str, open_only: bool = True) -> list[TodoRow]: ...
    def close_todo(self, todo_id: int) -> bool: ...
    def add_handoff(self, host: str, text: str, session_id: str | None = None) -> HandoffRow: ...
    def handoffs(self, host: str, limit: int = 10) -> list[HandoffRow]: ...
    def last_handoff(self, host: str) -> HandoffRow | None: ...
    def search_conclusions(self, query: str, limit: int = 20) -> list[ConclusionRow]: ...
    def record_alert(self, alert: AlertRow) -> None: ...
    def alert(self, session_id: str) -> AlertRow | None: ...
    def last_alert(self, group_key: str, host: str) -> AlertRow | None: ...
    def close(self) -> None: ...


class MemoryReads:
    """Answers built from other answers, the same on both backends."""

    def trajectory(self: Any, session_id: str) -> dict[str, Any]:
        s = self.get_session(session_id)
        rep = self.report(session_id)
        return {
            "session": s.model_dump() if s else None,
            "observations": self.observations(session_id),
            "hypotheses": rep.model_dump()["hypotheses"] if rep else [],
            "report": rep.model_dump() if rep else None,
            "events": [e.model_dump() for e in self.events(session_id)],
        }

    def last_handoff(self: Any, host: str) -> HandoffRow | None:
        rows = self.handoffs(host, limit=1)
        return rows[0] if rows else None
