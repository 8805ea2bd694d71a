"""One night with one failing and one passing experiment: results, revert, cleanup, diagnosis."""

from __future__ import annotations

from pathlib import Path

from loop import launcher
from loop.night import Night
from loop.night_diagnosis import agent_diagnoser
from tests.loop.conftest import make_plan
from tools.local_host import LocalHost


def test_failed_change_is_reverted_byte_for_byte_and_diagnosed(state: Path, tmp_path: Path) -> None:
    plan = make_plan(
        state,
        [
            {"name": "graph-bs-16", "flags": {"--cuda-graph-max-bs": 16}},
            {
                "name": "fewer-channels",
                "env": {"NCCL_MAX_NCHANNELS": "2", "NCCL_BUFFSIZE": "131072"},
                "combined": True,
            },
        ],
        tokens=120,
    )
    cfg = Path(plan.baseline.config_file or "")
    before = cfg.read_bytes()
    night = Night(
        plan,
        state,
        diagnoser=agent_diagnoser(home=tmp_path / "home"),
        memory_path=tmp_path / "mem.db",
    )
    result = night.run()
    assert result.status == "done"
    rows = {r.name: r for r in night.ledger.experiments(result.id)}
    assert rows["baseline"].status == "ok" and len(rows["baseline"].metric_values) >= 3
    assert rows["graph-bs-16"].status in ("kept", "discarded")
    assert rows["graph-bs-16"].metric_mean and rows["graph-bs-16"].gain is not None
    failed = rows["fewer-channels"]
    assert failed.status == "failed" and failed.phase == "done"
    assert failed.evidence and "Not enough memory" in failed.evidence
    assert "NCCL_BUFFSIZE" in failed.diff
    assert cfg.read_bytes() == before  # reverted, byte for byte
    assert launcher.marked_pids(LocalHost(), prefix=f"{plan.name}/") == []  # orphans gone too
    report = Path(state / "latest-report.txt").read_text().strip()
    text = Path(report).read_text()
    assert "fewer-channels" in text and "Not enough memory" in text
    assert (Path(report).parent / "chart.svg").read_text().startswith("<svg")
    from store.memory.sqlite import Memory

    mem = Memory(tmp_path / "mem.db")
    assert mem.last_handoff("local") is not None
    assert any("fewer-channels" in t.text for t in mem.todos("local"))
