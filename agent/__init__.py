"""The investigation: the LangGraph graph and its nodes, the brains, the rules, facts and proof,
the guardrails, the runner, and the `pivot` command lines.

May import: `tools`, `prompts`, `cards` and `store` (memory, checkpoints, leases, through
`store.factory`); never `loop`, `server`, `evals`, `watch` or `bench`.
"""
