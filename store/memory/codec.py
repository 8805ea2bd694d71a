"""How memory's rows become columns and back: one place for both backends.

SQLite (store/memory/sqlite.py) and PostgreSQL (store/memory/postgres.py) keep the same columns with the
same encodings (JSON text, integer booleans, ISO timestamps), so `pivot db copy` moves rows
unchanged and both return equal rows. Only the SQL differs between the backends; what a column
holds is decided here. Pure functions: models in, dicts out, and back.
"""

from __future__ import annotations

import json
from typing import Any

from store.records import AlertRow, Event, HypothesisView, Report, now


def observation_row(session_id: str, obs: dict[str, Any]) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "id": obs["id"],
        "tool": obs["tool"],
        "args": json.dumps(obs.get("args", {})),
        "ok": int(bool(obs.get("ok", True))),
        "lines": json.dumps(obs.get("lines", [])),
        "at": obs.get("at") or now(),
    }


def load_observation(r: dict[str, Any]) -> dict[str, Any]:
    return {
        **r,
        "args": json.loads(r["args"]),
        "lines": json.loads(r["lines"]),
        "ok": bool(r["ok"]),
    }


def hypothesis_row(session_id: str, h: HypothesisView) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "label": h.label,
        "status": h.status,
        "score": h.score,
        "statement": h.statement,
        "evidence": json.dumps([e.model_dump() for e in h.evidence]),
        "against": json.dumps([e.model_dump() for e in h.against]),
        "check": h.check,
    }


def conclusion_row(report: Report, created: str) -> dict[str, Any]:
    """A concluded report as a searchable conclusion: the evidence lines, one per line."""
    return {
        "session_id": report.session_id,
        "host": report.host,
        "root_cause": report.root_cause,
        "summary": report.summary,
        "evidence": "\n".join(e.line for e in report.evidence),
        "created": created,
    }


def session_outcome(report: Report, updated: str) -> dict[str, Any]:
    """The session row's columns a saved report sets."""
    return {
        "status": report.status,
        "updated": updated,
        "root_cause": report.root_cause,
        "report": report.model_dump_json(),
    }


def event_data(event: Event) -> str:
    return json.dumps(event.data, default=str)


def load_event(r: dict[str, Any]) -> Event:
    return Event(**{**r, "data": json.loads(r["data"])})


def alert_row(a: AlertRow) -> dict[str, Any]:
    """Labels and annotations as JSON text: both backends keep them in a text column."""
    return {
        **a.model_dump(),
        "labels": json.dumps(a.labels),
        "annotations": json.dumps(a.annotations),
    }


def load_alert(r: dict[str, Any]) -> AlertRow:
    return AlertRow(
        **{
            **r,
            "labels": json.loads(r["labels"] or "{}"),
            "annotations": json.loads(r["annotations"] or "{}"),
        }
    )
