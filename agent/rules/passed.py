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

from agent.evidence import (
    LOG_TOOLS,
    earlier_run_logs,
    last_launch,
    latest_text_observations,
    launch_line,
    text_lines,
)
from agent.facts import Facts
from agent.hits import set_aside_logs
from agent.rules import proof
from agent.rules.common import PHASE_PREFIX
from agent.signatures import scan
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
    #: lines that say the stage began; `finishes` also end it (beside `patterns`); `later` are
    #: the labels of the stages after it, out of reach while the launch has not finished it
    begins: list[str] = []
    finishes: list[str] = []
    later: list[str] = []
    begin_examples: list[str] = []
    begin_not_examples: list[str] = []


class EndedBefore(BaseModel):
    refutes: list[str]
    patterns: list[str]
    examples: list[str] = []


class _Stages(BaseModel):
    stages: list[Stage]
    ended_before_loading: EndedBefore
    announced: list[str] = []


@lru_cache(maxsize=1)
def _raw() -> _Stages:
    return _Stages.model_validate(yamlio.safe_load(STAGES.read_text(encoding="utf-8")))


@lru_cache(maxsize=1)
def ended_before() -> tuple[EndedBefore, re.Pattern[str]]:
    e = _raw().ended_before_loading
    return e, re.compile("|".join(f"(?:{p})" for p in e.patterns), re.M)


def _rx(patterns: list[str]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns) or r"(?!)")


@lru_cache(maxsize=1)
def stages() -> list[tuple[Stage, re.Pattern[str]]]:
    return [(s, _rx(s.patterns)) for s in _raw().stages]


@lru_cache(maxsize=1)
def begun_stages() -> list[tuple[Stage, re.Pattern[str], re.Pattern[str]]]:
    """Stages with begin lines: (stage, begins, its end: the stage's own lines or `finishes`)."""
    return [(s, _rx(s.begins), _rx([*s.patterns, *s.finishes])) for s in _raw().stages if s.begins]


def _own_logs(observations: list[Observation]) -> list[tuple[Observation, list[str]]]:
    """The launch's logs from their last start; a log whose run ended before another log read
    began (yesterday's retry beside today's run, by their own timestamps) is an earlier run, and
    a log set aside as none of this launch's story (a superseded rotation, a file that ended
    before the pod's own log began) says nothing of what this launch got past."""
    latest = latest_text_observations(observations)
    earlier = earlier_run_logs(latest) | set_aside_logs(observations)
    out = []
    for o in latest:
        if o["tool"] in LOG_TOOLS and str(o["args"].get("path", "")) not in earlier:
            lines = text_lines(o)
            out.append((o, lines[last_launch(lines) :]))
    return out


def stopped_in(
    begins: re.Pattern[str], ends: re.Pattern[str], logs: list[tuple[Observation, list[str]]]
) -> tuple[Observation, str] | None:
    """The last line of a stage the launch began, when none of its logs shows the stage ended.
    A begin line read means the read holds everything after it, so the missing end is not a
    part of the log left unread."""
    last = None
    for o, lines in logs:
        for ln in lines:
            if ends.search(ln):
                return None
            if begins.search(ln):
                last = (o, ln)
    return last


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

    def refute(labels, kind: str, obs_id: str, line: str, note) -> None:  # type: ignore[no-untyped-def]
        """Each label refuted by one line; `note` may be a function of the label."""
        for label in labels:
            add(label, kind, F.refutes, obs_id, line, note(label) if callable(note) else note)

    def refute_on_first(rx: re.Pattern[str], labels: list[str], note: str) -> None:
        """The first line of the launch's own logs that `rx` finds refutes `labels`."""
        for o, lines in logs:
            line = next((ln for ln in lines if rx.search(ln)), None)
            if line is not None:
                refute(labels, "stage", o["id"], line, note)
                return

    for stage, rx in stages():
        refute_on_first(rx, stage.refutes, f"the launch got past {stage.name}")
    for stage, begins, ends in begun_stages():
        stop = stopped_in(begins, ends, logs)
        if stop is not None:
            refute(
                stage.later,
                "stage",
                stop[0]["id"],
                stop[1],
                lambda label, name=stage.name: (
                    f"the launch never finished the stage of '{name}' (this is its last "
                    f"line of that stage): {label} belongs to a later stage"
                ),
            )
    _on_the_gpu(facts, add)
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
            refute(
                KILL_LABELS,
                "own_end",
                o["id"],
                line,
                "the launch ended on an error of its own; a kill from outside prints none",
            )
            if from_its_start(o, lines):
                # a phase marker names the OOM its phase would imply; it says no OOM happened
                said = {m.label for m in scan(lines) if not m.signature.startswith(PHASE_PREFIX)}
                refute(
                    [label for label in _raw().announced if label not in said],
                    "own_end",
                    o["id"],
                    line,
                    lambda label: (
                        f"ended on this; its log, read from the start, has no {label} line"
                    ),
                )
            return


def from_its_start(o: Observation, run: list[str]) -> bool:
    """The read holds the launch's run from its first line: its launch banner is in it, or the
    whole file was read (not cut to the window, fewer lines than asked)."""
    if any(launch_line(ln) for ln in run):
        return True
    d = o.get("data") or {}
    return (
        o["tool"] == "log_tail"
        and not d.get("truncated")
        and not d.get("cut")
        and len(d.get("tail") or []) < int(d.get("requested") or 0)
    )


def _on_the_gpu(facts: Facts, add) -> None:  # type: ignore[no-untyped-def]
    """A process of the launch holds memory on a GPU (nvidia-smi's own row): it made a CUDA
    context, so the runtime started with this driver; a mismatch fails at the first CUDA call."""
    held = [p for p in facts.server_pids if (facts.gpu_pids.get(p) or 0) > 0]
    if not held or not facts.gpu_pid_obs or not facts.gpu_pid_lines.get(held[0]):
        return
    add(
        "cuda_driver_mismatch",
        "stage",
        F.refutes,
        facts.gpu_pid_obs,
        facts.gpu_pid_lines[held[0]],
        f"the launch's process {held[0]} holds {facts.gpu_pids[held[0]]:.0f} MiB on a GPU: "
        "the CUDA runtime started with this driver",
    )


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
