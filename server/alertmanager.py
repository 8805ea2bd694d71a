"""Prometheus Alertmanager's webhook payload (version 4) and the rules that read it, as data.

The payload is Alertmanager's own (https://prometheus.io/docs/alerting/latest/configuration/
#webhook_config), named as it sends it; unknown fields are ignored so a newer Alertmanager still
gets through. Which labels name the host, the log or the container, and how long a group stays
deduplicated, live in `alerts.yaml` beside this file: a site that labels its nodes `node_name`
edits one list, not the code.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from tools.yamlio import safe_load

RULES_FILE = Path(__file__).resolve().parent / "alerts.yaml"

AlertStatus = Literal["firing", "resolved"]


def _http_only(url: str) -> str:
    """A link the page shows must be a web address; anything else (javascript:, file:) is
    dropped rather than rendered."""
    return url if url.lower().startswith(("http://", "https://")) else ""


WebLink = Annotated[str, AfterValidator(_http_only)]


class AmAlert(BaseModel):
    """One alert of a notification."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    status: AlertStatus
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    starts_at: str = Field("", alias="startsAt", max_length=64)
    ends_at: str = Field("", alias="endsAt", max_length=64)
    generator_url: WebLink = Field("", alias="generatorURL", max_length=4096)
    fingerprint: str = Field("", max_length=64)


class AmWebhook(BaseModel):
    """One notification: a group of alerts, as Alertmanager POSTs it to a webhook receiver."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    version: str = Field("4", max_length=8)
    group_key: str = Field(alias="groupKey", min_length=1, max_length=4096)
    truncated_alerts: int = Field(0, alias="truncatedAlerts", ge=0)
    status: AlertStatus
    receiver: str = Field("", max_length=512)
    group_labels: dict[str, str] = Field(default_factory=dict, alias="groupLabels")
    common_labels: dict[str, str] = Field(default_factory=dict, alias="commonLabels")
    common_annotations: dict[str, str] = Field(default_factory=dict, alias="commonAnnotations")
    external_url: WebLink = Field("", alias="externalURL", max_length=4096)
    alerts: list[AmAlert] = Field(default_factory=list, max_length=1000)


class AlertRules(BaseModel):
    """alerts.yaml: where in an alert the host, log, container and port are named."""

    model_config = ConfigDict(extra="forbid")

    host_labels: list[str] = Field(min_length=1)
    address_labels: list[str] = Field(default_factory=list)
    log_labels: list[str] = Field(default_factory=list)
    container_labels: list[str] = Field(default_factory=list)
    port_labels: list[str] = Field(default_factory=list)
    summary_annotations: list[str] = Field(default_factory=list)
    dedup_window_s: float = Field(gt=0)
    active_statuses: list[str] = Field(min_length=1)

    def host_label_names(self) -> list[str]:
        return [*self.host_labels, *self.address_labels]


@lru_cache(maxsize=1)
def shipped_rules() -> AlertRules:
    return AlertRules.model_validate(safe_load(RULES_FILE.read_text(encoding="utf-8")))


def first(values: dict[str, str], names: list[str]) -> tuple[str, str] | None:
    """(name, value) of the first of `names` with a non-empty value."""
    for n in names:
        v = values.get(n, "").strip()
        if v:
            return n, v
    return None
