"""Watch one launch until it is ready, or diagnose it the moment it dies or stalls.

`pivot watch` follows a launch someone else started (a pid, a log, a port); `pivot launch`
starts one under watch. Both read the launch with the overnight loop's one-round-trip tick
(loop/launcher.py), judge its pace with the liveness window of tools/log_window.py, and hand a
death or a stall to the same investigation as `pivot investigate`.

May import: `agent`, `loop`, `tools`, `store`; never `server`, `evals` or `bench`.
"""
