"""Alertmanager's webhook receiver: a firing alert that names a host starts its investigation.

Point a `webhook_configs` receiver at `POST /api/alerts` with the service's bearer token
(docs/alerts.md). Alertmanager retries only on 5xx, so a notification that names no known host
is a 422 that says which labels it saw: it shows in Alertmanager's log once, not forever.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from server.alert_intake import AlertsAccepted, Unresolvable
from server.alertmanager import AmWebhook
from server.deps import Catalog, Config, Desk, Hub, Mem

router = APIRouter(prefix="/api/alerts", tags=["alerts"])


@router.post(
    "",
    response_model=AlertsAccepted,
    responses={422: {"description": "no firing alert names a host this service knows"}},
)
def receive_alerts(
    body: AmWebhook, hub: Hub, config: Config, catalog: Catalog, mem: Mem, desk: Desk
) -> AlertsAccepted:
    """One Alertmanager notification (webhook payload version 4). Each firing alert whose labels
    name a known host starts an investigation there, once per alert group and host; resolved
    alerts and repeats of an investigated group start nothing (`skipped` says why)."""
    try:
        return desk.receive(body, hub, catalog, mem, config.default_brain)
    except Unresolvable as exc:
        detail = {
            "error": "no firing alert names a host this service can investigate",
            "hint": exc.hint,
            "unresolved": [u.model_dump() for u in exc.unresolved],
        }
        raise HTTPException(422, detail) from exc
