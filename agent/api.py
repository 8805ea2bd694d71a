"""The one entry point everybody outside agent/ uses to run an investigation.

Contract (implemented in agent/runner.py):

    runner = Runner(settings)                      # settings: agent.settings.Settings
    report = runner.start(host, symptom, session_id=None, brain="rulebook", on_event=cb)
    # report.status == "awaiting_approval" -> report.pending_approval is set; the graph is
    # checkpointed (SQLite, its own file) and the process may exit.
    report = runner.resume(host, session_id, Decision(approve=True, reason="ok"), on_event=cb)
    report = runner.message(host, session_id, "check dmesg too", on_event=cb)   # follow-up

`on_event(Event)` is called synchronously from the worker thread, in order.
`investigate(host, symptom, ...)` is the convenience wrapper for one-shot runs (evals, loop):
approvals are denied unless `approve` says otherwise.
"""

from __future__ import annotations

from store.records import ApprovalRequest, Decision, Event, Evidence, HypothesisView, Report

__all__ = ["ApprovalRequest", "Decision", "Event", "Evidence", "HypothesisView", "Report"]
