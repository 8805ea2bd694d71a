"""Incident cards, the root-cause taxonomy and the replay host: the benchmark's own room.

A card (`cards.model`) freezes a host as an investigation saw it; `cards.replay.ReplayHost`
answers the tools from it; `cards.taxonomy` is the label contract cards and signatures share.
Depends on `tools` (the Host protocol, the engine registry); `tools.cards`, `tools.taxonomy` and
`tools.replay_host` remain as aliases of these modules for code written before the move.

May import: `tools` only.
"""
