"""The investigation: the LangGraph graph and its nodes, the brains, facts and findings, the
runner; the proof and the rules in `rules/`; the `pivot` command and its subcommands in `cli/`.

May import: `tools`, `prompts`, `cards` and `store` (memory, checkpoints, leases, through
`store.factory`); never `loop`, `server`, `evals`, `watch` or `bench`.
"""
