"""Tiny helpers for tests that build incident cards in code."""

from __future__ import annotations

from typing import Any


def minimal_card(host: dict[str, Any], card_id: str = "t", engine: str = "other") -> dict[str, Any]:
    """A valid card around a `host` section: tools under test see only the host."""
    return {
        "id": card_id,
        "title": "t",
        "source": "test",
        "engine": engine,
        "symptom": "s",
        "host": host,
    }
