"""The agent's boundary types: what an investigation produces and what it emits while running.

The CLI, the service, the overnight loop and the eval harness all consume these; keep them stable.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

HypothesisStatus = Literal["open", "supported", "refuted", "confirmed"]
RunStatus = Literal[
    "concluded",
    "healthy",
    "insufficient_evidence",
    "budget_exhausted",
    "awaiting_approval",
    "error",
]
EventType = Literal[
    "session",
    "observation",
    "finding",
    "hypothesis",
    "approval_request",
    "approval",
    "message",
    "conclusion",
    "error",
]


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Evidence(BaseModel):
    observation: str = Field(description="id of the observation the line occurs in, verbatim")
    line: str
    tool: str = Field("", description="the read that produced it (log_tail, py_stacks, ...)")


class HypothesisView(BaseModel):
    label: str
    statement: str = ""
    status: HypothesisStatus = "open"
    score: float = 0.0
    evidence: list[Evidence] = Field(default_factory=list)
    against: list[Evidence] = Field(default_factory=list)
    check: str = Field("", description="the check that would separate it from its rivals")


class Report(BaseModel):
    """The result of one investigation (`pivot investigate --json` prints exactly this)."""

    session_id: str
    host: str
    symptom: str
    status: RunStatus
    root_cause: str | None = None
    confidence: float = 0.0
    summary: str = ""
    evidence: list[Evidence] = Field(default_factory=list)
    ruled_out: list[str] = Field(default_factory=list)
    hypotheses: list[HypothesisView] = Field(default_factory=list)
    tool_calls: int = 0
    rounds: int = 0
    next_step: str = ""
    seen_before: list[str] = Field(default_factory=list)
    notes: list[str] = Field(
        default_factory=list, description="open todos and the last handoff for this host"
    )
    unknowns: list[str] = Field(
        default_factory=list,
        description="reads that could not be made (permissions, missing tools, bad paths): "
        "unknown, never absent, each with how to read it",
    )
    where: str = Field(
        "",
        description="which container the server was read inside, and how that was known "
        "(--container, or detected from /proc/PID/cgroup); empty for a plain host",
    )
    pending_approval: ApprovalRequest | None = None
    launch: dict[str, Any] | None = Field(
        None,
        description="the launch investigated (agent/launch.Launch): anchor, members, logs, port "
        "and its holder, GPU holders, configs, and the bystanders set aside",
    )


class ApprovalRequest(BaseModel):
    """A changing action the graph wants to take; it waits at an interrupt for a decision."""

    id: str
    session_id: str
    tool: str
    args: dict[str, Any]
    reason: str
    created: str = Field(default_factory=now)


class Decision(BaseModel):
    approve: bool
    reason: str = ""


class Event(BaseModel):
    """One thing that happened during a run, in order; the SSE stream sends these as-is."""

    session_id: str
    seq: int = 0
    type: EventType
    data: dict[str, Any] = Field(default_factory=dict)
    at: str = Field(default_factory=now)


class AlertRow(BaseModel):
    """The alert that started a session: what the page links back to, and what dedup reads."""

    session_id: str
    group_key: str
    host: str
    alertname: str = ""
    fingerprint: str = ""
    status: str = "firing"
    receiver: str = ""
    generator_url: str = ""
    external_url: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    starts_at: str = ""
    received: str = Field(default_factory=now)


Report.model_rebuild()
