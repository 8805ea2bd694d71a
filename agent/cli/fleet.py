"""`pivot sweep --hosts GROUP|a,b,c` and the fleet path of `pivot investigate --hosts`.

Prints one table (host, health, why) as hosts finish, or one JSON object with `--json`.
Exit status: 0 when every host is healthy, 1 when any is unhealthy or did not answer, 2 for a
usage error (an unknown host or group), so a cron job can alert on it.
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent.fleet import CONNECT_TIMEOUT_S, DEADLINE_S, MAX_CONNECTIONS, FleetReport, Health

SWEEP_SYMPTOM = "Fleet health sweep: is anything wrong with the inference server on this host?"
STYLE = {Health.healthy: "green", Health.unhealthy: "bold red", Health.no_answer: "yellow"}

HostsOpt = Annotated[
    str,
    typer.Option(
        "--hosts",
        help="a group of fleet.yaml, or SSH aliases a,b,c (may mix); ALIAS:CONTAINER reads "
        "inside that container on that host",
    ),
]
FleetContainerOpt = Annotated[
    str | None,
    typer.Option(
        "--container",
        help="on every host the server runs in this Docker/Podman container (a target's own "
        "ALIAS:CONTAINER wins)",
    ),
]
MaxConnOpt = Annotated[
    int, typer.Option("--max-connections", min=1, help="SSH connections open at once")
]
DeadlineOpt = Annotated[
    float, typer.Option("--deadline", min=1.0, help="seconds one host may take, connect included")
]


def resolve_hosts(spec: str) -> list[str]:
    """`--hosts` -> aliases via $PIVOT_HOME/fleet.yaml and ~/.ssh/config; usage error if unknown."""
    from agent.settings import get_settings
    from tools.inventory import InventoryError, load_inventory

    try:
        return load_inventory(get_settings().home / "fleet.yaml").expand(spec)
    except InventoryError as exc:
        raise typer.BadParameter(str(exc), param_hint="--hosts") from exc


def render(console: Console, report: FleetReport) -> None:
    table = Table(title=f"{len(report.hosts)} hosts in {report.seconds:.1f}s", expand=False)
    table.add_column("host", no_wrap=True)
    table.add_column("health", no_wrap=True)
    table.add_column("why")
    table.add_column("session", no_wrap=True, style="dim")
    for row in report.hosts:
        table.add_row(
            escape(row.host),
            f"[{STYLE[row.health]}]{row.health.value}[/]",
            escape(row.why),
            row.session_id or "-",
        )
    console.print(table)
    console.print(
        f"{report.count(Health.unhealthy)} unhealthy, {report.count(Health.no_answer)} did not "
        f"answer, {report.count(Health.healthy)} healthy; conclusions stored in memory "
        "(pivot sessions --host HOST)",
        highlight=False,
    )


def run_and_print(
    hosts: str,
    symptom: str,
    *,
    brain: str | None,
    logs: list[str] | None,
    configs: list[str] | None,
    max_connections: int,
    deadline: float,
    as_json: bool,
    container: str | None = None,
) -> None:
    from agent.fleet import run_fleet

    aliases = resolve_hosts(hosts)
    # A host without an sshd makes paramiko's transport thread log a traceback; the table
    # already says "did not answer" with the error and the fix, once, in its row.
    logging.getLogger("paramiko.transport").setLevel(logging.CRITICAL)
    console = Console(stderr=as_json)

    def progress(row) -> None:  # type: ignore[no-untyped-def]
        console.print(f"  [dim]{escape(row.host)}: {row.health.value} ({row.seconds:.1f}s)[/]")

    report = run_fleet(
        aliases,
        symptom,
        container=container,
        brain=brain,
        logs=logs or [],
        configs=configs or [],
        max_connections=max_connections,
        deadline_s=deadline,
        connect_timeout=min(CONNECT_TIMEOUT_S, deadline),
        on_done=progress,
    )
    if as_json:
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    else:
        render(console, report)
    raise typer.Exit(0 if report.count(Health.healthy) == len(report.hosts) else 1)


def sweep(
    hosts: HostsOpt,
    log: Annotated[
        list[str] | None,
        typer.Option("--log", help="a log to read on every host; {host} becomes the alias"),
    ] = None,
    config: Annotated[
        list[str] | None, typer.Option("--config", help="a config to read ({host} as for --log)")
    ] = None,
    brain: Annotated[str | None, typer.Option(help="rulebook | llm")] = None,
    max_connections: MaxConnOpt = MAX_CONNECTIONS,
    deadline: DeadlineOpt = DEADLINE_S,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    container: FleetContainerOpt = None,
) -> None:
    """Sweep a fleet: investigate every host at once, one table of which are unhealthy and why."""
    from tools.inventory import CONTAINER_NAME  # paramiko: loaded only when a sweep runs

    if container and not CONTAINER_NAME.match(container):
        raise typer.BadParameter(f"{container!r} is not a container name", param_hint="--container")
    run_and_print(
        hosts,
        SWEEP_SYMPTOM,
        container=container,
        brain=brain,
        logs=log,
        configs=config,
        max_connections=max_connections,
        deadline=deadline,
        as_json=as_json,
    )


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)
