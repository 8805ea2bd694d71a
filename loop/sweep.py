"""Load sweeps: the benchmark at every load point, and SLOs that must hold at each one.

Why: a change that is faster one request at a time can break p99 TTFT at eight in flight; a
night measured at one load cannot see it. With `load: {concurrencies: [1, 8]}` (or
`request_rates`) the benchmark step runs once per point; every metric is kept per point as
`METRIC@POINT` (`p99_ttft_ms@concurrency=8`), the plain name holds the mean over the points
(the objective a change is ranked by), and a change wins only if it meets each constraint at
every point where the baseline met it.
"""

from __future__ import annotations

import re
import statistics

from loop.plan import LoadSweep, Plan
from loop.samples import enough_prompts
from loop.slo import Constraint, constraint_values, violations
from store.ledger.base import ExperimentRow
from tools.bench_results import unit
from tools.benchmark import Args, Result, benchmark
from tools.host import Host

#: What each axis is called in a point's label, its command token, and the flag appended
#: when the command has no token (the same in `vllm bench serve` and SGLang `bench_serving`).
AXES = {
    "request_rates": ("rate", "{request_rate}", "--request-rate"),
    "concurrencies": ("concurrency", "{concurrency}", "--max-concurrency"),
}


def points(load: LoadSweep | None) -> list[tuple[str, str]]:
    """(label, command text) per point: `concurrency=8`, `--max-concurrency 8`."""
    if load is None:
        return []
    axis = "request_rates" if load.request_rates else "concurrencies"
    name, _, _ = AXES[axis]
    return [(f"{name}={v:g}", f"{v:g}") for v in getattr(load, axis)]


def point_command(command: str, load: LoadSweep, value: str) -> str:
    """The command at one point; at a concurrency, `--num-prompts` raised to 5 x it
    (loop/samples.py; `prompt_notes` says so in the report)."""
    axis = "request_rates" if load.request_rates else "concurrencies"
    _, token, flag = AXES[axis]
    if axis == "concurrencies":
        command, _ = enough_prompts(command, int(float(value)))
    if token in command:
        return command.replace(token, value)
    return f"{command} {flag} {value}"


def prompt_notes(plan: Plan) -> list[str]:
    """Where the loop ran more prompts than the plan's command asks for, and why."""
    if plan.load is None or not plan.load.concurrencies:
        return []
    notes = [enough_prompts(plan.baseline.benchmark.command, c)[1] for c in plan.load.concurrencies]
    return [n for n in notes if n]


def measure(host: Host, load: LoadSweep | None, args: Args, deadline: float) -> Result:
    """The benchmark once per point (each `repeat` times), merged into one result whose runs
    carry every metric per point and, under the plain name, the mean over the points."""
    if load is None:
        return benchmark(host, args, deadline=deadline)
    per_point: list[tuple[str, Result]] = []
    for label, value in points(load):
        res = benchmark(
            host,
            args.model_copy(update={"command": point_command(args.command, load, value)}),
            deadline=deadline,
        )
        if not res.ok:
            return res.model_copy(update={"error": f"at {label}: {res.error}"})
        per_point.append((label, res))
    n = min(len(r.values) for _, r in per_point)
    values = [statistics.fmean(r.values[i] for _, r in per_point) for i in range(n)]
    runs: list[dict[str, float]] = []
    for i in range(n):
        run: dict[str, float] = {}
        for label, r in per_point:
            run |= {f"{k}@{label}": v for k, v in r.runs[i].items()}
        common = set.intersection(*(set(r.runs[i]) for _, r in per_point))
        run |= {k: statistics.fmean(r.runs[i][k] for _, r in per_point) for k in common}
        runs.append(run)
    return Result(
        host=host.name,
        values=values,
        mean=statistics.fmean(values),
        spread=statistics.stdev(values) if len(values) > 1 else 0.0,
        output_tail=per_point[-1][1].output_tail,
        runs=runs,
    )


def point_slos(plan: Plan) -> list[Constraint]:
    """The plan's constraints, one per load point when it sweeps."""
    slos = plan.slos()
    labels = [label for label, _ in points(plan.load)]
    if not labels:
        return slos
    return [c.model_copy(update={"metric": f"{c.metric}@{lb}"}) for c in slos for lb in labels]


def trial_constraints(
    plan: Plan, base: dict[str, list[float]], change: dict[str, list[float]]
) -> list[float]:
    """One number per plan constraint for Optuna (<= 0 met): the worst over the points."""
    labels = [label for label, _ in points(plan.load)] or [None]
    out = []
    for c in plan.slos():
        each = [c.model_copy(update={"metric": f"{c.metric}@{lb}"}) if lb else c for lb in labels]
        out.append(max(constraint_values(each, base, change)))
    return out


def _baseline_metrics(rows: list[ExperimentRow]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in rows:
        if r.kind == "baseline" and r.status == "ok":
            for k, v in r.metrics.items():
                out.setdefault(k, []).extend(v)
    return out


def report_lines(rows: list[ExperimentRow], plan: Plan) -> list[str]:
    """A small table per load point: the objective and each constrained metric (medians)
    and whether the change met the SLOs at that point."""
    labels = [label for label, _ in points(plan.load)]
    if not labels:
        return []
    base = _baseline_metrics(rows)
    shown = [r for r in rows if r.metrics and r.kind != "final"]
    names = [plan.objective] + [c.metric for c in plan.slos() if c.metric != plan.objective]
    out = ["## Load sweep", ""]
    out.append(
        f"The benchmark ran at {len(labels)} load points; `{plan.objective}` is ranked by its "
        "mean over the points, and a change wins only if it meets every SLO at every point "
        "where the baseline met it."
    )
    for label in labels:
        cols = [f"{m} ({unit(m)})" if unit(m) else m for m in names]
        out += ["", f"### {label}", "", "| experiment | status | " + " | ".join(cols) + " | SLO |"]
        out.append("|---|---|" + "---|" * len(cols) + "---|")
        slos = [c.model_copy(update={"metric": f"{c.metric}@{label}"}) for c in plan.slos()]
        for r in shown:
            cells = []
            for m in names:
                vals = r.metrics.get(f"{m}@{label}") or []
                cells.append(f"{statistics.median(vals):.4g}" if vals else "-")
            if not slos:
                slo = "-"
            elif r.kind == "baseline":
                slo = "met" if all(c.met(r.metrics) for c in slos) else "missed"
            else:
                broken = violations(slos, base, r.metrics)
                slo = "; ".join(re.sub(r"@\S+", "", b) for b in broken) or "met"
            out.append(f"| {r.name} | {r.status} | " + " | ".join(cells) + f" | {slo} |")
    return [*out, ""]
