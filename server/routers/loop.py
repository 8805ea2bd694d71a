"""The overnight loop's status and experiment ledger, read-only, for the page's ledger view.

The ledger is the loop's own SQLite file (store/ledger/sqlite.py) under its state root, one
directory per plan; the service reads the most recently written one. No loop installed, or no
night yet, is an empty ledger marked unavailable, never an error. With a team database
(`PIVOT_DATABASE_URL`) the ledger lives there and the latest night is read from it.
"""

from __future__ import annotations

import importlib
from collections import Counter
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from server.deps import Config
from server.schemas import Ledger, LoopStatus, MorningReport
from store.factory import open_ledger

router = APIRouter(prefix="/api/loop", tags=["loop"])


def _state_root(config: Any) -> Path:
    if config.loop_state is not None:
        return Path(config.loop_state)
    try:
        return importlib.import_module("loop.night").default_state_dir()
    except (ModuleNotFoundError, AttributeError):
        return Path(config.home) / "loop"


def _latest(root: Path) -> Path | None:
    try:
        dbs = sorted(root.glob("*/ledger.db"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return None
    return dbs[-1] if dbs else None


def _read(config: Any, database_url: str | None = None) -> tuple[Any, list[Any], Any] | None:
    """(night, experiments, where) of the latest night, or None."""
    if database_url:
        db: Any = "team database"
        ledger = open_ledger(Path(), database_url)
    else:
        db = _latest(_state_root(config))
        if db is None:
            return None
        ledger = open_ledger(db, None)
    try:
        night = ledger.night()
        if night is None:
            return None
        return night, ledger.experiments(night.id), db
    finally:
        ledger.close()


def _team(request: Request) -> str | None:
    return getattr(request.app.state.settings, "database_url", None)


@router.get("/status", response_model=LoopStatus)
async def loop_status(config: Config, request: Request) -> LoopStatus:
    got = await run_in_threadpool(_read, config, _team(request))
    if got is None:
        return LoopStatus(available=False, detail="no overnight loop night found")
    night, exps, db = got
    current = next((e for e in exps if e.status == "running"), None)
    return LoopStatus(
        available=True,
        detail=str(db),
        status={
            "night": night.model_dump(mode="json"),
            "experiments": len(exps),
            "by_status": dict(Counter(e.status for e in exps)),
            "current": None
            if current is None
            else {"name": current.name, "phase": current.phase, "started": current.started},
        },
    )


@router.get("/ledger", response_model=Ledger)
async def loop_ledger(config: Config, request: Request) -> Ledger:
    got = await run_in_threadpool(_read, config, _team(request))
    if got is None:
        return Ledger(available=False)
    night, exps, _ = got
    base = next((e for e in exps if e.kind == "baseline" and e.metric_mean is not None), None)
    return Ledger(
        available=True,
        plan=night.plan_name,
        baseline=base.metric_mean if base else None,
        entries=[
            {
                "name": e.name,
                "kind": e.kind,
                "status": e.status,
                "phase": e.phase,
                "change": e.diff or e.change,
                "metric": e.metric_mean,
                "spread": e.metric_spread,
                "gain": e.gain,
                "label": e.label,
                "evidence": e.evidence,
            }
            for e in exps
        ],
    )


MAX_REPORT_BYTES = 200_000


def _morning(config: Any, database_url: str | None = None) -> MorningReport:
    got = _read(config, database_url)
    if got is None:
        return MorningReport(available=False, detail="no overnight loop night found")
    night = got[0]
    try:
        path = importlib.import_module("loop.report").report_dir(night) / "report.md"
    except (ModuleNotFoundError, AttributeError):
        path = Path(night.state_dir) / "reports" / night.id / "report.md"
    try:
        with path.open("rb") as fh:
            text = fh.read(MAX_REPORT_BYTES).decode("utf-8", "replace")
    except OSError:
        return MorningReport(available=False, detail=f"night {night.id} has no report yet")
    return MorningReport(available=True, detail=str(path), markdown=text)


@router.get("/report", response_model=MorningReport)
async def morning_report(config: Config, request: Request) -> MorningReport:
    """The latest night's morning report, as the loop wrote it (markdown); with a team database
    the night comes from its ledger there, the report from the night's state dir."""
    return await run_in_threadpool(_morning, config, _team(request))
