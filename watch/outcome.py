"""How a watch ended, as one typed object: what a script's exit code, `--json` and a webhook read.

Exit codes are part of the interface (a launch script branches on them): 0 ready, 1 failed with
a diagnosis, 2 bad input, 3 gave up with the reason. 130 is `pivot launch` stopped by Ctrl-C.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field


class Status(StrEnum):
    ready = "ready"
    died = "died"  # the pid is gone
    crashed = "crashed"  # a line the signature KB calls fatal, the process still alive after it
    stalled = "stalled"  # alive, but silent past the window its own pace allows
    gave_up = "gave_up"  # timeout, host unreachable, log gone: the reason says which
    bad_input = "bad_input"
    stopped = "stopped"  # `pivot launch` stopped by Ctrl-C


EXIT_CODES: dict[Status, int] = {
    Status.ready: 0,
    Status.died: 1,
    Status.crashed: 1,
    Status.stalled: 1,
    Status.bad_input: 2,
    Status.gave_up: 3,
    Status.stopped: 130,
}

FAILED = (Status.died, Status.crashed, Status.stalled)


class Target(BaseModel):
    """What is watched; any of pid, log and port may be unknown, not all of them."""

    host: str
    pid: int | None = None
    log: str | None = None
    port: int | None = None
    url: str | None = Field(None, description="the readiness probe (a real HTTP GET)")
    container: str | None = None
    command: str | None = Field(None, description="the launch's command line, when known")


class EtaSample(BaseModel):
    """An ETA as it was shown: at `elapsed_s`, item `done` of `total`, `eta_s` left."""

    elapsed_s: float
    done: int
    total: int
    eta_s: float | None = None


class Diagnosis(BaseModel):
    """The investigation's verdict, trimmed to what an alert shows (the session has the rest)."""

    session_id: str
    status: str
    root_cause: str | None = None
    confidence: float = 0.0
    summary: str = ""
    evidence: list[str] = Field(default_factory=list)
    next_step: str = ""
    verdict_after_death_s: float | None = Field(
        None, description="seconds from the moment the watch saw the failure to the verdict"
    )


class Outcome(BaseModel):
    status: Status
    detail: str
    target: Target
    engine: str | None = None
    elapsed_s: float = 0.0
    phase: str | None = None
    progress: str | None = Field(None, description="the last progress seen, in words")
    etas: list[EtaSample] = Field(default_factory=list)
    evidence: str | None = Field(None, description="the log line that says why, verbatim")
    label: str | None = None
    window_s: float | None = Field(None, description="the stall window it was judged by")
    failed_at: float | None = Field(None, description="time.time() when the failure was seen")
    diagnosis: Diagnosis | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def headline(self) -> str:
        where = self.target.host
        what = f"pid {self.target.pid}" if self.target.pid else (self.target.log or "launch")
        head = f"{self.status.value.upper()}: {what} on {where}: {self.detail}"
        if self.diagnosis and self.diagnosis.root_cause:
            head += (
                f" | root cause {self.diagnosis.root_cause} "
                f"({self.diagnosis.confidence:.2f}): {self.diagnosis.summary}"
            )
        return head

    def to_json(self) -> dict[str, Any]:
        return {**self.model_dump(mode="json"), "exit_code": self.exit_code}

    def webhook_body(self) -> dict[str, Any]:
        """Slack-compatible (`text`), with the structured outcome beside it for other hooks."""
        return {"text": self.headline(), **self.to_json()}
