"""The root-cause labels in plain words, for the page's answer header.

The words live in cards/taxonomy.yaml (the scoring contract); the page asks once instead of
keeping its own copy, so a label added there reads in words here with no page change.
"""

from __future__ import annotations

import re

from fastapi import APIRouter

from cards.taxonomy import TAXONOMY

router = APIRouter(prefix="/api/causes", tags=["causes"])


def plain(words: str) -> str:
    """The description without its parenthesised examples (log phrases, not words)."""
    return re.sub(r"\s*\([^()]*\)", "", words).strip()


@router.get("", response_model=dict[str, str])
def causes() -> dict[str, str]:
    """Every root-cause label and what it means, in a sentence."""
    return {label: plain(words) for label, words in TAXONOMY.items()}
