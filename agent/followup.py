"""Answers to an operator's follow-up question, in prose, from the board and the evidence.

A question about the investigation ("why did you want to restore sitecustomize.py?", "why not a
stale GPU process?", "what would the next check show?") is about what the run already knows.
Running tools again and repeating the conclusion does not answer it; quoting the findings and
the lines they rest on does. So a follow-up is first classified (knowledge/questions.yaml): a
request for a new read goes through the graph as before; everything else is answered here, from
the checkpointed board, deterministically. The LLM brain may phrase the same facts with its
model (brains/llm.py `explain`), and is held to quoting only lines that were observed.
"""

from __future__ import annotations

import re
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.change_diff import changed_lines, config_diff
from store.records import ApprovalRequest
from tools import yamlio
from tools.taxonomy import TAXONOMY

MAX_QUOTE = 200


class Intent(StrEnum):
    check = "check"  # asks for a new read: the graph runs it
    approval = "approval"  # why a change was proposed, what it changes
    next_check = "next_check"  # what the next check is and what it would show
    hypothesis = "hypothesis"  # names a hypothesis: why it stands or fell
    why = "why"  # why the conclusion (no hypothesis named)
    summary = "summary"  # anything else: where the investigation stands


class Cited(BaseModel):
    observation: str
    line: str
    note: str = ""


class HypothesisFacts(BaseModel):
    label: str
    statement: str = ""
    status: str = "open"
    score: float = 0.0
    evidence: list[Cited] = Field(default_factory=list)
    against: list[Cited] = Field(default_factory=list)
    check: str = ""


class ChangeFacts(BaseModel):
    tool: str
    args: dict[str, Any]
    why: str = ""
    state: Literal["waiting", "approved", "denied"]
    diff: list[str] = Field(default_factory=list)


class Known(BaseModel):
    """What the investigation knows at its latest checkpoint: the facts every answer uses."""

    symptom: str = ""
    status: str = "running"
    root_cause: str | None = None
    confidence: float = 0.0
    summary: str = ""
    evidence: list[Cited] = Field(default_factory=list)
    next_step: str = ""
    hypotheses: list[HypothesisFacts] = Field(default_factory=list)
    changes: list[ChangeFacts] = Field(default_factory=list)
    #: every observed line by observation id: what a quote may be checked against
    lines: dict[str, list[str]] = Field(default_factory=dict)
    tools: dict[str, str] = Field(default_factory=dict)

    def hypothesis(self, label: str) -> HypothesisFacts | None:
        return next((h for h in self.hypotheses if h.label == label), None)

    def observed(self, quote: str) -> bool:
        q = quote.strip()
        return bool(q) and any(q in ln for lines in self.lines.values() for ln in lines)


class Answer(BaseModel):
    """One prose reply, with the lines it quotes (the page and the terminal show both)."""

    intent: Intent
    about: str | None = None
    text: str
    cites: list[Cited] = Field(default_factory=list)


# -- the facts, from a checkpointed state ----------------------------------------------------------
def known_from_state(
    values: dict[str, Any], pending: ApprovalRequest | None = None, running: bool = False
) -> Known:
    report = values.get("report") or {}
    board = values.get("hypotheses") or {}
    obs = list(values.get("observations") or [])
    hyps = [
        HypothesisFacts(
            label=h["label"],
            statement=h.get("statement", ""),
            status=h.get("status", "open"),
            score=float(h.get("score", 0.0)),
            evidence=[_cited(e) for e in h.get("evidence", [])],
            against=[_cited(e) for e in h.get("against", [])],
            check=h.get("check", ""),
        )
        for h in sorted(board.values(), key=lambda h: -float(h.get("score", 0.0)))
    ]
    changes: list[ChangeFacts] = []
    if pending is not None:
        changes.append(_change(pending.tool, pending.args, pending.reason, "waiting", obs))
    for c in reversed(values.get("changes") or []):
        state: Literal["approved", "denied"] = "approved" if c.get("approved") else "denied"
        changes.append(_change(c["tool"], c.get("args", {}), "", state, obs))
    status = "awaiting_approval" if pending is not None else report.get("status", "running")
    return Known(
        symptom=values.get("symptom", ""),
        status="running" if running else status,
        root_cause=report.get("root_cause"),
        confidence=float(report.get("confidence") or 0.0),
        summary=report.get("summary", ""),
        evidence=[_cited(e) for e in report.get("evidence", [])],
        next_step=report.get("next_step", ""),
        hypotheses=hyps,
        changes=changes,
        lines={o["id"]: list(o.get("lines", [])) for o in obs},
        tools={o["id"]: o["tool"] for o in obs},
    )


def _cited(e: dict[str, Any]) -> Cited:
    return Cited(
        observation=str(e.get("observation", "")),
        line=str(e.get("line", "")),
        note=str(e.get("note", "")),
    )


def _change(tool: str, args: dict[str, Any], why: str, state: Any, obs: list[Any]) -> ChangeFacts:
    path, source = str(args.get("path", "")), str(args.get("copy_from", ""))
    diff = config_diff(obs, path, source) if path and source else []
    if source:  # the proposal's own words name both paths already said in the answer
        why = "it differs from its known-good copy, and restoring that copy undoes the one change"
    return ChangeFacts(
        tool=tool, args=args, why=why.split(" (reversible")[0], state=state, diff=diff
    )


# -- what is asked ---------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _patterns() -> dict[str, re.Pattern[str]]:
    raw = yamlio.safe_load((Path(__file__).parent / "knowledge" / "questions.yaml").read_text())
    return {k: re.compile(v) for k, v in raw.items()}


def named_labels(text: str, labels: list[str]) -> list[str]:
    """Hypotheses the question names: by label ("stale_gpu_process", "stale gpu process") or by
    the operator's words for it (knowledge/rivals.yaml: "zombie" -> stale_gpu_process)."""
    from agent.board import alluded

    out = [lbl for lbl in labels if re.search(lbl.replace("_", r"[ _-]?"), text, re.I)]
    out += [lbl for lbl in alluded(text) if lbl in labels and lbl not in out]
    words = {w.lower() for w in re.findall(r"[A-Za-z]+", text)}
    generic = {"error", "failure", "process", "memory", "launch", "argument", "cache"}
    out += [
        lbl
        for lbl in labels
        if lbl not in out
        and sum(1 for p in lbl.split("_") if len(p) > 3 and p not in generic and p in words) >= 1
    ]
    return out


def intent_of(text: str, known: Known | None = None) -> Intent:
    p = _patterns()
    if p["check"].search(text):
        return Intent.check
    if p["approval"].search(text) and (known is None or known.changes):
        return Intent.approval
    if p["next_check"].search(text):
        return Intent.next_check
    if known is not None and named_labels(text, [h.label for h in known.hypotheses]):
        return Intent.hypothesis
    if p["why"].search(text):
        return Intent.why
    return Intent.summary


# -- the answers -----------------------------------------------------------------------------------
def answer(text: str, known: Known) -> Answer:
    """The rulebook's reply: plain sentences over the board, quoting the lines it rests on."""
    intent = intent_of(text, known)
    if intent is Intent.approval:
        return _approval(known)
    if intent is Intent.next_check:
        return _next_check(known, named_labels(text, [h.label for h in known.hypotheses]))
    if intent is Intent.hypothesis:
        label = named_labels(text, [h.label for h in known.hypotheses])[0]
        h = known.hypothesis(label)
        assert h is not None
        return _standing(h, known)
    if intent is Intent.why and known.root_cause and known.hypothesis(known.root_cause):
        return _standing(known.hypothesis(known.root_cause), known)  # type: ignore[arg-type]
    return _summary(known, intent)


def _q(c: Cited, known: Known) -> str:
    """A quote with where it was read: `o8 (log_tail): "…"`."""
    line = c.line.strip()
    cut = "…" if len(line) > MAX_QUOTE else ""
    return f'{c.observation} ({known.tools.get(c.observation, "read")}): "{line[:MAX_QUOTE]}{cut}"'


def _why_note(note: str) -> str:
    """A finding's note in words: a signature id becomes what that signature means."""
    if note.startswith("signature "):
        from agent.signatures import load_signatures

        sid = note.split(" ", 1)[1]
        sig = next((s for s in load_signatures() if s.id == sid), None)
        if sig is not None and sig.meaning:
            meaning = " ".join(sig.meaning.split()).rstrip(".")
            return f"it matches the known failure {sid} ({meaning})"
        return f"it matches the known failure {sid}"
    return note


def _reasons(side: str, cites: list[Cited], known: Known, out: list[Cited]) -> list[str]:
    """`For it: <why>; o8 (log_tail): "<line>".` per finding; a repeated why is said once."""
    said: list[str] = []
    last = None
    for c in cites:
        why = _why_note(c.note) or "this line"
        lead = f"{side}: {why}; " if why != last else "Also: "
        said.append(f"{lead}{_q(c, known)}.")
        out.append(c)
        last = why
    return said


def _standing(h: HypothesisFacts, known: Known) -> Answer:
    name = f"{h.label} ({h.statement or TAXONOMY.get(h.label, '')})"
    cites: list[Cited] = []
    if h.status == "refuted":
        parts = [f"{name} fell: it is ruled out."]
        parts += _reasons("Against it", h.against[:2], known, cites)
        if h.evidence:
            parts += _reasons("What spoke for it was weaker", h.evidence[:1], known, cites)
        elif not h.against:
            parts.append("Nothing on the host spoke for it.")
    elif h.status in ("confirmed", "supported"):
        word = "is the root cause" if h.status == "confirmed" else "stands (supported)"
        conf = f" at {known.confidence:.0%} confidence" if h.status == "confirmed" else ""
        parts = [f"{name} {word}{conf}, score {h.score:.1f}."]
        parts += _reasons("For it", h.evidence[:3], known, cites)
        parts += _reasons("Against it, weaker", h.against[:1], known, cites)
        fell = [x.label for x in known.hypotheses if x.status == "refuted"]
        if fell and h.status == "confirmed":
            parts.append(f"Its rivals fell: {', '.join(fell[:10])}.")
    else:
        parts = [f"{name} is still open (score {h.score:.1f}): neither proven nor ruled out."]
        parts += _reasons("For it", h.evidence[:2], known, cites)
        parts += _reasons("Against it", h.against[:1], known, cites)
        if not h.evidence and not h.against:
            parts.append("Nothing read so far points at it either way.")
        if h.check:
            parts.append(f"What would settle it: {h.check}")
    return Answer(intent=Intent.hypothesis, about=h.label, text=" ".join(parts), cites=cites)


def _approval(known: Known) -> Answer:
    if not known.changes:
        return Answer(
            intent=Intent.approval, text="I have not proposed any change in this session."
        )
    c = known.changes[0]
    path, source = c.args.get("path", ""), c.args.get("copy_from", "")
    verb = {"waiting": "I am asking", "approved": "I asked", "denied": "I asked"}[c.state]
    what = f"to restore {path} from {source}" if source else f"to run {c.tool} on {path}"
    parts = [f"{verb} {what} because {c.why.rstrip('.')}."]
    gone, new = changed_lines(c.diff)
    if gone or new:
        diff_words = []
        if gone:
            diff_words.append(
                "the current file has " + "; ".join(f"`{x.strip()}`" for x in gone[:4])
            )
        if new:
            diff_words.append(
                "the known-good copy has " + "; ".join(f"`{x.strip()}`" for x in new[:4])
            )
        parts.append("The difference: " + ", where ".join(diff_words) + ".")
    elif source:
        parts.append("I read both files, but their difference is not in what I kept.")
    cites: list[Cited] = []
    top = known.hypothesis(known.root_cause) if known.root_cause else None
    if top is not None and top.evidence:
        parts.append(
            f"It is offered after the diagnosis, not as it: the root cause is {top.label}, "
            f"from {_q(top.evidence[0], known)}."
        )
        cites.append(top.evidence[0])
    parts.append(
        "The current file is snapshotted first, so the change can be undone byte for byte."
        if c.tool == "config_apply"
        else ""
    )
    parts.append(
        {
            "waiting": "It is waiting for your approval; nothing has changed yet.",
            "approved": "You approved it.",
            "denied": "You denied it, so nothing changed.",
        }[c.state]
    )
    return Answer(
        intent=Intent.approval,
        about=path or c.tool,
        text=" ".join(p for p in parts if p),
        cites=cites,
    )


def _next_check(known: Known, asked: list[str]) -> Answer:
    live = [h for h in known.hypotheses if h.status in ("open", "supported")]
    targets = [known.hypothesis(x) for x in asked] or live[:2]
    parts: list[str] = []
    if known.next_step:
        parts.append(f"Next step: {known.next_step.rstrip('.')}.")
    for h in [t for t in targets if t is not None][:2]:
        if not h.check:
            continue
        if h.status == "refuted":
            parts.append(f"{h.label} is already ruled out; {h.check} would only confirm that.")
            continue
        cue = f"; so far for it: {_q(h.evidence[0], known)}" if h.evidence else ""
        parts.append(
            f"To settle {h.label} ({h.status}, score {h.score:.1f}): {h.check.rstrip('.')}. "
            f"If it shows that, {h.label} stands; if not, it falls{cue}."
        )
    if not parts:
        parts.append("Nothing is left to check: every hypothesis is either proven or ruled out.")
    return Answer(intent=Intent.next_check, about=(asked or [None])[0], text=" ".join(parts))


def _summary(known: Known, intent: Intent) -> Answer:
    cites = known.evidence[:2]
    if known.root_cause:
        head = f"The root cause is {known.root_cause} ({known.confidence:.0%})"
        body = "; ".join(_q(c, known) for c in cites)
        parts = [f"{head}, on {body}." if body else f"{head}."]
    elif known.status == "running":
        lead = [h for h in known.hypotheses if h.status != "refuted"][:2]
        parts = [
            "Still investigating; leading: "
            + ", ".join(f"{h.label} ({h.score:.1f})" for h in lead)
            + "."
        ]
    else:
        parts = [
            f"No conclusion ({known.status.replace('_', ' ')}): {known.summary}".rstrip(": ") + "."
        ]
    fell = [h.label for h in known.hypotheses if h.status == "refuted"]
    if fell:
        parts.append(f"Ruled out: {', '.join(fell[:8])}.")
    if known.changes and known.changes[0].state == "waiting":
        parts.append(
            f"A change waits for your approval: {known.changes[0].tool} on {known.changes[0].args.get('path', '')}."
        )
    parts.append(
        "Ask why a hypothesis stands or fell, why I proposed a change, or what the next check "
        "would show; or ask me to check dmesg, GPUs, processes, ports, disk, the log or a config."
    )
    return Answer(intent=intent, text=" ".join(parts), cites=list(cites))
