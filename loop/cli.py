"""`pivot loop run|status|report|demo`: the overnight loop from the command line."""

# ruff: noqa: B008  (typer declares options as argument defaults)

from __future__ import annotations

import re
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from loop.experiment import Diagnoser
from loop.night import Night, default_state_dir, loop_alive
from loop.night_diagnosis import agent_diagnoser
from loop.night_lock import NightBusy
from loop.plan import Plan, PlanError, load_plan
from loop.stopping import Interrupted
from store.factory import open_ledger
from store.ledger.base import NightRow
from store.ledger.sqlite import Ledger

loop_app = typer.Typer(help="Overnight optimization loop: ranked plan, TPE search, morning report.")
console = Console()
DEMO_PLAN = Path(__file__).with_name("plans") / "demo.yaml"
KNOWN_GOOD_SITECUSTOMIZE = """import os
# NCCL tuning for PCIe-only Blackwell (known good)
os.environ.setdefault("NCCL_PROTO", "LL")
os.environ.setdefault("NCCL_ALGO", "Ring")
os.environ.setdefault("NCCL_P2P_LEVEL", "SYS")
os.environ.setdefault("NCCL_MAX_NCHANNELS", "16")
os.environ.setdefault("NCCL_BUFFSIZE", "16777216")
os.environ.setdefault("NCCL_NTHREADS", "512")
"""


def _table(ledger: Ledger, night: NightRow | None, started: float | None = None) -> Table:
    status = night.status if night else ""
    if night is not None and night.status == "running" and not loop_alive(night)[0]:
        status = "dead (loop not running)"
    title = f"night {night.id} — {status}" if night else "no night yet"
    if started is not None:
        title += f" — {time.time() - started:.0f}s"
    t = Table(title=title)
    for col in ("#", "experiment", "status", "phase", "elapsed s", "mean", "± spread", "diagnosis"):
        t.add_column(col)
    if night is None:
        return t
    now = time.time()
    for r in ledger.experiments(night.id):
        elapsed = (
            r.duration_s if r.duration_s is not None else (now - r.started if r.started else None)
        )
        t.add_row(
            str(r.seq),
            r.name,
            r.status,
            r.phase,
            "-" if elapsed is None else f"{elapsed:.1f}",
            "-" if r.metric_mean is None else f"{r.metric_mean:.1f}",
            "-" if r.metric_spread is None else f"{r.metric_spread:.1f}",
            (f"{r.label or ''} {r.evidence or ''}".strip())[:70],
        )
    return t


def run_night(night: Night, live: bool = True) -> NightRow:
    """Run the night in this thread (so Ctrl-C reverts); a side thread draws the progress."""
    if not live:
        return night.run()
    stop = threading.Event()
    started = time.time()

    def draw(lv: Live) -> None:
        while not stop.wait(0.3):
            current = getattr(night, "night", None)
            lv.update(
                _table(night.ledger, night.ledger.night(current.id) if current else None, started)
            )

    with Live(_table(night.ledger, None), console=console, refresh_per_second=4) as lv:
        th = threading.Thread(target=draw, args=(lv,), daemon=True)
        th.start()
        try:
            result = night.run()
        finally:
            stop.set()
            th.join(timeout=2)
        lv.update(_table(night.ledger, night.ledger.night(result.id)))
    return result


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prepare_demo(
    state_dir: Path, load_s: float = 1.0, gpu: bool = False, port: int | None = None
) -> Plan:
    """A temp host layout for the demo plan: a known-good sitecustomize.py and a port (a free
    one unless given)."""
    site = state_dir / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(KNOWN_GOOD_SITECUSTOMIZE, encoding="utf-8")
    repo = Path(__file__).resolve().parents[1]
    plan = load_plan(
        DEMO_PLAN,
        {
            "PYTHON": sys.executable,
            "REPO": str(repo),
            "STATE": str(state_dir),
            "PORT": str(port or _free_port()),
            "LOAD_S": str(load_s),
            "GPU_FLAG": "--gpu" if gpu else "",
        },
    )
    if gpu:  # importing torch and taking the GPU's memory prints nothing for several seconds
        plan.baseline.timeouts.stall_s = max(plan.baseline.timeouts.stall_s, 25.0)
        plan.baseline.timeouts.ready_s = max(plan.baseline.timeouts.ready_s, 120.0)
    return plan


@loop_app.command("run")
def run_cmd(
    plan_path: Path = typer.Argument(..., exists=True, help="the plan YAML"),
    state: Path = typer.Option(None, help="state dir (ledger, logs, reports)"),
    no_diagnose: bool = typer.Option(False, help="skip the investigating agent on failures"),
    quiet: bool = typer.Option(False, help="no live table"),
    worker: bool = typer.Option(
        False, help="one of several workers sharing the night in PIVOT_DATABASE_URL"
    ),
    slot: str = typer.Option(None, help="with --worker: the plan's host this worker drives"),
) -> None:
    """Run (or resume) the night described by PLAN_PATH."""
    plan = _load(plan_path)
    state_dir = state or default_state_dir() / plan.name
    diagnoser = None if no_diagnose else agent_diagnoser()
    night = (
        _worker(plan, state_dir, slot, diagnoser)
        if worker
        else Night(plan, state_dir, diagnoser=diagnoser)
    )
    try:
        result = _run_or_stop(night, live=not quiet)
    except PlanError as exc:  # a worker whose plan is not the night's
        print(f"pivot loop: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    except NightBusy as exc:  # another loop runs this plan: it is left alone
        print(f"pivot loop: {exc}", file=sys.stderr)
        raise typer.Exit(3) from None
    console.print(f"night {result.id}: {result.status}; report: {_latest(state_dir)}")
    if result.status == "blocked":  # nothing was tried: a script must not read it as a night
        print(f"pivot loop: night {result.id} blocked: {result.note}", file=sys.stderr)
        raise typer.Exit(4)


def _worker(plan: Plan, state_dir: Path, slot: str | None, diagnoser: Diagnoser | None) -> Night:
    """A fleet worker (loop/workers.py), or one clear line on why it cannot be one."""
    from agent.settings import Settings
    from loop.workers import FleetWorker

    if not Settings().database_url:
        print(
            "pivot loop: --worker shares the night through PostgreSQL: set PIVOT_DATABASE_URL",
            file=sys.stderr,
        )
        raise typer.Exit(2)
    try:
        return FleetWorker(plan, state_dir, slot=slot, diagnoser=diagnoser)
    except PlanError as exc:
        print(f"pivot loop: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None


def _load(plan_path: Path, variables: dict[str, str] | None = None) -> Plan:
    """The plan, or one clear line naming the file and what is wrong in it (no traceback)."""
    try:
        plan = load_plan(plan_path, variables)
    except PlanError as exc:
        print(f"pivot loop: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    unfilled = sorted(set(re.findall(r"\$\{(\w+)\}", plan.model_dump_json())))
    if unfilled:  # `${PORTT}` would reach the shell as an empty string, or as itself
        print(
            f"pivot loop: {plan_path}: unfilled variable(s) {', '.join(unfilled)}: set them in "
            "the environment, or fix their names",
            file=sys.stderr,
        )
        raise typer.Exit(2)
    return plan


def _run_or_stop(night: Night, live: bool) -> NightRow:
    """Run the night; on SIGTERM/SIGINT print what the clean-up did and exit 128+signal."""
    try:
        return run_night(night, live=live)
    except Interrupted as stop:
        for line in stop.actions:
            print(f"pivot loop: {line}", file=sys.stderr, flush=True)
        print(
            f"pivot loop: night {night.night.id} stopped by {stop.name}; "
            "run the same command again to resume it",
            file=sys.stderr,
            flush=True,
        )
        raise typer.Exit(stop.exit_code) from None


@loop_app.command("status")
def status_cmd(state: Path = typer.Option(None, help="state dir of the plan")) -> None:
    """The latest night's ledger: experiments, status, phase, metric."""
    state_dir = state or _guess_state()
    from agent.settings import Settings

    ledger = open_ledger(Path(state_dir) / "ledger.db", Settings().database_url)
    night = _night_of(ledger, Path(state_dir))
    console.print(_table(ledger, night))
    if night is not None:
        from loop.fleet import worker_lines

        for line in worker_lines(ledger, night.id):
            console.print(line, markup=False)
    if night is not None and night.status == "running":
        alive, why = loop_alive(night)
        if alive:
            console.print(f"loop running (pid {night.loop_pid}, {why})")
        else:
            console.print(
                f"loop DEAD ({why}): the night is unfinished; `pivot loop run PLAN` resumes it",
                markup=False,
            )


@loop_app.command("report")
def report_cmd(
    state: Path = typer.Option(None, help="state dir of the plan"),
    open_: bool = typer.Option(False, "--open", help="open the report in a browser"),
) -> None:
    """Write the latest night's morning report again and print its path."""
    from loop.report import write_report

    state_dir = Path(state or _guess_state())
    from agent.settings import Settings

    ledger = open_ledger(state_dir / "ledger.db", Settings().database_url)
    night = _night_of(ledger, state_dir)
    if night is None:
        console.print(f"no night in {state_dir}")
        raise typer.Exit(1)
    plan = Plan.model_validate_json((state_dir / "plans" / f"{night.id}.json").read_text())
    # into this state dir: a fleet's night names the first worker's dir, maybe on another machine
    path = write_report(
        ledger, night.model_copy(update={"state_dir": str(state_dir.resolve())}), plan
    )
    console.print(str(path))
    if open_:
        import webbrowser

        if not webbrowser.open(path.as_uri()):
            console.print(path.read_text(encoding="utf-8"), markup=False, highlight=False)


@loop_app.command("demo")
def demo_cmd(
    state: Path = typer.Option(None, help="where to keep the demo night (default: a temp dir)"),
    load_s: float = typer.Option(1.0, help="emulated start-up time per launch"),
    gpu: bool = typer.Option(False, help="the emulator holds real GPU memory and does matmuls"),
    quiet: bool = typer.Option(False, help="no live table"),
    keep_server: bool = typer.Option(False, help="leave the final server running"),
    port: int = typer.Option(None, help="the emulated server's port (default: a free one)"),
) -> None:
    """A full night on the engine emulator in a temp dir (< 2 min); prints the report path."""
    state_dir = Path(state or tempfile.mkdtemp(prefix="pivot-loop-demo-"))
    plan = prepare_demo(state_dir, load_s=load_s, gpu=gpu, port=port)
    night = Night(
        plan,
        state_dir,
        diagnoser=agent_diagnoser(home=state_dir),
        memory_path=state_dir / "memory.db",
    )
    result = _run_or_stop(night, live=not quiet)
    if not keep_server and result.final_pid:
        from loop import launcher

        launcher.stop(night.hosts[0], result.final_pid, None, grace_s=2)
        for pid in launcher.marked_pids(night.hosts[0], prefix=f"{plan.name}/{result.id}."):
            night.hosts[0].run(f"kill -KILL {pid} 2>/dev/null; true")
        console.print(
            f"demo: stopped the morning server (pid {result.final_pid}); use --keep-server to keep it"
        )
    console.print(f"night {result.id}: {result.status}")
    print(_latest(state_dir))  # plain print: the last line is the report path, never wrapped


def _night_of(ledger: Ledger, state_dir: Path) -> NightRow | None:
    """The newest night this state dir ran (its plan copies are named by night); a team
    database holds every plan's nights, so "the latest night" alone could be anyone's."""
    copies = sorted((state_dir / "plans").glob("*.json"), key=lambda p: p.stat().st_mtime)
    for copy in reversed(copies):
        night = ledger.night(copy.stem)
        if night is not None:
            return night
    return ledger.night()


def _latest(state_dir: Path) -> str:
    p = Path(state_dir) / "latest-report.txt"
    return p.read_text(encoding="utf-8").strip() if p.exists() else "(no report)"


def _guess_state() -> Path:
    root = default_state_dir()
    dbs = sorted(root.glob("*/ledger.db"), key=lambda p: p.stat().st_mtime) if root.exists() else []
    if not dbs:
        console.print(f"no ledger under {root}; pass --state")
        raise typer.Exit(1)
    return dbs[-1].parent


def register(app: typer.Typer) -> None:
    app.add_typer(loop_app, name="loop")
