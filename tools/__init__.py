"""What the agent can do on a host: one tool a file (typed args, typed result, its parser beside
it), the `Host` protocol with its SSH, local and container implementations, and the registry.

May import: the standard library, third-party packages and `cards` (the aliases kept for old
code); never `agent`, `store`, `loop` or `server` (tests/test_layering.py holds it to that).
"""
