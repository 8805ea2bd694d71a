"""Capacity under SLOs (issue 23, item 3): per config the highest request rate that meets every
SLO, by bisection on the real emulator, whose knee is known (`capacity_rps`): `max_running`
slots of `tps / (1 + BATCH_COST * (slots - 1))` tokens/s each, 40 tokens a request. Past it the
queue, and p90 TTFT with it, grows with every request."""

from __future__ import annotations

import math
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from loop import launcher
from loop.capacity import (
    Bracket,
    bracket,
    find_capacity,
    gpus_of,
    judge_probe,
    probe_command,
    separate,
)
from loop.emulator import capacity_rps, throughput
from loop.night import Night
from loop.plan import CapacitySearch
from loop.slo import Constraint
from store.ledger.sqlite import Ledger
from tests.loop.conftest import PY, REPO, free_port, make_plan
from tests.loop.test_resume import _loop, _phase_of
from tools.benchmark import Args
from tools.local_host import LocalHost

TOKENS = 40
SLO = "p90_ttft_ms <= 50"  # the prefill alone is 35 ms: 15 ms of queue breaks it


def _knee(slots: int, extra: str = "") -> float:
    from loop.emulator import parse_args

    args = parse_args(f"--mem-fraction-static 0.55 {extra}".split())
    return capacity_rps(throughput(args, env={}), slots, TOKENS)


def _capacity_plan(
    state: Path, experiments: list[dict[str, Any]], slo: str = SLO, **over: Any
) -> Any:
    plan = make_plan(
        state,
        experiments,
        tokens=TOKENS,
        maximize="capacity",
        constraints=[slo],
        capacity={"low": 10, "high": 160, "resolution": 0.1, "max_probes": 10},
        **over,
    )
    b = plan.baseline
    b.launch += " --max-running-requests 2"
    b.benchmark.command = (
        f"{PY} -m loop.emulator --bench-client --port {b.port} --num-prompts 30 "
        f"--tokens {TOKENS} --format vllm"
    )
    b.benchmark.metric_json_key = None
    b.timeouts.experiment_s = 90
    # the default: the baseline again after every change, so its bracket spans launches (one
    # launch's probe caught the client lagging on a busy box and set it 10% low)
    b.interleave = True
    return plan


def test_brackets_apart_or_inconclusive() -> None:
    base = Bracket(low=40, high=47)
    assert separate(Bracket(low=48, high=56), base) == "better"
    assert separate(Bracket(low=47, high=56), base) == "inconclusive"  # touching: not apart
    assert separate(Bracket(low=42, high=50), base) == "inconclusive"
    assert separate(Bracket(low=20, high=39), base) == "worse"
    assert separate(Bracket(low=160, high=math.inf), Bracket(low=160, high=math.inf)) == (
        "inconclusive"
    )
    # a row's bracket is the envelope of its launches; goodput per GPU scales it
    m = {"capacity": [40.0, 36.0], "capacity_high": [44.0, 40.0], "capacity_open": [0.0, 0.0]}
    assert bracket(m) == Bracket(low=36, high=44, launches=2)
    g = {"capacity": [40.0], "capacity_high": [44.0], "goodput_per_gpu": [20.0], "gpus": [2.0]}
    assert bracket(g, "goodput_per_gpu") == Bracket(low=20, high=22)


def test_probes_have_prompts_for_their_percentiles_and_say_too_few() -> None:
    spec = CapacitySearch(low=1, high=8)
    cmd = "vllm bench serve --num-prompts 20"
    assert probe_command(cmd, spec, 4, 100) == "vllm bench serve --num-prompts 100 --request-rate 4"
    conc = CapacitySearch(axis="concurrency", low=1, high=64)
    assert probe_command(cmd + " -c {concurrency}", conc, 32, 10) == (
        "vllm bench serve --num-prompts 160 -c 32"
    )
    slos = [Constraint.parse("p99_ttft_ms <= 300")]
    ok, why = judge_probe(slos, {"p99_ttft_ms": 120.0, "completed": 4.0})
    assert not ok and why == "p99_ttft_ms: too few (n=4 < 100)"
    assert judge_probe(slos, {"p99_ttft_ms": 120.0, "completed": 100.0}) == (True, "")
    assert gpus_of(CapacitySearch(low=1, high=2, gpus_flag="--tp-size"), "s --tp-size 4") == 4
    assert gpus_of(CapacitySearch(low=1, high=2, gpus=2, gpus_flag="--tp"), "s --x 1") == 2


def test_a_plan_ranking_by_capacity_is_checked(state: Path) -> None:
    with pytest.raises(ValidationError, match="needs a capacity: section"):
        make_plan(state, [], maximize="capacity")
    with pytest.raises(ValidationError, match="give constraints"):
        make_plan(state, [], maximize="capacity", capacity={"low": 1, "high": 8})
    with pytest.raises(ValidationError, match="low must be below high"):
        CapacitySearch(low=8, high=8)


def test_bisection_finds_the_known_knee_within_resolution(tmp_path: Path) -> None:
    port = free_port()
    knee = _knee(2)
    with open(tmp_path / "e.log", "w") as log:
        proc = subprocess.Popen(
            f"{PY} -m loop.emulator --port {port} --load-seconds 0.05 --mem-fraction-static 0.55 "
            "--max-running-requests 2".split(),
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        plan = _capacity_plan(tmp_path / "state", [])
        host = LocalHost()
        for _ in range(100):
            if host.run(f"curl -sf http://127.0.0.1:{port}/health", timeout=2).rc == 0:
                break
            time.sleep(0.05)
        cmd = plan.baseline.benchmark.command.replace(str(plan.baseline.port), str(port))
        cap = find_capacity(
            host, plan, Args(command=cmd, objective="capacity", workdir=str(REPO)),
            time.monotonic() + 120, plan.baseline.launch,
        )  # fmt: skip
    finally:
        proc.kill()
        proc.wait(5)
    assert cap.high is not None and cap.low > 0, cap
    assert cap.high / cap.low - 1 <= 0.1  # bisected to the resolution
    assert len(cap.probes) <= 10
    # the knee is inside the bracket, give or take the CPU timing of a shared box
    assert 0.85 * knee <= cap.high and cap.low <= 1.1 * knee, (knee, cap)
    assert [p.load for p in cap.probes[:3]] == [10, 20, 40]  # bracketed by doubling first
    assert cap.goodput_rps == pytest.approx(cap.low, rel=0.15)


def test_a_lower_knee_loses_a_higher_one_wins_and_a_small_one_is_inconclusive(
    state: Path,
) -> None:
    plan = _capacity_plan(
        state,
        [
            {"name": "one-slot", "flags": {"--max-running-requests": 1}},
            {"name": "four-slots", "flags": {"--max-running-requests": 4}},
            {"name": "graph-bs-16", "flags": {"--cuda-graph-max-bs": 16}},  # +9%: within a step
        ],
    )
    night = Night(plan, state, diagnoser=None)
    result = night.run()
    assert result.status == "done", result.note
    rows = {r.name: r for r in night.ledger.experiments(result.id)}
    one, four, small = rows["one-slot"], rows["four-slots"], rows["graph-bs-16"]
    assert one.status == "discarded" and "apart, below" in (one.stats or ""), one.stats
    assert four.status == "kept" and "apart, above" in (four.stats or ""), four.stats
    assert small.status == "inconclusive", small.stats
    for r in (one, four):
        assert r.slo and r.slo.startswith("limited by p90_ttft_ms"), r.slo
    report = (state / "reports" / result.id / "report.md").read_text()
    assert "## Capacity under SLOs" in report
    assert "- best: **four-slots**" in report
    assert "**four-slots** beats runner-up" in report
    line = next(x for x in report.splitlines() if x.startswith("| four-slots | kept |"))
    assert "apart, above" in line and "10 met, 20 met, 40 met" in line


def test_an_slo_the_baseline_misses_at_every_rate_is_said(state: Path) -> None:
    plan = _capacity_plan(state, [], slo="p90_ttft_ms <= 20")
    night = Night(plan, state, diagnoser=None)
    result = night.run()
    assert result.status == "done", result.note
    base = night.ledger.get(f"{result.id}:baseline")
    assert base is not None and base.metrics["capacity"] == [0.0]
    assert base.metrics["capacity_probes"] == [10.0]  # one probe: below it nothing is asked
    report = (state / "reports" / result.id / "report.md").read_text()
    assert "The baseline misses the SLOs at every load probed, down to 10 req/s" in report
    assert "p90_ttft_ms 3" in report  # the value that broke it, ~35 ms


def test_a_killed_probe_is_requeued_and_measured_once(state: Path, tmp_path: Path) -> None:
    plan = _capacity_plan(state, [{"name": "four-slots", "flags": {"--max-running-requests": 4}}])
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan.model_dump(mode="json")))
    cfg = Path(plan.baseline.config_file or "")
    before = cfg.read_bytes()
    db = state / "ledger.db"
    proc = subprocess.Popen(_loop(plan_file, state), cwd=REPO, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and _phase_of(db, "four-slots") != "benchmark":
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    time.sleep(1.0)  # inside a probe: the client is sending requests
    proc.send_signal(signal.SIGKILL)
    proc.wait(5)
    done = subprocess.run(_loop(plan_file, state), cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    ledger = Ledger(db)
    night = ledger.night()
    assert night and night.status == "done"
    rows = ledger.experiments(night.id)
    assert sorted(r.name for r in rows) == ["baseline", "baseline-2", "four-slots"]  # once each
    four = next(r for r in rows if r.name == "four-slots")
    assert four.attempts == 2 and four.status == "kept", (four.attempts, four.stats)
    assert len(four.metrics["capacity"]) == 1  # the killed launch's probes left nothing
    assert cfg.read_bytes() == before
    assert launcher.marked_pids(LocalHost(), prefix=f"{plan.name}/") == []
    left = subprocess.run(["pgrep", "-f", "--", f"--bench-client --port {plan.baseline.port}"])
    assert left.returncode == 1  # the probe's client went with the killed night
