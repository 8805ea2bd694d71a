"""The fast YAML path reads every knowledge file exactly as PyYAML's own safe loader does."""

from __future__ import annotations

from pathlib import Path

import yaml

from tools import yamlio

ROOT = Path(__file__).resolve().parents[1]


def test_every_knowledge_file_loads_the_same_through_libyaml() -> None:
    files = [
        *sorted((ROOT / "agent" / "knowledge").rglob("*.yaml")),
        ROOT / "tools" / "engines.yaml",
        ROOT / "cards" / "taxonomy.yaml",
    ]
    assert len(files) > 20
    for f in files:
        text = f.read_text(encoding="utf-8")
        assert yamlio.safe_load(text) == yaml.safe_load(text), f


def test_what_libyaml_refuses_still_loads_as_before() -> None:
    # a block scalar whose first line starts with a tab (ldconfig -p output): libyaml refuses it,
    # PyYAML reads it
    text = "k: |\n  \tlibcudart.so.12 (libc6,x86-64) => /usr/lib/x\n"
    assert yamlio.safe_load(text) == yaml.safe_load(text)
