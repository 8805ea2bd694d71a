"""On death or stall: the same investigation as `pivot investigate`, started at once.

Importing the graph machinery and opening the runner cost most of a second; a watch does both in a
thread while the launch is still loading, so the verdict follows the death by one investigation,
not by one import plus one investigation.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tools.host import Host
from watch.outcome import Diagnosis, Outcome


class Diagnoser:
    def __init__(self, brain: str | None = None) -> None:
        self.brain = brain
        self.runner: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._warm, name="pivot-watch-warm", daemon=True)

    def warm(self) -> Diagnoser:
        self._thread.start()
        return self

    def _warm(self) -> None:
        try:
            from agent.runner import Runner

            self.runner = Runner()
        except BaseException as exc:  # reported when a diagnosis is asked for
            self.error = exc

    def diagnose(self, host: Host, outcome: Outcome, on_event: Any = None) -> tuple[Diagnosis, Any]:
        """The trimmed verdict for the outcome, and the full report to print."""
        from agent.runner import investigate
        from agent.settings import get_settings

        if self._thread.ident is not None:
            self._thread.join()
        if self.error is not None:
            raise self.error
        report = investigate(
            host,
            symptom(outcome),
            brain=self.brain or get_settings().default_brain,
            on_event=on_event,
            runner=self.runner,
            logs=[outcome.target.log] if outcome.target.log else None,
        )
        return Diagnosis(
            session_id=report.session_id,
            status=str(report.status),
            root_cause=report.root_cause,
            confidence=report.confidence,
            summary=report.summary,
            evidence=[e.line for e in report.evidence][:5],
            next_step=report.next_step,
            verdict_after_death_s=(
                round(time.time() - outcome.failed_at, 3) if outcome.failed_at else None
            ),
        ), report

    def close(self) -> None:
        if self._thread.ident is not None:
            self._thread.join()
        if self.runner is not None:
            self.runner.close()


def symptom(o: Outcome) -> str:
    """The operator's question, in the words a watch saw."""
    t = o.target
    what = " ".join(
        x
        for x in (
            f"pid {t.pid}" if t.pid else "",
            f"port {t.port}" if t.port else "",
            f"container {t.container}" if t.container else "",
            f"log {t.log}" if t.log else "",
        )
        if x
    )
    where = f" in phase {o.phase}" if o.phase else ""
    prog = f" ({o.progress})" if o.progress else ""
    return (
        f"The inference server launch ({what}) {o.status.value}{where}{prog}: {o.detail}. "
        "Why did it fail?"
    )
