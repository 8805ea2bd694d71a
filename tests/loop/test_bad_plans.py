"""Blocked nights say why, exit non-zero and leave nothing "running" (issue 23, items 4-5):
names checked against the baseline's result, unfilled variables, a benchmark with no JSON, an
unknown objective, a missing config file; and an SLO the baseline misses held to "no worse".
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from loop.night import Night
from loop.slo import Constraint, violations
from tests.loop.conftest import PY, REPO, make_plan
from tests.loop.test_resume import _loop

ONE = [{"name": "bs-16", "flags": {"--cuda-graph-max-bs": 16}}]


def _vllm(plan_bench: str) -> str:
    return plan_bench + " --format vllm --clock model"


def test_a_misspelled_slo_refuses_the_plan_listing_what_exists(state: Path, tmp_path: Path) -> None:
    plan = make_plan(state, ONE, constraints=["p99_tfft_ms <= 300"])
    plan.baseline.benchmark.command = _vllm(plan.baseline.benchmark.command)
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan.model_dump(mode="json")))
    done = subprocess.run(
        _loop(plan_file, state), cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 4, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "plan refused: p99_tfft_ms not in the baseline's result; it has: " in done.stderr
    assert "p99_ttft_ms" in done.stderr  # the name meant is listed


def test_unfilled_variable_is_refused_before_launch(state: Path, tmp_path: Path) -> None:
    plan = make_plan(state, ONE)
    data = plan.model_dump(mode="json")
    data["baseline"]["launch"] += " --port ${PORTT}"
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(data))
    done = subprocess.run(
        _loop(plan_file, state), cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "unfilled variable(s) PORTT" in done.stderr
    assert not (state / "ledger.db").exists()  # nothing launched, no night opened


def test_benchmark_without_json_and_unknown_objective_are_named(state: Path) -> None:
    plan = make_plan(state, ONE)
    plan.baseline.benchmark.command = "echo benchmark done"
    night = Night(plan, state / "a", diagnoser=lambda *a: None)
    result = night.run()
    assert result.status == "blocked"
    assert "benchmark printed no JSON result (looked for objective 'output_throughput')" in (
        result.note or ""
    ), result.note
    base = night.ledger.get(f"{result.id}:baseline")
    assert base and base.label == "benchmark_output"

    plan = make_plan(state, ONE, maximize="output_thruput")
    plan.baseline.benchmark.metric_json_key = None
    plan.baseline.benchmark.command = f"{PY} -m loop.emulator --bench-client --port {plan.baseline.port} --requests 2 --tokens 20 --clock model"
    result = Night(plan, state / "b", diagnoser=None).run()
    assert result.status == "blocked"
    assert "objective 'output_thruput' is not in the benchmark's result; it has: " in (
        result.note or ""
    )
    assert "output_throughput" in (result.note or "")


def test_missing_config_file_blocks_the_night_without_a_traceback(state: Path) -> None:
    plan = make_plan(state, ONE)
    plan.baseline.config_files.append(str(state / "no-such.env"))
    night = Night(plan, state, diagnoser=None)
    result = night.run()
    assert result.status == "blocked" and result.ended
    assert "config file:" in (result.note or "") and "no-such.env" in (result.note or "")
    assert night.ledger.night(result.id).status == "blocked"  # type: ignore[union-attr]


def test_an_slo_the_baseline_misses_is_held_to_no_worse_than_baseline() -> None:
    slo = [Constraint.parse("p99_ttft_ms <= 300")]
    base = {"p99_ttft_ms": [440.0, 450.0, 445.0]}  # the baseline misses it
    assert violations(slo, base, {"p99_ttft_ms": [430.0]}) == []  # better: fine
    worse = violations(slo, base, {"p99_ttft_ms": [5400.0]})  # 12x worse no longer "meets" it
    assert worse and "worse than the baseline's 445" in worse[0], worse
    met = {"p99_ttft_ms": [200.0]}
    assert violations(slo, met, {"p99_ttft_ms": [442.0]}) == [
        "p99_ttft_ms = 442 breaks p99_ttft_ms <= 300"
    ]
