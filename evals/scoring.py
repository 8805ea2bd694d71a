"""Deterministic scoring of one investigation against its card: no LLM judge, no partial credit.

A card passes when the run concluded, with the expected label, citing at least one expected
evidence string, having refuted every expected rival, and the label is not one the card calls
wrong outright. Outcomes are kept apart because they mean different things to an operator:
`wrong` (a confident wrong answer) is worse than `insufficient` (an honest "cannot decide"),
and `unproven` (right label, but the cited lines or the ruled-out rivals do not show it) is a
lucky guess, not a pass. A label the card lists in `expected.also_right` (the taxonomy overlaps
and a careful engineer could defend it) is not wrong either: it scores `unproven`, never a pass.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Literal

from pydantic import BaseModel, Field

from cards.model import IncidentCard
from store.records import Evidence, HypothesisView, Report

Outcome = Literal["passed", "wrong", "insufficient", "unproven", "error"]
INSUFFICIENT = "insufficient"
#: Statuses that carry a label: a concluded failure, or a launch found up and answering.
LABELLED = ("concluded", "healthy")
#: What an answer is worth to the operator who acts on it: wrong costs more than unsure.
COST = {"right": 1, "insufficient": 0, "wrong": -3}


class CardResult(BaseModel):
    """One card, one run. The first fields are the JSON contract (issue 4); the rest feed the
    HTML report's hypothesis trail."""

    id: str
    expected: str | None = None
    got: str | None = None
    status: str
    passed: bool = False
    evidence_ok: bool = False
    ruled_out_ok: bool = False
    wrong: bool = False
    #: concluded a label the card calls defensible (expected.also_right): unproven, not wrong
    also_right: bool = False
    rounds: int = 0
    tool_calls: int = 0
    transcript_steps: int = 0
    outcome: Outcome = "error"
    path: str = ""
    error: str | None = None
    seconds: float = 0.0
    attempt: int = 0
    missing_ruled_out: list[str] = Field(default_factory=list)
    evidence: list[Evidence] = Field(default_factory=list)
    ruled_out: list[str] = Field(default_factory=list)
    hypotheses: list[HypothesisView] = Field(default_factory=list)
    summary: str = ""


def score(card: IncidentCard, report: Report, path: str = "", seconds: float = 0.0) -> CardResult:
    """Score a finished report against the card's `expected` section."""
    base = dict(
        id=card.id,
        got=report.root_cause if report.status in LABELLED else None,
        status=report.status,
        rounds=report.rounds,
        tool_calls=report.tool_calls,
        transcript_steps=len(card.transcript),
        path=path,
        seconds=seconds,
        evidence=report.evidence,
        ruled_out=report.ruled_out,
        hypotheses=report.hypotheses,
        summary=report.summary,
    )
    exp = card.expected
    if exp is None:
        return CardResult(
            **base,
            outcome="error",
            error=f"{path or card.id}: expected: missing (a captured draft: fill expected.root_cause)",
        )
    cited = [e.line for e in report.evidence]
    evidence_ok = any(want in line for want in exp.evidence for line in cited)
    missing = [lbl for lbl in exp.ruled_out if lbl not in report.ruled_out]
    concluded = report.status in LABELLED
    label = report.root_cause if concluded else None
    also_right = concluded and label != exp.root_cause and label in exp.also_right
    wrong = concluded and not also_right and (label != exp.root_cause or label in exp.wrong)
    passed = concluded and label == exp.root_cause and not wrong and evidence_ok and not missing
    outcome: Outcome = (
        "passed" if passed else "wrong" if wrong else "unproven" if concluded else "insufficient"
    )
    return CardResult(
        **base,
        expected=exp.root_cause,
        passed=passed,
        evidence_ok=evidence_ok,
        ruled_out_ok=not missing,
        wrong=wrong,
        also_right=also_right,
        outcome=outcome,
        missing_ruled_out=missing,
    )


def failed_run(card_id: str, path: str, error: str, expected: str | None = None) -> CardResult:
    """A card that could not be loaded, or whose run raised: counted as `errors`, never a pass."""
    return CardResult(id=card_id, path=path, expected=expected, status="error", error=error)


class CardPassAtK(BaseModel):
    id: str
    attempts: int
    passes: int
    pass_at_1: float
    pass_at_k: bool
    pass_all: bool


class Summary(BaseModel):
    cards: int
    passed: int
    accuracy: float
    wrong: int
    insufficient: int
    errors: int
    unproven: int = 0
    #: of the unproven, how many concluded an expected.also_right label
    also_right: int = 0
    median_rounds: float = 0.0
    median_tool_calls: float = 0.0
    cards_per_second: float = 0.0
    seconds: float = 0.0
    repeat: int = 1
    #: with --repeat K: share of cards passed at least once in K runs, and in all K runs
    pass_at_k: float | None = None
    #: right label (pass or unproven with the expected label), and the cost figure
    #: right x COST["right"] + wrong x COST["wrong"] (insufficient costs nothing)
    right_label: int = 0
    cost: int = 0
    pass_all_k: float | None = None
    mean_pass_at_1: float | None = None


def summarize(results: list[CardResult], seconds: float, repeat: int = 1) -> Summary:
    """Summary over first attempts (so numbers mean the same with or without --repeat)."""
    first = [r for r in results if r.attempt == 0]
    ran = [r for r in first if r.outcome != "error"]
    counts = Counter(r.outcome for r in first)
    runs_done = sum(1 for r in results if r.outcome != "error")
    s = Summary(
        cards=len(first),
        passed=counts["passed"],
        accuracy=round(counts["passed"] / len(first), 4) if first else 0.0,
        wrong=counts["wrong"],
        insufficient=counts["insufficient"],
        errors=counts["error"],
        unproven=counts["unproven"],
        also_right=sum(1 for r in first if r.also_right and r.outcome == "unproven"),
        median_rounds=statistics.median([r.rounds for r in ran]) if ran else 0.0,
        median_tool_calls=statistics.median([r.tool_calls for r in ran]) if ran else 0.0,
        cards_per_second=round(runs_done / seconds, 2) if seconds > 0 else 0.0,
        seconds=round(seconds, 3),
        repeat=repeat,
        right_label=sum(1 for r in first if r.expected and r.got == r.expected),
    )
    s.cost = s.right_label * COST["right"] + s.wrong * COST["wrong"]
    if repeat > 1:
        per = pass_at_k(results)
        if per:
            s.pass_at_k = round(sum(p.pass_at_k for p in per) / len(per), 4)
            s.pass_all_k = round(sum(p.pass_all for p in per) / len(per), 4)
            s.mean_pass_at_1 = round(sum(p.pass_at_1 for p in per) / len(per), 4)
    return s


def pass_at_k(results: list[CardResult]) -> list[CardPassAtK]:
    """Per card over its K attempts. With n = k samples the unbiased pass@k estimator is simply
    "passed at least once"; `pass_all` is the stricter bar a card must meet to join the
    regression set (it passes every time)."""
    by_id: dict[str, list[CardResult]] = {}
    for r in results:
        by_id.setdefault(r.path or r.id, []).append(r)
    out = []
    for runs in by_id.values():
        passes = sum(r.passed for r in runs)
        out.append(
            CardPassAtK(
                id=runs[0].id,
                attempts=len(runs),
                passes=passes,
                pass_at_1=round(passes / len(runs), 4),
                pass_at_k=passes > 0,
                pass_all=passes == len(runs),
            )
        )
    return out


def counts_line(s: Summary) -> str:
    """The four outcomes an operator reads first, in one fixed order."""
    also = (
        f" ({s.also_right} also-right label{'s' if s.also_right != 1 else ''})"
        if s.also_right
        else ""
    )
    return (
        f"{s.passed} pass / {s.unproven} unproven{also} / {s.wrong} wrong / "
        f"{s.insufficient} insufficient" + (f" / {s.errors} errors" if s.errors else "")
    )


def confusion(results: list[CardResult]) -> dict[str, dict[str, int]]:
    """expected label -> got label (or "insufficient") -> count, over scored first attempts."""
    m: dict[str, dict[str, int]] = {}
    for r in results:
        if r.attempt or r.expected is None or r.outcome == "error":
            continue
        got = r.got or INSUFFICIENT
        row = m.setdefault(r.expected, {})
        row[got] = row.get(got, 0) + 1
    return m
