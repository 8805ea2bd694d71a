"""The morning: the best change wins the final slot and stays in place on purpose, and the
report names the file that differs from baseline with a revert command that really works."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from loop import launcher
from loop.night import Night
from tests.loop.conftest import REPO, make_plan
from tools.local_host import LocalHost


def test_report_names_the_changed_file_and_its_revert_command_works(state: Path) -> None:
    plan = make_plan(
        state,
        # 32 -> 1 channel with the big baseline buffer: +7.6% in the emulator, no OOM; a gain
        # well above the timing jitter of a busy 2-core box, so the change is surely kept
        [{"name": "channels-1", "env": {"NCCL_MAX_NCHANNELS": "1"}}],
        tokens=300,
        budget={"night_s": 300, "final_slot": True},
    )
    plan.baseline.env["EMULATOR_NOISE"] = "0"
    cfg = Path(plan.baseline.config_file or "")
    cfg.write_text(cfg.read_text().replace('"16")', '"32")', 1))
    assert '"NCCL_MAX_NCHANNELS", "32"' in cfg.read_text()
    before = cfg.read_bytes()
    night = Night(plan, state, diagnoser=None)
    result = night.run()
    local = LocalHost()
    try:
        assert result.status == "done" and result.best == "channels-1", result
        assert result.final_pid
        assert cfg.read_bytes() != before  # the morning server runs the kept change

        [left] = result.left_in_place
        assert left.path == str(cfg) and left.snapshot_id
        report = Path((state / "latest-report.txt").read_text().strip()).read_text()
        assert "## Config left in place" in report
        assert f"`{cfg}` on localhost" in report
        assert '+os.environ.setdefault("NCCL_MAX_NCHANNELS", "1")' in report
        m = re.search(r"To put the baseline back: `(pivot tools config_revert [^`]+)`", report)
        assert m and "--local" in m.group(1) and f"--path {cfg}" in m.group(1)

        # run the report's command as a person would (pivot = python -m agent.cli)
        cmd = m.group(1).replace("pivot ", f"{sys.executable} -m agent.cli ", 1)
        res = subprocess.run(cmd, shell=True, cwd=REPO, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr
        assert cfg.read_bytes() == before  # back to the night's baseline, byte for byte
    finally:
        launcher.stop(local, result.final_pid, None, grace_s=1)
        for pid in launcher.marked_pids(local, prefix=f"{plan.name}/"):
            local.run(f"kill -KILL {pid} 2>/dev/null; true")
    assert launcher.marked_pids(local, prefix=f"{plan.name}/") == []
