"""YAML through libyaml when PyYAML has it: the knowledge files (481 signatures, the engine
registry, checks, thresholds) load in ~10 ms instead of ~450 ms with the pure-Python loader, and
that time sits on the critical path of every `pivot investigate`. Safe loading either way: the C
loader builds the same plain types and never constructs Python objects."""

from __future__ import annotations

from typing import Any

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    """libyaml first; where it is stricter than PyYAML's own loader (a tab inside a block
    scalar), the pure-Python loader decides, so what loaded before still loads the same."""
    try:
        return yaml.load(text, Loader=_LOADER)  # noqa: S506 (CSafeLoader/SafeLoader only)
    except yaml.YAMLError:
        if _LOADER is yaml.SafeLoader:
            raise
        return yaml.safe_load(text)
