"""Enough requests behind a number: percentiles from enough completions, prompts for the load.

Why: a p99 of 4 requests is their maximum, and a night ranked changes by it. A pNN needs at
least 1 / (1 - NN/100) completed requests before one of them lies beyond it at all (p99: 100,
p90: 10); below that the report says "too few" instead of a number. And a benchmark at
concurrency C with fewer than 5 x C prompts spends most of its time filling and draining the
batch (SGLang's bench_serving asks for 5 x C too), so the loop raises `--num-prompts` to that,
with a note.
"""

from __future__ import annotations

import math
import re

#: Fewest completed requests for a percentile to be shown, per percentile (the rule above,
#: written out for the ones the clients report); others follow the rule.
MIN_COMPLETED = {50: 2, 90: 10, 95: 20, 99: 100, 99.9: 1000}
#: Prompts per unit of concurrency a benchmark run needs (SGLang bench_serving's advice).
PROMPTS_PER_CONCURRENCY = 5

_PCT = re.compile(r"^p(\d+(?:\.\d+)?)_")
_PROMPTS = re.compile(r"(--num-prompts[ =])(\d+)")


def percentile_of(metric: str) -> float | None:
    """99.0 for `p99_ttft_ms` (or `p99_ttft_ms@concurrency=8`), None for other metrics."""
    found = _PCT.match(metric)
    return float(found.group(1)) if found else None


def min_completed(pct: float) -> int:
    if pct in MIN_COMPLETED:
        return MIN_COMPLETED[pct]
    return math.ceil(1.0 / max(1e-9, 1.0 - pct / 100.0) - 1e-9)


def completed_key(metric: str) -> str:
    """Where a metric's completed-request count is: `completed`, at the same load point."""
    _, at, point = metric.partition("@")
    return f"completed@{point}" if at else "completed"


def too_few(metric: str, runs: dict[str, list[float]]) -> str | None:
    """'too few (n=4 < 100)' when a percentile rests on fewer completed requests per run than
    it needs; None when it has enough, is no percentile, or the client did not say."""
    pct = percentile_of(metric)
    done = runs.get(completed_key(metric))
    if pct is None or not done:
        return None
    need = min_completed(pct)
    n = int(min(done))
    return f"too few (n={n} < {need})" if n < need else None


def raise_prompts(command: str, need: int) -> str:
    """The command with `--num-prompts` raised to `need` when it asks for fewer."""
    found = _PROMPTS.search(command)
    if not found or int(found.group(2)) >= need:
        return command
    return command[: found.start(2)] + str(need) + command[found.end(2) :]


def enough_prompts(command: str, concurrency: int) -> tuple[str, str | None]:
    """The command with `--num-prompts` raised to 5 x concurrency when it asks for fewer, and
    the note saying so (None when nothing changed or the command names no prompt count)."""
    found = _PROMPTS.search(command)
    need = PROMPTS_PER_CONCURRENCY * concurrency
    if not found or int(found.group(2)) >= need:
        return command, None
    raised = command[: found.start(2)] + str(need) + command[found.end(2) :]
    note = (
        f"--num-prompts {found.group(2)} raised to {need} at concurrency {concurrency} "
        f"(>= {PROMPTS_PER_CONCURRENCY} x concurrency)"
    )
    return raised, note
