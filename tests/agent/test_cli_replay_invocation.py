"""`pivot investigate --replay CARD` runs what the card's operator ran: the card's invocation (the
container, log and config they named besides the symptom) applies unless the command line names
its own, exactly as `pivot eval` replays it. Without it a busy box's replay reasoned about
another server (the one on the host's port) instead of the container asked about."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CARD = ROOT / "evals/blind/round41/r41a-vllm-compose-embed-hostnet-port-8000.yaml"


def _investigate(tmp_path: Path, *extra: str) -> dict:
    env = {**os.environ, "PIVOT_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    env.pop("PIVOT_LLM_BASE_URL", None)
    out = subprocess.run(
        [sys.executable, "-m", "agent.cli", "investigate", "--replay", str(CARD), "--json", *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_the_cards_container_is_where_the_replay_reads(tmp_path: Path) -> None:
    from cards.model import load_card

    said = load_card(CARD).invocation.container
    assert said
    report = _investigate(tmp_path)
    assert report["host"].endswith(f"/{said}")
    assert "--container" in report["where"]


def test_a_container_on_the_command_line_wins(tmp_path: Path) -> None:
    report = _investigate(tmp_path, "--container", "rag_vllm-llm_1")
    assert report["host"].endswith("/rag_vllm-llm_1")
