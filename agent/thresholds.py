"""The rulebook's numbers (agent/knowledge/thresholds.yaml), loaded once and validated.

Weights and thresholds used to live as literals in five modules ("disk full" was 95 in one and
97 in another); now each is a named field here and the modules read `THRESHOLDS`.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, model_validator

from tools import yamlio

PATH = Path(__file__).with_name("knowledge") / "thresholds.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SignatureWeight(_Strict):
    fatal: float
    strong: float
    weak: float


class Board(_Strict):
    supported_at: float
    refuted_at: float


class Fact(_Strict):
    proves: float
    supports_clearly: float
    supports: float
    leans: float
    hints: float
    weakens: float
    weakens_clearly: float
    refutes: float
    refutes_firmly: float
    refutes_strongly: float
    refutes_outright: float


class Structure(_Strict):
    hint_weight: float
    against_killed: float


class Hang(_Strict):
    pinned_pct: float
    idle_pct: float
    working_pct: float
    busy_mib: float
    context_mib: float
    pinned_alive: float
    stacks_in_collective: float
    pinned_silent: float
    static_silent: float
    compiling: float
    memory_moving: float
    rank_gone: float
    consequence_of_gone_rank: float
    stacks_working: float
    stacks_not_starting: float
    resource_wait_s: float
    neighbour_cpu_pct: float


class Cause(_Strict):
    proven_setting: float
    names_the_cause: float
    behind_the_failure: float
    setting_line: float
    effect_cited: float
    tiny_memory_fraction: float


class Oom(_Strict):
    weights_hold_share: float
    weights_ask_share: float
    holder_floor_mib: float
    unneeded_holder_scale: float
    duplicate_gib: float
    init_frame_lines: int


class Shm(_Strict):
    small_mib: float
    full_pct: float
    roomy_mib: float
    live_room_pct: float


class Rulebook(_Strict):
    min_check_value: float
    decisive_score: float
    decisive_margin: float
    conclude_score: float
    conclude_margin: float
    lean_score: float
    lean_margin: float


class Nodes(_Strict):
    explains_away_at: float


class Thresholds(_Strict):
    signature_weight: SignatureWeight
    strong_cap: float
    weak_cap: float
    board: Board
    fact: Fact
    structure: Structure
    hang: Hang
    cause: Cause
    oom: Oom
    shm: Shm
    rulebook: Rulebook
    nodes: Nodes

    @model_validator(mode="after")
    def _ordered(self) -> Thresholds:
        w = self.signature_weight
        if not w.fatal >= w.strong > w.weak > 0:
            raise ValueError("signature weights must order fatal >= strong > weak > 0")
        if not self.board.refuted_at < 0 < self.board.supported_at:
            raise ValueError("the board refutes below zero and supports above it")
        return self


def load(path: Path = PATH) -> Thresholds:
    return Thresholds.model_validate(yamlio.safe_load(path.read_text(encoding="utf-8")))


THRESHOLDS = load()
