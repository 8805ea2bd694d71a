"""Combinations are run: the compatible kept changes together, between two baselines (A/B/A).

In the emulator `--cuda-graph-max-bs 16` is +9%, `--mem-fraction-static 0.9` +5.3% and 0.8
+3.8%: the two memory fractions are alternatives (one knob, two values), so the night combines
graph batches with the better of them, measures it between two fresh baselines, leaves the
other out with the reason, relaunches the combination in the morning, and the report says the
combination kept (and added to) the best single gain.
"""

from __future__ import annotations

from pathlib import Path

from loop import launcher
from loop.combine import AFTER, BEFORE, COMBINED
from loop.night import Night
from tests.loop.conftest import PY, make_plan
from tools.local_host import LocalHost

EXPERIMENTS = [
    {"name": "bs-16", "flags": {"--cuda-graph-max-bs": 16}},
    {"name": "mem-0.9", "flags": {"--mem-fraction-static": 0.9}},
    {"name": "mem-0.8", "flags": {"--mem-fraction-static": 0.8}},
]


def test_compatible_kept_changes_are_run_together_against_interleaved_baselines(
    state: Path,
) -> None:
    plan = make_plan(state, EXPERIMENTS, tokens=150)
    port = plan.baseline.port
    plan.baseline.benchmark.command = (
        f"{PY} -m loop.emulator --bench-client --port {port} --requests 4 --tokens 150 "
        "--clock model"
    )
    plan.budget.final_slot = True
    night = Night(plan, state, diagnoser=None)
    result = None
    try:
        result = night.run()
        assert result.status == "done", result.note
        rows = night.ledger.experiments(result.id)
        by = {r.name: r for r in rows}
        for name in ("bs-16", "mem-0.9", "mem-0.8"):
            assert by[name].status == "kept", (name, by[name].stats)
        combo = by[COMBINED]
        # the better memory fraction goes with the graph batches; 0.8 is its alternative
        assert combo.change == {"flag:--cuda-graph-max-bs": 16, "flag:--mem-fraction-static": 0.9}
        # A/B/A: a baseline measured right before and right after it, in that order
        order = [r.name for r in rows]
        assert order.index(BEFORE) < order.index(COMBINED) < order.index(AFTER)
        assert by[BEFORE].status == by[AFTER].status == "ok"
        assert by[BEFORE].metric_values and by[AFTER].metric_values
        assert combo.status == "kept" and combo.attempts == 1
        assert (combo.metric_mean or 0) > (by["bs-16"].metric_mean or 0)
        # the morning server runs the combination: it is the night's best
        assert result.best == COMBINED and result.final_pid
        text = (state / "reports" / result.id / "report.md").read_text()
        assert "## Combination of the kept changes" in text
        assert "`combined` = `bs-16` + `mem-0.9`" in text
        assert "measured between two baselines (A/B/A): **kept**" in text
        assert "Left out as incompatible: mem-0.8 (sets flag:--mem-fraction-static otherwise)" in (
            text
        )
        # kept the gain; whether it also separates from `bs-16` alone is the statistics' call
        # (4 requests a run, t intervals from 3 runs): "adds to it" or "not distinguishable"
        assert "**the combination kept the gain" in text and "LOST" not in text
        assert "vs the baselines around it: better" in text
        assert "Combine the compatible kept changes" not in text  # done, not a todo
    finally:
        if result is not None and result.final_pid:
            launcher.stop(LocalHost(), result.final_pid, None, grace_s=1)
        for pid in launcher.marked_pids(LocalHost(), prefix=f"{plan.name}/"):
            LocalHost().run(f"kill -KILL {pid}")


def test_one_kept_change_is_not_combined(state: Path) -> None:
    plan = make_plan(state, EXPERIMENTS[:1], tokens=150)
    plan.baseline.benchmark.command += " --clock model"
    night = Night(plan, state, diagnoser=None)
    result = night.run()
    names = [r.name for r in night.ledger.experiments(result.id)]
    assert COMBINED not in names and BEFORE not in names
    text = (state / "reports" / result.id / "report.md").read_text()
    assert "Not run: 1 change(s) kept, fewer than two that can go together." in text


def test_kill_9_during_the_combination_then_resume(state: Path, tmp_path: Path) -> None:
    """The combination is an experiment like any other: killed in its benchmark, the restart
    re-runs it from scratch, once, and the night ends with every row done and nothing left."""
    import signal
    import subprocess
    import time

    import yaml

    from store.ledger.base import TERMINAL
    from store.ledger.sqlite import Ledger
    from tests.loop.conftest import REPO
    from tests.loop.test_resume import _loop, _phase_of

    plan = make_plan(state, EXPERIMENTS[:2], load_s=0.3, tokens=150)
    # the combination's benchmark waits while a hold file exists, so the kill lands inside it
    # however loaded the box (a 20 ms poll could miss a sub-second phase); the file is made
    # while the combination is still before its benchmark, so no earlier row ever waits
    hold = tmp_path / "hold"
    plan.baseline.benchmark.command = (
        f"while [ -e {hold} ]; do sleep 0.05; done; "
        + plan.baseline.benchmark.command
        + " --clock model"
    )
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan.model_dump(mode="json")))
    cfg = Path(plan.baseline.config_file or "")
    before = cfg.read_bytes()
    db = state / "ledger.db"
    proc = subprocess.Popen(
        _loop(plan_file, state), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline, seen = time.monotonic() + 90, None
    while time.monotonic() < deadline and proc.poll() is None:
        seen = _phase_of(db, COMBINED)
        if seen in ("preflight", "apply", "launch", "ready") and not hold.exists():
            hold.touch()
        if seen == "benchmark" and hold.exists():
            break
        time.sleep(0.02)
    assert seen == "benchmark" and hold.exists(), (
        proc.stderr.read() if proc.poll() is not None and proc.stderr else ""
    )
    time.sleep(0.3)  # well inside the held benchmark
    proc.send_signal(signal.SIGKILL)
    proc.wait(5)
    hold.unlink()
    done = subprocess.run(
        _loop(plan_file, state), cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ledger = Ledger(db)
    night = ledger.night()
    assert night and night.status == "done"
    rows = ledger.experiments(night.id)
    assert [r.name for r in rows] == ["baseline", "bs-16", "mem-0.9", BEFORE, COMBINED, AFTER]
    assert all(r.status in TERMINAL and r.phase == "done" for r in rows)
    combo = next(r for r in rows if r.name == COMBINED)
    assert combo.attempts - combo.remeasured == 2 and combo.metric_values  # re-run, measured
    assert combo.status == "kept"
    assert cfg.read_bytes() == before
    assert launcher.marked_pids(LocalHost(), prefix=f"{plan.name}/") == []
