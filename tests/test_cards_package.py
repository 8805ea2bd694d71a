"""Cards, taxonomy and replay live in `cards/`; the old `tools.*` names alias them, and nothing
in the repo reads the project's `../shared` folder (the repo stands on its own)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_old_import_paths_are_the_same_modules() -> None:
    import cards.model
    import cards.replay
    import cards.taxonomy
    import tools.cards
    import tools.replay_host
    import tools.taxonomy

    assert tools.cards is cards.model and tools.taxonomy is cards.taxonomy
    assert tools.replay_host.ReplayHost is cards.replay.ReplayHost
    assert "kv_cache_no_room" in cards.taxonomy.LABELS


def test_no_code_test_or_script_reads_the_shared_folder() -> None:
    shared = re.compile(r"\.\./shared\b|/work/shared\b")
    offenders = []
    for pkg in ("agent", "cards", "tools", "evals", "bench", "tests", "scripts", "prompts"):
        for f in (ROOT / pkg).rglob("*"):
            if f.suffix not in (".py", ".sh", ".yaml", ".j2", ".toml") or not f.is_file():
                continue
            for n, ln in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                if shared.search(ln) and f.name != "test_cards_package.py":
                    offenders.append(f"{f.relative_to(ROOT)}:{n}: {ln.strip()[:100]}")
    assert not offenders, "\n".join(offenders)
