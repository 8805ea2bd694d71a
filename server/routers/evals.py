"""Evals: run the harness over cards (named files, or one whole card directory) in the
background, read its result, and open its HTML report.

The harness (evals/harness.py) is its own area; it is imported only when asked for, and its
absence is a clear 501, not a crash at start-up. Card directories are the ones `pivot serve`
was given (`--cards DIR`, after the shipped ones); a request can name only those.
"""

from __future__ import annotations

import importlib
import secrets
import threading
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Request, status

from server.deps import Catalog, Config
from server.schemas import CardDir, EvalIn, EvalRun

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


@router.get("/dirs", response_model=list[CardDir])
def card_dirs(config: Config) -> list[CardDir]:
    """The card directories this service may run (shipped first, then `serve --cards`)."""
    return [
        CardDir(path=str(d), name=d.name, cards=sum(1 for _ in d.rglob("*.yaml")))
        for d in config.card_dirs
        if d.is_dir()
    ]


def _directory(config: Any, wanted: str) -> str:
    for d in config.card_dirs:
        if wanted in (str(d), d.name) and d.is_dir():
            return str(d)
    raise HTTPException(
        404, f"{wanted} is not a card directory of this service (GET /api/evals/dirs)"
    )


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=EvalRun)
def start_eval(body: EvalIn, request: Request, catalog: Catalog, config: Config) -> EvalRun:
    if body.directory:
        paths = [_directory(config, body.directory)]
    else:
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
    reports: dict[str, tuple[str, Any]] = request.app.state.eval_reports
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
        key = secrets.token_urlsafe(16)  # the report page cannot send a bearer header
        reports[run.eval_id] = (key, result)
        runs[run.eval_id] = run.model_copy(
            update={
                "status": "done",
                "result": _as_dict(result),
                "report_url": f"/reports/{run.eval_id}.html?key={key}",
            }
        )

    threading.Thread(target=work, name=f"pivot-eval-{run.eval_id}", daemon=True).start()
    return run


@router.get("/{eval_id}", response_model=EvalRun)
def get_eval(eval_id: Annotated[str, Path(max_length=100)], request: Request) -> EvalRun:
    run = request.app.state.evals.get(eval_id)
    if run is None:
        raise HTTPException(404, f"no eval run {eval_id}")
    return run
