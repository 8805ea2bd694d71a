"""How the ledger's rows become columns and back: one place for both backends.

SQLite (store/ledger/sqlite.py) and PostgreSQL (store/ledger/postgres.py) store the same columns, so
`pivot db copy` moves rows unchanged and both answer the same rows; what differs between them is
the SQL, never the encoding. Everything here is pure: dicts in, dicts or models out.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from typing import Any

from pydantic import BaseModel

from store.ledger.base import ExperimentRow, NightRow

#: ExperimentRow fields stored as JSON text, with the value an empty column reads as.
JSON_FIELDS: dict[str, str] = {
    "change": "{}",
    "metric_values": "[]",
    "metrics": "{}",
    "run_launch": "[]",
}


def dump_experiment(row: ExperimentRow) -> dict[str, Any]:
    """A whole experiment row as columns."""
    d = row.model_dump()
    for k in JSON_FIELDS:
        d[k] = json.dumps(d[k])
    return d


def load_experiment(r: dict[str, Any]) -> ExperimentRow:
    """Columns back to a row; a NULL column takes the model's default."""
    r = dict(r)
    for k, empty in JSON_FIELDS.items():
        r[k] = json.loads(r.get(k) or empty)
    return ExperimentRow(**{k: v for k, v in r.items() if v is not None})


def experiment_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The columns of a partial update (`Ledger.update(id, **fields)`)."""
    return {k: json.dumps(v) if k in JSON_FIELDS else v for k, v in fields.items()}


def new_night(plan_name: str, digest: str, state_dir: str) -> NightRow:
    """A fresh night: its id sorts by start time and stays unique across machines."""
    return NightRow(
        id=time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6],
        plan_name=plan_name,
        plan_digest=digest,
        state_dir=state_dir,
        started=time.time(),
    )


def dump_night(night: NightRow) -> dict[str, Any]:
    """A new night's columns (left_in_place is written only when the night ends)."""
    return night.model_dump(exclude={"left_in_place"})


def night_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The columns of a partial night update: `left_in_place` as JSON text."""
    if "left_in_place" not in fields:
        return fields
    changes = [c.model_dump() if isinstance(c, BaseModel) else c for c in fields["left_in_place"]]
    return {**fields, "left_in_place": json.dumps(changes)}


def load_night(r: dict[str, Any]) -> NightRow:
    r = dict(r)
    r["left_in_place"] = json.loads(r.get("left_in_place") or "[]")
    return NightRow(**{k: v for k, v in r.items() if v is not None})


def baseline_file(night_id: str, host: str, path: str, content: bytes) -> dict[str, Any]:
    """One saved baseline file with its digest (what a revert is checked against)."""
    return {
        "night_id": night_id,
        "host": host,
        "path": path,
        "sha256": hashlib.sha256(content).hexdigest(),
        "content": content,
    }
