"""Investigate many hosts at once: `pivot sweep --hosts GROUP`, `pivot investigate --hosts a,b`.

Each host gets the same investigation as `pivot investigate --host` (one reused SSH connection,
its reads on channels of it), run in a pool whose size bounds the connections open at once; a
host's connection is closed when its investigation ends, so a slot holds at most one. Each host
has its own deadline from the moment it starts (`DeadlineHost` clips every read to it), so a host
that refuses, times out or drops packets is reported with its error and fix and never holds up
the rest. Every host's outcome lands in memory under its alias, through the same Memory API as a
single investigation: the session and, when a failure is proven, its conclusion.

A target `alias:container` (fleet.yaml or `--hosts`), or every alias under `--container NAME`,
is investigated inside that Docker/Podman container (`ContainerHost` over the deadline-clipped
SSH host: exec, inspect and logs ride the same connection and the same deadline); its row and
session are named `alias/container`, as `pivot investigate --host alias --container NAME` names
them.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from enum import StrEnum

from pydantic import BaseModel, Field

from agent.settings import Settings, get_settings
from store.records import Report
from tools.deadline_host import DeadlineHost
from tools.host import Host

#: Default bound on SSH connections open at once (each also costs one worker thread).
MAX_CONNECTIONS = 16
#: Default seconds one host may take, connect included.
DEADLINE_S = 60.0
#: Seconds to reach and log in to a host before it counts as not answering.
CONNECT_TIMEOUT_S = 5.0
#: After its deadline a worker still stuck in analysis gets this long before it is abandoned.
GRACE_S = 2.0
#: Stored as the session status of a host that did not answer (no report exists).
NO_ANSWER_STATUS = "no_answer"

HostOpener = Callable[[str, float], Host]


class Health(StrEnum):
    healthy = "healthy"
    unhealthy = "unhealthy"
    no_answer = "did not answer"


class HostOutcome(BaseModel):
    """One row of the summary table."""

    host: str
    health: Health
    status: str = Field(description="the run's status, or no_answer")
    label: str | None = None
    line: str | None = Field(None, description="the log line the conclusion cites")
    error: str | None = None
    fix: str | None = None
    session_id: str | None = None
    seconds: float = 0.0

    @property
    def why(self) -> str:
        if self.health is Health.no_answer:
            return f"did not answer: {self.error} — {self.fix}"
        if self.health is Health.unhealthy:
            why = f"{self.label}: {self.line}" if self.line else str(self.label)
            if self.status == "awaiting_approval":
                why += (
                    f" (paused for a fix: pivot investigate --resume {self.session_id} --approve)"
                )
            return why
        return f"no failure proven ({self.status})"


class FleetReport(BaseModel):
    hosts: list[HostOutcome]
    seconds: float
    max_connections: int
    deadline_s: float

    def count(self, health: Health) -> int:
        return sum(1 for h in self.hosts if h.health is health)


def classify(report: Report, seconds: float) -> HostOutcome:
    """A proven failure (status concluded) is unhealthy; anything short of proof is not."""
    row = HostOutcome(
        host=report.host,
        health=Health.healthy,
        status=report.status,
        session_id=report.session_id,
        seconds=seconds,
    )
    if report.status == "concluded" or (report.status == "awaiting_approval" and report.root_cause):
        row.health = Health.unhealthy
        row.label = report.root_cause
        row.line = report.evidence[0].line if report.evidence else None
    return row


def _shown(target: str) -> str:
    """A row's name: `alias`, or `alias/container` as ContainerHost names it."""
    return target.replace(":", "/", 1)


def _alone(alias: str) -> str:
    return f"investigate {alias} alone (pivot investigate --host {alias}) or raise --deadline"


def open_ssh(ssh_config: str | os.PathLike[str] | None = None) -> HostOpener:
    """The process-wide SSHHost per alias (tools.hosts), resolved like `ssh ALIAS`."""
    from tools.hosts import ssh_host

    def opener(alias: str, connect_timeout: float) -> Host:
        opts: dict[str, object] = {"connect_timeout": connect_timeout}
        if ssh_config is not None:
            opts["ssh_config_path"] = str(ssh_config)
        if os.environ.get("PIVOT_SSH_TRUST_ON_FIRST_USE") == "1":
            opts["trust_on_first_use"] = True
        return ssh_host(alias, **opts)

    return opener


def run_fleet(
    aliases: Sequence[str],
    symptom: str,
    *,
    container: str | None = None,
    brain: str | None = None,
    logs: Sequence[str] = (),
    configs: Sequence[str] = (),
    max_connections: int = MAX_CONNECTIONS,
    deadline_s: float = DEADLINE_S,
    connect_timeout: float = CONNECT_TIMEOUT_S,
    settings: Settings | None = None,
    open_host: HostOpener | None = None,
    on_done: Callable[[HostOutcome], None] | None = None,
) -> FleetReport:
    """Investigate every alias concurrently; one outcome per alias, in the order given.

    `aliases` are SSH aliases or `alias:container` targets; `container` applies to those that
    name none. `logs`/`configs` may contain `{host}`, replaced by each alias (per-node paths on
    shared storage). `on_done` is called from the calling thread as each host finishes.
    """
    from agent.runner import Runner  # langgraph: loaded only when a fleet really runs
    from tools.container_host import ContainerHost
    from tools.inventory import split_target

    s = settings or get_settings()
    s = s.model_copy(
        update={
            "budget": s.budget.model_copy(
                update={"max_seconds": min(s.budget.max_seconds, deadline_s)}
            )
        }
    )
    opener = open_host or open_ssh()
    brain_name = brain or s.default_brain
    started: dict[str, float] = {}
    opened: dict[str, Host] = {}
    # One Runner for all hosts, as the service shares one across its worker threads: one
    # compiled graph and one set of database connections instead of one per host.
    runner = Runner(s)

    def one(target: str) -> HostOutcome:
        t0 = time.monotonic()
        started[target] = t0
        alias, inside = split_target(target)
        inside = inside or container
        name = f"{alias}/{inside}" if inside else alias
        spec = f"ssh:{alias}|container={inside}" if inside else f"ssh:{alias}"
        host = DeadlineHost(
            opener(alias, min(connect_timeout, deadline_s)), t0 + deadline_s, deadline_s
        )
        opened[target] = host
        try:
            # the connect is bounded by connect_timeout inside SSHHost; `true` by the deadline
            probe = host.run("true", timeout=deadline_s)
            view: Host = host
            if not probe.error and probe.rc == 0 and inside:
                box = ContainerHost(host, inside)
                probe = box.unavailable() or probe  # no CLI knows it: the row says so
                view = box
            if probe.error or probe.rc != 0:
                sid = runner.memory.create_session(name, symptom, brain_name)
                runner.memory.set_host_spec(sid, spec)
                runner.memory.set_status(sid, NO_ANSWER_STATUS)
                return HostOutcome(
                    host=name,
                    health=Health.no_answer,
                    status=NO_ANSWER_STATUS,
                    error=probe.error or f"`true` exited {probe.rc}: {probe.stderr.strip()}",
                    fix=probe.fix or f"check the login shell of the user on {alias}",
                    session_id=sid,
                    seconds=time.monotonic() - t0,
                )
            report = runner.start(
                view,
                symptom,
                brain=brain_name,
                host_spec=spec,
                logs=[p.replace("{host}", alias) for p in logs],
                configs=[p.replace("{host}", alias) for p in configs],
            )
            row = classify(report, time.monotonic() - t0)
            if row.health is Health.healthy and host.left() <= 0:
                # reads were cut short: "no failure proven" would be a guess, not a finding
                row.health = Health.no_answer
                row.error = (
                    f"{name} had not finished its reads when its {deadline_s:g}s deadline "
                    "passed; the reads left were cut short"
                )
                row.fix = _alone(alias)
            return row
        finally:
            host.close()

    t_start = time.monotonic()
    results: dict[str, HostOutcome] = {}
    pool = ThreadPoolExecutor(max(1, min(max_connections, len(aliases))), "fleet")
    futures: dict[Future[HostOutcome], str] = {pool.submit(one, a): a for a in aliases}
    pending = set(futures)
    abandoned = False
    try:
        while pending:
            done, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
            for f in done:
                alias = futures[f]
                try:
                    row = f.result()
                except Exception as exc:  # a bug on one host must not lose the others
                    row = HostOutcome(
                        host=_shown(alias),
                        health=Health.no_answer,
                        status="error",
                        error=f"{type(exc).__name__}: {exc}",
                        fix="this is a bug in Pivot; investigate this host alone and report it",
                        seconds=time.monotonic() - started.get(alias, t_start),
                    )
                results[alias] = row
                if on_done:
                    on_done(row)
            now = time.monotonic()
            for f in list(pending):
                alias = futures[f]
                t0 = started.get(alias)
                if t0 is not None and now > t0 + deadline_s + GRACE_S:
                    pending.discard(f)
                    abandoned = True
                    if alias in opened:
                        # a read stuck past the deadline ends when its connection goes; closing
                        # may wait for a connect in progress, so not on this thread
                        threading.Thread(target=opened[alias].close, daemon=True).start()
                    row = HostOutcome(
                        host=_shown(alias),
                        health=Health.no_answer,
                        status=NO_ANSWER_STATUS,
                        error=f"no result within its {deadline_s:g}s deadline",
                        fix=_alone(alias),
                        seconds=now - t0,
                    )
                    results[alias] = row
                    if on_done:
                        on_done(row)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        # an abandoned worker may still write to memory; the process exit closes it then
        if not pending and not abandoned:
            runner.close()
    return FleetReport(
        hosts=[results[a] for a in aliases],
        seconds=time.monotonic() - t_start,
        max_connections=max_connections,
        deadline_s=deadline_s,
    )
