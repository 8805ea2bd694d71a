"""From an Alertmanager notification to investigations: which host, what symptom, whether to start.

Why a desk of its own: the router stays an edge (parse, call, map errors to HTTP), and the three
decisions here are each a small function with its own cases: where an alert points
(`resolve`), what it says in words (`symptom`), and whether a repeat of its group starts nothing
(`duplicate`). One lock makes "is this group already investigated? no: start and record it"
atomic within the service, so two notifications of one group arriving together start one run.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from server.alertmanager import AlertRules, AmAlert, AmWebhook, first
from server.hosts import HostCatalog, UnknownHost
from server.runs import BrainFailed
from store.records import AlertRow


class AlertTarget(BaseModel):
    """Where an alert points: a host the service knows, and what else its labels name."""

    host: str
    by_label: str = Field(description="the label that named the host")
    log: str | None = None
    container: str | None = None
    port: int | None = None


class Unresolved(BaseModel):
    alertname: str
    fingerprint: str
    reason: str
    labels: dict[str, str]


class Started(BaseModel):
    session_id: str
    host: str
    alertname: str
    fingerprint: str
    session_url: str


class Skipped(BaseModel):
    alertname: str
    fingerprint: str
    reason: str
    session_id: str | None = Field(None, description="the investigation this repeat belongs to")


class AlertsAccepted(BaseModel):
    group_key: str
    started: list[Started] = Field(default_factory=list)
    skipped: list[Skipped] = Field(default_factory=list)
    unresolved: list[Unresolved] = Field(default_factory=list)


class Unresolvable(Exception):
    """No firing alert of the notification names a host this service can investigate."""

    def __init__(self, unresolved: list[Unresolved], hint: str) -> None:
        super().__init__("; ".join(u.reason for u in unresolved))
        self.unresolved = unresolved
        self.hint = hint


def labels_of(alert: AmAlert, note: AmWebhook) -> dict[str, str]:
    """The alert's own labels over the group's common ones (Alertmanager repeats them)."""
    return {**note.common_labels, **alert.labels}


def _address(value: str) -> str:
    """`10.0.0.7:9100` -> `10.0.0.7`, `[fe80::1]:9100` -> `fe80::1`; a bare name is itself."""
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    host, sep, port = value.rpartition(":")
    return host if sep and port.isdigit() else value


def resolve(labels: dict[str, str], rules: AlertRules, catalog: HostCatalog) -> AlertTarget | str:
    """The alert's target, or why it has none (the reason names the labels it looked at)."""
    host: str | None = None
    named = first(labels, rules.host_labels)
    if named is not None:
        label, value = named
        if not catalog.known(value):
            return (
                f"label {label}={value!r} names no host this service knows "
                "(GET /api/hosts lists them)"
            )
        host = value
    else:
        named = first(labels, rules.address_labels)
        if named is None:
            return f"no host label: looked for {', '.join(rules.host_label_names())}"
        label, value = named
        host = catalog.alias_for(value) or catalog.alias_for(_address(value))
        if host is None:
            return (
                f"label {label}={value!r} is not the address of a host this service knows "
                "(a host name, or an SSH alias's HostName)"
            )
    port = first(labels, rules.port_labels)
    log = first(labels, rules.log_labels)
    container = first(labels, rules.container_labels)
    return AlertTarget(
        host=host,
        by_label=label,
        log=log[1] if log else None,
        container=container[1] if container else None,
        port=int(port[1]) if port and port[1].isdigit() else None,
    )


def symptom(alert: AmAlert, note: AmWebhook, target: AlertTarget, rules: AlertRules) -> str:
    """The operator's question, in the alert's own words."""
    labels = labels_of(alert, note)
    notes = {**note.common_annotations, **alert.annotations}
    said: list[str] = []
    for key in rules.summary_annotations:
        text = notes.get(key, "").strip()
        if text and text not in said:
            said.append(text)
    where = target.host
    if target.container:
        where += f", container {target.container}"
    if target.port:
        where += f", port {target.port}"
    if target.log:
        where += f", log {target.log}"
    body = f": {' '.join(said)}" if said else ""
    name = labels.get("alertname", "an alert")
    return f"Prometheus alert {name} is firing on {where}{body}. Why?"


def _age_s(iso: str, now: datetime) -> float | None:
    try:
        at = datetime.fromisoformat(iso)
    except ValueError:
        return None
    return (now - (at if at.tzinfo else at.replace(tzinfo=UTC))).total_seconds()


def duplicate(
    status: str | None, finished_at: str | None, rules: AlertRules, now: datetime
) -> str | None:
    """Why a repeat of a group's alert starts nothing, or None to start one.

    `status`/`finished_at`: the group's last investigation on this host (None: there was none).
    """
    if status is None:
        return None
    if status in rules.active_statuses:
        return f"its investigation is {status}"
    age = _age_s(finished_at or "", now)
    if age is not None and age < rules.dedup_window_s:
        return f"its investigation ended {age:.0f} s ago (window {rules.dedup_window_s:.0f} s)"
    return None


class AlertDesk:
    def __init__(self, rules: AlertRules) -> None:
        self.rules = rules
        self._lock = threading.Lock()

    def receive(
        self, note: AmWebhook, hub: Any, catalog: HostCatalog, memory: Any, brain: str
    ) -> AlertsAccepted:
        """Start one investigation per firing alert's host not already investigated for this
        group; raises Unresolvable when firing alerts came and none names a known host."""
        out = AlertsAccepted(group_key=note.group_key)
        firing = 0
        with self._lock:
            for alert in note.alerts:
                labels = labels_of(alert, note)
                name = labels.get("alertname", "")
                if alert.status != "firing":
                    out.skipped.append(
                        Skipped(alertname=name, fingerprint=alert.fingerprint, reason="resolved")
                    )
                    continue
                firing += 1
                target = resolve(labels, self.rules, catalog)
                if isinstance(target, str):
                    out.unresolved.append(
                        Unresolved(
                            alertname=name,
                            fingerprint=alert.fingerprint,
                            reason=target,
                            labels=labels,
                        )
                    )
                    continue
                last = memory.last_alert(note.group_key, target.host)
                why = self._repeat(last, hub, memory)
                if why is not None:
                    out.skipped.append(
                        Skipped(
                            alertname=name,
                            fingerprint=alert.fingerprint,
                            reason=f"group already investigated on {target.host}: {why}",
                            session_id=last.session_id if last else None,
                        )
                    )
                    continue
                try:
                    sid = hub.start(
                        target.host,
                        symptom(alert, note, target, self.rules),
                        brain,
                        logs=[target.log] if target.log else None,
                    )
                except UnknownHost as exc:  # its card or alias went away since `known`
                    out.unresolved.append(
                        Unresolved(
                            alertname=name,
                            fingerprint=alert.fingerprint,
                            reason=str(exc),
                            labels=labels,
                        )
                    )
                    continue
                except BrainFailed as exc:  # the session exists, failed by name: link it too
                    sid = exc.session_id
                    out.skipped.append(
                        Skipped(
                            alertname=name,
                            fingerprint=alert.fingerprint,
                            reason=exc.error,
                            session_id=sid,
                        )
                    )
                memory.record_alert(
                    AlertRow(
                        session_id=sid,
                        group_key=note.group_key,
                        host=target.host,
                        alertname=name,
                        fingerprint=alert.fingerprint,
                        status=alert.status,
                        receiver=note.receiver,
                        generator_url=alert.generator_url,
                        external_url=note.external_url,
                        labels=labels,
                        annotations={**note.common_annotations, **alert.annotations},
                        starts_at=alert.starts_at,
                    )
                )
                if out.skipped and out.skipped[-1].session_id == sid:
                    continue
                out.started.append(
                    Started(
                        session_id=sid,
                        host=target.host,
                        alertname=name,
                        fingerprint=alert.fingerprint,
                        session_url=f"/s/{sid}",
                    )
                )
        if firing and not out.started and not any(s.session_id for s in out.skipped):
            raise Unresolvable(
                out.unresolved,
                f"label the alert with one of {', '.join(self.rules.host_label_names())} "
                "naming a host of GET /api/hosts",
            )
        return out

    def _repeat(self, last: AlertRow | None, hub: Any, memory: Any) -> str | None:
        if last is None:
            return None
        row = memory.get_session(last.session_id)
        live = hub.phase(last.session_id)
        status = live if live in self.rules.active_statuses else None
        status = status or (row.status if row else "done")
        return duplicate(status, row.updated if row else last.received, self.rules, _now())


def _now() -> datetime:
    return datetime.now(UTC)
