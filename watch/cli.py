"""`pivot watch` and `pivot launch`: follow a launch to ready, or to a diagnosis the moment it fails."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import Iterator
from typing import Annotated, Any

import typer

from watch.outcome import FAILED, Outcome, Status, Target

LogOpt = Annotated[str | None, typer.Option("--log", help="the launch's log file (on the host)")]
PortOpt = Annotated[
    int | None, typer.Option("--port", help="ready when http://127.0.0.1:PORT/health answers 2xx")
]
UrlOpt = Annotated[
    str | None, typer.Option("--url", help="the readiness URL, probed from the host (2xx = ready)")
]
HostOpt = Annotated[str | None, typer.Option("--host", help="SSH alias (from ~/.ssh/config)")]
LocalOpt = Annotated[bool, typer.Option("--local", help="the launch runs on this machine")]
ContainerOpt = Annotated[
    str | None,
    typer.Option("--container", help="the container it runs in (named to the investigation)"),
]
BrainOpt = Annotated[str | None, typer.Option(help="rulebook | llm, for the diagnosis")]
TimeoutOpt = Annotated[
    float | None, typer.Option("--timeout", help="give up (exit 3) after this many seconds")
]
StallOpt = Annotated[
    float,
    typer.Option(
        "--stall-base",
        help="seconds of silence before any pace is known; the window grows with the launch's "
        "own pace (progress bars, slow phases, silences it came back from)",
    ),
]
StallMaxOpt = Annotated[
    float | None,
    typer.Option("--stall-max", help="the longest stall window (default PIVOT_LIVENESS_MAX_S, 30)"),
]
NotifyOpt = Annotated[
    str | None, typer.Option("--notify", help="POST the outcome as JSON here; rings the bell")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object (the outcome)")]
ServeOpt = Annotated[
    str | None,
    typer.Option(
        "--serve",
        envvar="PIVOT_SERVE_URL",
        help="a running `pivot serve` (http://host:8765) whose page lists this launch live",
    ),
]
ServeTokenOpt = Annotated[
    str | None,
    typer.Option(
        "--serve-token", envvar="PIVOT_SERVE_TOKEN", help="its API token (the one it printed)"
    ),
]
TrustOpt = Annotated[
    bool, typer.Option("--trust-new-host-key", help="accept and record an UNKNOWN SSH host key")
]


def _bad(msg: str, as_json: bool) -> typer.Exit:
    if as_json:
        body = {"status": Status.bad_input.value, "detail": msg, "exit_code": 2}
        sys.stdout.write(json.dumps(body) + "\n")
    typer.echo(f"error: {msg}", err=True)
    return typer.Exit(2)


def _host(host: str | None, local: bool, trust: bool, as_json: bool) -> Any:
    from tools.hosts import resolve_host

    try:
        return resolve_host(
            host, local, None, **({"trust_on_first_use": True} if trust and host else {})
        )
    except (ValueError, OSError) as exc:
        raise _bad(str(exc), as_json) from exc


def _reporter(url: str | None, token: str | None, as_json: bool) -> Any:
    """The reporter to a running `pivot serve`, when asked for one."""
    if not url:
        return None
    if not url.startswith(("http://", "https://")):
        raise _bad(f"--serve {url!r} is not an http(s) URL of a running pivot serve", as_json)
    from watch.serve_report import ServeReporter

    return ServeReporter(url, token)


def _limits(
    timeout: float | None, stall_base: float, stall_max: float | None, past_ready: bool
) -> Any:
    from watch.follow import Limits

    kw: dict[str, Any] = {
        "timeout_s": timeout,
        "stall_base_s": stall_base,
        "past_ready": past_ready,
    }
    if stall_max is not None:
        kw["stall_max_s"] = stall_max
    return Limits(**kw)


@contextlib.contextmanager
def _term_is_interrupt() -> Iterator[None]:
    """SIGTERM (a supervisor stopping pivot) ends a launch as Ctrl-C does: the group stopped.

    SIGINT is taken too, whatever the parent left: a shell starts background commands with
    SIGINT ignored and Python keeps an ignored SIGINT ignored, so `pivot launch` run from a
    script (a CI step, `cmd &`) would not stop on `kill -INT`, and its launch would run on."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
        signal.signal(signal.SIGINT, old_int)


def _stopped(target: Target, left: list[int]) -> Outcome:
    return Outcome(
        status=Status.stopped,
        detail="stopped by Ctrl-C; its process group was stopped"
        + (f" (still alive: {left})" if left else ""),
        target=target,
    )


def follow_and_report(
    host: Any,
    target: Target,
    limits: Any,
    *,
    brain: str | None,
    notify: str | None,
    as_json: bool,
    echo: bool = False,
    on_stop: Any = None,
    serve: Any = None,
) -> int:
    """Follow, diagnose a failure at once, print, notify; returns the exit code.

    `serve`: a watch.serve_report.ServeReporter told of every change the watch prints."""
    import uuid

    from rich.console import Console

    from agent.render import live_printer, print_report
    from watch.diagnose import Diagnoser
    from watch.follow import Follower
    from watch.live import ended, watching

    console = Console(stderr=as_json, highlight=False)
    out = sys.stderr if as_json else sys.stdout

    mid_line = [False]  # the echoed log ended without a newline (a tqdm bar)

    watch_id = uuid.uuid4().hex[:12]
    follower: Follower | None = None

    def note(text: str) -> None:
        if mid_line[0] and not as_json:
            out.write("\n")
            mid_line[0] = False
        console.print(text, markup=False, soft_wrap=True)
        if serve is not None and follower is not None:
            serve.update(watching(watch_id, follower))

    def echo_bytes(text: str) -> None:
        out.write(text)
        out.flush()
        mid_line[0] = not text.endswith("\n")

    diag = Diagnoser(brain).warm()
    report = None
    try:
        try:
            follower = Follower(host, target, limits, note, echo_bytes if echo else None)
            if serve is not None:
                serve.update(watching(watch_id, follower))
            outcome = follower.run()
        except KeyboardInterrupt:
            if on_stop is None:
                raise
            outcome = _stopped(target, on_stop())
        follower = None  # from here on the outcome speaks, not the follower
        if outcome.status in FAILED:
            if serve is not None:
                serve.update(ended(watch_id, outcome, investigating=True))
            note(f"{outcome.status.value}: {outcome.detail}; investigating now")
            try:
                outcome.diagnosis, report = diag.diagnose(
                    host, outcome, None if as_json else live_printer(console)
                )
            except Exception as exc:  # the watch's verdict stands; say why there is no more
                note(f"the investigation failed: {type(exc).__name__}: {exc}")
    finally:
        diag.close()
    if report is not None and not as_json:
        print_report(console, report)
    if serve is not None:
        serve.update(ended(watch_id, outcome))
        problem = serve.close()
        if problem:
            note(problem)
    if notify:
        from watch.notify import bell, post

        problem = post(notify, outcome)
        if problem:
            note(problem)
        bell()
    if as_json:
        sys.stdout.write(json.dumps(outcome.to_json(), indent=2) + "\n")
    else:
        note(outcome.headline())
    return outcome.exit_code


def watch(
    log: LogOpt = None,
    pid: Annotated[int | None, typer.Option("--pid", help="the server's main pid")] = None,
    port: PortOpt = None,
    url: UrlOpt = None,
    host: HostOpt = None,
    local: LocalOpt = False,
    container: ContainerOpt = None,
    brain: BrainOpt = None,
    timeout: TimeoutOpt = None,
    stall_base: StallOpt = 6.0,
    stall_max: StallMaxOpt = None,
    notify: NotifyOpt = None,
    as_json: JsonOpt = False,
    trust_new_host_key: TrustOpt = False,
    serve: ServeOpt = None,
    serve_token: ServeTokenOpt = None,
) -> None:
    """Follow one launch until it is ready (exit 0), or diagnose it the moment it dies or stalls
    (exit 1). Exit 2: bad input; exit 3: gave up (timeout, host lost), with the reason."""
    if not (log or pid or port or url):
        raise _bad("nothing to watch: give --log, --pid, --port or --url (any of them)", as_json)
    if brain not in (None, "rulebook", "llm"):
        raise _bad(f"unknown brain {brain!r}: use rulebook or llm", as_json)
    if pid is not None and pid <= 0:
        raise _bad(f"--pid {pid} is not a process id", as_json)
    reporter = _reporter(serve, serve_token, as_json)
    h = _host(host, local, trust_new_host_key, as_json)
    target = Target(
        host=h.name,
        pid=pid,
        log=log,
        port=port,
        url=url or (f"http://127.0.0.1:{port}/health" if port else None),
        container=container,
    )
    code = follow_and_report(
        h,
        target,
        _limits(timeout, stall_base, stall_max, past_ready=False),
        brain=brain,
        notify=notify,
        as_json=as_json,
        serve=reporter,
    )
    h.close()
    raise typer.Exit(code)


def launch(
    command: Annotated[list[str], typer.Argument(help="the server command, after --")],
    log: LogOpt = None,
    port: PortOpt = None,
    url: UrlOpt = None,
    host: HostOpt = None,
    local: Annotated[
        bool, typer.Option("--local", help="run it on this machine (default)")
    ] = False,
    brain: BrainOpt = None,
    timeout: TimeoutOpt = None,
    stall_base: StallOpt = 6.0,
    stall_max: StallMaxOpt = None,
    until_ready: Annotated[
        bool,
        typer.Option("--until-ready", help="exit 0 once ready and leave the server running"),
    ] = False,
    notify: NotifyOpt = None,
    as_json: JsonOpt = False,
    trust_new_host_key: TrustOpt = False,
    serve: ServeOpt = None,
    serve_token: ServeTokenOpt = None,
) -> None:
    """Start a server under watch: `pivot launch [--log F] -- vllm serve M --port 8000`.

    Its own process group, its output in a log file it names and echoed here; ready, or a
    diagnosis the moment it fails; Ctrl-C stops the whole group (exit 130)."""
    from agent.settings import get_settings
    from watch import launch as launching

    if not command:
        raise _bad("no command: pivot launch [OPTIONS] -- CMD ARGS...", as_json)
    if brain not in (None, "rulebook", "llm"):
        raise _bad(f"unknown brain {brain!r}: use rulebook or llm", as_json)
    reporter = _reporter(serve, serve_token, as_json)
    h = _host(host, local or not host, trust_new_host_key, as_json)
    path = log or launching.default_log(get_settings().home, command, local=not host)
    started = launching.start(h, command, path)
    if started.error or not started.pid:
        raise _bad(f"could not start {started.command!r}: {started.error}", as_json)
    port = port or launching.port_of(command)
    typer.echo(
        f"pivot launch: pid {started.pid} (its own process group), log {path}",
        err=as_json,
    )
    target = Target(
        host=h.name,
        pid=started.pid,
        log=path,
        port=port,
        url=url or (f"http://127.0.0.1:{port}/health" if port else None),
        command=started.command,
    )
    with _term_is_interrupt():
        try:
            code = follow_and_report(
                h,
                target,
                _limits(timeout, stall_base, stall_max, past_ready=not until_ready),
                brain=brain,
                notify=notify,
                as_json=as_json,
                echo=True,
                serve=reporter,
                on_stop=lambda: launching.stop(h, started),
            )
        except KeyboardInterrupt:  # before the watch began or during a diagnosis
            left = launching.stop(h, started)
            o = _stopped(target, left)
            typer.echo(json.dumps(o.to_json()) if as_json else o.headline())
            code = o.exit_code
    if code != 0:  # failed, gave up or stopped: nothing of this launch is left running
        launching.stop(h, started, grace_s=2.0)
    launching.reap()
    h.close()
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("watch")(watch)
    app.command("launch", context_settings={"allow_interspersed_args": False})(launch)
