"""Brains are policies behind one Protocol; the graph is the same for every brain.

May import the agent's state, facts, board, checks, next steps and rules; never the graph or the
nodes, which call the brain through `base.Brain`.
"""

from __future__ import annotations

from agent.brains.base import Brain, BrainContext, Context


def make_brain(name: str, settings: object | None = None) -> Brain:
    """The one brain factory: `rulebook` (offline, deterministic) or `llm` (OpenAI-compatible)."""
    from agent.settings import Settings, get_settings

    s = settings if isinstance(settings, Settings) else get_settings()
    if name == "rulebook":
        from agent.brains.rulebook import RulebookBrain

        return RulebookBrain()
    if name == "llm":
        from agent.brains.llm import LLMBrain

        return LLMBrain(s)
    raise ValueError(f"unknown brain {name!r}: use rulebook or llm")


__all__ = ["Brain", "BrainContext", "Context", "make_brain"]
