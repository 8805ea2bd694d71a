"""What the launch got past: a finished stage rules out the failures that belong to it.

An engineer reading "Loading weights took 6.71 seconds" crosses off a weights OOM and unreadable
model files without a second thought; "Uvicorn running on ..." crosses off a taken port. These
are refutations with a line to quote, so both brains get them from the same table
(knowledge/stages.yaml). Only the launch's own log counts (the newest read of each log tool,
from the last start on): a grep hit or another launch's log proves nothing about this one.

Likewise a launch that died on an error of its own, at the end of its log, was not killed from
outside: `own_end` gives the line that ended it, and the kill labels are ruled out with it.

A stage's refutation never outweighs a label's own support (a draft model loading after the
target, a LoRA adapter failing after the weights): `keep_supported` drops it afterwards.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel

from agent.evidence import LOG_TOOLS, last_launch, latest_text_observations, text_lines
from agent.facts import Facts
from agent.rules import proof
from agent.state import Finding, Observation
from agent.thresholds import THRESHOLDS
from tools import yamlio

F = THRESHOLDS.fact
STAGES = Path(__file__).parents[1] / "knowledge" / "stages.yaml"
#: Labels for an end that came from outside the process (a signal, the OOM killer).
KILL_LABELS = ("host_oom_killed", "killed_externally")
#: Finding kinds this module adds: dropped again where the label has support of its own.
KINDS = ("stage", "own_end")
#: How far from the end of the log the line that ended the launch may be.
END_WINDOW = 40


class Stage(BaseModel):
    name: str
    refutes: list[str]
    patterns: list[str]
    examples: list[str] = []
    not_examples: list[str] = []


class EndedBefore(BaseModel):
    refutes: list[str]
    patterns: list[str]
    examples: list[str] = []


class _Stages(BaseModel):
    stages: list[Stage]
    ended_before_loading: EndedBefore


@lru_cache(maxsize=1)
def _raw() -> _Stages:
    return _Stages.model_validate(yamlio.safe_load(STAGES.read_text(encoding="utf-8")))


@lru_cache(maxsize=1)
def ended_before() -> tuple[EndedBefore, re.Pattern[str]]:
    e = _raw().ended_before_loading
    return e, re.compile("|".join(f"(?:{p})" for p in e.patterns), re.M)


@lru_cache(maxsize=1)
def stages() -> list[tuple[Stage, re.Pattern[str]]]:
    return [(s, re.compile("|".join(f"(?:{p})" for p in s.patterns))) for s in _raw().stages]


def _own_logs(observations: list[Observation]) -> list[tuple[Observation, list[str]]]:
    out = []
    for o in latest_text_observations(observations):
        if o["tool"] in LOG_TOOLS:
            lines = text_lines(o)
            out.append((o, lines[last_launch(lines) :]))
    return out


def own_end(lines: list[str]) -> str | None:
    """The final line of a traceback (or a CUDA/NCCL error) among the log's last lines that is
    the process's own: not a signal from outside, not a peer gone, not "see above"."""
    start = max(0, len(lines) - END_WINDOW)
    for idx in range(len(lines) - 1, start - 1, -1):
        ln = lines[idx]
        if proof.external_end(ln) or proof.peer_lost(ln) or proof.is_wrapper(ln):
            continue
        if proof.kind_in_context(lines, idx) in ("traceback", "cuda", "nccl"):
            return ln
    return None


def passed_rules(facts: Facts, observations: list[Observation], add) -> None:  # type: ignore[no-untyped-def]
    logs = _own_logs(observations)

    def refute_on_first(rx: re.Pattern[str], labels: list[str], note: str) -> None:
        """The first line of the launch's own logs that `rx` finds refutes `labels`."""
        for o, lines in logs:
            line = next((ln for ln in lines if rx.search(ln)), None)
            if line is not None:
                for label in labels:
                    add(label, "stage", F.refutes, o["id"], line, note)
                return

    for stage, rx in stages():
        refute_on_first(rx, stage.refutes, f"the launch got past {stage.name}")
    if facts.server_alive:
        return  # a live launch has not ended; liveness speaks to the kill labels
    before, rx = ended_before()
    refute_on_first(
        rx,
        before.refutes,
        "the launch ended before loading anything: its command was refused or never ran",
    )
    for o, lines in logs:
        line = own_end(lines)
        if line is not None:
            for label in KILL_LABELS:
                add(
                    label,
                    "own_end",
                    F.refutes,
                    o["id"],
                    line,
                    "the launch ended on an error of its own; a kill from outside prints none",
                )
            return


def keep_supported(findings: list[Finding], supported_at: float) -> list[Finding]:
    """Drop this module's refutations of labels that other findings support on their own."""
    support: dict[str, float] = {}
    for f in findings:
        if f["strength"] > 0 and f["label"]:
            support[f["label"]] = support.get(f["label"], 0.0) + f["strength"]
    return [
        f
        for f in findings
        if f["kind"] not in KINDS or support.get(f["label"] or "", 0.0) < supported_at
    ]
