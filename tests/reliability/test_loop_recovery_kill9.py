"""kill -9 during recovery, again and again, then a restart: nothing lost, nothing twice.

The issue: recovery wrote phase `stop` on a row that had no result; killed there, the next
restart took the row for finished (`done`, status still `running`), and the night ended
without the experiment. Here the loop is killed first in an experiment, then at every step of
each following recovery (its own phase hook fires `recover:<step>`), then restarted for real.
Between kills the ledger must never hold a row `done` with no result, and at the end every
experiment is measured exactly once (re-run only when it was killed before its result).
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml

from loop import launcher
from loop.plan import Plan
from store.ledger.base import BEFORE_RESULT, TERMINAL
from store.ledger.sqlite import Ledger
from tests.loop.conftest import REPO, make_plan
from tests.loop.test_resume import EXPERIMENTS, _loop
from tests.reliability._figures import figure
from tools.local_host import LocalHost

TARGET = "proto-simple"
RECOVERY_KILLS = ["recover:stop", "recover:revert", "recover:decide", "recover:stop"]


def _driver(plan_file: Path, state: Path, phase: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.reliability._loop_driver", str(plan_file), str(state),
         TARGET, phase, "0"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _never_done_without_result(state: Path) -> None:
    ledger = Ledger(state / "ledger.db")
    try:
        night = ledger.night()
        assert night is not None
        bad = [
            (r.name, r.status, r.phase)
            for r in ledger.experiments(night.id)
            if r.phase == "done" and r.status not in TERMINAL
        ]
        assert not bad, f"rows 'done' without a result: {bad}"
    finally:
        ledger.close()


def _check_end(plan: Plan, state: Path, cfg: Path, before: bytes) -> list:
    assert cfg.read_bytes() == before, "config not back to baseline byte for byte"
    assert launcher.marked_pids(LocalHost(), prefix=f"{plan.name}/") == [], "orphans left"
    ledger = Ledger(state / "ledger.db")
    night = ledger.night()
    assert night and night.status == "done", night
    rows = ledger.experiments(night.id)
    assert all(r.status in TERMINAL and r.phase == "done" for r in rows), [
        (r.name, r.status, r.phase) for r in rows
    ]
    for e in EXPERIMENTS:  # each experiment once in the ledger, and measured
        mine = [r for r in rows if r.name == e["name"]]
        assert len(mine) == 1 and mine[0].metric_mean is not None, mine
    return rows


@pytest.mark.parametrize("first", ["benchmark", "stop"])
def test_kill_9_during_recovery_repeatedly(first: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    plan = make_plan(state, EXPERIMENTS, load_s=0.3, tokens=60)
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan.model_dump(mode="json")))
    cfg = Path(plan.baseline.config_file or "")
    before = cfg.read_bytes()

    killed = _driver(plan_file, state, first)
    assert killed.returncode == -9, (killed.stdout, killed.stderr[-2000:])
    for step in RECOVERY_KILLS:
        again = _driver(plan_file, state, step)
        assert again.returncode == -9, (step, again.stdout, again.stderr[-2000:])
        assert f"killing in {step}" in again.stdout
        _never_done_without_result(state)

    done = subprocess.run(
        _loop(plan_file, state), cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _check_end(plan, state, cfg, before)
    target = next(r for r in rows if r.name == TARGET)
    assert target.attempts - target.remeasured == (2 if first in BEFORE_RESULT else 1)
    assert all(r.attempts - r.remeasured == 1 for r in rows if r.name != TARGET)
    events = Ledger(state / "ledger.db").events(rows[0].night_id)
    # only the recovery that finished says so (the killed ones recorded nothing, by design)
    resumed = [e for e in events if e.kind == "resumed"]
    assert len(resumed) == 1 and f"{TARGET}:" in resumed[0].detail, events


def test_kill_9_at_20_random_moments_then_finish(tmp_path: Path) -> None:
    """Random kills land anywhere: imports, recovery, pre-flight, benchmark, Optuna's tell."""
    state = tmp_path / "state"
    search = {
        "study": "rand",
        "trials": 2,
        "seed": 1,
        "params": [{"knob": "flag:--cuda-graph-max-bs", "type": "int", "low": 8, "high": 64}],
    }
    plan = make_plan(state, EXPERIMENTS, load_s=0.3, tokens=60, search=search)
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan.model_dump(mode="json")))
    cfg = Path(plan.baseline.config_file or "")
    before = cfg.read_bytes()
    rng = random.Random(15)
    kills = finished_early = 0
    t0 = time.monotonic()
    while kills < 20:
        proc = subprocess.Popen(
            _loop(plan_file, state), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            proc.wait(timeout=rng.uniform(0.5, 3.5))
            finished_early += 1  # the night ended before this kill (a rerun would start a new one)
            assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
            break
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait(5)
            kills += 1
        if (state / "ledger.db").exists():
            _never_done_without_result(state)
            night = Ledger(state / "ledger.db").night()
            if night is not None and night.status == "done":
                # the kill landed after the night was closed (report written, exiting): it is
                # over; another `loop run` would rightly start a new night
                finished_early += 1
                break

    if not finished_early:
        done = subprocess.run(
            _loop(plan_file, state), cwd=REPO, capture_output=True, text=True, timeout=180
        )
        assert done.returncode == 0, done.stderr[-2000:]
    rows = _check_end(plan, state, cfg, before)
    trials = [r for r in rows if r.kind == "search" and r.metric_mean is not None]
    assert len(trials) == 2, [(r.name, r.status, r.diagnosis) for r in rows]
    study = optuna.load_study(study_name="rand", storage=f"sqlite:///{state.resolve()}/optuna.db")
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert sorted(t.number for t in complete) == sorted(r.trial_number for r in trials)
    figure(
        "loop kill -9 at random moments",
        kills=kills,
        night_finished_before_a_kill=finished_early,
        reruns=sum(r.attempts - r.remeasured - 1 for r in rows),
        seconds=round(time.monotonic() - t0, 1),
    )
