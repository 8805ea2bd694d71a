"""Objectives and SLO constraints over every metric a benchmark reported.

A plan says `maximize: output_throughput` and `constraints: ["p99_ttft_ms <= 500",
"errors == 0"]`. A change wins only if it meets every constraint the baseline met: a night
must not trade a latency SLO for throughput behind the user's back. A constraint the baseline
itself misses cannot be asked of a one-knob change; it becomes "no worse than the baseline"
(a 12x worse p99 once "met" an SLO the baseline missed), and the report says so. Every metric a
plan names must be in the baseline's result (`unknown_metrics`): a misspelled `p99_tfft_ms`
once switched its SLO off silently.
"""

from __future__ import annotations

import operator
import re
import statistics
from collections.abc import Callable

from pydantic import BaseModel

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
    "==": operator.eq,
}
_SYNTAX = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=|==|<|>)\s*(-?[\d.]+(?:e-?\d+)?)\s*$")


class Constraint(BaseModel):
    metric: str
    op: str
    bound: float

    @classmethod
    def parse(cls, text: str) -> Constraint:
        m = _SYNTAX.match(text)
        if not m:
            raise ValueError(
                f"constraint {text!r}: write METRIC OP NUMBER, e.g. 'p99_ttft_ms <= 500' "
                f"(OP one of {', '.join(_OPS)})"
            )
        return cls(metric=m[1], op=m[2], bound=float(m[3]))

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.bound:g}"

    def value(self, metrics: dict[str, list[float]]) -> float | None:
        """The median over runs: one slow run does not break an SLO, a slow config does."""
        vals = metrics.get(self.metric) or []
        return statistics.median(vals) if vals else None

    def met(self, metrics: dict[str, list[float]]) -> bool | None:
        v = self.value(metrics)
        return None if v is None else _OPS[self.op](v, self.bound)


def violations(
    constraints: list[Constraint],
    baseline: dict[str, list[float]],
    change: dict[str, list[float]],
) -> list[str]:
    """The constraints the baseline met and the change does not, in words (empty = fine)."""
    out = []
    for c in constraints:
        met = c.met(baseline)
        if met is None:
            continue  # never measured by the baseline: refused before the night (unknown_metrics)
        if c.met(change) is None:
            out.append(f"{c.metric} not measured (needed for {c})")
        elif met and not c.met(change):
            out.append(f"{c.metric} = {c.value(change):.4g} breaks {c}")
        elif not met and worse_than_baseline(c, baseline, change) > 0:
            out.append(
                f"{c.metric} = {c.value(change):.4g} is worse than the baseline's "
                f"{c.value(baseline):.4g} (the baseline misses {c}: held to no worse)"
            )
    return out


def worse_than_baseline(
    c: Constraint, baseline: dict[str, list[float]], change: dict[str, list[float]]
) -> float:
    """How much further from the bound than the baseline the change is (> 0: worse)."""
    b, v = c.value(baseline), c.value(change)
    if b is None or v is None:
        return 0.0
    if c.op in ("<=", "<"):
        return v - b
    if c.op in (">=", ">"):
        return b - v
    return abs(v - c.bound) - abs(b - c.bound)


def missed_by_baseline(
    constraints: list[Constraint], baseline: dict[str, list[float]]
) -> list[str]:
    """The report's words for each SLO the baseline itself misses."""
    return [
        f"`{c}` is missed by the baseline itself ({c.metric} = {c.value(baseline):.4g}): "
        "a change is held to no worse than the baseline there"
        for c in constraints
        if c.met(baseline) is False
    ]


def unknown_metrics(names: list[str], result: dict[str, list[float]]) -> list[str]:
    """The plan's metric names that the baseline's result does not have."""
    return [n for n in dict.fromkeys(names) if n not in result]


def constraint_values(
    constraints: list[Constraint],
    baseline: dict[str, list[float]],
    change: dict[str, list[float]],
) -> list[float]:
    """Optuna's constrained-TPE form: one number per constraint, <= 0 when it is met (or not
    asked of the change because the baseline misses it), else by how much it is broken."""
    out = []
    for c in constraints:
        v = c.value(change)
        if c.met(baseline) is None:
            out.append(0.0)
        elif not c.met(baseline):
            out.append(worse_than_baseline(c, baseline, change))
        elif v is None:
            out.append(1.0)
        elif c.op in ("<=", "<"):
            out.append(v - c.bound if not c.met(change) else min(0.0, v - c.bound))
        elif c.op in (">=", ">"):
            out.append(c.bound - v if not c.met(change) else min(0.0, c.bound - v))
        else:
            out.append(abs(v - c.bound))
    return out
