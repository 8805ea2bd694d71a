"""kill -9 of the overnight loop in every phase of an experiment, then a restart.

tests/loop/test_resume.py kills from outside by polling the ledger (ready, benchmark, stop);
here the loop kills itself from its own phase hook (tests/reliability/_loop_driver.py), so the
short phases are hit every time too: pre-flight, apply, launch, ready, benchmark, stop, revert.
After the restart (the real `pivot loop run`): the config equals the baseline byte for byte,
no process of the plan is left, every experiment is in the ledger exactly once and finished,
and only an experiment killed before its result was measured ran again.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from loop import launcher
from store.ledger.base import BEFORE_RESULT, TERMINAL
from store.ledger.sqlite import Ledger
from tests.loop.conftest import REPO, make_plan
from tests.loop.test_resume import EXPERIMENTS, _loop
from tests.reliability._figures import figure
from tools.local_host import LocalHost

TARGET = "proto-simple"  # an env change: its apply really rewrites the config file
#: (phase, seconds into it): ready/benchmark are killed with the server up and working.
PHASES = [
    ("preflight", 0.0),
    ("apply", 0.0),
    ("launch", 0.0),
    ("ready", 0.2),
    ("benchmark", 0.3),
    ("stop", 0.0),
    ("revert", 0.0),
]


def _port_listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("phase,delay", PHASES, ids=[p for p, _ in PHASES])
def test_kill_9_in_every_phase_then_restart(phase: str, delay: float, tmp_path: Path) -> None:
    state = tmp_path / "state"
    plan = make_plan(state, EXPERIMENTS, load_s=0.3, tokens=60)
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan.model_dump(mode="json")))
    cfg = Path(plan.baseline.config_file or "")
    before = cfg.read_bytes()

    t0 = time.monotonic()
    killed = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.reliability._loop_driver",
            str(plan_file),
            str(state),
            TARGET,
            phase,
            str(delay),
        ],  # fmt: skip
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert killed.returncode == -9, (killed.returncode, killed.stdout, killed.stderr[-2000:])
    assert f"killing in {phase}" in killed.stdout
    changed_at_kill = cfg.read_bytes() != before
    left_at_kill = launcher.marked_pids(LocalHost(), prefix=f"{plan.name}/")

    done = subprocess.run(
        _loop(plan_file, state), cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]

    assert cfg.read_bytes() == before, "config not back to baseline byte for byte"
    assert launcher.marked_pids(LocalHost(), prefix=f"{plan.name}/") == []
    assert not _port_listening(plan.baseline.port or 0), "something still serves the port"
    ledger = Ledger(state / "ledger.db")
    night = ledger.night()
    assert night and night.status == "done"
    rows = ledger.experiments(night.id)
    assert sorted(r.name for r in rows) == sorted(["baseline", *(e["name"] for e in EXPERIMENTS)])
    assert all(r.status in TERMINAL and r.phase == "done" for r in rows), [
        (r.name, r.status, r.phase) for r in rows
    ]
    target = next(r for r in rows if r.name == TARGET)
    assert target.attempts - target.remeasured == (
        2 if phase in BEFORE_RESULT else 1
    )  # re-run only if no result
    assert target.metric_mean is not None
    assert all(r.attempts - r.remeasured == 1 for r in rows if r.name != TARGET)
    figure(
        f"loop kill -9 in {phase}",
        config_changed_at_kill=changed_at_kill,
        our_processes_at_kill=len(left_at_kill),
        config_restored=True,
        orphans_after=0,
        target_attempts=target.attempts,
        seconds=round(time.monotonic() - t0, 1),
    )
