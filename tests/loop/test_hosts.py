"""Two host slots, one experiment each at a time, on Optuna's shared storage.

The slots are two really separate targets on this one machine: each has its own name, port,
config file (different bytes) and PYTHONPATH, and each runs its own emulator with its own
orphan child. Pre-flight on one slot must not take the other slot's running server for a
leftover; each slot's config must come back to its own baseline byte for byte.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import optuna

from loop import launcher
from loop.cli import KNOWN_GOOD_SITECUSTOMIZE
from loop.night import Night
from loop.plan import Plan
from loop.preflight import port_listeners
from store.ledger.base import MEASURED, ExperimentRow
from tests.loop.conftest import PY, REPO, free_port
from tools.local_host import LocalHost

TRIALS = 4


def _slot(state: Path, name: str, extra: str) -> tuple[dict[str, Any], Path]:
    site = state / f"site-{name}"
    site.mkdir(parents=True)
    cfg = site / "sitecustomize.py"
    cfg.write_text(KNOWN_GOOD_SITECUSTOMIZE + extra, encoding="utf-8")
    spec = {
        "name": name,
        "target": "local",
        "port": free_port(),
        "config_file": str(cfg),
        "env": {"PYTHONPATH": f"{site}:{REPO}"},
    }
    return spec, cfg


def _overlap(a: ExperimentRow, b: ExperimentRow) -> float:
    assert a.started and a.ended and b.started and b.ended
    return min(a.ended, b.ended) - max(a.started, b.started)


def test_two_slots_run_trials_in_parallel_and_each_reverts(state: Path) -> None:
    state.mkdir(parents=True)
    a, cfg_a = _slot(state, "slot-a", "")
    b, cfg_b = _slot(state, "slot-b", "# slot b: same knobs, other bytes\n")
    before = {cfg_a: cfg_a.read_bytes(), cfg_b: cfg_b.read_bytes()}
    emu = f"{PY} -m loop.emulator --port {{port}} --mem-fraction-static 0.55"
    plan = Plan.model_validate(
        {
            "name": "two-slots",
            "hosts": [a, b],
            "baseline": {
                "launch": f"{emu} --load-seconds 0.3 --spawn-orphan",
                "workdir": str(REPO),
                "env": {"PYTHONPATH": f"{cfg_a.parent}:{REPO}", "EMULATOR_GPU_ARCH": "sm120"},
                "config_file": str(cfg_a),
                "port": a["port"],
                "ready_url": "http://127.0.0.1:{port}/health",
                "benchmark": {
                    "command": f"{emu} --bench-client --requests 2 --tokens 60",
                    "metric_json_key": "output_throughput",
                    "repeat": 2,
                },
                "timeouts": {"ready_s": 20, "stall_s": 1.5, "benchmark_s": 20, "experiment_s": 30},
                "remeasure": False,  # the overlap below is about the slots, not re-measures
            },
            "experiments": [
                {"name": "proto-simple", "env": {"NCCL_PROTO": "Simple"}},
                {"name": "graph-bs-16", "flags": {"--cuda-graph-max-bs": 16}},
            ],
            "search": {
                "study": "slots",
                "trials": TRIALS,
                "seed": 3,
                "params": [
                    {"knob": "flag:--cuda-graph-max-bs", "type": "int", "low": 8, "high": 64},
                    {"knob": "env:NCCL_MAX_NCHANNELS", "type": "categorical", "choices": ["4", "8", "16"]},
                ],
            },
            "policy": {"kill_leftovers": True, "stop_grace_s": 1},
            "budget": {"night_s": 300, "final_slot": False},
        }
    )  # fmt: skip
    night = Night(plan, state, diagnoser=None)
    assert [h.name for h in night.hosts] == ["slot-a", "slot-b"]
    result = night.run()
    assert result.status == "done", result.note

    rows = night.ledger.experiments(result.id)
    by_name = {r.name: r for r in rows}
    assert all(r.status in MEASURED for r in rows), [(r.name, r.status, r.diagnosis) for r in rows]
    trials = [r for r in rows if r.kind == "search"]
    assert len(trials) == TRIALS
    # both slots worked, at the same time: ranked rows overlap, and search rows overlap
    assert {r.host for r in trials} == {"slot-a", "slot-b"}
    assert {by_name["proto-simple"].host, by_name["graph-bs-16"].host} == {"slot-a", "slot-b"}
    assert _overlap(by_name["proto-simple"], by_name["graph-bs-16"]) > 0.5
    pairs = [
        (x, y)
        for x, y in itertools.combinations(trials, 2)
        if {x.host, y.host} == {"slot-a", "slot-b"}
    ]
    assert max(_overlap(x, y) for x, y in pairs) > 0.5
    # each slot changed its own file only (a value equal to the baseline's changes no file)
    changed_files = [r for r in rows if "sitecustomize.py" in r.diff]
    assert changed_files
    for r in changed_files:
        mine = cfg_a if r.host == "slot-a" else cfg_b
        other = cfg_b if mine is cfg_a else cfg_a
        assert str(mine) in r.diff and str(other) not in r.diff
    for cfg, data in before.items():
        assert cfg.read_bytes() == data  # reverted byte for byte, each to its own baseline

    study = optuna.load_study(study_name="slots", storage=f"sqlite:///{state.resolve()}/optuna.db")
    assert len(study.trials) == TRIALS
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    assert sorted(t.number for t in study.trials) == sorted(r.trial_number for r in trials)
    for t in study.trials:
        row = next(r for r in trials if r.trial_number == t.number)
        assert t.params == row.change
        # a decided trial tells the study its own mean; one inside the launch noise is told the
        # baseline's level (loop/night_search.py), so TPE is not steered by noise
        assert t.value == row.metric_mean or row.status == "inconclusive", (t.value, row)

    local = LocalHost()
    assert launcher.marked_pids(local, prefix="two-slots/") == []  # servers and orphans
    assert not port_listeners(local, a["port"]) and not port_listeners(local, b["port"])
