"""kill -9 of the loop in the middle of a TPE trial, then a restart.

The trial is FAIL in the study (not left RUNNING), its params are asked again exactly once,
the search still gets its full number of finished trials, the config is back at baseline and
nothing the killed loop started survives. Runs on both backends (the `database` fixture): with
PostgreSQL the ledger and the study live in the team database.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import yaml

from agent.settings import Settings
from loop import launcher
from loop.preflight import port_listeners
from store.factory import open_ledger, study_storage
from store.ledger.base import TERMINAL
from tests.loop.conftest import REPO, make_plan
from tests.loop.test_resume import _loop
from tools.local_host import LocalHost

TRIALS = 2


def test_kill_9_in_a_trial_fails_it_and_reruns_its_params_once(
    state: Path, tmp_path: Path, database: str | None
) -> None:
    search = {
        "study": "resume",
        "trials": TRIALS,
        "seed": 11,
        "params": [
            # both channel counts differ from the baseline's 16: every trial rewrites the file
            {"knob": "env:NCCL_MAX_NCHANNELS", "type": "categorical", "choices": ["4", "8"]},
            {"knob": "flag:--mem-fraction-static", "type": "float", "low": 0.4, "high": 0.6},
        ],
    }
    plan = make_plan(state, [], load_s=0.3, tokens=60, search=search)
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan.model_dump(mode="json")))
    cfg = Path(plan.baseline.config_file or "")
    before = cfg.read_bytes()

    killed = subprocess.run(
        [sys.executable, "-m", "tests.reliability._loop_driver", str(plan_file), str(state), "trial-0", "benchmark", "0.2"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert killed.returncode == -9, (killed.returncode, killed.stdout, killed.stderr[-2000:])
    assert cfg.read_bytes() != before  # killed with the trial's change in place...
    assert launcher.marked_pids(LocalHost(), prefix=f"{plan.name}/")  # ...and its server up

    done = subprocess.run(
        _loop(plan_file, state), cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]

    storage = study_storage(state.resolve(), Settings().database_url)
    trials = optuna.load_study(study_name="resume", storage=storage).trials
    first = trials[0]
    assert first.state == optuna.trial.TrialState.FAIL
    again = [t for t in trials[1:] if t.params == first.params]
    assert len(again) == 1 and again[0].state == optuna.trial.TrialState.COMPLETE
    assert len(trials) == TRIALS + 1  # the interrupted trial did not use up a slot
    assert sum(t.state == optuna.trial.TrialState.COMPLETE for t in trials) == TRIALS

    ledger = open_ledger(state / "ledger.db", Settings().database_url)
    night = ledger.night()
    assert night and night.status == "done"
    rows = {r.name: r for r in ledger.experiments(night.id)}
    assert sorted(rows) == ["baseline", "trial-0", "trial-1", "trial-2"]
    assert all(r.status in TERMINAL and r.phase == "done" for r in rows.values())
    assert rows["trial-0"].status == "failed" and "interrupted" in (rows["trial-0"].diagnosis or "")
    rerun = rows[f"trial-{again[0].number}"]
    assert rerun.change == rows["trial-0"].change and rerun.metric_mean

    assert (state / "ledger.db").exists() is (database is None)
    assert (state / "optuna.db").exists() is (database is None)
    assert cfg.read_bytes() == before
    assert launcher.marked_pids(LocalHost(), prefix=f"{plan.name}/") == []  # no orphans
    assert not port_listeners(LocalHost(), plan.baseline.port)
