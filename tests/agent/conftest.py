"""Agent-test fixtures: isolated settings (own memory and checkpoint files) per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CARDS = ROOT / "evals" / "incidents"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "pivot-home")


def card_path(card_id: str) -> Path:
    return CARDS / f"{card_id}.yaml"
