"""Evals: start a harness run over card paths in the background and read its result.

The harness (evals/harness.py) is its own area; it is imported only when asked for, and its
absence is a clear 501, not a crash at start-up.
"""

from __future__ import annotations

import importlib
import threading
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Request, status

from server.deps import Catalog, Config
from server.schemas import EvalIn, EvalRun

router = APIRouter(prefix="/api/evals", tags=["evals"])

_RUNNERS = ("run_paths", "run_eval", "run_cards", "run")


def _harness_entry() -> Any | None:
    try:
        mod = importlib.import_module("evals.harness")
    except ModuleNotFoundError as exc:
        if exc.name in ("evals.harness", "evals"):
            return None
        raise
    for name in _RUNNERS:
        fn = getattr(mod, name, None)
        if callable(fn):
            return fn
    return None


def _as_dict(result: Any) -> dict[str, Any]:
    if hasattr(result, "model_dump"):
        return result.model_dump(mode="json")
    if isinstance(result, dict):
        return result
    return {"result": repr(result)}


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=EvalRun)
def start_eval(body: EvalIn, request: Request, catalog: Catalog, config: Config) -> EvalRun:
    try:
        paths = [str(catalog.card_path(p)) for p in body.paths]
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from exc
    except FileNotFoundError as exc:
        raise HTTPException(404, str(exc)) from exc
    entry = _harness_entry()
    if entry is None:
        raise HTTPException(501, "the eval harness (evals/harness.py) is not installed here yet")
    runs: dict[str, EvalRun] = request.app.state.evals
    run = EvalRun(eval_id=uuid.uuid4().hex[:12], status="running", paths=paths)
    runs[run.eval_id] = run
    brain = body.brain or config.default_brain

    def work() -> None:
        try:
            result = entry(paths, brain=brain)
        except Exception as exc:  # the harness's failure is this run's result, not the server's
            runs[run.eval_id] = run.model_copy(
                update={"status": "error", "error": f"{type(exc).__name__}: {exc}"}
            )
            return
        runs[run.eval_id] = run.model_copy(update={"status": "done", "result": _as_dict(result)})

    threading.Thread(target=work, name=f"pivot-eval-{run.eval_id}", daemon=True).start()
    return run


@router.get("/{eval_id}", response_model=EvalRun)
def get_eval(eval_id: Annotated[str, Path(max_length=100)], request: Request) -> EvalRun:
    run = request.app.state.evals.get(eval_id)
    if run is None:
        raise HTTPException(404, f"no eval run {eval_id}")
    return run
