"""`pivot investigate`, `pivot todo`, `pivot handoff`, `pivot sessions`."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from agent.cli.fleet import DeadlineOpt, MaxConnOpt, run_and_print
from agent.fleet import DEADLINE_S, MAX_CONNECTIONS
from agent.render import live_printer, print_report
from store.records import Decision

DEFAULT_SYMPTOM = "The inference server launch failed or never became ready. Why?"

if TYPE_CHECKING:
    from store.memory.base import MemoryStore


def _host(host: str | None, local: bool, replay: str | None, tofu: bool = False):  # type: ignore[no-untyped-def]
    from cards.model import CardError
    from tools.hosts import resolve_host

    try:
        opts = {"trust_on_first_use": True} if tofu and host else {}
        return resolve_host(host, local, replay, **opts)
    except (ValueError, OSError, CardError) as exc:  # a card that is missing or does not validate
        raise typer.BadParameter(str(exc)) from exc


def _reachable_or_exit(h) -> None:  # type: ignore[no-untyped-def]
    """An unreachable host, refused auth or unknown key is the answer, not a sweep of failures."""
    probe = h.run("true", timeout=20)
    if probe.error or probe.rc not in (0,):
        typer.echo(f"error: {probe.error or probe.stderr.strip()}", err=True)
        if probe.fix:
            typer.echo(f"fix: {probe.fix}", err=True)
        raise typer.Exit(2)


def _host_spec(
    host: str | None, local: bool, replay: str | None, container: str | None = None
) -> str:
    spec = f"replay:{Path(replay).resolve()}" if replay else "local" if local else f"ssh:{host}"
    return f"{spec}|container={container}" if container else spec


def _host_from_spec(spec: str):  # type: ignore[no-untyped-def]
    spec, _, container = spec.partition("|container=")
    kind, _, value = spec.partition(":")
    h = _host(
        value if kind == "ssh" else None, kind == "local", value if kind == "replay" else None
    )
    return in_container(h, container or None)


def in_container(h, container: str | None):  # type: ignore[no-untyped-def]
    """The host itself, or a view inside one of its containers (--container NAME); a container
    no CLI on the host knows is the answer, not a sweep of failures."""
    if not container:
        return h
    from tools.container_host import ContainerHost

    try:
        inside = ContainerHost(h, container)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--container") from exc
    down = inside.unavailable()
    if down is not None:
        typer.echo(f"error: {down.error}", err=True)
        typer.echo(f"fix: {down.fix}", err=True)
        raise typer.Exit(2)
    return inside


def _open(
    host: str | None,
    local: bool,
    replay: str | None,
    tofu: bool,
    container: str | None,
    logs: list[str],
):  # type: ignore[no-untyped-def]
    """The host to investigate, checked reachable, with its first wave of reads under way."""
    from agent.observe import Prefetch, first_wave

    h = _host(host, local, replay, tofu)
    if host:
        _reachable_or_exit(h)
    h = in_container(h, container)
    return h, Prefetch(h, first_wave(logs, container is not None))


class _Early:
    """A call run in a thread from now on; `result()` waits for it and returns its value or
    raises what it raised (a bad --host is still the CLI's error, only found a little later)."""

    def __init__(self, fn) -> None:  # type: ignore[no-untyped-def]
        self._fn = fn
        self._value: object = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="pivot-connect", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as exc:  # typer.Exit and BadParameter travel to the caller
            self._error = exc

    def result(self):  # type: ignore[no-untyped-def]
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


ContainerOpt = Annotated[
    str | None,
    typer.Option(
        "--container",
        help="the server runs in this Docker/Podman container: read it inside (and its record "
        "and log), the GPUs and kernel log outside",
    ),
]


def investigate(
    symptom: Annotated[
        str | None, typer.Argument(help="what the operator saw, in their words")
    ] = None,
    host: Annotated[
        str | None, typer.Option("--host", help="SSH alias (from ~/.ssh/config)")
    ] = None,
    local: Annotated[bool, typer.Option("--local", help="investigate this machine")] = False,
    replay: Annotated[
        str | None, typer.Option("--replay", help="an incident card to replay")
    ] = None,
    brain: Annotated[
        str | None, typer.Option(help="rulebook | llm (default: llm iff an endpoint is set)")
    ] = None,
    log: Annotated[
        list[str] | None, typer.Option("--log", help="a log to read (repeatable)")
    ] = None,
    config: Annotated[
        list[str] | None, typer.Option("--config", help="a config to read (repeatable)")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print one JSON object (the report)")
    ] = False,
    yes: Annotated[
        bool, typer.Option("--yes", help="approve changing actions without asking")
    ] = False,
    resume: Annotated[
        str | None, typer.Option("--resume", help="session id of a paused run")
    ] = None,
    trust_new_host_key: Annotated[
        bool,
        typer.Option(
            "--trust-new-host-key",
            help="accept and record an UNKNOWN SSH host key (logged); a changed key is still refused",
        ),
    ] = False,
    approve: Annotated[
        bool | None, typer.Option("--approve/--deny", help="decision for --resume")
    ] = None,
    hosts: Annotated[
        str | None,
        typer.Option(
            "--hosts",
            help="several hosts at once: a fleet.yaml group or aliases a,b,c (see pivot sweep)",
        ),
    ] = None,
    max_connections: MaxConnOpt = MAX_CONNECTIONS,
    deadline: DeadlineOpt = DEADLINE_S,
    container: ContainerOpt = None,
) -> None:
    """Find why a launch died: sweep the host, weigh hypotheses, cite the log lines that prove it."""
    from agent.settings import get_settings

    s = get_settings()
    if brain not in (None, "rulebook", "llm"):
        raise typer.BadParameter(
            f"unknown brain {brain!r}: use rulebook or llm", param_hint="--brain"
        )
    if (brain or s.default_brain) == "llm" and not (s.llm_base_url or s.llm_replay_dir):
        raise typer.BadParameter(
            "the llm brain needs an OpenAI-compatible endpoint: set PIVOT_LLM_BASE_URL "
            "(and PIVOT_LLM_MODEL, PIVOT_LLM_API_KEY), or use --brain rulebook",
            param_hint="--brain",
        )
    if hosts:
        if host or local or replay or resume:
            raise typer.BadParameter("--hosts replaces --host/--local/--replay/--resume")
        if yes:
            raise typer.BadParameter(
                "--yes is for one host: a fleet run leaves each fix paused for its own "
                "`pivot investigate --resume SESSION --approve`",
                param_hint="--yes",
            )
        run_and_print(
            hosts,
            symptom or DEFAULT_SYMPTOM,
            brain=brain,
            logs=log,
            configs=config,
            max_connections=max_connections,
            deadline=deadline,
            as_json=as_json,
            container=container,
        )
    card = None
    if replay and not resume:
        # a card freezes what the operator passed besides the symptom (its log, config,
        # container): replayed without flags of its own, the run gets them, as `pivot eval` does
        from cards.model import load_card

        card = load_card(replay)
        said = card.invocation
        container = container or said.container
        log = log or ([said.log] if said.log else None)
        config = config or ([said.config] if said.config else None)
    console = Console(stderr=as_json)
    h = prefetch = None
    early = None
    if not resume:
        # the connection, its probe and the sweep's first reads start now, in a thread, and
        # overlap the graph machinery's imports and the store's opening below (~1 s)
        early = _Early(
            lambda: _open(host, local, replay, trust_new_host_key, container, list(log or []))
        )
    from agent.runner import Runner

    runner = Runner()
    on_event = live_printer(console)
    try:
        if early is not None:
            h, prefetch = early.result()
        if resume:
            spec = runner.memory.host_spec(resume)
            if not spec:
                raise typer.BadParameter(f"no session {resume} (see pivot sessions)")
            h = _host_from_spec(spec)
            if approve is None:
                raise typer.BadParameter("--resume needs --approve or --deny")
            report = runner.resume(h, resume, Decision(approve=approve, reason="cli"), on_event)
        else:
            text = symptom
            if not text and card is not None:
                text = card.symptom
            report = runner.start(
                h,
                text or DEFAULT_SYMPTOM,
                brain=brain,
                on_event=on_event,
                host_spec=_host_spec(host, local, replay, container),
                logs=log,
                configs=config,
                prefetched=prefetch,
            )
        while report.status == "awaiting_approval" and report.pending_approval:
            p = report.pending_approval
            if yes:
                ok = True
            elif sys.stdin.isatty() and not as_json:
                ok = typer.confirm(
                    f"Approve {p.tool} on {p.args.get('path', '')}? {p.reason}", default=False
                )
            else:
                break  # leave it paused; the report says how to resume
            report = runner.resume(
                h, report.session_id, Decision(approve=ok, reason="cli"), on_event
            )
    finally:
        runner.close()
    if as_json:
        sys.stdout.write(
            report.model_dump_json(
                indent=2, exclude={"pending_approval"} if not report.pending_approval else None
            )
            + "\n"
        )
    else:
        print_report(console, report)


todo_app = typer.Typer(help="Open todos per host (carried into the next session on that host).")


@todo_app.command("list")
def todo_list(host: str, all_: Annotated[bool, typer.Option("--all")] = False) -> None:
    for t in _memory().todos(host, open_only=not all_):
        typer.echo(f"#{t.id} [{'x' if t.done else ' '}] {t.text}  ({t.created[:16]})")


@todo_app.command("add")
def todo_add(host: str, text: str) -> None:
    t = _memory().add_todo(host, text)
    typer.echo(f"added #{t.id}")


@todo_app.command("close")
def todo_close(todo_id: int) -> None:
    ok = _memory().close_todo(todo_id)
    typer.echo(f"closed #{todo_id}" if ok else f"no open todo #{todo_id}")
    raise typer.Exit(0 if ok else 1)


def handoff(host: str, text: Annotated[str | None, typer.Argument()] = None) -> None:
    """Read the host's handoff notes, or write one (the next session starts from it)."""
    m = _memory()
    if text:
        h = m.add_handoff(host, text)
        typer.echo(f"handoff #{h.id} saved for {host}")
        return
    for h in m.handoffs(host):
        typer.echo(f"{h.created[:16]}  {h.text}")


def sessions(host: Annotated[str | None, typer.Option()] = None, limit: int = 20) -> None:
    """Past investigations, newest first."""
    for s in _memory().list_sessions(host, limit):
        typer.echo(
            f"{s.id}  {s.created[:16]}  {s.host:30}  {s.status:22} {s.root_cause or '-'}  {s.symptom[:50]!r}"
        )


def _memory() -> MemoryStore:
    from agent.settings import get_settings
    from store.factory import open_memory

    s = get_settings()
    return open_memory(s.database_url, s.memory_path)


def register(app: typer.Typer) -> None:
    app.command("investigate")(investigate)
    app.add_typer(todo_app, name="todo")
    app.command("handoff")(handoff)
    app.command("sessions")(sessions)
