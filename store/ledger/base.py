"""The night's ledger, whatever keeps it: its rows, its statuses and phases, and the one
`LedgerStore` Protocol both backends meet.

`Ledger` (store/ledger/sqlite.py) is one SQLite file (WAL) in the night's state dir; `PgLedger`
(store/ledger/postgres.py) keeps the same tables in a team's PostgreSQL. `store.factory.open_ledger`
picks one. Every phase change is committed before the phase starts, so a `kill -9` at any moment
leaves a row that says exactly what to undo on restart.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

Status = Literal[
    "pending", "running", "ok", "kept", "discarded", "inconclusive", "failed", "hung",
    "timeout", "skipped", "no_effect",
]  # fmt: skip
Phase = Literal[
    "pending", "preflight", "apply", "launch", "ready", "benchmark", "stop", "revert",
    "diagnose", "done",
]  # fmt: skip
#: Phases in which the experiment has no result yet: a restart runs it again from scratch.
BEFORE_RESULT = {"preflight", "apply", "launch", "ready", "benchmark"}
#: Phases after the result was recorded: a restart only finishes the cleanup (and diagnosis).
AFTER_RESULT = {"stop", "revert", "diagnose"}
TERMINAL = {
    "ok", "kept", "discarded", "inconclusive", "failed", "hung", "timeout", "skipped", "no_effect",
}  # fmt: skip
#: A change that provably changed nothing the server sees (loop/effect.py): never launched.
NO_EFFECT = "no_effect"
#: Statuses of a measured experiment (its metric is a result, whatever the verdict).
MEASURED = ("ok", "kept", "discarded", "inconclusive")
#: Terminal statuses that call for a diagnosis and a line under "Failures" in the report.
FAILED = ("failed", "hung", "timeout")


class ExperimentRow(BaseModel):
    id: str
    night_id: str
    seq: int
    name: str
    kind: Literal["baseline", "ranked", "search", "final"]
    host: str = ""
    change: dict[str, Any] = Field(default_factory=dict)
    diff: str = ""
    expect: str = ""
    status: Status = "pending"
    phase: Phase = "pending"
    metric_mean: float | None = None
    metric_spread: float | None = None
    metric_values: list[float] = Field(default_factory=list)
    #: Every metric the benchmark reported, one value per run (canonical names, see
    #: tools/bench_results.py): latency percentiles, throughputs, errors.
    metrics: dict[str, list[float]] = Field(default_factory=dict)
    slo: str | None = Field(None, description="SLO verdict: 'met', or what the change broke")
    ci_low: float | None = Field(None, description="interval of the metric's center")
    ci_high: float | None = None
    stats: str | None = Field(None, description="the statistical statement, in words")
    remeasured: int = Field(0, description="launches spent re-measuring an inconclusive result")
    #: When the launch that made each run started (one per metric_values entry): runs of one
    #: launch share it, so the judge can tell launches apart (loop/stats.py interleaved_compare).
    run_launch: list[float] = Field(default_factory=list)
    gain: float | None = None
    duration_s: float | None = None
    label: str | None = None
    evidence: str | None = None
    diagnosis: str | None = None
    log_path: str | None = None
    pid: int | None = None
    attempts: int = 0
    trial_number: int | None = None
    started: float | None = None
    ended: float | None = None


class LeftChange(BaseModel):
    """A config file the morning server runs with that differs from the night's baseline."""

    host: str
    path: str
    baseline_sha256: str
    snapshot_id: str | None = Field(None, description="the baseline's snapshot in the store")
    revert: str = Field(description="the command that puts the baseline back")
    diff: str = ""


class NightRow(BaseModel):
    id: str
    plan_name: str
    plan_digest: str
    state_dir: str
    started: float
    ended: float | None = None
    status: Literal["running", "done", "blocked"] = "running"
    noise: float | None = None
    best: str | None = None
    final_pid: int | None = None
    final_host: str | None = None
    note: str | None = None
    left_in_place: list[LeftChange] = Field(default_factory=list)
    heartbeat: float | None = Field(None, description="last time the running loop said so")
    loop_pid: int | None = None
    loop_host: str | None = None


class Event(BaseModel):
    """Something that happened to the night rather than to one experiment: an interruption
    (signal or kill -9) and what the stop or the next start did about it."""

    night_id: str
    at: float
    kind: Literal["signal", "killed", "resumed"]
    detail: str


class LedgerStore(Protocol):
    """What the loop, the service and `pivot db` ask of a ledger, whatever the backend."""

    def open_night(self, plan_name: str, digest: str, state_dir: str) -> tuple[NightRow, bool]: ...
    def night(self, night_id: str | None = None) -> NightRow | None: ...
    def update_night(self, night_id: str, **fields: Any) -> None: ...
    def add_event(self, night_id: str, kind: str, detail: str) -> None: ...
    def events(self, night_id: str) -> list[Event]: ...
    def save_baseline_file(self, night_id: str, host: str, path: str, content: bytes) -> None: ...
    def baseline_files(self, night_id: str, host: str) -> dict[str, bytes]: ...
    def add(self, row: ExperimentRow) -> ExperimentRow: ...
    def get(self, exp_id: str) -> ExperimentRow | None: ...
    def experiments(self, night_id: str) -> list[ExperimentRow]: ...
    def update(self, exp_id: str, **fields: Any) -> None: ...
    def set_phase(self, exp_id: str, phase: Phase) -> None: ...
    def next_seq(self, night_id: str) -> int: ...
    def close(self) -> None: ...
