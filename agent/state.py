"""The investigation's state: plain, JSON-able data so the SQLite checkpointer can save it.

Observations are append-only; hypotheses are data (one dict per label), not graph nodes.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from typing_extensions import TypedDict


class Observation(TypedDict):
    id: str  # "o1", "o2", ... unique within a session
    tool: str
    args: dict[str, Any]
    ok: bool
    lines: list[str]  # what the agent sees and may cite, verbatim
    data: dict[str, Any]  # the typed result, dumped
    round: int


class Finding(TypedDict):
    id: str
    label: str | None
    kind: str  # signature strength or "fact"
    strength: float  # signed support: >0 supports the label, <0 speaks against it
    observation: str
    line: str
    note: str


class Hypothesis(TypedDict):
    label: str
    statement: str
    status: str  # open | supported | refuted | confirmed
    score: float
    evidence: list[dict[str, str]]  # {observation, line}
    against: list[dict[str, str]]
    check: str


class Action(TypedDict, total=False):
    kind: str  # check | change | conclude | insufficient
    tool: str
    args: dict[str, Any]
    why: str
    label: str
    confidence: float
    evidence: list[dict[str, str]]
    ruled_out: list[str]
    #: the rivals a brain says it ruled out, each with the verbatim line that refutes it:
    #: {label, observation, line, why}; checked like evidence before it refutes on the board
    refutations: list[dict[str, str]]
    next_step: str
    summary: str


class State(TypedDict, total=False):
    session_id: str
    host: str
    symptom: str
    messages: Annotated[list[str], operator.add]  # follow-ups from the operator
    observations: Annotated[list[Observation], operator.add]
    findings: list[Finding]
    hypotheses: dict[str, Hypothesis]
    todo: list[str]
    done_checks: Annotated[list[str], operator.add]
    rounds: int
    tool_calls: int
    tokens: int
    started: float
    action: Action | None
    rejections: Annotated[list[str], operator.add]  # guardrail refusals, fed back to the brain
    changes: Annotated[list[dict[str, Any]], operator.add]  # approved/denied changing actions
    queue: list[Action]  # checks asked for by the operator, run together
    notes: list[str]  # open todos and the last handoff for this host, from memory
    status: str
    report: dict[str, Any] | None
