"""kill -9 of the loop process in several phases, then a restart: nothing lost, nothing twice."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from loop import launcher
from store.ledger.base import TERMINAL
from store.ledger.sqlite import Ledger
from tests.loop.conftest import REPO, make_plan
from tools.local_host import LocalHost

EXPERIMENTS = [
    {"name": "proto-simple", "env": {"NCCL_PROTO": "Simple"}},
    {"name": "graph-bs-16", "flags": {"--cuda-graph-max-bs": 16}},
]


def _phase_of(db: Path, name: str) -> str | None:
    if not db.exists():
        return None
    try:
        with sqlite3.connect(db, timeout=1) as conn:
            row = conn.execute("select phase from experiments where name = ?", [name]).fetchone()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def _loop(plan_file: Path, state: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "agent.cli",
        "loop",
        "run",
        str(plan_file),
        "--state",
        str(state),
        "--quiet",
        "--no-diagnose",
    ]


@pytest.mark.parametrize("phase", ["ready", "benchmark", "stop"])
def test_kill_9_then_resume(phase: str, state: Path, tmp_path: Path) -> None:
    plan = make_plan(state, EXPERIMENTS, load_s=0.5, tokens=100)
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan.model_dump(mode="json")))
    cfg = Path(plan.baseline.config_file or "")
    before = cfg.read_bytes()
    db = state / "ledger.db"

    proc = subprocess.Popen(
        _loop(plan_file, state), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 40
    seen = None
    while time.monotonic() < deadline and proc.poll() is None:
        seen = _phase_of(db, "proto-simple")
        if seen == phase:
            break
        time.sleep(0.02)
    assert seen == phase, (
        f"never saw phase {phase} (last {seen}); stderr: {proc.stderr.read() if proc.poll() is not None and proc.stderr else ''}"
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait(5)

    done = subprocess.run(
        _loop(plan_file, state), cwd=REPO, capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stderr[-2000:]

    ledger = Ledger(db)
    night = ledger.night()
    assert night and night.status == "done"
    rows = ledger.experiments(night.id)
    names = [r.name for r in rows]
    assert sorted(names) == ["baseline", "graph-bs-16", "proto-simple"]  # none lost, none twice
    assert all(r.status in TERMINAL and r.phase == "done" for r in rows)
    killed = next(r for r in rows if r.name == "proto-simple")
    # Killed before its result: run again from scratch; after it: only the cleanup was finished.
    assert killed.attempts - killed.remeasured == (2 if phase in ("ready", "benchmark") else 1)
    assert killed.metric_mean is not None
    assert cfg.read_bytes() == before
    assert launcher.marked_pids(LocalHost(), prefix=f"{plan.name}/") == []
