"""`pivot loop demo` end to end, as a user runs it: a whole night on the emulator."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from loop import launcher
from loop.cli import KNOWN_GOOD_SITECUSTOMIZE
from store.ledger.base import TERMINAL
from store.ledger.sqlite import Ledger
from tests.loop.conftest import REPO, free_port
from tools.local_host import LocalHost


def test_demo_night_end_to_end(tmp_path: Path) -> None:
    state = tmp_path / "demo"
    port = free_port()
    res = subprocess.run(
        [sys.executable, "-m", "agent.cli", "loop", "demo", "--quiet", "--load-s", "0.3", "--state", str(state),
         "--port", str(port)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    report = Path(res.stdout.strip().splitlines()[-1])
    assert report.exists() and report.suffix == ".md"
    text = report.read_text()
    night = Ledger(state / "ledger.db").night()
    assert night and night.status == "done" and night.final_pid
    plan = (state / "plans" / f"{night.id}.json").read_text()
    assert f'"port": {port}' in plan and f"--port {port}" in plan  # demo --port is honoured
    rows = {r.name: r for r in Ledger(state / "ledger.db").experiments(night.id)}
    assert all(r.status in TERMINAL for r in rows.values())
    assert rows["fewer-nccl-channels"].status == "failed"
    assert "Not enough memory" in (rows["fewer-nccl-channels"].evidence or "")
    assert "No supported CUDA architectures" in (rows["flashinfer-fusion"].evidence or "")
    hang = rows["emulated-init-hang"]
    assert hang.status == "hung"
    # the loop stopped the hung server itself: the agent finding it gone is not a cause, and
    # another experiment's error line (the arch failure's log beside it) is not this one's
    assert hang.label not in ("killed_externally", "unsupported_gpu_arch"), hang.diagnosis
    assert "No supported CUDA architectures" not in (hang.diagnosis or "")
    # diagnosed while it still hung: its own stacks show where it waits (stopped first, it
    # would leave nothing to read)
    assert hang.label == "nccl_failure", hang.diagnosis
    assert "init_distributed_environment" in (hang.evidence or ""), hang.evidence
    assert sum(1 for n in rows if n.startswith("trial-")) == 3
    assert rows["final"].status == "ok"
    for needle in ("| baseline |", "## Failures", "Not enough memory", "## What to try next"):
        assert needle in text
    ET.fromstring((report.parent / "chart.svg").read_text())  # well-formed SVG
    # the morning server was stopped by the demo; nothing of the night is left running
    assert launcher.marked_pids(LocalHost(), prefix="demo/" + night.id) == []
    assert (state / "site" / "sitecustomize.py").read_text() == KNOWN_GOOD_SITECUSTOMIZE or rows[
        "final"
    ].change  # only the final slot may leave its (best) change in place
