"""The overnight optimization loop: a ranked plan, then Optuna search, every failure diagnosed.

Kept import-light on purpose: `python -m loop.emulator` starts through this package and
must come up in milliseconds.

May import: `store` (the ledger, through `store.factory`), `tools`, and `agent` for diagnosis,
settings and memory; never `server`, `evals`, `watch` or `bench`.
"""
