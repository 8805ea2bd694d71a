"""One experiment, phase by phase, with the ledger updated before each phase starts.

pre-flight -> apply (snapshot + ONE change) -> launch (detached) -> ready (probe + liveness)
-> benchmark -> [result recorded] -> stop (group + orphans) -> revert (byte for byte) ->
diagnose (failures only) -> done. Stop and revert run in a `finally`, whatever happened.

`timeouts.experiment_s` is a hard limit over pre-flight, launch, readiness and benchmark:
every blocking call gets at most the time that is left, and an experiment that runs out ends
as `timeout` (then stopped and reverted like any other). Cleanup and diagnosis come after the
limit on purpose: they must run however late it is.
"""

from __future__ import annotations

import os
import shlex
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loop import configs, launcher
from loop.knobs import set_flag
from loop.plan import Plan
from loop.preflight import run_preflight
from loop.stopping import Interrupted
from loop.sweep import measure
from store.ledger.base import FAILED, ExperimentRow
from store.ledger.sqlite import Ledger
from tools.benchmark import Args as BenchArgs
from tools.host import Host


@dataclass
class Diagnosis:
    label: str | None
    evidence: str | None
    summary: str
    source: str  # "agent" | "signatures"


Diagnoser = Callable[[Host, ExperimentRow, str], Diagnosis | None]


@dataclass
class Context:
    plan: Plan
    ledger: Ledger
    night_id: str
    host: Host
    state_dir: str
    baseline_files: dict[str, bytes]
    diagnoser: Diagnoser | None = None
    on_phase: Callable[[ExperimentRow, str], None] | None = None
    leave_running: bool = False
    store_root: str | None = None
    #: Run markers of experiments in flight on the other host slots of this night; pre-flight
    #: leaves their processes alone (slots may share one machine's process table).
    busy_elsewhere: Callable[[], set[str]] | None = None
    #: True once the night is stopping (SIGTERM/SIGINT): a result measured now is not recorded,
    #: the night's own clean-up re-queues the experiment instead.
    stopping: Callable[[], bool] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def log_dir(self) -> str:
        return os.path.join(self.state_dir, "logs", self.night_id)


@dataclass
class Limit:
    """The per-experiment hard limit as a monotonic deadline."""

    seconds: float
    deadline: float

    @classmethod
    def start(cls, seconds: float) -> Limit:
        return cls(seconds, time.monotonic() + seconds)

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def over(self) -> bool:
        return time.monotonic() >= self.deadline

    def result(self, phase: str, detail: str, evidence: str | None = None) -> dict[str, Any]:
        return {
            "status": "timeout",
            "diagnosis": f"experiment limit {self.seconds:g}s reached during {phase}: {detail}",
            "evidence": evidence or detail,
        }


def run_marker(plan_name: str, night_id: str, seq: int, attempt: int) -> str:
    """PIVOT_RUN_ID of one launch: plan/night.seq.attempt, so cleanup can match by prefix."""
    return f"{plan_name}/{night_id}.{seq}.{attempt}"


def launch_command(plan: Plan, change: dict[str, Any]) -> str:
    cmd = plan.baseline.launch
    for knob, value in change.items():
        kind, name = knob.split(":", 1)
        if kind == "flag":
            cmd = set_flag(cmd, name, value)
    return cmd


def reproduce(plan: Plan, change: dict[str, Any]) -> str:
    """The whole launch as a person re-runs it: workdir, the server's exact environment (the
    allow-list taken from their shell, the plan's env), the full launch line."""
    keep = " ".join(f'{v}="${v}"' for v in plan.baseline.inherit_env)
    env = " ".join(shlex.quote(f"{k}={v}") for k, v in plan.baseline.env.items())
    return (
        f"cd {shlex.quote(plan.baseline.workdir)} && env -i {keep} {env} "
        f"{launch_command(plan, change)}"
    )


def env_change(change: dict[str, Any]) -> dict[str, Any]:
    return {k.split(":", 1)[1]: v for k, v in change.items() if k.startswith("env:")}


def _phase(ctx: Context, row: ExperimentRow, phase: str) -> None:
    if ctx.stopping is not None and ctx.stopping() and phase in ("apply", "launch", "ready"):
        raise Interrupted(0)  # another thread got SIGTERM: start nothing new
    ctx.ledger.set_phase(row.id, phase)  # type: ignore[arg-type]
    row.phase = phase  # type: ignore[assignment]
    if ctx.on_phase:
        ctx.on_phase(row, phase)


def run_experiment(ctx: Context, row: ExperimentRow, repeat: int | None = None) -> ExperimentRow:
    """Run `row` to a terminal status; returns the stored row."""
    plan, host, led = ctx.plan, ctx.host, ctx.ledger
    t0 = time.time()
    limit = Limit.start(plan.baseline.timeouts.experiment_s)
    attempt = row.attempts + 1
    marker = run_marker(ctx.plan.name, ctx.night_id, row.seq, attempt)
    log_path = os.path.join(ctx.log_dir, f"{row.seq:02d}-{row.name}-a{attempt}.log")
    led.update(
        row.id, attempts=attempt, started=t0, host=host.name, log_path=log_path, status="running"
    )
    row.attempts, row.log_path = attempt, log_path
    try:
        _phase(ctx, row, "preflight")
        pf = run_preflight(
            host, plan, ctx.state_dir, settle_s=min(10.0, limit.left()), spare=_spare(ctx)
        )
        if pf.ok and limit.over():
            result, pid = limit.result("preflight", "pre-flight took the whole limit"), None
        elif not pf.ok:
            result = {
                "status": "skipped",
                "label": pf.label,
                "evidence": pf.problems[0],
                "diagnosis": "pre-flight: " + "; ".join(pf.problems),
            }
            pid = None
        else:
            result, pid = _launch_and_measure(ctx, row, log_path, marker, repeat, limit)
        if ctx.stopping is not None and ctx.stopping():
            raise Interrupted(0)  # the server was stopped under us: not a result, not a failure
    except Interrupted:
        raise  # the night stops, reverts and re-queues everything in flight, and says so
    except BaseException:
        # A bug or KeyboardInterrupt outside a night: stop what we started, revert, re-raise.
        stored = led.get(row.id)
        try:
            launcher.stop(host, stored.pid if stored else None, marker, grace_s=1.0)
        finally:
            configs.revert(host, ctx.baseline_files, store_root=ctx.store_root)
        raise
    return _finish(ctx, row, result, pid, t0, marker=marker)


def _spare(ctx: Context) -> Callable[[], set[int]] | None:
    """Pids pre-flight must not take for leftovers: the servers of the other slots' runs."""
    busy = ctx.busy_elsewhere
    if busy is None:
        return None
    return lambda: {p for m in busy() for p in launcher.marked_pids(ctx.host, marker=m)}


def _launch_and_measure(
    ctx: Context,
    row: ExperimentRow,
    log_path: str,
    marker: str,
    repeat: int | None,
    limit: Limit,
) -> tuple[dict[str, Any], int | None]:
    """apply -> launch -> ready -> benchmark; returns (result fields, pid). Never cleans up.

    Each blocking step gets at most `limit.left()`; past the limit the result is `timeout`.
    """
    plan, host, led = ctx.plan, ctx.host, ctx.ledger
    pid: int | None = None
    try:
        _phase(ctx, row, "apply")
        diff_parts = []
        env = env_change(row.change)
        if env and plan.baseline.config_file:
            path = plan.baseline.config_file
            diff_parts.append(
                configs.apply_env(
                    host,
                    path,
                    env,
                    ctx.baseline_files[path],
                    f"loop {row.name}",
                    ctx.store_root,
                )
            )
        command = launch_command(plan, row.change)
        if command != plan.baseline.launch:
            diff_parts.append(f"- launch: {plan.baseline.launch}\n+ launch: {command}\n")
        led.update(row.id, diff="".join(diff_parts))

        _phase(ctx, row, "launch")
        launched = time.time()
        lr = launcher.start(
            host,
            command,
            plan.baseline.workdir,
            plan.baseline.env,
            log_path,
            marker,
            inherit_env=plan.baseline.inherit_env,
        )
        if not lr.ok or lr.pid is None:
            result = {
                "status": "failed",
                "diagnosis": f"launch failed: {lr.error}",
                "evidence": lr.error,
            }
            return result, None
        pid = lr.pid
        led.update(row.id, pid=pid)
        if limit.over():
            return limit.result("launch", f"launch returned after the limit (pid {pid})"), pid

        _phase(ctx, row, "ready")
        t = plan.baseline.timeouts
        ready_s = min(t.ready_s, limit.left())
        verdict = launcher.watch_until_ready(
            host, pid, log_path, plan.baseline.ready_url, ready_s, t.stall_s
        )
        if verdict.state == "timeout" and ready_s < t.ready_s:
            return limit.result("ready", verdict.detail, verdict.evidence), pid
        if verdict.state != "ready":
            result = {
                "status": "hung" if verdict.state == "hung" else "failed",
                "label": verdict.label,
                "evidence": verdict.evidence,
                "diagnosis": f"{verdict.state}: {verdict.detail}",
            }
            return result, pid
        if ctx.leave_running:
            result = {
                "status": "ok",
                "diagnosis": f"ready in {verdict.elapsed_s:.1f}s; left running",
            }
            return result, pid

        _phase(ctx, row, "benchmark")
        b = plan.baseline.benchmark
        bargs = BenchArgs(
            command=b.command,
            workdir=plan.baseline.workdir,
            metric_json_key=b.metric_json_key,
            metric_regex=b.metric_regex,
            objective=plan.maximize or plan.minimize,
            result_file=b.result_file,
            repeat=repeat or b.repeat,
            timeout_s=t.benchmark_s,
        )
        if plan.ranks_by_capacity:  # the bisection is the measurement
            result = {"status": "ok", "run_launch": [launched], "metrics": {}}
        else:
            result = _fixed_load(ctx, bargs, limit, launched)
        if result["status"] == "ok" and plan.capacity is not None:
            result = _with_capacity(ctx, bargs, limit, result, command, pid)
        return result, pid
    except Exception as exc:  # a config error or a bug: recorded; _finish still cleans up
        return {
            "status": "failed",
            "diagnosis": f"loop error: {exc!r}",
            "evidence": traceback.format_exc(limit=3)[-300:],
        }, pid


def _fixed_load(ctx: Context, bargs: BenchArgs, limit: Limit, launched: float) -> dict[str, Any]:
    """The plan's benchmark, `repeat` runs at each load point (or at its own load)."""
    plan = ctx.plan
    br = measure(ctx.host, plan.load, bargs, deadline=limit.deadline)
    if not br.ok and br.timed_out and limit.over():
        return limit.result("benchmark", br.error or "benchmark stopped")
    if not br.ok:
        result = {"status": "failed", "diagnosis": f"benchmark: {br.error}", "evidence": br.error}
        named = _no_metric(plan, br.error or "", br.output_tail)
        if named:  # the server was fine: the benchmark's output is the cause, said so
            result |= {"label": BENCHMARK_OUTPUT, "diagnosis": named}
        return result
    return {
        "status": "ok",
        "metric_mean": br.mean,
        "metric_spread": br.spread,
        "metric_values": br.values,
        "run_launch": [launched] * len(br.values),
        "metrics": {k: [r[k] for r in br.runs if k in r] for k in sorted(set().union(*br.runs))},
    }


def _with_capacity(
    ctx: Context,
    bargs: BenchArgs,
    limit: Limit,
    result: dict[str, Any],
    launch: str,
    pid: int | None,
) -> dict[str, Any]:
    """This launch's capacity under the SLOs (loop/capacity.py), added to its metrics; when
    the plan ranks by it, it is the row's value too."""
    from loop.capacity import ProbeFailed, find_capacity

    plan, host = ctx.plan, ctx.host
    try:
        cap = find_capacity(
            host,
            plan,
            bargs,
            limit.deadline,
            launch,
            alive=(lambda: launcher.group_alive(host, pid)) if pid else None,
        )
    except ProbeFailed as exc:
        if exc.timed_out and limit.over():
            return limit.result("benchmark", str(exc))
        return {"status": "failed", "diagnosis": f"benchmark: {exc}", "evidence": str(exc)}
    metrics = dict(result["metrics"])
    for k, v in cap.metrics().items():
        metrics.setdefault(k, v)  # the fixed-load runs keep their own plain metrics
    out = {**result, "metrics": metrics}
    if plan.ranks_by_capacity:
        value = metrics[plan.objective][0]
        out |= {"metric_mean": value, "metric_spread": 0.0, "metric_values": [value]}
    return out


#: Label of a failure whose cause is the benchmark's output (no JSON, no such metric): the
#: server ran, so no agent is sent to find a server-side cause (it once said killed_externally).
BENCHMARK_OUTPUT = "benchmark_output"


def _no_metric(plan: Any, error: str, tail: list[str]) -> str | None:
    """The benchmark ran but its output has no objective: name the objective and what the
    output has instead (or that it printed no JSON at all)."""
    if "metric not found" not in error:
        return None
    from tools.bench_results import parse_results

    want = plan.baseline.benchmark.metric_json_key or plan.objective
    found = parse_results("\n".join(tail))
    if not found:
        last = next((line for line in reversed(tail) if line.strip()), "")
        return (
            f"benchmark printed no JSON result (looked for objective {want!r}); "
            f"its last line: {last[:200]!r}"
        )
    have = ", ".join(sorted(k for k in found if "@" not in k))
    return f"objective {want!r} is not in the benchmark's result; it has: {have}"


def _finish(
    ctx: Context,
    row: ExperimentRow,
    result: dict[str, Any],
    pid: int | None,
    t0: float,
    marker: str,
) -> ExperimentRow:
    """Record the result, then stop, revert and (on failure) diagnose; always in this order,
    except for a hang: a hung server is diagnosed while it still hangs (its stacks and GPUs are
    the proof, and they are gone once it is stopped); the stop and the revert follow whatever
    the diagnosis does."""
    led = ctx.ledger
    leave = ctx.leave_running and result.get("status") == "ok"
    live = result.get("status") == "hung" and ctx.diagnoser is not None and pid is not None
    led.update(row.id, **result, phase="diagnose" if live else "stop")
    try:
        if live:
            _phase(ctx, row, "diagnose")
            diagnose_row(ctx, led.get(row.id) or row, live=True)
    finally:
        try:
            if not leave:
                cleanup(ctx, pid, marker, row)
        finally:
            if not leave:
                _phase(ctx, row, "revert")
                bad = configs.revert(ctx.host, ctx.baseline_files, store_root=ctx.store_root)
                if bad:
                    led.update(
                        row.id,
                        diagnosis=(result.get("diagnosis") or "") + f"; REVERT FAILED: {bad}",
                    )
                    raise configs.ConfigError(
                        f"config not back to baseline on {ctx.host.name}: {bad}"
                    )
    stored = led.get(row.id) or row
    if (
        stored.status in FAILED
        and ctx.diagnoser is not None
        and not live
        and stored.label != BENCHMARK_OUTPUT
    ):
        _phase(ctx, stored, "diagnose")
        diagnose_row(ctx, stored)
    led.update(row.id, ended=time.time(), duration_s=round(time.time() - t0, 3))
    _phase(ctx, row, "done")
    return led.get(row.id) or stored


def cleanup(ctx: Context, pid: int | None, marker: str | None, row: ExperimentRow) -> None:
    _phase(ctx, row, "stop")
    left = launcher.stop(ctx.host, pid, marker, grace_s=ctx.plan.policy.stop_grace_s)
    if left:
        ctx.ledger.update(row.id, diagnosis=f"processes survived stop: {left}")


def diagnose_row(ctx: Context, row: ExperimentRow, live: bool = False) -> None:
    assert ctx.diagnoser is not None
    what = "hangs (still running, pid " + str(row.pid) + ")" if live else "failed"
    symptom = (
        f"experiment {row.name} ({row.diff.strip().splitlines()[-1] if row.diff else 'baseline'}) "
        f"{what}: {row.diagnosis}. Server log: {row.log_path}"
    )
    try:
        d = ctx.diagnoser(ctx.host, row, symptom)
    except Exception as exc:  # the agent failing must not take the night down
        d = Diagnosis(None, None, f"diagnosis failed: {exc!r}", "error")
    if d is None:
        return
    fields: dict[str, Any] = {"diagnosis": f"{row.diagnosis} | {d.source}: {d.summary}".strip(" |")}
    if d.label:
        fields["label"] = d.label
    if d.evidence:
        fields["evidence"] = d.evidence
    ctx.ledger.update(row.id, **fields)
