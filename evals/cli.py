"""`pivot eval` (replay cards, score, report) and `pivot capture` (live host -> card draft)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import Counter
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

EXIT_BELOW_BAR = 1
EXIT_HARNESS_FAILED = 2


def eval_cmd(
    paths: Annotated[list[Path], typer.Argument(help="card files or directories of *.yaml cards")],
    brain: Annotated[str, typer.Option(help="rulebook | llm")] = "rulebook",
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="worker processes")] = 1,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="write summary and results as JSON here")
    ] = None,
    report: Annotated[
        Path | None, typer.Option("--report", help="write a self-contained HTML report here")
    ] = None,
    min_accuracy: Annotated[
        float | None,
        typer.Option("--min-accuracy", min=0.0, max=1.0, help="exit 1 below this accuracy"),
    ] = None,
    record: Annotated[
        Path | None, typer.Option("--record", help="llm brain: keep every model turn here")
    ] = None,
    replay_model: Annotated[
        Path | None,
        typer.Option("--replay-model", help="llm brain: answer model turns from this recording"),
    ] = None,
    repeat: Annotated[
        int, typer.Option("--repeat", min=1, help="run each card K times (pass@k)")
    ] = 1,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
) -> None:
    """Replay incident cards through the real agent graph and score every conclusion.

    A card passes when the run concluded with the expected label, cites an expected evidence
    line, refuted every expected rival and is not a label the card calls wrong. Exit 1 below
    --min-accuracy, 2 when the harness itself failed, else 0.
    """
    from evals.harness import EvalOptions, evaluate
    from evals.report_html import write as write_html

    if brain not in ("rulebook", "llm"):
        raise typer.BadParameter(
            f"unknown brain {brain!r}: use rulebook or llm", param_hint="--brain"
        )
    if (record or replay_model) and brain != "llm":
        raise typer.BadParameter("--record and --replay-model need --brain llm")
    if replay_model is not None and not replay_model.is_dir():
        raise typer.BadParameter(
            f"{replay_model}: no such recording directory", param_hint="--replay-model"
        )
    options = EvalOptions(
        brain=brain, jobs=jobs, repeat=repeat, record_dir=record, replay_dir=replay_model
    )
    console = Console(stderr=True)
    tally: Counter[str] = Counter()
    progress = Progress(
        TextColumn("[bold]eval"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[tally]}"),
        TimeElapsedColumn(),
        console=console,
        disable=quiet,
        transient=False,
    )
    task = progress.add_task("cards", total=None, tally="")

    def tally_text() -> str:
        return (
            f"[green]{tally['passed']} passed[/] [red]{tally['wrong']} wrong[/] "
            f"[yellow]{tally['insufficient']} insufficient[/]"
            + (f" [dark_orange]{tally['unproven']} unproven[/]" if tally["unproven"] else "")
            + (f" [grey50]{tally['error']} errors[/]" if tally["error"] else "")
        )

    def on_start(total: int) -> None:
        progress.update(task, total=total)

    def on_result(res) -> None:  # type: ignore[no-untyped-def]
        tally[res.outcome] += 1
        progress.update(task, advance=1, tally=tally_text())
        if res.outcome == "error":
            progress.console.print(
                f"[grey50]error[/] {escape(str(res.error))}", markup=True, highlight=False
            )

    turns = _TurnTally() if (record or replay_model) else None
    try:
        with progress, turns or nullcontext():
            run = evaluate(paths, options, on_result=on_result, on_start=on_start)
    except ValueError as exc:  # a path that does not exist: the caller's mistake
        raise typer.BadParameter(str(exc)) from exc
    except Exception as exc:  # the harness itself broke (a worker died): not a score
        console.print(f"[red]the eval harness failed:[/] {type(exc).__name__}: {escape(str(exc))}")
        raise typer.Exit(EXIT_HARNESS_FAILED) from exc

    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(run.model_dump(mode="json"), indent=1) + "\n")
    if report:
        write_html(run, report)
    _print_summary(Console(), run)
    if turns is not None:
        Console().print(turns.summary(record, replay_model), highlight=False)
    s = run.summary
    if min_accuracy is not None and s.accuracy < min_accuracy:
        console.print(f"[red]accuracy {s.accuracy:.3f} is below the bar {min_accuracy:.3f}[/]")
        raise typer.Exit(EXIT_BELOW_BAR)


class _TurnTally:
    """Counts model turns across worker processes: the LLM brain appends one word per recorded
    or replayed turn to the file named in its tally variable (set here, inherited by workers)."""

    def __enter__(self) -> _TurnTally:
        from agent.brains.llm import TALLY_ENV

        self._env = TALLY_ENV
        self._old = os.environ.get(TALLY_ENV)
        fd, name = tempfile.mkstemp(prefix="pivot-turns-")
        os.close(fd)
        self.path = Path(name)
        os.environ[TALLY_ENV] = name
        return self

    def __exit__(self, *exc: object) -> None:
        if self._old is None:
            os.environ.pop(self._env, None)
        else:
            os.environ[self._env] = self._old
        words = self.path.read_text(encoding="utf-8").split() if self.path.exists() else []
        self.counts = Counter(words)
        self.path.unlink(missing_ok=True)

    def summary(self, record: Path | None, replay: Path | None) -> str:
        c = getattr(self, "counts", Counter())
        if replay is not None:
            line = (
                f"model turns replayed: {c['hash']} by hash, {c['sequence']} by sequence, "
                f"{c['missing']} not recorded"
            )
            if c["sequence"]:
                line += (
                    " (by sequence: the prompt changed since the recording; re-record to refresh)"
                )
            return line
        n = c["recorded"]
        return f"recorded {n} model turn{'s' if n != 1 else ''} in {record}"


def _print_summary(console: Console, run) -> None:  # type: ignore[no-untyped-def]
    failing = [r for r in run.results if r.attempt == 0 and r.outcome != "passed"]
    if failing:
        t = Table(title="not passed", show_lines=False)
        for col in ("card", "outcome", "expected", "got", "why"):
            t.add_column(col, overflow="fold")
        for r in failing:
            why = r.error or _why(r)
            t.add_row(r.id, r.outcome, r.expected or "-", r.got or "-", why)
        console.print(t)
    from evals.scoring import counts_line

    s = run.summary
    line = (
        f"{s.passed}/{s.cards} passed (accuracy {s.accuracy:.3f}), {s.wrong} wrong, "
        f"{s.insufficient} insufficient, {s.unproven} unproven, {s.errors} errors; "
        f"right label {s.right_label}/{s.cards}, cost {s.cost:+d} (right +1, unsure 0, wrong -3); "
        f"median {s.median_rounds} rounds, {s.median_tool_calls} tool calls; "
        f"{s.cards_per_second} cards/s"
    )
    console.print(counts_line(s), highlight=False)
    if s.repeat > 1:
        line += f"; pass@{s.repeat} {s.pass_at_k:.3f}, passes all {s.repeat}: {s.pass_all_k:.3f}"
    console.print(line, highlight=False)


def _why(r) -> str:  # type: ignore[no-untyped-def]
    if r.outcome == "insufficient":
        return f"{r.status}: {r.summary}"[:200] if r.summary else r.status
    if r.wrong:
        return "a label the card calls wrong" if r.got == r.expected else "label wrong"
    if getattr(r, "also_right", False):
        return "a label the card calls defensible (also_right), not the root cause"
    if not r.evidence_ok:
        return "no expected evidence line cited"
    return f"not ruled out: {', '.join(r.missing_ruled_out)}"


def capture_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="the card draft to write (NAME.yaml)")],
    log: Annotated[
        list[str] | None,
        typer.Option("--log", help="a log to keep (repeatable); a container's is its CLI log"),
    ] = None,
    host: Annotated[str | None, typer.Option("--host", help="SSH alias (~/.ssh/config)")] = None,
    local: Annotated[bool, typer.Option("--local", help="capture this machine")] = False,
    config: Annotated[
        list[str] | None, typer.Option("--config", help="a config to keep (repeatable)")
    ] = None,
    pid: Annotated[
        int | None, typer.Option("--pid", help="server pid: capture its environment")
    ] = None,
    redact_hosts: Annotated[
        bool, typer.Option("--redact-hosts", help="also replace hostnames and IP addresses")
    ] = False,
    symptom: Annotated[str | None, typer.Option(help="what the operator saw")] = None,
    engine: Annotated[
        str | None, typer.Option(help="sglang | vllm | trtllm | torch | other (default: guess)")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing file")] = False,
    container: Annotated[
        str | None,
        typer.Option(
            "--container",
            help="the server's Docker/Podman container: record it too (default: the one the "
            "launch's processes run in, if any)",
        ),
    ] = None,
) -> None:
    """Snapshot a live host into an incident-card draft, secrets redacted, label left to fill."""
    from evals.capture import CaptureOptions, capture, describe
    from tools.hosts import resolve_host

    if out.exists() and not force:
        raise typer.BadParameter(f"{out} exists (use --force to overwrite)", param_hint="-o")
    if engine is not None and engine not in ("sglang", "vllm", "trtllm", "torch", "other"):
        raise typer.BadParameter(f"unknown engine {engine!r}", param_hint="--engine")
    try:
        h = resolve_host(host, local, None)
    except (ValueError, OSError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    opts = CaptureOptions(
        logs=log or [],
        configs=config or [],
        pid=pid,
        redact_hosts=redact_hosts,
        symptom=symptom,
        engine=engine,
        container=container,
    )
    try:
        result = capture(h, out, opts)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="-o") from exc
    sys.stdout.write(describe(result) + "\n")


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_cmd)
    app.command("capture")(capture_cmd)
