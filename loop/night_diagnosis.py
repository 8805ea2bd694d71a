"""Why an experiment failed: the known signatures in its log, else the agent's own
investigation of the host (the rulebook or the LLM brain), while the failed server is still there.
"""

from __future__ import annotations

from pathlib import Path

from loop import launcher
from loop.experiment import Diagnoser, Diagnosis
from store.ledger.base import ExperimentRow
from tools.host import Host


def signature_diagnosis(host: Host, row: ExperimentRow) -> Diagnosis | None:
    """The KB's verdict on the experiment's log: first fatal line, else first strong one."""
    if not row.log_path:
        return None
    from agent.signatures import scan

    kb = launcher.signatures()
    if not kb:
        return None
    tail = host.read_tail(row.log_path, max_bytes=200_000)
    import re

    lines = re.split(r"[\r\n]", tail.data.decode("utf-8", errors="replace"))
    hits = scan(lines, kb)
    # A hung server printed nothing fatal by definition; a phase line is no cause for it.
    for strength in ("fatal",) if row.status == "hung" else ("fatal", "strong"):
        for m in hits:
            if m.strength == strength and m.label:
                return Diagnosis(m.label, m.line.strip(), f"signature {m.signature}", "signatures")
    return None


#: reads of the live process and its GPUs: never another experiment's log
LIVE_READS = ("py_stacks", "gpu_status", "processes")


def _in_log(host: Host, row: ExperimentRow, line: str) -> bool:
    """Evidence counts only when it occurs in this experiment's own log."""
    if not row.log_path:
        return False
    data = host.read_tail(row.log_path, max_bytes=400_000).data.decode("utf-8", errors="replace")
    return line.strip()[:200] in data


def agent_diagnoser(home: Path | None = None, brain: str = "rulebook") -> Diagnoser:
    """Run the investigating agent on the host; fall back to the signature KB without it."""

    def diagnose(host: Host, row: ExperimentRow, symptom: str) -> Diagnosis | None:
        try:
            from agent.runner import Runner
            from agent.settings import Settings
        except ImportError:
            return signature_diagnosis(host, row)
        settings = Settings(home=home) if home else Settings()
        # the experiment's own log (and config): the logs dir also holds every other
        # experiment's log, and another one's error is not this one's cause
        logs = [row.log_path] if row.log_path else None
        report = Runner(settings).start(host, symptom=symptom, brain=brain, logs=logs)
        line = report.evidence[0].line if report.evidence else None
        # a live read of the hung server itself (its stacks, its GPUs, its processes) is this
        # experiment's evidence; a log line must be in this experiment's own log
        live = next((e.line for e in report.evidence if e.tool in LIVE_READS), None)
        if row.status == "hung" and report.root_cause and live:
            inlog = next((e.line for e in report.evidence if _in_log(host, row, e.line)), None)
            return Diagnosis(
                report.root_cause, inlog or live, report.summary or report.status, "agent"
            )
        if report.root_cause == "killed_externally" and row.status in ("hung", "timeout"):
            # the loop stopped this server itself (it hung, or ran past its limit): the "kill"
            # the agent found after the fact is the loop's own, not a cause
            return Diagnosis(
                None,
                None,
                "the agent saw only the loop's own stop of the hung server; the hang's cause was "
                "not diagnosed (read its stacks while it hangs: pivot tools py_stacks --pid PID)",
                "agent",
            )
        if report.root_cause and line and _in_log(host, row, line):
            return Diagnosis(report.root_cause, line, report.summary or report.status, "agent")
        fallback = signature_diagnosis(host, row)
        if fallback:
            return fallback
        if report.root_cause:  # cited lines from elsewhere (another experiment's log): not stored
            return Diagnosis(
                None,
                None,
                f"agent said {report.root_cause} citing {line!r}, not in this log",
                "agent",
            )
        return Diagnosis(None, None, report.status, "agent")

    return diagnose
