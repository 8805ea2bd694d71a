"""The service: the FastAPI app factory, one router per resource, auth, the alert intake, the
cluster relay between replicas, and the web page's static files.

May import: `agent`, `store`, `tools`, `cards`, `evals`, `watch`, and `loop` (read-only views of
its ledger and reports); nothing imports `server`.
"""
