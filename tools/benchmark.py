"""`benchmark`: run a benchmark command N times on the host and read one metric from each run.

The metric is read by a JSON key (dotted path, from the last JSON line that has it) or by a
regex whose first group is the number; the last match wins, since benchmark tools print their
summary at the end. Mean and spread come back together: one number without its noise is how a
night keeps changes that only won the coin toss.
"""

from __future__ import annotations

import json
import re
import shlex
import statistics
import time

from pydantic import BaseModel, Field, model_validator

from tools.base import ToolResult, ToolSpec, bound_lines
from tools.bench_results import parse_results
from tools.host import Host


class Args(BaseModel):
    command: str = Field(description="the benchmark command line")
    workdir: str = "."
    env: dict[str, str] = Field(default_factory=dict)
    metric_json_key: str | None = Field(None, description="dotted key in a JSON output line")
    metric_regex: str | None = Field(None, description="regex whose group 1 is the metric")
    objective: str | None = Field(
        None, description="canonical metric name (p99_ttft_ms, output_throughput, ...)"
    )
    result_file: str | None = Field(
        None, description="file the client writes its result to (vllm --result-filename)"
    )
    repeat: int = Field(1, ge=1, le=50)
    timeout_s: float = Field(300.0, gt=0)

    @model_validator(mode="after")
    def _one_reader(self) -> Args:
        if not (self.metric_json_key or self.metric_regex or self.objective):
            raise ValueError("give metric_json_key, metric_regex or objective")
        return self


class Result(ToolResult):
    values: list[float] = Field(default_factory=list)
    mean: float | None = None
    spread: float | None = Field(None, description="sample standard deviation; 0 for one run")
    output_tail: list[str] = Field(default_factory=list)
    timed_out: bool = Field(False, description="a run was stopped by its timeout or the deadline")
    runs: list[dict[str, float]] = Field(
        default_factory=list, description="every metric each run reported (canonical names)"
    )

    def lines(self) -> list[str]:
        head = super().lines()
        if self.mean is not None:
            head.append(
                f"# metric mean {self.mean:.4g} spread {self.spread:.3g} over {self.values}"
            )
        return head + bound_lines(self.output_tail, 40)


def parse_metric(text: str, json_key: str | None = None, regex: str | None = None) -> float | None:
    """The metric in `text`, or None when it is not there (never raises on odd output)."""
    if json_key:
        for line in reversed(text.splitlines()):
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            for part in json_key.split("."):
                obj = obj.get(part) if isinstance(obj, dict) else None
            if isinstance(obj, int | float) and not isinstance(obj, bool):
                return float(obj)
    if regex:
        matches = re.findall(regex, text, flags=re.MULTILINE)
        for m in reversed(matches):
            raw = m[0] if isinstance(m, tuple) else m
            try:
                return float(raw)
            except ValueError:
                continue
    return None


def summarize(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def benchmark(host: Host, args: Args, deadline: float | None = None) -> Result:
    """Run the command `repeat` times; `deadline` (time.monotonic()) caps all runs together.

    Why a deadline beside `timeout_s`: the overnight loop's per-experiment limit must hold
    across every repeat, so a benchmark that hangs is killed when the experiment's time is up,
    not after `repeat` x `timeout_s`.
    """
    env = " ".join(shlex.quote(f"{k}={v}") for k, v in args.env.items())
    line = f"cd {shlex.quote(args.workdir)} && {'env ' + env + ' ' if env else ''}/bin/sh -c {shlex.quote(args.command)} 2>&1"
    values: list[float] = []
    runs: list[dict[str, float]] = []
    tail: list[str] = []
    if args.result_file:  # a stale file from an earlier run must never be read as this one's
        f = shlex.quote(args.result_file)
        line = f"rm -f {f} ; ( {line} ) && {{ echo; cat {f}; }}"
    for i in range(args.repeat):
        timeout = args.timeout_s
        if deadline is not None:
            timeout = min(timeout, deadline - time.monotonic())
            if timeout <= 0:
                return Result(
                    host=host.name,
                    ok=False,
                    error=f"benchmark on {host.name}: deadline reached before run {i + 1}/{args.repeat}",
                    fix="allow more time for the benchmark, or fewer repeats",
                    values=values,
                    output_tail=tail,
                    timed_out=True,
                )
        res = host.run(line, timeout=timeout)
        tail = res.stdout.splitlines()[-20:]
        if not res.ok:
            why = res.error or f"exited {res.rc}"
            return Result(
                host=host.name,
                ok=False,
                error=f"benchmark run {i + 1}/{args.repeat} on {host.name} failed: {why}",
                fix="read the output tail; is the server still up?",
                values=values,
                output_tail=tail,
                timed_out=res.timed_out,
            )
        metrics = parse_results(res.stdout)
        v = parse_metric(res.stdout, args.metric_json_key, args.metric_regex)
        if v is None and args.objective:
            v = metrics.get(args.objective)
        if v is None:
            return Result(
                host=host.name,
                ok=False,
                error=f"benchmark run {i + 1} on {host.name}: metric not found in the output",
                fix="check metric_json_key / metric_regex / objective against the output tail",
                values=values,
                output_tail=tail,
                runs=runs,
            )
        values.append(v)
        runs.append(metrics)
    mean, spread = summarize(values)
    return Result(
        host=host.name, values=values, mean=mean, spread=spread, output_tail=tail, runs=runs
    )


SPEC = ToolSpec(
    name="benchmark",
    description="Run a benchmark command N times on the host and parse one metric (mean, spread).",
    args=Args,
    result=Result,
    fn=benchmark,
    changing=True,
)
