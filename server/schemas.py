"""Request and response bodies of the HTTP API (the OpenAPI schema is generated from these)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from store.records import AlertRow, Event, HypothesisView, Report
from watch.live import LaunchReport


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SessionCreate(Strict):
    host: str = Field(min_length=1, max_length=200, examples=["replay:seed-sglang-fewchan-kv-oom"])
    symptom: str = Field(min_length=1, max_length=8000)
    brain: Literal["rulebook", "llm"] | None = None
    container: str | None = Field(
        None,
        max_length=200,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="the server runs in this Docker/Podman container on the host: read it inside "
        "(with its record and log), the GPUs and kernel log outside",
        examples=["vllm-0"],
    )


class SessionCreated(BaseModel):
    session_id: str
    events_url: str


class MessageIn(Strict):
    text: str = Field(min_length=1, max_length=8000)


class Accepted(BaseModel):
    session_id: str
    accepted: bool = True


class SessionSummary(BaseModel):
    model_config = ConfigDict(extra="allow")

    session_id: str
    host: str
    symptom: str = ""
    status: str = ""
    root_cause: str | None = None
    created: str | None = None
    alertname: str | None = Field(None, description="the alert that started it, if one did")


class SessionDetail(BaseModel):
    session_id: str
    host: str
    symptom: str = ""
    brain: str = ""
    status: str
    phase: str | None = Field(None, description="queued | running | awaiting_approval | done")
    observations: list[dict[str, Any]] = Field(default_factory=list)
    hypotheses: list[HypothesisView | dict[str, Any]] = Field(default_factory=list)
    conclusion: dict[str, Any] | None = None
    report: Report | None = None
    events: list[Event] = Field(default_factory=list)
    error: str | None = None
    alert: AlertRow | None = Field(None, description="the Alertmanager alert that started it")


class DecisionIn(Strict):
    approve: bool
    reason: str = Field("", max_length=2000)


class TodoIn(Strict):
    text: str = Field(min_length=1, max_length=2000)
    session_id: str | None = Field(None, max_length=100)


class HandoffIn(Strict):
    text: str = Field(min_length=1, max_length=8000)
    session_id: str | None = Field(None, max_length=100)


class Closed(BaseModel):
    todo_id: int | str
    closed: bool


class FileTailOut(BaseModel):
    host: str
    path: str
    exists: bool
    size: int
    text: str
    error: str | None = None


class EvalIn(Strict):
    paths: list[str] = Field(default_factory=list, max_length=200)
    directory: str | None = Field(
        None, max_length=4096, description="one of GET /api/evals/dirs: run every card in it"
    )
    brain: Literal["rulebook", "llm"] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> EvalIn:
        if bool(self.paths) == bool(self.directory):
            raise ValueError("give either paths or directory")
        return self


class EvalRun(BaseModel):
    eval_id: str
    status: Literal["running", "done", "error"]
    paths: list[str]
    result: dict[str, Any] | None = None
    error: str | None = None
    report_url: str | None = Field(None, description="the run's HTML report, once done")


class CardDir(BaseModel):
    path: str
    name: str
    cards: int


class LoopStatus(BaseModel):
    available: bool
    detail: str = ""
    status: dict[str, Any] = Field(default_factory=dict)


class MorningReport(BaseModel):
    available: bool
    detail: str = ""
    markdown: str = ""


class Ledger(BaseModel):
    available: bool
    plan: str | None = None
    baseline: float | None = None
    metric: str | None = None
    entries: list[dict[str, Any]] = Field(default_factory=list)


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    version: str


class WatchedLaunch(LaunchReport):
    first_seen: str = Field(description="when this service first heard of the launch")
