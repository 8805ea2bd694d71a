"""Enough samples (issue 23, item 2): a percentile only from enough completed requests (p99
from 100, p90 from 10), else "too few"; num_prompts raised to 5 x concurrency, with a note."""

from __future__ import annotations

from pathlib import Path

import pytest

from loop.plan import LoadSweep
from loop.samples import enough_prompts, min_completed, percentile_of, too_few
from loop.sweep import point_command, prompt_notes
from tests.loop.conftest import make_plan


@pytest.mark.parametrize(
    ("metric", "pct", "need"),
    [("p99_ttft_ms", 99, 100), ("p90_itl_ms@concurrency=8", 90, 10), ("p95_itl_ms", 95, 20),
     ("p50_e2el_ms", 50, 2), ("p75_tpot_ms", 75, 4), ("mean_ttft_ms", None, None)],
)  # fmt: skip
def test_percentiles_and_what_they_need(metric: str, pct: float | None, need: int | None) -> None:
    assert percentile_of(metric) == pct
    if pct is not None:
        assert min_completed(pct) == need


def test_a_p99_of_four_requests_is_too_few() -> None:
    runs = {"completed": [4.0, 4.0], "p99_ttft_ms": [40.0, 41.0], "p90_ttft_ms": [39.0, 40.0]}
    assert too_few("p99_ttft_ms", runs) == "too few (n=4 < 100)"
    assert too_few("p90_ttft_ms", runs) == "too few (n=4 < 10)"
    assert too_few("p50_ttft_ms", runs) is None
    assert too_few("mean_ttft_ms", runs) is None
    enough = {"completed": [120.0, 100.0], "completed@concurrency=8": [9.0]}
    assert too_few("p99_ttft_ms", enough) is None
    assert too_few("p90_ttft_ms@concurrency=8", enough) == "too few (n=9 < 10)"
    assert too_few("p99_ttft_ms", {}) is None  # the client did not say: not guessed


def test_num_prompts_raised_to_five_times_concurrency(tmp_path: Path) -> None:
    cmd = "vllm bench serve --model m --num-prompts 20"
    raised, note = enough_prompts(cmd, 8)
    assert raised.endswith("--num-prompts 40") and note and "raised to 40" in note
    assert enough_prompts(cmd, 4) == (cmd, None)
    assert enough_prompts("bench --requests 3", 8) == ("bench --requests 3", None)
    load = LoadSweep(concurrencies=[1, 16])
    assert (
        point_command(cmd, load, "16")
        == "vllm bench serve --model m --num-prompts 80 --max-concurrency 16"
    )
    assert point_command(cmd, load, "1") == f"{cmd} --max-concurrency 1"
    plan = make_plan(tmp_path, [])
    plan.baseline.benchmark.command = cmd
    plan.load = load
    assert prompt_notes(plan) == [
        "--num-prompts 20 raised to 80 at concurrency 16 (>= 5 x concurrency)"
    ]
