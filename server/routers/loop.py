"""The overnight loop's status and experiment ledger, read-only.

The ledger lives with the loop (agent/loop/ledger.py); until it exists the service answers with
an empty ledger marked unavailable, so the page can say so instead of failing.
"""

from __future__ import annotations

import importlib
from typing import Any

from fastapi import APIRouter

from server.deps import Config
from server.schemas import Ledger, LoopStatus

router = APIRouter(prefix="/api/loop", tags=["loop"])


def _ledger_module() -> Any | None:
    try:
        return importlib.import_module("agent.loop.ledger")
    except ModuleNotFoundError as exc:
        if exc.name and "agent.loop" in exc.name:
            return None
        raise


def _plain(x: Any) -> Any:
    if hasattr(x, "model_dump"):
        return x.model_dump(mode="json")
    if isinstance(x, list | tuple):
        return [_plain(i) for i in x]
    return x


def _call(mod: Any, names: tuple[str, ...], *args: Any) -> Any:
    for name in names:
        fn = getattr(mod, name, None)
        if callable(fn):
            return fn(*args)
    raise LookupError(f"agent.loop.ledger has none of {names}")


@router.get("/status", response_model=LoopStatus)
def loop_status(config: Config) -> LoopStatus:
    mod = _ledger_module()
    if mod is None:
        return LoopStatus(available=False, detail="the overnight loop is not installed here yet")
    try:
        status = _plain(_call(mod, ("loop_status", "status", "read_status"), config.home))
    except (LookupError, OSError, ValueError) as exc:
        return LoopStatus(available=False, detail=str(exc))
    return LoopStatus(
        available=True, status=status if isinstance(status, dict) else {"status": status}
    )


@router.get("/ledger", response_model=Ledger)
def loop_ledger(config: Config) -> Ledger:
    mod = _ledger_module()
    if mod is None:
        return Ledger(available=False)
    try:
        raw = _plain(_call(mod, ("ledger_view", "read_ledger", "load_ledger"), config.home))
    except (LookupError, OSError, ValueError):
        return Ledger(available=False)
    if isinstance(raw, dict):
        return Ledger(
            available=True,
            **{k: raw.get(k) for k in ("baseline", "metric") if k in raw},
            entries=list(raw.get("entries", raw.get("experiments", []))),
        )
    return Ledger(available=True, entries=list(raw or []))
