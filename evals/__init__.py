"""The eval harness: replay incident cards through the agent, score the verdicts, capture and
redact new cards, and the blind rounds' rescoring.

May import: `agent`, `cards`, `store`, `tools`; never `server`, `loop`, `watch` or `bench`.
"""
