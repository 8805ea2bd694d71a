"""Approvals: changing actions the agent paused on; a decision resumes the graph from its checkpoint."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, status
from pydantic import BaseModel

from server.change_fit import change_fit
from server.deps import Catalog, Config, Hub, Mem
from server.diffs import SOURCE_KEYS, ApprovalDiff, approval_diff
from server.hosts import UnknownHost
from server.paths import PathRefused, check_lexical
from server.runs import Busy, NotFound
from server.schemas import DecisionIn
from store.records import ApprovalRequest, Decision

router = APIRouter(prefix="/api/approvals", tags=["approvals"])


class Decided(BaseModel):
    approval_id: str
    session_id: str
    approve: bool


def _paths(args: dict[str, Any]) -> list[str]:
    """Every argument of the action that names a file (path, src, dest, ...)."""
    out = []
    for key, value in args.items():
        if isinstance(value, str) and ("path" in key or key in ("src", "dest", "file", "target")):
            out.append(value)
    return out


def _report(mem: Any, session_id: str) -> dict[str, Any]:
    """The session's latest conclusion, from the database (any replica may have stored it)."""
    for ev in reversed(mem.events(session_id, after_seq=0)):
        if ev.type == "conclusion":
            return ev.data.get("report", ev.data)
    return {}


@router.get("", response_model=list[ApprovalRequest])
def pending(hub: Hub) -> list[ApprovalRequest]:
    return hub.pending()


@router.get("/{approval_id}/diff", response_model=ApprovalDiff)
def diff(
    approval_id: Annotated[str, Path(max_length=100)],
    hub: Hub,
    mem: Mem,
    catalog: Catalog,
    config: Config,
) -> ApprovalDiff:
    """The unified diff of the file change a pending approval would make, read on the session's
    host by whichever replica answers: where it runs comes from the database, not memory."""
    req = next((a for a in hub.pending() if a.id == approval_id), None)
    if req is None:
        raise HTTPException(404, f"no pending approval {approval_id}")
    try:  # the session's own host, also when another replica paused it (from the database)
        host_name, _ = hub.location(req.session_id)
    except NotFound as exc:
        raise HTTPException(404, str(exc)) from exc
    roots, protected = catalog.roots(host_name), config.protected_now()
    try:  # the same paths an approval may touch, and only those, are read for the diff
        for p in _paths(req.args) + [v for k, v in req.args.items() if k in SOURCE_KEYS]:
            check_lexical(p, roots, None, protected)
    except PathRefused as exc:
        raise HTTPException(exc.status, exc.message) from exc
    try:
        host = hub.open_for(req.session_id)  # inside the session's container when it has one
    except UnknownHost as exc:
        raise HTTPException(409, f"the session's host is gone: {exc}") from exc
    try:
        out = approval_diff(req, host)
    finally:
        host.close()
    report = _report(mem, req.session_id)
    out.fit = change_fit(req, report.get("next_step") or "", report.get("root_cause"))
    return out


@router.post("/{approval_id}", status_code=status.HTTP_202_ACCEPTED, response_model=Decided)
def decide(
    approval_id: Annotated[str, Path(max_length=100)],
    body: DecisionIn,
    hub: Hub,
    catalog: Catalog,
    config: Config,
) -> Decided:
    """Approve or deny; the run resumes in the background and streams on the session's events."""
    req = next((a for a in hub.pending() if a.id == approval_id), None)
    if req is None:
        raise HTTPException(404, f"no pending approval {approval_id}")
    if body.approve:
        try:
            roots = catalog.roots(hub.location(req.session_id)[0])
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from exc
        protected = config.protected_now()  # a change never writes Pivot's own state
        try:
            for p in _paths(req.args):
                check_lexical(p, roots, None, protected)
        except PathRefused as exc:
            raise HTTPException(exc.status, f"refusing to approve: {exc.message}") from exc
    try:
        hub.decide(approval_id, Decision(approve=body.approve, reason=body.reason))
    except NotFound as exc:
        raise HTTPException(404, str(exc)) from exc
    except Busy as exc:
        raise HTTPException(409, str(exc)) from exc
    return Decided(approval_id=approval_id, session_id=req.session_id, approve=body.approve)
