"""Plain sentences for a run's events: what a person watching the run reads, one per step.

Events carry tool names and raw arguments (`log_search {'pattern': '(?i)error|…'}`), which is a
trace, not a conversation. The sentences come from data (knowledge/steps.yaml, and the `says`
of knowledge/checks.yaml for a check the agent chose), so a new tool is one line there.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from store.records import Event, Report
from tools import yamlio

#: first word of a check's `says` -> how a sentence about doing it starts
_GERUND = {
    "read": "Reading",
    "search": "Searching",
    "see": "Checking",
    "check": "Checking",
    "find": "Finding",
    "dump": "Dumping",
    "look": "Looking",
}
_CLAUSE = re.compile(r"\{(\w+): ([^{}]*(?:\{\w+\}[^{}]*)*)\}")


@lru_cache(maxsize=1)
def _steps() -> dict[str, str]:
    return dict(yamlio.safe_load((Path(__file__).parent / "knowledge" / "steps.yaml").read_text()))


def _short(key: str, value: Any) -> str:
    """An argument as said: paths whole (they are what the reader acts on), the rest cut short."""
    s = str(value if not isinstance(value, list) else ", ".join(map(str, value)))
    return s if len(s) <= 60 or key in ("path", "copy_from", "to") else s[:57] + "…"


def _fill(template: str, args: dict[str, Any]) -> str:
    def clause(m: re.Match[str]) -> str:
        return f" {m.group(2)}" if args.get(m.group(1)) else ""

    text = _CLAUSE.sub(clause, template)
    text = re.sub(r"\s+", " ", text).replace(" (", " (").strip()
    for key in re.findall(r"\{(\w+)\}", text):
        text = text.replace("{" + key + "}", _short(key, args.get(key, "")) or key)
    return text


def _from_check(tool: str, args: dict[str, Any]) -> str | None:
    """The catalogue check this read is (same tool, same fixed pattern), said as a sentence."""
    pattern = args.get("pattern")
    return _check_sayings().get((tool, pattern)) if isinstance(pattern, str) else None


@lru_cache(maxsize=1)
def _check_sayings() -> dict[tuple[str, str], str]:
    """(tool, pattern) -> the first catalogue check's sentence: every observation event is said
    in words, so the catalogue is read once, not once per step."""
    from agent.checks import catalogue

    out: dict[tuple[str, str], str] = {}
    for c in catalogue():
        if not c.get("pattern") or not isinstance(c["pattern"], str):
            continue
        says = re.sub(r"\s*\([^)]*\)", "", str(c["says"])).strip()
        first, _, rest = says.partition(" ")
        out.setdefault(
            (c["tool"], c["pattern"]), f"{_GERUND.get(first, first.capitalize())} {rest}".strip()
        )
    return out


def step(tool: str, args: dict[str, Any]) -> str:
    """`Reading the end of /var/log/server.log` for `log_tail {'path': '/var/log/server.log'}`."""
    said = _from_check(tool, args)
    if said:
        return said
    template = _steps().get(tool)
    if template is None:
        return f"Running {tool}"
    if tool == "log_search" and len(str(args.get("pattern", ""))) > 40:
        args = {**args, "pattern": "error lines"}
    return _fill(template, args)


def _note(note: str) -> str:
    """A finding's note in words: `signature X` is the name of a known failure a line matched."""
    if note.startswith("signature "):
        return f"a line matches the known failure {note.split(' ', 1)[1]}"
    return note


def sentence(ev: Event, seen: dict[str, str] | None = None) -> str | None:
    """One line for a live view, or None for events that are not a step (findings, scores).

    `seen` (label -> last status) keeps a hypothesis to one line per change of its standing."""
    d = ev.data
    if ev.type == "observation":
        failed = "" if d.get("ok", True) else " (it could not be read)"
        return f"{step(str(d.get('tool')), dict(d.get('args') or {}))}{failed}."
    if ev.type == "hypothesis":
        label, status = str(d.get("label")), str(d.get("status"))
        if seen is not None:
            # a standing is said once: the board is rebuilt each round and re-emits it
            if seen.get(label) == status or status == "open":
                return None
            seen[label] = status
        if status == "refuted":
            why = _note((d.get("against") or [{}])[0].get("note", ""))
            return f"Ruling out {label}" + (f": {why}." if why else ".")
        if status == "supported":
            why = _note((d.get("evidence") or [{}])[0].get("note", ""))
            return f"{label} gains support" + (f": {why}." if why else ".")
        if status == "confirmed":
            return f"{label} is confirmed."
        return None
    if ev.type == "message" and d.get("role") == "agent" and d.get("kind") != "answer":
        text = str(d.get("text", ""))
        # the decide node's trace lines are said by the observations that follow them
        if text.startswith(("Next check:", "Concluding ", "Proposing a change")):
            return None
        return text
    if ev.type == "approval":
        verb = "Approved" if d.get("approved") else "Denied"
        return f"{verb}: {step(str(d.get('tool')), dict(d.get('args') or {}))}."
    if ev.type == "error":
        if "guardrail" in d:
            return f"A guardrail refused the conclusion: {d['guardrail']}"
        return f"Error: {d.get('error', d)}"
    return None


def conclusion(r: Report | dict[str, Any]) -> list[str]:
    """The agent's final reply: cause, cited lines, what was ruled out, the next step."""
    rep = (
        r
        if isinstance(r, Report)
        else Report.model_validate({"session_id": "", "host": "", "symptom": "", **r})
    )
    if rep.status == "healthy":
        out = [f"Healthy: the launch is up and answering ({rep.confidence:.0%} confidence)."]
    elif rep.status in ("concluded", "awaiting_approval") and rep.root_cause:
        out = [f"Root cause: {rep.root_cause} ({rep.confidence:.0%} confidence)."]
    elif rep.status == "budget_exhausted":
        out = [f"I ran out of budget before a conclusion: {rep.summary}"]
    else:
        out = [f"Not enough evidence to name a cause: {rep.summary}".rstrip(": ")]
    out += [rep.where] if rep.where else []
    out += [f'  {e.observation}: "{e.line}"' for e in rep.evidence]
    if rep.ruled_out:
        out.append(f"Ruled out: {', '.join(rep.ruled_out)}.")
    if rep.next_step:
        out.append(f"Next step: {rep.next_step}")
    out += [f"Seen before: {s}" for s in rep.seen_before]
    out += [f"Unknown: {u}" for u in rep.unknowns]
    return out
