"""Capacity under SLOs: per configuration, the highest load that meets every SLO, by bisection.

Why: below saturation a benchmark at a fixed rate measures the offered load, not the server (a
real -8% ITL came out "inconclusive" that way). What a serving engineer compares is how much
load a configuration carries while every SLO holds, per GPU: `vllm bench sweep serve_sla` finds
it per config by searching `--request-rate` or `--max-concurrency`. Here each launch brackets it
(the plan's `low`, doubled until a probe misses or `high` is reached), then bisects (geometric
midpoints) until the bracket is `resolution` wide or `max_probes` benchmark runs are spent.

A probe is one benchmark run at one load, judged against every SLO's bound on that run; it
runs enough prompts for its percentiles (loop/samples.py: p99 from 100 completions) and a
probe whose percentile still rests on too few is not "met". The result is a bracket
[met, missed): the highest load probed that met every SLO, the lowest above it that missed.
Two configurations differ only when their brackets are apart (one's met load above the
other's missed load); the baseline's bracket is the envelope of all its launches, so the
launch-to-launch spread is inside it. Goodput is the throughput served at the met load, per GPU
the config uses.
"""

from __future__ import annotations

import math
import shlex
import statistics
from collections.abc import Callable

from pydantic import BaseModel

from loop.plan import CAPACITY_OBJECTIVES, CapacitySearch, Plan
from loop.samples import PROMPTS_PER_CONCURRENCY, min_completed, percentile_of, raise_prompts
from loop.slo import Constraint
from store.ledger.base import ExperimentRow
from tools.benchmark import Args, benchmark
from tools.host import Host

#: Objectives a plan may rank by once it has `capacity:`; both are higher-is-better.
OBJECTIVES = CAPACITY_OBJECTIVES
#: The capacity's command token and the flag appended without it, per axis (vllm and SGLang).
AXES = {
    "request_rate": ("rate", "{request_rate}", "--request-rate", "req/s"),
    "concurrency": ("concurrency", "{concurrency}", "--max-concurrency", "in flight"),
}
#: What each probe keeps under `METRIC@rate=X`, besides the SLOs' metrics.
KEPT = ("completed", "request_throughput", "output_throughput")


class Probe(BaseModel):
    load: float
    met: bool
    why: str = ""  # the broken SLOs, "too few", or the failed benchmark
    metrics: dict[str, float] = {}


class Capacity(BaseModel):
    axis: str
    probes: list[Probe]
    low: float  # the highest load probed that met every SLO (0: none did)
    high: float | None  # the lowest load above it that missed (None: met up to the ceiling)
    gpus: int
    goodput_rps: float = 0.0
    goodput_tps: float = 0.0

    def metrics(self) -> dict[str, list[float]]:
        """The row's metrics: the bracket, goodput, and every probe at its load."""
        name = AXES[self.axis][0]
        out: dict[str, list[float]] = {
            "capacity": [self.low],
            "capacity_high": [self.high if self.high is not None else self.low],
            "capacity_open": [1.0 if self.high is None else 0.0],
            "capacity_probes": [p.load for p in self.probes],
            "gpus": [float(self.gpus)],
            "goodput_rps": [self.goodput_rps],
            "goodput_tps": [self.goodput_tps],
            "goodput_per_gpu": [self.goodput_rps / self.gpus],
        }
        for p in self.probes:
            at = f"@{name}={p.load:g}"
            out[f"slo_met{at}"] = [1.0 if p.met else 0.0]
            out |= {f"{k}{at}": [v] for k, v in p.metrics.items()}
        # the metrics at the capacity (or at the lowest load when none met), under plain names
        here = next((p for p in self.probes if p.load == self.low), self.probes[0])
        out |= {k: [v] for k, v in here.metrics.items()}
        return out


class Bracket(BaseModel):
    """Where a config's capacity (or goodput per GPU) lies: [low, high), high inf when open."""

    low: float
    high: float
    launches: int = 1

    def describe(self, unit: str = "") -> str:
        u = f" {unit}" if unit else ""
        if math.isinf(self.high):
            return f">= {self.low:.4g}{u} (met up to the ceiling)"
        if self.low == 0:
            return f"< {self.high:.4g}{u} (missed at every load probed)"
        return f"[{self.low:.4g}, {self.high:.4g}){u}"


def bracket(metrics: dict[str, list[float]], objective: str = "capacity") -> Bracket | None:
    """The row's bracket of `capacity` or `goodput_per_gpu`: the envelope of its launches."""
    lows = metrics.get("capacity") or []
    if not lows:
        return None
    highs = metrics.get("capacity_high") or lows
    opened = metrics.get("capacity_open") or [0.0] * len(lows)
    if objective == "goodput_per_gpu":  # the load bracket, scaled to the goodput measured
        g = metrics.get("goodput_per_gpu") or [0.0] * len(lows)
        gpus = metrics.get("gpus") or [1.0] * len(lows)
        pairs = [
            (gi, gi * h / lo if lo > 0 else h / max(1.0, n))
            for gi, lo, h, n in zip(g, lows, highs, gpus, strict=False)
        ]
        lows, highs = [p[0] for p in pairs], [p[1] for p in pairs]
    high = math.inf if any(o > 0 for o in opened) else max(highs)
    return Bracket(low=min(lows), high=high, launches=len(lows))


def separate(change: Bracket, base: Bracket) -> str:
    """better / worse only when the brackets are apart; touching or overlapping: inconclusive."""
    if change.low > base.high:
        return "better"
    if change.high < base.low:
        return "worse"
    return "inconclusive"


def probe_command(command: str, spec: CapacitySearch, load: float, need: int) -> str:
    """The benchmark at one load, with prompts enough for its percentiles (and 5 x concurrency)."""
    _, token, flag, _ = AXES[spec.axis]
    value = f"{int(load)}" if spec.axis == "concurrency" else f"{load:g}"
    if spec.axis == "concurrency":
        need = max(need, PROMPTS_PER_CONCURRENCY * int(load))
    command = raise_prompts(command, need)
    if token in command:
        return command.replace(token, value)
    return f"{command} {flag} {value}"


def prompts_needed(slos: list[Constraint]) -> int:
    """Completions a probe needs for every percentile its SLOs read (p99: 100)."""
    pcts = [p for c in slos if (p := percentile_of(c.metric)) is not None]
    return max((min_completed(p) for p in pcts), default=1)


def gpus_of(spec: CapacitySearch, launch: str) -> int:
    """The GPUs a config uses: its `gpus_flag` (--tp-size 2) in the launch line, else `gpus`."""
    if spec.gpus_flag:
        words = shlex.split(launch)
        for i, w in enumerate(words):
            if w == spec.gpus_flag and i + 1 < len(words) and words[i + 1].isdigit():
                return int(words[i + 1])
            if w.startswith(spec.gpus_flag + "=") and w.split("=", 1)[1].isdigit():
                return int(w.split("=", 1)[1])
    return spec.gpus


def judge_probe(slos: list[Constraint], run: dict[str, float]) -> tuple[bool, str]:
    """Met only when every SLO holds on this run, each from enough completions."""
    done = run.get("completed")
    broken = []
    for c in slos:
        v = run.get(c.metric)
        pct = percentile_of(c.metric)
        if v is None:
            broken.append(f"{c.metric} not measured")
        elif pct is not None and done is not None and done < min_completed(pct):
            broken.append(f"{c.metric}: too few (n={int(done)} < {min_completed(pct)})")
        elif not c.met({c.metric: [v]}):
            broken.append(f"{c.metric} = {v:.4g} breaks {c}")
    return not broken, "; ".join(broken)


class ProbeFailed(Exception):
    """The first probe's benchmark failed, or the server died under a probe: no capacity."""

    def __init__(self, error: str, timed_out: bool = False) -> None:
        super().__init__(error)
        self.timed_out = timed_out


def find_capacity(
    host: Host,
    plan: Plan,
    args: Args,
    deadline: float,
    launch: str,
    alive: Callable[[], bool] | None = None,
) -> Capacity:
    """Bracket, then bisect, spending at most `max_probes` benchmark runs on this launch."""
    spec = plan.capacity
    assert spec is not None
    slos = plan.slos()
    need = prompts_needed(slos)
    keep = {c.metric for c in slos} | set(KEPT)
    probes: list[Probe] = []

    def probe(load: float) -> bool:
        cmd = probe_command(args.command, spec, load, need)
        res = benchmark(
            host,
            args.model_copy(update={"command": cmd, "repeat": 1, "objective": slos[0].metric}),
            deadline=deadline,
        )
        if not res.ok or not res.runs:
            if not probes or res.timed_out or (alive is not None and not alive()):
                raise ProbeFailed(f"capacity probe at {load:g}: {res.error}", res.timed_out)
            probes.append(Probe(load=load, met=False, why=f"benchmark failed: {res.error}"))
            return False  # the server lives: the load was too much for the client or it
        run = res.runs[0]
        met, why = judge_probe(slos, run)
        kept = {k: v for k, v in run.items() if k in keep}
        probes.append(Probe(load=load, met=met, why=why, metrics=kept))
        return met

    def room() -> bool:
        return len(probes) < spec.max_probes

    lo, hi = 0.0, None
    if probe(spec.low):
        lo = spec.low
        while hi is None and lo < spec.high and room():
            x = min(lo * 2, spec.high)
            if spec.axis == "concurrency":
                x = float(int(x))
            if probe(x):
                lo = x
            else:
                hi = x
        while hi is not None and hi / lo - 1 > spec.resolution and room():
            mid = math.sqrt(lo * hi)
            if spec.axis == "concurrency":
                mid = float(round(mid))
                if not lo < mid < hi:
                    break
            if probe(mid):
                lo = mid
            else:
                hi = mid
    else:
        hi = spec.low
    at = next((p for p in probes if p.load == lo and p.met), None)
    rps = tps = 0.0
    if at is not None:
        rps = at.metrics.get("request_throughput", lo if spec.axis == "request_rate" else 0.0)
        tps = at.metrics.get("output_throughput", 0.0)
    return Capacity(
        axis=spec.axis,
        probes=probes,
        low=lo,
        high=hi,
        gpus=gpus_of(spec, launch),
        goodput_rps=rps,
        goodput_tps=tps,
    )


def trail(metrics: dict[str, list[float]], axis: str) -> str:
    """The probes in the order they ran: `4 met, 8 met, 16 missed, 11 met, ...`."""
    name = AXES[axis][0]
    out = []
    for x in metrics.get("capacity_probes") or []:
        met = (metrics.get(f"slo_met@{name}={x:g}") or [0.0])[0]
        out.append(f"{x:.4g} {'met' if met else 'missed'}")
    return ", ".join(out)


def binding(metrics: dict[str, list[float]], plan: Plan, at: float | None = None) -> str:
    """Which SLO broke at the missed end of the bracket (what limits the capacity)."""
    spec = plan.capacity
    b = bracket(metrics)
    if spec is None or b is None or (at is None and math.isinf(b.high)):
        return "-"
    name = AXES[spec.axis][0]
    load = b.high if at is None else at
    broken = []
    for c in plan.slos():
        v = (metrics.get(f"{c.metric}@{name}={load:g}") or [None])[0]
        if v is not None and not c.met({c.metric: [v]}):
            broken.append(f"{c.metric} {v:.4g}")
    return ", ".join(broken) or "-"


def report_lines(rows: list[ExperimentRow], plan: Plan) -> list[str]:
    """The morning's capacity table: per config its bracket, the probes that made it, goodput
    per GPU, what limits it, and whether it is apart from the baseline's."""
    spec = plan.capacity
    if spec is None:
        return []
    shown = [r for r in rows if r.metrics.get("capacity") and r.kind != "final"]
    if not shown:
        return []
    base_metrics: dict[str, list[float]] = {}
    for r in shown:
        if r.kind == "baseline" and r.status == "ok":
            for k, v in r.metrics.items():
                base_metrics.setdefault(k, []).extend(v)
    base = bracket(base_metrics)
    unit = AXES[spec.axis][3]
    out = [
        "## Capacity under SLOs",
        "",
        f"Per config, the highest {spec.axis.replace('_', ' ')} at which every SLO held "
        f"({', '.join(f'`{c}`' for c in plan.slos())}), bisected from {spec.low:g} up to "
        f"{spec.high:g} {unit} to {spec.resolution:.0%} in at most {spec.max_probes} probes "
        "a launch; each probe one benchmark run with enough prompts for its percentiles. "
        "[met, missed): the capacity lies between; two configs differ only when their brackets "
        "are apart (the baseline's spans all its launches). Goodput: what was served at the met "
        "load, per GPU the config uses.",
        "",
    ]
    if base is not None and base.low == 0:
        missed = binding(base_metrics, plan, at=spec.low)
        out += [
            f"- The baseline misses the SLOs at every load probed, down to {spec.low:g} {unit} "
            f"({missed}): it has no capacity under them; a change is apart from it only "
            "when it meets them above that.",
            "",
        ]
    out += [
        f"| experiment | status | capacity ({unit}) | vs baseline | goodput req/s | "
        "goodput tok/s | GPUs | goodput req/s per GPU | limited by | probes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in shown:
        b = bracket(r.metrics)
        if b is None:
            continue
        if r.kind == "baseline" or base is None:
            vs = "-"
        else:
            vs = {"better": "apart, above", "worse": "apart, below"}.get(
                separate(b, base), "inconclusive"
            )
        m = r.metrics
        gpus = int(statistics.median(m.get("gpus") or [1.0]))
        cells = [
            r.name,
            r.status,
            b.describe(),
            vs,
            _med(m.get("goodput_rps")),
            _med(m.get("goodput_tps")),
            str(gpus),
            _med(m.get("goodput_per_gpu")),
            binding(r.metrics, plan),
            trail(r.metrics, spec.axis),
        ]
        out.append("| " + " | ".join(cells) + " |")
    if base is not None:
        out += [
            "",
            f"Baseline, every launch: {base.describe(unit)} over {base.launches} launch(es).",
        ]
    return [*out, ""]


def _med(vals: list[float] | None) -> str:
    return f"{statistics.median(vals):.4g}" if vals else "-"
