"""SIGTERM and SIGINT stop a night cleanly and say what they did; `loop status` sees it dead.

A real `pivot loop run` in a subprocess, stopped while an env experiment is benchmarking
(its config file edited, its server and the server's orphan child running).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from loop import launcher
from loop.night import default_state_dir, loop_alive
from store.ledger.base import NightRow
from store.ledger.sqlite import Ledger
from tests.loop.conftest import REPO, make_plan
from tests.loop.test_resume import EXPERIMENTS, _loop, _phase_of
from tools.local_host import LocalHost


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_signal_reverts_stops_requeues_and_says_so(
    sig: signal.Signals, state: Path, tmp_path: Path
) -> None:
    plan = make_plan(state, EXPERIMENTS, load_s=0.3, tokens=100)
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan.model_dump(mode="json")))
    cfg = Path(plan.baseline.config_file or "")
    before = cfg.read_bytes()
    proc = subprocess.Popen(
        _loop(plan_file, state), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _phase_of(state / "ledger.db", "proto-simple") != (
        "benchmark"
    ):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    assert cfg.read_bytes() != before, "the experiment's env change should be in the file"
    assert launcher.marked_pids(LocalHost(), prefix=f"{plan.name}/")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)

    assert proc.returncode == 128 + sig, (proc.returncode, err[-2000:])
    assert f"{sig.name} received" in err
    assert "stopped proto-simple's server" in err
    assert f"reverted {cfg}" in err
    assert "proto-simple: interrupted in benchmark; re-queued" in err
    assert "Traceback" not in err
    assert cfg.read_bytes() == before
    assert launcher.marked_pids(LocalHost(), prefix=f"{plan.name}/") == []  # server + orphan
    ledger = Ledger(state / "ledger.db")
    night = ledger.night()
    assert night and night.status == "running"  # resumable
    row = next(r for r in ledger.experiments(night.id) if r.name == "proto-simple")
    assert (row.status, row.phase) == ("pending", "pending")
    assert [e.kind for e in ledger.events(night.id)] == ["signal"]

    status = subprocess.run(
        [sys.executable, "-m", "agent.cli", "loop", "status", "--state", str(state)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "loop DEAD" in status.stdout and "is gone" in status.stdout, status.stdout

    done = subprocess.run(
        _loop(plan_file, state), cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = ledger.experiments(night.id)
    again = next(r for r in rows if r.name == "proto-simple")
    assert again.attempts - again.remeasured == 2 and again.metric_mean is not None
    assert cfg.read_bytes() == before
    report = (state / "reports" / night.id / "report.md").read_text()
    interruptions = report.split("## Interruptions")[1].split("## Failures")[0]
    assert f"stopped by a signal: {sig.name} received" in interruptions
    assert "resumed after a stop or kill" in interruptions
    failures = report.split("## Failures")[1].split("##")[0]
    assert "proto-simple" not in failures


def test_loop_alive_by_pid_and_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    here = os.uname().nodename
    now = time.time()
    base = {"id": "n", "plan_name": "p", "plan_digest": "d", "state_dir": "/x", "started": now}
    me = NightRow(**base, heartbeat=now, loop_pid=os.getpid(), loop_host=here)
    assert loop_alive(me, now)[0]
    gone = NightRow(**base, heartbeat=now, loop_pid=dead.pid, loop_host=here)
    assert loop_alive(gone, now) == (False, f"loop pid {dead.pid} is gone")
    elsewhere = NightRow(**base, heartbeat=now - 100, loop_pid=dead.pid, loop_host="other-box")
    alive, why = loop_alive(elsewhere, now)
    assert not alive and "no heartbeat for 100s" in why
    assert not loop_alive(me.model_copy(update={"status": "done"}), now)[0]


def test_state_dir_follows_pivot_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PIVOT_LOOP_STATE", raising=False)
    monkeypatch.setenv("PIVOT_HOME", str(tmp_path))
    assert default_state_dir() == tmp_path / "loop"
    monkeypatch.setenv("PIVOT_LOOP_STATE", str(tmp_path / "elsewhere"))
    assert default_state_dir() == tmp_path / "elsewhere"
