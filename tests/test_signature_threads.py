"""The knowledge grown from public threads: at least 300 real error lines, each with its label, its
engines and the thread it came from, and each matched by its own signature (checked on load)."""

from __future__ import annotations

import re

import yaml

from agent.signatures import KB_DIR, SignatureFile
from cards.taxonomy import LABELS

THREAD = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+/(?:issues|pull|discussions)/\d+")


def test_at_least_300_thread_lines_with_label_engine_and_source() -> None:
    examples, threads = 0, set()
    for f in sorted((KB_DIR / "signatures").glob("threads_*.yaml")):
        parsed = SignatureFile.model_validate(yaml.safe_load(f.read_text(encoding="utf-8")))
        for s in parsed.signatures:
            assert s.label is None or s.label in LABELS, s.id
            assert s.engines, f"{s.id}: no engines"
            assert s.source.startswith("https://"), f"{s.id}: no source thread"
            for ex in s.examples:
                assert s.matches(ex), f"{s.id}: {ex!r}"
            examples += len(s.examples)
            if THREAD.match(s.source):
                threads.add(s.source)
    assert examples >= 300, examples
    assert len(threads) >= 150, len(threads)
