"""The hypothesis board: one entry per suspected label, weighed from findings.

Hypotheses are data. A label enters the board when a finding supports it, when the operator's
words suggest it, or because it is a usual suspect (knowledge/rivals.yaml). Its status follows its
evidence: supported with real support, refuted with a check that speaks against it and nothing
for it, confirmed only by the conclusion step (after the guardrails).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from agent.state import Finding, Hypothesis
from agent.thresholds import THRESHOLDS
from cards.taxonomy import TAXONOMY
from tools import yamlio

#: where a hypothesis counts as supported / refuted (agent/knowledge/thresholds.yaml)
SUPPORTED_AT = THRESHOLDS.board.supported_at
REFUTED_AT = THRESHOLDS.board.refuted_at


@lru_cache(maxsize=1)
def _rivals() -> dict:
    return yamlio.safe_load((Path(__file__).parent / "knowledge" / "rivals.yaml").read_text())


def alluded(text: str) -> list[str]:
    """Labels an operator's words point at ("zombie" -> stale_gpu_process), without the usual suspects."""
    out: list[str] = []
    for pattern, lbls in (_rivals().get("symptom_words") or {}).items():
        if re.search(pattern, text or ""):
            out.extend(lbls)
    return list(dict.fromkeys(out))


def suspected(symptom: str) -> list[str]:
    r = _rivals()
    labels = list(r.get("always", []))
    for pattern, lbls in (r.get("symptom_words") or {}).items():
        if re.search(pattern, symptom or ""):
            labels.extend(lbls)
    return list(dict.fromkeys(labels))


def build(
    symptom: str,
    findings: list[Finding],
    previous: dict[str, Hypothesis] | None = None,
    checks: dict[str, str] | None = None,
) -> dict[str, Hypothesis]:
    board: dict[str, Hypothesis] = {}
    for label in suspected(symptom):
        board[label] = _empty(label)
    for f in findings:
        # a label enters with support, or with a check that speaks clearly against it (ruled out)
        if (
            f["label"]
            and f["label"] not in board
            and (f["strength"] > 0 or f["strength"] <= REFUTED_AT)
        ):
            board[f["label"]] = _empty(f["label"])
    confusable = _rivals().get("confusable") or {}
    for f in list(findings):
        if f["label"] in board and f["strength"] > 0:
            for other in confusable.get(f["label"]) or []:
                board.setdefault(other, _empty(other))
    for f in findings:
        h = board.get(f["label"] or "")
        if h is None:
            continue
        h["score"] += f["strength"]
        ev = {
            "observation": f["observation"],
            "line": f["line"],
            "note": f["note"],
            "w": abs(f["strength"]),
            "kind": f["kind"],
        }
        (h["evidence"] if f["strength"] > 0 else h["against"]).append(ev)
    _explain(board)
    _exclude(board, findings)
    for h in board.values():
        if h["score"] <= REFUTED_AT:  # what speaks against it outweighs what speaks for it
            h["status"] = "refuted"
        elif h["score"] >= SUPPORTED_AT:
            h["status"] = "supported"
        else:
            h["status"] = "open"
        h["evidence"].sort(key=lambda e: -float(e.get("w", 0)))
        h["check"] = (checks or {}).get(h["label"], "")
        if previous and previous.get(h["label"], {}).get("status") == "confirmed":
            h["status"] = "confirmed"
    return dict(sorted(board.items(), key=lambda kv: -kv[1]["score"]))


@lru_cache(maxsize=1)
def _explains() -> dict[str, list[str]]:
    return yamlio.safe_load((Path(__file__).parent / "knowledge" / "explains.yaml").read_text())


def _explain(board: dict[str, Hypothesis]) -> None:
    """A supported cause absorbs belief from the failures it explains (knowledge/explains.yaml)."""
    for cause, effects in _explains().items():
        c = board.get(cause)
        if c is None or c["score"] < SUPPORTED_AT:
            continue
        for effect in effects:
            e = board.get(effect)
            if e is None or e["score"] <= 0:
                continue
            moved = 0.6 * e["score"]
            c["score"] += moved
            c["evidence"].extend(x for x in e["evidence"][:1] if x not in c["evidence"])
            if c["score"] >= e["score"] + 1.0 and c["evidence"]:
                # a consequence of the cause, not a cause: ruled out as the root cause
                e["score"] = min(e["score"] - moved, REFUTED_AT)
                top = c["evidence"][0]
                e["against"].append({**top, "note": f"a consequence of {cause}", "w": 2.0})
                e["evidence"] = []
            else:
                e["score"] -= moved


@lru_cache(maxsize=1)
def _exclusive() -> list[list[str]]:
    return yamlio.safe_load((Path(__file__).parent / "knowledge" / "exclusive.yaml").read_text())


def _exclude(board: dict[str, Hypothesis], findings: list[Finding]) -> None:
    for group in _exclusive():
        proven = [
            f
            for f in findings
            if f["label"] in group
            and f["kind"] == "fatal"
            and board.get(f["label"] or "", {}).get("score", 0) >= 3
        ]
        if not proven:
            continue
        winner = proven[0]
        for label in group:
            h = board.get(label)
            if h is None or label == winner["label"] or any(e for e in h["evidence"]):
                continue
            h["score"] = min(h["score"], REFUTED_AT)
            h["against"].append(
                {
                    "observation": winner["observation"],
                    "line": winner["line"],
                    "note": f"the end was {winner['label']}: {winner['note']}",
                    "w": 3.0,
                }
            )


def _empty(label: str) -> Hypothesis:
    return Hypothesis(
        label=label,
        statement=TAXONOMY.get(label, label),
        status="open",
        score=0.0,
        evidence=[],
        against=[],
        check="",
    )


def ranked(board: dict[str, Hypothesis]) -> list[Hypothesis]:
    return sorted(board.values(), key=lambda h: -h["score"])


@lru_cache(maxsize=1)
def _causes() -> dict[str, list[str]]:
    return yamlio.safe_load((Path(__file__).parent / "knowledge" / "causes.yaml").read_text())


def related(a: str, b: str) -> bool:
    """Two labels one incident can honestly carry: the same, or one explains or causes the other
    (knowledge/explains.yaml, knowledge/causes.yaml)."""
    if a == b:
        return True
    for table in (_explains(), _causes()):
        if b in (table.get(a) or []) or a in (table.get(b) or []):
            return True
    return False
