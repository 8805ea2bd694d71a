"""Two objectives: a multi-objective Optuna study, and the Pareto front drawn and listed.

In the emulator (noise off, model clock: every number is exact) big prefill chunks buy +15%
output throughput with a 13x p99 TTFT; graph batches of 16 buy +9% and leave TTFT alone; the
search only lowers the memory fraction (worse throughput, same TTFT), so its trials are all
dominated by the baseline. The front is therefore known: graph-bs-16 and the combination of
graph batches with big chunks (which dominates big chunks alone).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import optuna

from loop.night import Night
from loop.plan import Search, SearchParam
from tests.loop.conftest import PY, make_plan

EXPERIMENTS = [
    {"name": "big-chunks", "flags": {"--chunked-prefill-size": 32768}},
    {"name": "graph-bs-16", "flags": {"--cuda-graph-max-bs": 16}},
]


def test_two_objectives_search_a_pareto_front_dashboard_can_open(state: Path) -> None:
    result_file = state / "bench.json"
    plan = make_plan(state, EXPERIMENTS, maximize="output_throughput", minimize="p99_ttft_ms")
    b = plan.baseline
    b.env["EMULATOR_NOISE"] = "0"
    b.benchmark.command = (
        f"{PY} -m loop.emulator --bench-client --port {b.port} --requests 8 --tokens 60 "
        f"--format vllm --clock model --result-file {result_file}"
    )
    b.benchmark.metric_json_key = None
    b.benchmark.result_file = str(result_file)
    plan.search = Search(
        study="pareto",
        trials=2,
        seed=3,
        params=[SearchParam(knob="flag:--mem-fraction-static", type="float", low=0.3, high=0.5)],
    )
    night = Night(plan, state, diagnoser=None)
    result = night.run()
    assert result.status == "done", result.note
    # the study is a two-direction RDB study, opened here by optuna itself as the dashboard would
    study = optuna.load_study(study_name="pareto", storage=f"sqlite:///{state.resolve()}/optuna.db")
    assert study.directions == [
        optuna.study.StudyDirection.MAXIMIZE,
        optuna.study.StudyDirection.MINIMIZE,
    ]
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 2 and all(len(t.values) == 2 for t in done)
    assert study.best_trials  # optuna's own non-dominated set among the trials
    d = state / "reports" / result.id
    text = (d / "report.md").read_text()
    assert "and minimize `p99_ttft_ms` (Pareto front below)" in text
    section = text.split("## Pareto front")[1]
    front = re.findall(r"^\| ([\w.-]+) \| [^|]+ \| [\d.]+ \| [\d.]+ \|$", section, re.M)
    assert front == ["graph-bs-16", "combined"], section
    assert "Non-dominated configs (2 of" in section
    listed = section.split("its non-dominated trials: ")[1].split(". Open it")[0]
    assert re.findall(r"trial (\d+) \(", listed) == [str(t.number) for t in study.best_trials]
    assert f"`optuna-dashboard sqlite:///{state.resolve()}/optuna.db`" in section
    svg = (d / "pareto.svg").read_text()
    ET.fromstring(svg)
    assert "output_throughput (tok/s) — higher is better" in svg
    assert "p99_ttft_ms (ms) — lower is better" in svg
    assert svg.count('fill="#16a34a" stroke="#111">') == 2 and "<polyline" in svg
