"""`experiment_s` is a hard limit: a benchmark that hangs is stopped, reverted, named, and the
night goes on to the next experiment."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from loop import launcher
from loop.night import Night
from tests.loop.conftest import make_plan
from tools.local_host import LocalHost

LIMIT_S = 5.0


def test_experiment_over_its_limit_is_stopped_reverted_and_named(state: Path) -> None:
    plan = make_plan(
        state,
        [
            # /generate never answers: the bench client would wait 30 s per request, x2 repeats
            {"name": "wedged-scheduler", "env": {"EMULATOR_GENERATE_HANG": "1"}},
            {"name": "graph-bs-16", "flags": {"--cuda-graph-max-bs": 16}},
        ],
    )
    plan.baseline.timeouts.experiment_s = LIMIT_S
    cfg = Path(plan.baseline.config_file or "")
    before = cfg.read_bytes()

    t0 = time.monotonic()
    result = Night(plan, state, diagnoser=None).run()
    took = time.monotonic() - t0

    assert result.status == "done"
    rows = {r.name: r for r in Night(plan, state).ledger.experiments(result.id)}
    wedged = rows["wedged-scheduler"]
    assert wedged.status == "timeout" and wedged.phase == "done"
    assert f"experiment limit {LIMIT_S:g}s reached during benchmark" in (wedged.diagnosis or "")
    assert "EMULATOR_GENERATE_HANG" in wedged.diff  # the change really was applied
    # Stopped at the limit, not after the bench client's own 2 x 30 s: limit + stop + revert.
    assert wedged.duration_s is not None and LIMIT_S <= wedged.duration_s < LIMIT_S + 4
    # ...and the night went on: the next experiment ran and was measured.
    # measured: kept, discarded, or inconclusive when the noise of a loaded box swamps it
    assert rows["graph-bs-16"].status in ("kept", "discarded", "inconclusive")
    assert rows["graph-bs-16"].metric_mean
    assert took < 30
    assert cfg.read_bytes() == before  # reverted byte for byte
    assert launcher.marked_pids(LocalHost(), prefix=f"{plan.name}/") == []  # server + orphan
    client = f"--bench-client --port {plan.baseline.port}"
    ps = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout
    assert client not in ps  # the hanging benchmark client was killed too
    report = Path((state / "latest-report.txt").read_text().strip()).read_text()
    assert "### wedged-scheduler" in report and "— timeout" in report
