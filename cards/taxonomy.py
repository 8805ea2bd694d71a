"""The root-cause labels, loaded from taxonomy.yaml so the contract lives in one data file."""

from __future__ import annotations

from pathlib import Path

from tools import yamlio

TAXONOMY: dict[str, str] = yamlio.safe_load((Path(__file__).with_name("taxonomy.yaml")).read_text())
LABELS: tuple[str, ...] = tuple(TAXONOMY)
