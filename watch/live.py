"""A watched launch as the page shows it: where it is now, then how it ended.

`pivot watch --serve URL` and `pivot launch --serve URL` send one of these to `pivot serve`
(PUT /api/watches/{id}) at each change the watch itself prints (phase, progress with ETA, ready,
failure, verdict), so the page lists launches live without polling the launches themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from watch.outcome import Diagnosis, Outcome, Status, Target

if TYPE_CHECKING:
    from watch.follow import Follower

#: While the watch goes on: loading (no verdict yet), ready and still followed, or the failure
#: seen and its investigation running. Afterwards: the Outcome's own status.
LiveStatus = Literal["watching", "investigating"] | Status

WATCH_ID = r"^[A-Za-z0-9_-]{1,64}$"


class LaunchReport(BaseModel):
    watch_id: str = Field(pattern=WATCH_ID)
    target: Target
    status: LiveStatus
    live: bool = Field(description="the watch is still following it (no verdict yet)")
    detail: str = Field("", max_length=4000)
    engine: str | None = None
    phase: str | None = None
    progress: str | None = Field(None, description="the last progress seen, in words, with ETA")
    eta_s: float | None = Field(None, description="seconds left at the measured load rate")
    elapsed_s: float = 0.0
    diagnosis: Diagnosis | None = None


def watching(watch_id: str, fol: Follower) -> LaunchReport:
    """The launch as the follower sees it now."""
    bar = fol.rate.measured()
    return LaunchReport(
        watch_id=watch_id,
        target=fol.t,
        status=Status.ready if fol.was_ready else "watching",
        live=True,
        engine=fol.engine,
        phase=fol.phase,
        progress=bar.describe() if bar else None,
        eta_s=bar.eta_s if bar and bar.done != bar.total else None,
        elapsed_s=round(fol.elapsed(), 1),
    )


def ended(watch_id: str, outcome: Outcome, investigating: bool = False) -> LaunchReport:
    """How the watch ended; `investigating` while the failure's investigation still runs."""
    last = outcome.etas[-1] if outcome.etas else None
    return LaunchReport(
        watch_id=watch_id,
        target=outcome.target,
        status="investigating" if investigating else outcome.status,
        live=investigating,
        detail=outcome.detail,
        engine=outcome.engine,
        phase=outcome.phase,
        progress=outcome.progress,
        eta_s=last.eta_s if last and last.done != last.total else None,
        elapsed_s=round(outcome.elapsed_s, 1),
        diagnosis=outcome.diagnosis,
    )
